/* SPDX-License-Identifier: MIT */
/*
 * test_index.c - the index's transitions (index/kvp_index.h), each called
 * directly on a bare segment (kvpt_seg_bare: no agent, no /dev/shm name):
 *
 *  - kvp_ix_claim: insert-if-absent, one winner per key among threads and
 *    among processes, every distinct key wins, -ENOSPC exactly when both
 *    buckets of a key are full, keys that share a fingerprint (or their
 *    whole hash), keys of every length 1..255 (prefixes of one another,
 *    zero bytes included), namespaces kept apart;
 *  - kvp_ix_find: every state mask, never a RESERVED or EMPTY slot, and
 *    never a wrong key while slots are rewritten under it (torn reads);
 *  - kvp_ix_publish, kvp_ix_abort, kvp_ix_delete (only READY, only the
 *    exact word), kvp_ix_check_take / _release, kvp_ix_relocate,
 *    kvp_ix_remove (remove moves the generation on, relocate keeps it;
 *    none succeeds from a stale word), kvp_ix_reap_owner (only
 *    RESERVED/CLAIM/PENDING of that owner) and what an attaching agent
 *    undoes (kvp_ix_clear_stale_agent).
 *
 * The hold protocol has its own file (test_hold.c); the index as the pool
 * uses it, with an agent, is tests/agent/test_index_pool.c.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "index/index_int.h"
#include "tests/agent/harness.h"

#define NS1 0x5e1f0001ull
#define NS2 0x5e1f0002ull
#define CS_A 0u /* client slots (owners CS + 1) */
#define CS_B 1u

static uint64_t
word(const struct kvp_seg *s, uint64_t i)
{
	return kvp_load_acquire(&s->meta[i]); /* acquire: a test's look */
}

static void
bare(struct kvp_seg *s, uint64_t slots)
{
	assert_int_equal(kvpt_seg_bare(s, slots, 64, 16, 4), 0);
}

/* Slots that are not EMPTY. */
static uint64_t
nonempty(const struct kvp_seg *s)
{
	return s->g.g_index_slots - kvpt_count_state(s, KVP_IX_EMPTY);
}

/* Is slot i one of the 16 candidates of hash h? */
static bool
is_cand(const struct kvp_seg *s, uint64_t h, uint64_t i)
{
	unsigned pos;

	for (pos = 0; pos < KVP_IX_CANDS; pos++)
		if (kvp_ix_cand(s, h, pos) == i)
			return true;
	return false;
}

/* Set slot j up by hand in a state no call leaves it in for long
 * (RESERVED, CLAIM: a claimant between two steps), key written. */
static void
craft(struct kvp_seg *s, uint64_t j, uint64_t ns, uint64_t h, const void *key,
      size_t klen, unsigned owner, unsigned st)
{
	kvp_ix_key_write(s, j, ns, h, key, klen);
	/* release: the key fields before the word, as kvp_ix_claim does */
	kvp_store_release(&s->meta[j], KVP_IX_WORD(KVP_IX_GEN(word(s, j)),
						   kvp_ix_fp(h), owner, st));
}

/* The first EMPTY candidate of hash h. */
static uint64_t
free_cand(const struct kvp_seg *s, uint64_t h)
{
	unsigned pos;

	for (pos = 0; pos < KVP_IX_CANDS; pos++)
		if (KVP_IX_STATE(word(s, kvp_ix_cand(s, h, pos))) ==
		    KVP_IX_EMPTY)
			return kvp_ix_cand(s, h, pos);
	fail_msg("no EMPTY candidate");
	return 0;
}

static int64_t
find(const struct kvp_seg *s, uint64_t ns, const void *key, size_t klen,
     unsigned mask, uint64_t *w)
{
	return kvp_ix_find(s, ns, kvp_key_hash(ns, key, klen), key, klen, mask,
			   w);
}

/* ---- claim, publish, find ---- */

/* One claim: the slot is PENDING, owned by the claimant, carries the
 * key's fingerprint and key fields; a second claimant is told -EEXIST
 * and leaves nothing behind; publish makes it READY (same generation,
 * no owner) exactly once. */
static void
test_claim_publish(void **state)
{
	struct kvp_seg s;
	uint64_t h = kvp_key_hash(NS1, "k", 1), w, w2;
	const struct kvp_entry *e;
	int64_t i;

	(void)state;
	bare(&s, 1024);
	i = kvp_ix_claim(&s, CS_A, NS1, h, "k", 1, &w);
	assert_true(i >= 0);
	assert_true(is_cand(&s, h, (uint64_t)i));
	assert_int_equal(word(&s, (uint64_t)i), w);
	assert_int_equal(w, KVP_IX_WORD(0, kvp_ix_fp(h), CS_A + 1,
					KVP_IX_PENDING));
	e = &s.entries[i];
	assert_int_equal(kvp_load_relaxed(&e->e_ns), NS1);
	assert_int_equal(kvp_load_relaxed(&e->e_hash), h);
	assert_int_equal(kvp_load_relaxed(&e->e_klen), 1);
	assert_int_equal(kvp_load_relaxed(&e->e_key[0]), 'k');
	assert_int_equal(kvp_load_relaxed(&e->e_loc), 0);
	/* a PENDING key is live: found by the live mask, not by READY */
	assert_int_equal(find(&s, NS1, "k", 1, KVP_IX_LIVE_MASK, &w2), i);
	assert_int_equal(w2, w);
	assert_int_equal(find(&s, NS1, "k", 1, KVP_IX_M(KVP_IX_READY), &w2),
			 -ENOENT);
	/* a second claimant loses and gives back whatever it reserved */
	assert_int_equal(kvp_ix_claim(&s, CS_B, NS1, h, "k", 1, &w2), -EEXIST);
	assert_int_equal(word(&s, (uint64_t)i), w);
	assert_int_equal(nonempty(&s), 1);
	/* publish: READY, same generation and fingerprint, no owner; once */
	assert_int_equal(kvp_ix_publish(&s, (uint64_t)i, w), 0);
	assert_int_equal(word(&s, (uint64_t)i),
			 KVP_IX_WORD(0, kvp_ix_fp(h), 0, KVP_IX_READY));
	assert_int_equal(kvp_ix_publish(&s, (uint64_t)i, w), -ESTALE);
	assert_int_equal(find(&s, NS1, "k", 1, KVP_IX_M(KVP_IX_READY), &w2), i);
	assert_int_equal(w2, word(&s, (uint64_t)i));
	assert_int_equal(kvp_ix_claim(&s, CS_B, NS1, h, "k", 1, &w2), -EEXIST);
	assert_int_equal(nonempty(&s), 1);
	kvp__seg_unmap(&s);
}

/* kvp_ix_find with every mask of states, over a slot in each state: a
 * slot is reported iff its state is in the mask, with its exact word
 * (flags included); a RESERVED slot (key half written) and an EMPTY one
 * never are, whatever the mask. */
static void
test_find_masks(void **state)
{
	enum {
		K_RESERVED,
		K_CLAIM,
		K_PENDING,
		K_READY,
		K_DELETED,
		K_CHECK,
		K_EMPTIED,
		NK
	};
	static const char *const keys[NK] = { "reserved", "claim",   "pending",
					      "ready",    "deleted", "check",
					      "emptied" };
	static const unsigned states[NK] = { KVP_IX_RESERVED, KVP_IX_CLAIM,
					     KVP_IX_PENDING,  KVP_IX_READY,
					     KVP_IX_DELETED,  KVP_IX_READY,
					     KVP_IX_EMPTY };
	struct kvp_seg s;
	uint64_t slot[NK], w;
	unsigned k, mask, reported = 0;

	(void)state;
	bare(&s, 1024);
	for (k = 0; k < NK; k++) {
		size_t kl = strlen(keys[k]);
		uint64_t h = kvp_key_hash(NS1, keys[k], kl);
		int64_t i;

		if (k == K_RESERVED || k == K_CLAIM) {
			slot[k] = free_cand(&s, h);
			craft(&s, slot[k], NS1, h, keys[k], kl, 7,
			      k == K_RESERVED ? KVP_IX_RESERVED : KVP_IX_CLAIM);
			continue;
		}
		i = kvp_ix_claim(&s, CS_A, NS1, h, keys[k], kl, &w);
		assert_true(i >= 0);
		slot[k] = (uint64_t)i;
		if (k == K_PENDING)
			continue;
		assert_int_equal(kvp_ix_publish(&s, slot[k], w), 0);
		w = word(&s, slot[k]);
		if (k == K_DELETED)
			assert_true(kvp_ix_delete(&s, slot[k], w));
		if (k == K_CHECK)
			assert_true(kvp_ix_check_take(&s, slot[k], w));
		if (k == K_EMPTIED) {
			/* removed: the key bytes are still there, the slot
			 * EMPTY */
			assert_true(kvp_ix_remove(&s, slot[k], w));
		}
	}
	for (mask = 0; mask < 64; mask++) {
		for (k = 0; k < NK; k++) {
			unsigned st = states[k];
			bool want = (mask & KVP_IX_M(st)) &&
				    st != KVP_IX_EMPTY && st != KVP_IX_RESERVED;
			int64_t i = find(&s, NS1, keys[k], strlen(keys[k]),
					 mask, &w);

			if (!want) {
				assert_int_equal(i, -ENOENT);
				continue;
			}
			assert_int_equal(i, slot[k]);
			assert_int_equal(w, word(&s, slot[k]));
			assert_int_equal(KVP_IX_STATE(w), st);
			assert_int_equal(!!(w & KVP_IX_CHECK), k == K_CHECK);
			reported++;
		}
		assert_int_equal(find(&s, NS1, "absent", 6, mask, &w), -ENOENT);
	}
	/* 5 reportable slots, each in 32 of the 64 masks */
	assert_int_equal(reported, 5 * 32);
	kvp__seg_unmap(&s);
}

/* Keys of every length 1..255, each a prefix of the next, zero bytes
 * inside and at their ends (so two keys may differ in their length
 * alone): every one is its own entry, found at its slot, its key stored
 * zero padded; a key one byte off, or never put, is a miss. */
static void
test_keys_every_length(void **state)
{
	unsigned char buf[KVP_KEY_MAX], alt[KVP_KEY_MAX + 1];
	int64_t slot[KVP_KEY_MAX + 1];
	struct kvp_seg s;
	uint64_t w;
	size_t L, b;

	(void)state;
	bare(&s, 4096);
	for (b = 0; b < sizeof(buf); b++)
		buf[b] = b % 5 == 3 ? 0 : (unsigned char)(b * 37 + 11);
	for (L = 1; L <= KVP_KEY_MAX; L++) {
		slot[L] = kvpt_ix_put(&s, CS_A, NS1, buf, L, &w);
		assert_true(slot[L] >= 0);
	}
	assert_int_equal(kvpt_count_state(&s, KVP_IX_READY), KVP_KEY_MAX);
	for (L = 1; L <= KVP_KEY_MAX; L++) {
		const struct kvp_entry *e = &s.entries[slot[L]];
		unsigned char stored[256];

		assert_int_equal(find(&s, NS1, buf, L, KVP_IX_M(KVP_IX_READY),
				      &w),
				 slot[L]);
		assert_int_equal(kvp_load_relaxed(&e->e_klen), L);
		for (b = 0; b < 32; b++) {
			uint64_t v = kvp_load_relaxed(&e->e_key[b]);
			memcpy(stored + b * 8, &v, 8);
		}
		assert_memory_equal(stored, buf, L);
		for (b = L; b < 256; b++)
			assert_int_equal(stored[b], 0);
		/* the same length, one byte off (the first, the last) */
		memcpy(alt, buf, L);
		alt[L - 1] ^= 0x40;
		assert_int_equal(find(&s, NS1, alt, L, KVP_IX_LIVE_MASK, &w),
				 -ENOENT);
		alt[L - 1] ^= 0x40;
		alt[0] ^= 0x01;
		assert_int_equal(find(&s, NS1, alt, L, KVP_IX_LIVE_MASK, &w),
				 -ENOENT);
		/* every length is taken: another put of it exists */
		assert_int_equal(kvpt_ix_put(&s, CS_B, NS1, buf, L, &w),
				 -EEXIST);
	}
	assert_int_equal(kvpt_count_state(&s, KVP_IX_READY), KVP_KEY_MAX);
	kvp__seg_unmap(&s);
}

/* Keys that share their whole hash (so their fingerprint and both
 * buckets), differing in length alone ("x", "x\0", "x\0\0", ...): the
 * fingerprint only filters, the key decides; the 16 candidates hold 16
 * of them, the 17th key is -ENOSPC while a key already there is still
 * -EEXIST, and a slot given back makes room. */
static void
test_same_hash_keys(void **state)
{
	const uint64_t H = 0x9d2c5680a1b2c3d4ull;
	unsigned char key[32] = { 'x' };
	uint64_t w[16], w2;
	int64_t slot[16];
	struct kvp_seg s;
	unsigned k, j;

	(void)state;
	bare(&s, 1024);
	for (k = 0; k < 16; k++) {
		slot[k] = kvp_ix_claim(&s, CS_A, NS1, H, key, k + 1, &w[k]);
		assert_true(slot[k] >= 0);
		assert_true(is_cand(&s, H, (uint64_t)slot[k]));
		for (j = 0; j < k; j++)
			assert_true(slot[j] != slot[k]);
		if (k % 2)
			assert_int_equal(
				kvp_ix_publish(&s, (uint64_t)slot[k], w[k]), 0);
	}
	for (k = 0; k < 16; k++) {
		assert_int_equal(kvp_ix_find(&s, NS1, H, key, k + 1,
					     KVP_IX_LIVE_MASK, &w2),
				 slot[k]);
		/* present: -EEXIST even though both buckets are full */
		assert_int_equal(kvp_ix_claim(&s, CS_B, NS1, H, key, k + 1,
					      &w2),
				 -EEXIST);
	}
	assert_int_equal(kvp_ix_find(&s, NS1, H, "y", 1, KVP_IX_LIVE_MASK, &w2),
			 -ENOENT);
	assert_int_equal(kvp_ix_claim(&s, CS_B, NS1, H, "y", 1, &w2), -ENOSPC);
	assert_int_equal(kvp_ix_claim(&s, CS_B, NS1, H, key, 17, &w2), -ENOSPC);
	assert_int_equal(nonempty(&s), 16);
	/* give one PENDING slot back: the next claim takes it (gen 1) */
	kvp_ix_abort(&s, (uint64_t)slot[4], w[4]);
	assert_int_equal(kvp_ix_find(&s, NS1, H, key, 5, KVP_IX_LIVE_MASK, &w2),
			 -ENOENT);
	assert_int_equal(kvp_ix_claim(&s, CS_B, NS1, H, "y", 1, &w2), slot[4]);
	assert_int_equal(KVP_IX_GEN(w2), 1);
	assert_int_equal(kvp_ix_find(&s, NS1, H, "y", 1, KVP_IX_LIVE_MASK, &w2),
			 slot[4]);
	for (k = 0; k < 16; k++)
		if (k != 4)
			assert_int_equal(kvp_ix_find(&s, NS1, H, key, k + 1,
						     KVP_IX_LIVE_MASK, &w2),
					 slot[k]);
	kvp__seg_unmap(&s);
}

/* -ENOSPC is per bucket pair: with real hashes, 16 keys whose two
 * buckets are the same pair fill it and the 17th is refused, while a
 * key sharing one bucket with it goes to its other bucket and a key of
 * another pair is not affected. */
static void
test_enospc_bucket_pair(void **state)
{
	struct kvp_seg s;
	char key[32];
	uint64_t w, b1, b2;
	int64_t i;
	int n = 0, k, kl, one_shared = -1, other = -1;

	(void)state;
	bare(&s, 128); /* 16 buckets */
	kl = snprintf(key, sizeof(key), "pair-0");
	b1 = kvp_ix_cand(&s, kvp_key_hash(NS1, key, (size_t)kl), 0) / 8;
	b2 = kvp_ix_cand(&s, kvp_key_hash(NS1, key, (size_t)kl), 8) / 8;
	for (k = 0; k < 1000000; k++) {
		uint64_t h, c1, c2;

		kl = snprintf(key, sizeof(key), "pair-%d", k);
		h = kvp_key_hash(NS1, key, (size_t)kl);
		c1 = kvp_ix_cand(&s, h, 0) / 8;
		c2 = kvp_ix_cand(&s, h, 8) / 8;
		if ((c1 == b1 && c2 == b2) || (c1 == b2 && c2 == b1)) {
			i = kvp_ix_claim(&s, CS_A, NS1, h, key, (size_t)kl, &w);
			if (n < 16) {
				assert_true(i >= 0);
				assert_true(i / 8 == (int64_t)b1 ||
					    i / 8 == (int64_t)b2);
			} else {
				assert_int_equal(i, -ENOSPC);
			}
			if (++n == 17)
				break;
		} else if (one_shared < 0 &&
			   (c1 == b1 || c2 == b1 || c1 == b2 || c2 == b2)) {
			one_shared = k;
		} else if (other < 0 && c1 != b1 && c2 != b1 && c1 != b2 &&
			   c2 != b2) {
			other = k;
		}
	}
	assert_int_equal(n, 17);
	assert_true(one_shared >= 0 && other >= 0);
	kl = snprintf(key, sizeof(key), "pair-%d", one_shared);
	i = kvp_ix_claim(&s, CS_A, NS1, kvp_key_hash(NS1, key, (size_t)kl), key,
			 (size_t)kl, &w);
	assert_true(i >= 0);
	assert_true(i / 8 != (int64_t)b1 && i / 8 != (int64_t)b2);
	kl = snprintf(key, sizeof(key), "pair-%d", other);
	assert_true(kvp_ix_claim(&s, CS_A, NS1,
				 kvp_key_hash(NS1, key, (size_t)kl), key,
				 (size_t)kl, &w) >= 0);
	kvp__seg_unmap(&s);
}

/* One key in two namespaces is two entries, with real hashes and even
 * when the hashes are forced equal: the namespace is compared, not
 * only hashed. */
static void
test_namespaces(void **state)
{
	const uint64_t H = 0x0123456789abcdefull;
	struct kvp_seg s;
	uint64_t w;
	int64_t a, b;

	(void)state;
	assert_true(kvp_ns_id("a") != kvp_ns_id("b"));
	assert_true(kvp_ns_id("") != 0);
	assert_true(kvp_key_hash(NS1, "abc", 3) != kvp_key_hash(NS2, "abc", 3));
	bare(&s, 1024);
	a = kvpt_ix_put(&s, CS_A, NS1, "shared", 6, &w);
	b = kvpt_ix_put(&s, CS_A, NS2, "shared", 6, &w);
	assert_true(a >= 0 && b >= 0 && a != b);
	assert_int_equal(find(&s, NS1, "shared", 6, KVP_IX_LIVE_MASK, &w), a);
	assert_int_equal(find(&s, NS2, "shared", 6, KVP_IX_LIVE_MASK, &w), b);
	assert_int_equal(find(&s, NS1 + 7, "shared", 6, KVP_IX_LIVE_MASK, &w),
			 -ENOENT);
	assert_int_equal(kvp_load_relaxed(&s.entries[a].e_ns), NS1);
	assert_int_equal(kvp_load_relaxed(&s.entries[b].e_ns), NS2);
	/* the same hash in both namespaces */
	a = kvp_ix_claim(&s, CS_A, NS1, H, "k", 1, &w);
	b = kvp_ix_claim(&s, CS_B, NS2, H, "k", 1, &w);
	assert_true(a >= 0 && b >= 0 && a != b);
	assert_int_equal(kvp_ix_find(&s, NS1, H, "k", 1, KVP_IX_LIVE_MASK, &w),
			 a);
	assert_int_equal(kvp_ix_find(&s, NS2, H, "k", 1, KVP_IX_LIVE_MASK, &w),
			 b);
	assert_int_equal(kvp_ix_find(&s, NS1 + 7, H, "k", 1, KVP_IX_LIVE_MASK,
				     &w),
			 -ENOENT);
	assert_int_equal(kvp_ix_claim(&s, CS_A, NS2, H, "k", 1, &w), -EEXIST);
	kvp__seg_unmap(&s);
}

/* ---- publish, abort, delete ---- */

/* Abort gives a PENDING slot back (EMPTY, next generation), once; a
 * publish after it, or after the reaper took the slot, is -ESTALE; an
 * abort from a word that is no longer the slot's changes nothing. */
static void
test_publish_abort(void **state)
{
	struct kvp_seg s;
	uint64_t w, w2;
	int64_t i, j;

	(void)state;
	bare(&s, 16);
	i = kvp_ix_claim(&s, CS_A, NS1, kvp_key_hash(NS1, "p", 1), "p", 1, &w);
	assert_true(i >= 0);
	kvp_ix_abort(&s, (uint64_t)i, w);
	assert_int_equal(word(&s, (uint64_t)i),
			 KVP_IX_WORD(1, 0, 0, KVP_IX_EMPTY));
	kvp_ix_abort(&s, (uint64_t)i, w);
	assert_int_equal(word(&s, (uint64_t)i),
			 KVP_IX_WORD(1, 0, 0, KVP_IX_EMPTY));
	assert_int_equal(kvp_ix_publish(&s, (uint64_t)i, w), -ESTALE);
	assert_int_equal(word(&s, (uint64_t)i),
			 KVP_IX_WORD(1, 0, 0, KVP_IX_EMPTY));
	/* one key in a 16-slot index lands in the same slot again */
	j = kvp_ix_claim(&s, CS_A, NS1, kvp_key_hash(NS1, "p", 1), "p", 1, &w2);
	assert_int_equal(j, i);
	assert_int_equal(KVP_IX_GEN(w2), 1);
	/* the reaper empties it: the owner's publish is -ESTALE */
	assert_true(kvp_ix_reap_owner(&s, (uint64_t)j, w2, CS_A + 1));
	assert_int_equal(kvp_ix_publish(&s, (uint64_t)j, w2), -ESTALE);
	assert_int_equal(word(&s, (uint64_t)j),
			 KVP_IX_WORD(2, 0, 0, KVP_IX_EMPTY));
	/* published: an abort from the PENDING word is a no-op */
	j = kvp_ix_claim(&s, CS_A, NS1, kvp_key_hash(NS1, "p", 1), "p", 1, &w2);
	assert_int_equal(kvp_ix_publish(&s, (uint64_t)j, w2), 0);
	w = word(&s, (uint64_t)j);
	kvp_ix_abort(&s, (uint64_t)j, w2);
	assert_int_equal(word(&s, (uint64_t)j), w);
	assert_int_equal(KVP_IX_STATE(w), KVP_IX_READY);
	kvp__seg_unmap(&s);
}

/* Delete: READY(g) -> DELETED(g) from the exact word only; nothing else
 * is deleted (PENDING, DELETED, an older generation, a READY slot the
 * agent holds under CHECK), except by the agent's strict delete, which
 * passes the CHECK word and clears the flag with it. */
static void
test_delete(void **state)
{
	struct kvp_seg s;
	uint64_t w, w1, wp;
	int64_t i, p;

	(void)state;
	bare(&s, 16);
	i = kvpt_ix_put(&s, CS_A, NS1, "d", 1, &w);
	assert_true(i >= 0);
	assert_true(kvp_ix_delete(&s, (uint64_t)i, w));
	assert_int_equal(word(&s, (uint64_t)i), (w & ~0xfull) | KVP_IX_DELETED);
	assert_int_equal(KVP_IX_GEN(word(&s, (uint64_t)i)), KVP_IX_GEN(w));
	assert_false(kvp_ix_delete(&s, (uint64_t)i, w)); /* done */
	/* DELETED */
	assert_false(kvp_ix_delete(&s, (uint64_t)i, word(&s, (uint64_t)i)));
	/* PENDING: not deleted */
	p = kvp_ix_claim(&s, CS_A, NS1, kvp_key_hash(NS1, "q", 1), "q", 1, &wp);
	assert_true(p >= 0);
	assert_false(kvp_ix_delete(&s, (uint64_t)p, wp));
	assert_int_equal(word(&s, (uint64_t)p), wp);
	kvp_ix_abort(&s, (uint64_t)p, wp);
	/* an older generation of the slot: not deleted */
	assert_true(kvp_ix_check_take(&s, (uint64_t)i, word(&s, (uint64_t)i)));
	assert_true(kvp_ix_remove(&s, (uint64_t)i, word(&s, (uint64_t)i)));
	assert_int_equal(kvpt_ix_put(&s, CS_A, NS1, "d", 1, &w1), i);
	assert_int_equal(KVP_IX_GEN(w1), KVP_IX_GEN(w) + 1);
	assert_false(kvp_ix_delete(&s, (uint64_t)i, w));
	assert_int_equal(word(&s, (uint64_t)i), w1);
	/* under CHECK: a client's word (READY) no longer matches ... */
	assert_true(kvp_ix_check_take(&s, (uint64_t)i, w1));
	assert_false(kvp_ix_delete(&s, (uint64_t)i, w1));
	assert_int_equal(word(&s, (uint64_t)i), w1 | KVP_IX_CHECK);
	/* ... the agent's strict delete passes the CHECK word: flag cleared */
	assert_true(kvp_ix_delete(&s, (uint64_t)i, w1 | KVP_IX_CHECK));
	assert_int_equal(word(&s, (uint64_t)i),
			 (w1 & ~0xfull) | KVP_IX_DELETED);
	kvp__seg_unmap(&s);
}

/* ---- the agent's transitions, generations ---- */

/* check_take marks READY or DELETED slots (no flag set yet); release
 * and relocate clear the flag at the same generation (relocate with the
 * entry's new location visible); remove empties the slot and moves the
 * generation on, wrapping at 24 bits. */
static void
test_check_relocate_remove(void **state)
{
	struct kvp_seg s;
	uint64_t w, wd, wp, loc = KVP_LOC_MAKE(KVP_TIER_SSD, 12345);
	int64_t i, p;

	(void)state;
	bare(&s, 16);
	i = kvpt_ix_put(&s, CS_A, NS1, "c", 1, &w);
	assert_true(i >= 0);
	assert_true(kvp_ix_check_take(&s, (uint64_t)i, w));
	assert_int_equal(word(&s, (uint64_t)i), w | KVP_IX_CHECK);
	assert_false(kvp_ix_check_take(&s, (uint64_t)i, w));
	assert_false(kvp_ix_check_take(&s, (uint64_t)i, w | KVP_IX_CHECK));
	assert_true(kvp_ix_check_release(&s, (uint64_t)i, w | KVP_IX_CHECK));
	assert_int_equal(word(&s, (uint64_t)i), w);
	assert_false(kvp_ix_check_release(&s, (uint64_t)i, w | KVP_IX_CHECK));
	assert_false(kvp_ix_relocate(&s, (uint64_t)i, w | KVP_IX_CHECK));
	/* relocate: the location written under CHECK, same generation */
	assert_true(kvp_ix_check_take(&s, (uint64_t)i, w));
	/* relaxed: the CAS publishes */
	kvp_store_relaxed(&s.entries[i].e_loc, loc);
	assert_true(kvp_ix_relocate(&s, (uint64_t)i, w | KVP_IX_CHECK));
	assert_int_equal(word(&s, (uint64_t)i), w);
	assert_int_equal(kvp_load_relaxed(&s.entries[i].e_loc), loc);
	assert_false(kvp_ix_relocate(&s, (uint64_t)i, w | KVP_IX_CHECK));
	/* remove: EMPTY, the next generation, no owner, no fingerprint */
	assert_true(kvp_ix_check_take(&s, (uint64_t)i, w));
	assert_true(kvp_ix_remove(&s, (uint64_t)i, w | KVP_IX_CHECK));
	assert_int_equal(word(&s, (uint64_t)i),
			 KVP_IX_WORD(KVP_IX_GEN(w) + 1, 0, 0, KVP_IX_EMPTY));
	assert_false(kvp_ix_remove(&s, (uint64_t)i, w | KVP_IX_CHECK));
	/* EMPTY */
	assert_false(kvp_ix_check_take(&s, (uint64_t)i, word(&s, (uint64_t)i)));
	/* DELETED slots are taken too, and removed */
	assert_int_equal(kvpt_ix_put(&s, CS_A, NS1, "c", 1, &w), i);
	assert_true(kvp_ix_delete(&s, (uint64_t)i, w));
	wd = word(&s, (uint64_t)i);
	assert_true(kvp_ix_check_take(&s, (uint64_t)i, wd));
	assert_true(kvp_ix_remove(&s, (uint64_t)i, wd | KVP_IX_CHECK));
	assert_int_equal(KVP_IX_GEN(word(&s, (uint64_t)i)), KVP_IX_GEN(w) + 1);
	/* PENDING, CLAIM, RESERVED: never under CHECK */
	p = kvp_ix_claim(&s, CS_A, NS1, kvp_key_hash(NS1, "n", 1), "n", 1, &wp);
	assert_true(p >= 0);
	assert_false(kvp_ix_check_take(&s, (uint64_t)p, wp));
	assert_int_equal(word(&s, (uint64_t)p), wp);
	assert_false(kvp_ix_check_take(&s, (uint64_t)p,
				       (wp & ~0xfull) | KVP_IX_CLAIM));
	/* the generation wraps at 24 bits */
	kvp_store_release(&s.meta[i],
			  KVP_IX_WORD(KVP_IX_GEN_MASK, 0x77, 0, KVP_IX_READY));
	w = word(&s, (uint64_t)i);
	assert_true(kvp_ix_check_take(&s, (uint64_t)i, w));
	assert_true(kvp_ix_remove(&s, (uint64_t)i, w | KVP_IX_CHECK));
	assert_int_equal(word(&s, (uint64_t)i),
			 KVP_IX_WORD(0, 0, 0, KVP_IX_EMPTY));
	kvp__seg_unmap(&s);
}

/* Every transition, given a word of the slot's previous generation
 * (the same key, removed and put again in the same slot), fails and
 * leaves the slot as it is: remove moved the generation on, so nothing
 * that read the slot before can act on its new value. */
static void
test_stale_words(void **state)
{
	struct kvp_seg s;
	uint64_t w0, w1, p0, cur;
	int64_t i;

	(void)state;
	bare(&s, 16);
	i = kvp_ix_claim(&s, CS_A, NS1, kvp_key_hash(NS1, "g", 1), "g", 1, &p0);
	assert_true(i >= 0);
	assert_int_equal(kvp_ix_publish(&s, (uint64_t)i, p0), 0);
	w0 = word(&s, (uint64_t)i);
	assert_true(kvp_ix_check_take(&s, (uint64_t)i, w0));
	assert_true(kvp_ix_remove(&s, (uint64_t)i, w0 | KVP_IX_CHECK));
	assert_int_equal(kvpt_ix_put(&s, CS_A, NS1, "g", 1, &w1), i);
	assert_int_equal(KVP_IX_GEN(w1), KVP_IX_GEN(w0) + 1);
	assert_true(w1 != w0);
	for (cur = w1; cur; cur = cur == w1 ? (w1 | KVP_IX_CHECK) : 0) {
		/* the slot's word is cur: READY(1), then READY|CHECK(1) */
		kvp_store_release(&s.meta[i], cur);
		assert_false(kvp_ix_delete(&s, (uint64_t)i, w0));
		assert_false(kvp_ix_delete(&s, (uint64_t)i, w0 | KVP_IX_CHECK));
		assert_false(kvp_ix_check_take(&s, (uint64_t)i, w0));
		assert_false(kvp_ix_check_release(&s, (uint64_t)i,
						  w0 | KVP_IX_CHECK));
		assert_false(
			kvp_ix_relocate(&s, (uint64_t)i, w0 | KVP_IX_CHECK));
		assert_false(kvp_ix_remove(&s, (uint64_t)i, w0));
		assert_false(kvp_ix_remove(&s, (uint64_t)i, w0 | KVP_IX_CHECK));
		assert_int_equal(kvp_ix_publish(&s, (uint64_t)i, p0), -ESTALE);
		kvp_ix_abort(&s, (uint64_t)i, p0);
		assert_false(kvp_ix_reap_owner(&s, (uint64_t)i, p0, CS_A + 1));
		assert_int_equal(word(&s, (uint64_t)i), cur);
	}
	kvp__seg_unmap(&s);
}

/* The reaper's transition: only RESERVED, CLAIM or PENDING slots of
 * the dead owner, from the exact word, go EMPTY (next generation); an
 * attaching agent clears every CHECK (same generation) and its dead
 * predecessor's claims, and nothing else. */
static void
test_reap_owner(void **state)
{
	struct kvp_seg s;
	uint64_t w, wr, wd, wc, h;
	int64_t p, r, d, c;
	uint64_t j;
	unsigned st;

	(void)state;
	bare(&s, 1024);
	p = kvp_ix_claim(&s, CS_A, NS1, kvp_key_hash(NS1, "pend", 4), "pend", 4,
			 &w);
	assert_true(p >= 0);
	/* not its owner */
	assert_false(kvp_ix_reap_owner(&s, (uint64_t)p, w, CS_B + 1));
	assert_false(kvp_ix_reap_owner(&s, (uint64_t)p, w, 0));
	assert_true(kvp_ix_reap_owner(&s, (uint64_t)p, w, CS_A + 1));
	assert_int_equal(word(&s, (uint64_t)p),
			 KVP_IX_WORD(KVP_IX_GEN(w) + 1, 0, 0, KVP_IX_EMPTY));
	/* stale */
	assert_false(kvp_ix_reap_owner(&s, (uint64_t)p, w, CS_A + 1));
	/* EMPTY */
	assert_false(
		kvp_ix_reap_owner(&s, (uint64_t)p, word(&s, (uint64_t)p), 0));
	/* RESERVED and CLAIM of owner 9 (a claimant between two steps) */
	for (st = KVP_IX_RESERVED; st <= KVP_IX_CLAIM; st++) {
		h = kvp_key_hash(NS1, "half", 4);
		j = free_cand(&s, h);
		craft(&s, j, NS1, h, "half", 4, 9, st);
		w = word(&s, j);
		assert_false(kvp_ix_reap_owner(&s, j, w, 10));
		assert_true(kvp_ix_reap_owner(&s, j, w, 9));
		assert_int_equal(KVP_IX_STATE(word(&s, j)), KVP_IX_EMPTY);
		assert_int_equal(KVP_IX_GEN(word(&s, j)), KVP_IX_GEN(w) + 1);
	}
	/* READY and DELETED have no owner: never reaped */
	r = kvpt_ix_put(&s, CS_A, NS1, "ready", 5, &wr);
	d = kvpt_ix_put(&s, CS_A, NS1, "deleted", 7, &wd);
	assert_true(r >= 0 && d >= 0);
	assert_true(kvp_ix_delete(&s, (uint64_t)d, wd));
	wd = word(&s, (uint64_t)d);
	for (st = 0; st <= 0xffff; st += 0x1111) {
		assert_false(kvp_ix_reap_owner(&s, (uint64_t)r, wr, st));
		assert_false(kvp_ix_reap_owner(&s, (uint64_t)d, wd, st));
	}
	assert_false(kvp_ix_reap_owner(&s, (uint64_t)r, wr, CS_A + 1));
	assert_int_equal(word(&s, (uint64_t)r), wr);
	assert_int_equal(word(&s, (uint64_t)d), wd);
	/* an attaching agent: both CHECKs cleared, the agent's own claim
	 * (owner 0xffff, SSD recovery) reaped, a client's PENDING kept */
	assert_true(kvp_ix_check_take(&s, (uint64_t)r, wr));
	assert_true(kvp_ix_check_take(&s, (uint64_t)d, wd));
	c = kvp_ix_claim(&s, KVP_IX_OWNER_AGENT - 1, NS1,
			 kvp_key_hash(NS1, "agent", 5), "agent", 5, &wc);
	assert_true(c >= 0);
	assert_int_equal(KVP_IX_OWNER(wc), KVP_IX_OWNER_AGENT);
	p = kvp_ix_claim(&s, CS_B, NS1, kvp_key_hash(NS1, "client", 6),
			 "client", 6, &w);
	assert_true(p >= 0);
	/* an agent with an SSD tier keeps the CHECK of an entry not in DRAM
	 * (its segment may be gone: recovery decides), undoes the rest */
	kvp_store_relaxed(&s.entries[r].e_loc, KVP_LOC_MAKE(KVP_TIER_SSD, 0));
	kvp_store_relaxed(&s.entries[d].e_loc, KVP_LOC_MAKE(KVP_TIER_DRAM, 0));
	assert_int_equal(kvp_ix_clear_stale_agent(&s, true), 2);
	assert_int_equal(word(&s, (uint64_t)r), wr | KVP_IX_CHECK);
	kvp_store_relaxed(&s.entries[r].e_loc, KVP_LOC_MAKE(KVP_TIER_DRAM, 0));
	assert_int_equal(kvp_ix_clear_stale_agent(&s, false), 1);
	assert_int_equal(word(&s, (uint64_t)r), wr);
	assert_int_equal(word(&s, (uint64_t)d), wd);
	assert_int_equal(word(&s, (uint64_t)c),
			 KVP_IX_WORD(KVP_IX_GEN(wc) + 1, 0, 0, KVP_IX_EMPTY));
	assert_int_equal(word(&s, (uint64_t)p), w);
	assert_int_equal(kvp_ix_clear_stale_agent(&s, false), 0);
	kvp__seg_unmap(&s);
}

/* ---- races ---- */

#define RACERS 4
#define RKEYS 3000
#define OWNKEYS 500

struct race {
	struct kvp_seg *s;
	kvp_aint_t go;
	int64_t res[RACERS][RKEYS];
	unsigned own_failed[RACERS];
};

static uint32_t
race_key(char *k, int who, int i)
{
	if (who < 0)
		return (uint32_t)snprintf(k, 100, "%040x-shared-%d",
					  (unsigned)i * 2654435761u, i);
	return (uint32_t)snprintf(k, 100, "own-%d-%d", who, i);
}

/* Racer 'who' (client slot who): claims every shared key, in the order
 * every racer does, and one key of its own between two of them; it
 * publishes the even shared keys it wins and leaves the odd ones
 * PENDING. */
static void
racer(struct race *r, int who)
{
	char k[100];
	uint64_t w;
	int i;

	/* start together: wait on a shared futex, no spinning */
	while (kvp_iload_acquire(&r->go) == 0)
		kvp_futex_wait(&r->go, 0, 100000000ull);
	for (i = 0; i < RKEYS; i++) {
		uint32_t kl = race_key(k, -1, i);
		int64_t slot = kvp_ix_claim(r->s, (uint32_t)who, NS1,
					    kvp_key_hash(NS1, k, kl), k, kl,
					    &w);

		r->res[who][i] = slot;
		if (slot >= 0 && i % 2 == 0 &&
		    kvp_ix_publish(r->s, (uint64_t)slot, w))
			r->res[who][i] = -ESTALE;
		if (i < OWNKEYS) {
			kl = race_key(k, who, i);
			r->own_failed[who] += kvpt_ix_put(r->s, (uint32_t)who,
							  NS1, k, kl, &w) < 0;
		}
	}
}

struct racer_arg {
	struct race *r;
	int who;
};

static void *
racer_main(void *p)
{
	struct racer_arg *a = p;

	racer(a->r, a->who);
	return NULL;
}

/* Exactly one winner per shared key, the others told -EEXIST; every
 * racer's own keys all won; the index holds each key in exactly one
 * slot, in the state its winner left it (READY or PENDING, owned by the
 * winner), and nothing a loser reserved is left behind. */
static void
check_race(struct race *r)
{
	struct kvp_seg *s = r->s;
	char k[100];
	uint64_t w, i;
	int key, who;

	for (who = 0; who < RACERS; who++)
		assert_int_equal(r->own_failed[who], 0);
	for (key = 0; key < RKEYS; key++) {
		uint32_t kl = race_key(k, -1, key);
		int winners = 0, winner = -1, copies = 0;
		int64_t slot;

		for (who = 0; who < RACERS; who++) {
			if (r->res[who][key] >= 0) {
				winners++;
				winner = who;
			} else {
				assert_int_equal(r->res[who][key], -EEXIST);
			}
		}
		assert_int_equal(winners, 1);
		slot = r->res[winner][key];
		assert_int_equal(find(s, NS1, k, kl, KVP_IX_LIVE_MASK, &w),
				 slot);
		if (key % 2 == 0)
			assert_int_equal(KVP_IX_STATE(w), KVP_IX_READY);
		else
			assert_int_equal(w & 0xffff0fu,
					 ((uint64_t)(winner + 1) << 8) |
						 KVP_IX_PENDING);
		for (i = 0; i < s->g.g_index_slots; i++)
			copies += KVP_IX_STATE(word(s, i)) != KVP_IX_EMPTY &&
				  kvp_ix_key_eq(s, i, NS1, k, kl);
		assert_int_equal(copies, 1);
	}
	assert_int_equal(nonempty(s), RKEYS + RACERS * OWNKEYS);
}

static struct race *
race_new(struct kvp_seg *s)
{
	struct race *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_ptr_not_equal(r, MAP_FAILED);
	memset(r, 0, sizeof(*r));
	assert_int_equal(kvpt_seg_bare(s, 16384, 64, 16, 4), 0);
	r->s = s;
	return r;
}

static void
race_go(struct race *r)
{
	kvp_istore_release(&r->go, 1);
	kvp_futex_wake(&r->go);
}

/* RACERS threads claim the same keys at the same moment. */
static void
test_claim_race_threads(void **state)
{
	struct racer_arg a[RACERS];
	pthread_t t[RACERS];
	struct kvp_seg s;
	struct race *r = race_new(&s);
	int who;

	(void)state;
	for (who = 0; who < RACERS; who++) {
		a[who].r = r;
		a[who].who = who;
		assert_int_equal(
			pthread_create(&t[who], NULL, racer_main, &a[who]), 0);
	}
	race_go(r);
	for (who = 0; who < RACERS; who++)
		pthread_join(t[who], NULL);
	check_race(r);
	kvp__seg_unmap(&s);
	munmap(r, sizeof(*r));
}

/* RACERS processes claim the same keys at the same moment, on the
 * segment their parent mapped (MAP_SHARED: the same pages). */
static void
test_claim_race_processes(void **state)
{
	pid_t pid[RACERS];
	struct kvp_seg s;
	struct race *r = race_new(&s);
	int who, st;

	(void)state;
	for (who = 0; who < RACERS; who++) {
		pid[who] = fork();
		assert_true(pid[who] >= 0);
		if (pid[who] == 0) {
			racer(r, who);
			_exit(0);
		}
	}
	race_go(r);
	for (who = 0; who < RACERS; who++) {
		assert_int_equal(waitpid(pid[who], &st, 0), pid[who]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	check_race(r);
	kvp__seg_unmap(&s);
	munmap(r, sizeof(*r));
}

/*
 * Insert-if-absent in lock step: two claimants (client slots 0 and 1)
 * meet at every round and claim one new key together, each after a
 * random delay, so their CLAIM stores and scans overlap in a share of
 * the rounds (what a free-running race on two cores seldom does).  Each
 * round: exactly one winner, the other -EEXIST, one live slot with the
 * key; the winner then aborts (the slot goes EMPTY again).  Runs at
 * least KVPT_CLAIM_MS (default 500) ms and 20,000 rounds, until the two
 * claims have overlapped in time in CLAIM_OVERLAPS rounds (else, after
 * 60 s, it says SKIP for the race it could not make).
 */
#define CLAIM_OVERLAPS 2000
struct claim_step {
	struct kvp_seg *s;
	kvp_aword_t arrive[2]; /* round each claimant reached */
	kvp_aword_t leave[2];  /* round each has claimed in */
	kvp_aword_t past[2];   /* round each has seen judged */
	kvp_aword_t stop;
	int64_t res[2];
	uint64_t word[2];
	uint64_t t[2][2]; /* each claim's start and end (CLOCK_MONOTONIC) */
	uint64_t min_ns, rounds, bad, overlapped;
};

struct stepper_arg {
	struct claim_step *x;
	unsigned me;
};

static void *
claim_step_main(void *p)
{
	struct stepper_arg *a = p;
	struct claim_step *x = a->x;
	unsigned me = a->me, other = 1 - a->me;
	uint64_t seed = 0x9e3779b97f4a7c15ull * (me + 1), r,
		 t0 = kvp_now_ns(CLOCK_MONOTONIC);
	char key[64];

	for (r = 1;; r++) {
		uint32_t kl = (uint32_t)snprintf(key, sizeof(key), "step-%llu",
						 (unsigned long long)r);
		uint64_t h = kvp_key_hash(NS1, key, kl);

		/* release: we reached round r; then meet the other claimant */
		kvp_store_release(&x->arrive[me], r);
		kvpt_step_wait(&x->arrive[other], r, NULL);
		kvpt_delay(&seed, 255);
		x->t[me][0] = kvp_now_ns(CLOCK_MONOTONIC);
		x->res[me] =
			kvp_ix_claim(x->s, me, NS1, h, key, kl, &x->word[me]);
		x->t[me][1] = kvp_now_ns(CLOCK_MONOTONIC);
		kvp_store_release(&x->leave[me], r); /* release: our result */
		kvpt_step_wait(&x->leave[other], r, NULL);
		if (me == 0) {
			/* the judge: both results are in, neither moves */
			int64_t win = x->res[0] >= 0 ? x->res[0] : x->res[1];
			unsigned wi = x->res[0] >= 0 ? 0 : 1, pos, live = 0;
			uint64_t w;

			if ((x->res[0] >= 0) == (x->res[1] >= 0) ||
			    x->res[1 - wi] != -EEXIST)
				x->bad++;
			for (pos = 0; pos < KVP_IX_CANDS; pos++) {
				uint64_t i = kvp_ix_cand(x->s, h, pos);
				unsigned st = KVP_IX_STATE(word(x->s, i));

				live += (KVP_IX_LIVE_MASK & KVP_IX_M(st)) &&
					kvp_ix_key_eq(x->s, i, NS1, key, kl);
			}
			if (live != (win >= 0))
				x->bad++;
			if (win >= 0 &&
			    kvp_ix_find(x->s, NS1, h, key, kl, KVP_IX_LIVE_MASK,
					&w) != win)
				x->bad++;
			if (win >= 0)
				kvp_ix_abort(x->s, (uint64_t)win, x->word[wi]);
			/* the two claims ran at the same time (two cores) */
			x->overlapped += x->t[0][0] < x->t[1][1] &&
					 x->t[1][0] < x->t[0][1];
			x->rounds = r;
			if ((r >= 20000 && x->overlapped >= CLAIM_OVERLAPS &&
			     kvp_now_ns(CLOCK_MONOTONIC) - t0 >= x->min_ns) ||
			    kvp_now_ns(CLOCK_MONOTONIC) - t0 > 60000000000ull)
				/* relaxed: published by our past[] release
				 * below */
				kvp_store_relaxed(&x->stop, 1);
		}
		/* both past the judge before the next round's claims; both
		 * stop after the same round */
		kvp_store_release(&x->past[me], r);
		kvpt_step_wait(&x->past[other], r, NULL);
		if (kvp_load_relaxed(&x->stop)) /* relaxed: ordered by past[] */
			break;
	}
	return NULL;
}

static void
test_claim_race_lockstep(void **state)
{
	struct claim_step *x = calloc(1, sizeof(*x));
	struct stepper_arg a[2];
	pthread_t t[2];
	struct kvp_seg s;
	unsigned k;

	(void)state;
	assert_non_null(x);
	bare(&s, 1024);
	x->s = &s;
	x->min_ns = kvpt_env_ms_ns("KVPT_CLAIM_MS", 500);
	for (k = 0; k < 2; k++) {
		a[k].x = x;
		a[k].me = k;
		assert_int_equal(
			pthread_create(&t[k], NULL, claim_step_main, &a[k]), 0);
	}
	for (k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	print_message("  %llu rounds, the two claims overlapping in %llu\n",
		      (unsigned long long)x->rounds,
		      (unsigned long long)x->overlapped);
	if (x->bad)
		fail_msg("%llu rounds without exactly one winner",
			 (unsigned long long)x->bad);
	assert_true(x->rounds >= 20000);
	/* what it could not check is said, not passed off as checked */
	if (x->overlapped < CLAIM_OVERLAPS)
		print_message(
			"SKIP lock-step claim race: the claims overlapped in %llu rounds "
			"of %llu in 60 s (fewer than two free cores?)\n",
			(unsigned long long)x->overlapped,
			(unsigned long long)x->rounds);
	assert_int_equal(nonempty(&s), 0);
	kvp__seg_unmap(&s);
	free(x);
}

/*
 * Torn reads.  Three 255-byte keys differ in their last byte alone and
 * share their whole hash (so their fingerprint and all 16 slots of a
 * 16-slot index): C stays put; a writer puts A, removes it, puts B into
 * the same slot, removes it, and so on, recording which key each
 * (slot, generation) carried before publishing it.  Readers look A, B
 * and C up meanwhile: C is found every time, at its slot; A and B are
 * found or missed, but a slot reported for A carried A at the reported
 * generation (likewise B): a key compared while the slot was rewritten
 * is never taken for the one that is there.  Runs at least 200,000
 * rewrites and KVPT_TORN_MS (default 500) ms, until 100,000 lookups of
 * A or B were judged (10,000 under ThreadSanitizer; at most 60 s).
 */
#define TORN_HIST 4096u
#define TORN_READERS 2
#if defined(__SANITIZE_THREAD__)
#define TORN_JUDGED 10000u /* ThreadSanitizer starves the readers */
#else
#define TORN_JUDGED 100000u
#endif

struct torn {
	struct kvp_seg *s;
	uint64_t H;
	unsigned char key[3][KVP_KEY_MAX]; /* A, B, C */
	int64_t c_slot;
	uint64_t c_word;
	/* gen << 2 | key, written before READY */
	kvp_aword_t hist[16][TORN_HIST];
	kvp_aword_t stop;
	unsigned rounds, done; /* rewrites asked for (at least), done */
	uint64_t min_ns;
	/* per reader */
	uint64_t wrong[TORN_READERS], right[TORN_READERS],
		unknown[TORN_READERS];
	int id_seq;
};

/* Enough: at least t->rounds rewrites, KVPT_TORN_MS (default 500) ms
 * and TORN_JUDGED lookups of A or B judged; at most 60 s. */
static bool
torn_enough(struct torn *t, unsigned n, uint64_t t0)
{
	uint64_t dt = kvp_now_ns(CLOCK_MONOTONIC) - t0, right = 0;
	unsigned k;

	if (dt > 60000000000ull)
		return true;
	if (n < t->rounds || dt < t->min_ns)
		return false;
	for (k = 0; k < TORN_READERS; k++)
		/* a progress look */
		right += __atomic_load_n(&t->right[k], __ATOMIC_RELAXED);
	return right >= TORN_JUDGED;
}

static void *
torn_writer(void *p)
{
	struct torn *t = p;
	struct kvp_seg *s = t->s;
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC);
	unsigned n;

	for (n = 0; !torn_enough(t, n, t0); n++) {
		unsigned which = n & 1;
		uint64_t w;
		int64_t i = kvp_ix_claim(s, CS_A, NS1, t->H, t->key[which],
					 KVP_KEY_MAX, &w);

		if (i < 0 || i >= 16)
			break; /* the check below sees the round fail */
		/* relaxed: published by the READY CAS (full) below */
		kvp_store_relaxed(&t->hist[i][KVP_IX_GEN(w) % TORN_HIST],
				  ((uint64_t)KVP_IX_GEN(w) << 2) | which);
		if (kvp_ix_publish(s, (uint64_t)i, w))
			break;
		w = word(s, (uint64_t)i);
		/* every other round deleted first: DELETED is not READY */
		if (n % 4 >= 2 && kvp_ix_delete(s, (uint64_t)i, w))
			w = word(s, (uint64_t)i);
		if (!kvp_ix_check_take(s, (uint64_t)i, w) ||
		    !kvp_ix_remove(s, (uint64_t)i, w | KVP_IX_CHECK))
			break;
		t->done = n + 1;
	}
	kvp_store_release(&t->stop, 1); /* release: readers stop */
	return NULL;
}

static void *
torn_reader(void *p)
{
	struct torn *t = p;
	const struct kvp_seg *s = t->s;
	int me = __atomic_fetch_add(&t->id_seq, 1, __ATOMIC_RELAXED);

	/* acquire: pairs with the writer's stop store */
	while (!kvp_load_acquire(&t->stop)) {
		unsigned which;

		for (which = 0; which < 3; which++) {
			uint64_t w, rec;
			int64_t i = kvp_ix_find(s, NS1, t->H, t->key[which],
						KVP_KEY_MAX,
						KVP_IX_M(KVP_IX_READY), &w);

			if (which == 2) {
				if (i != t->c_slot || w != t->c_word)
					t->wrong[me]++;
				continue;
			}
			if (i < 0)
				continue;
			if (i >= 16 || KVP_IX_STATE(w) != KVP_IX_READY) {
				t->wrong[me]++;
				continue;
			}
			/* relaxed: written before the READY CAS we acquired */
			rec = kvp_load_relaxed(
				&t->hist[i][KVP_IX_GEN(w) % TORN_HIST]);
			if (rec >> 2 != KVP_IX_GEN(w))
				/* that generation's record was reused */
				t->unknown[me]++;
			else if ((rec & 3) != which)
				t->wrong[me]++;
			else
				__atomic_fetch_add(&t->right[me], 1,
						   __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

static void
test_find_torn(void **state)
{
	pthread_t wt, rt[TORN_READERS];
	struct kvp_seg s;
	struct torn *t = calloc(1, sizeof(*t));
	uint64_t wrong = 0, right = 0, unknown = 0;
	unsigned b, k;

	(void)state;
	assert_non_null(t);
	bare(&s, 16);
	t->s = &s;
	t->H = 0x7a11eca7f00dull;
	t->rounds = 200000;
	t->min_ns = kvpt_env_ms_ns("KVPT_TORN_MS", 500);
	for (k = 0; k < 3; k++) {
		for (b = 0; b < KVP_KEY_MAX; b++)
			t->key[k][b] = (unsigned char)(b * 131 + 7);
		t->key[k][KVP_KEY_MAX - 1] = (unsigned char)('A' + k);
	}
	t->c_slot = kvp_ix_claim(&s, CS_B, NS1, t->H, t->key[2], KVP_KEY_MAX,
				 &t->c_word);
	assert_true(t->c_slot >= 0);
	assert_int_equal(kvp_ix_publish(&s, (uint64_t)t->c_slot, t->c_word), 0);
	t->c_word = word(&s, (uint64_t)t->c_slot);
	for (k = 0; k < TORN_READERS; k++)
		assert_int_equal(pthread_create(&rt[k], NULL, torn_reader, t),
				 0);
	assert_int_equal(pthread_create(&wt, NULL, torn_writer, t), 0);
	pthread_join(wt, NULL);
	for (k = 0; k < TORN_READERS; k++) {
		pthread_join(rt[k], NULL);
		wrong += t->wrong[k];
		right += t->right[k];
		unknown += t->unknown[k];
	}
	print_message(
		"  %u rewrites; %llu lookups of A/B checked, %llu unjudged\n",
		t->done, (unsigned long long)right,
		(unsigned long long)unknown);
	assert_true(t->done >= t->rounds); /* no rewrite failed */
	if (wrong)
		fail_msg("%llu lookups reported a key the slot did not hold",
			 (unsigned long long)wrong);
	/* it checked enough (else 60 s ran out) */
	assert_true(right >= TORN_JUDGED);
	kvp__seg_unmap(&s);
	free(t);
}

/* The two candidate buckets of a key are distinct and keys spread evenly:
 * no bucket is more than 4x the mean over 1M keys. */
static void
test_hash_spread(void **state)
{
	enum {
		NB = 4096,
		NK = 1 << 20
	};
	struct kvp_seg s;
	unsigned *cnt = calloc(NB, sizeof(unsigned)), max = 0;
	char key[96];
	int k;

	(void)state;
	memset(&s, 0, sizeof(s));
	s.bucket_mask = NB - 1;
	for (k = 0; k < NK; k++) {
		uint32_t kl = (uint32_t)snprintf(key, sizeof(key), "%064x_%d",
						 (unsigned)k, k % 8);
		uint64_t h = kvp_key_hash(7, key, kl);
		uint64_t b1 = kvp_ix_cand(&s, h, 0) / 8,
			 b2 = kvp_ix_cand(&s, h, 8) / 8;
		assert_true(b1 != b2);
		cnt[b1]++;
	}
	for (k = 0; k < NB; k++)
		max = cnt[k] > max ? cnt[k] : max;
	assert_true(max < 4 * (NK / NB));
	assert_true(kvp_ns_id("a") != kvp_ns_id("b"));
	assert_true(kvp_key_hash(1, "abc", 3) != kvp_key_hash(2, "abc", 3));
	free(cnt);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hash_spread),
		cmocka_unit_test(test_claim_publish),
		cmocka_unit_test(test_find_masks),
		cmocka_unit_test(test_keys_every_length),
		cmocka_unit_test(test_same_hash_keys),
		cmocka_unit_test(test_enospc_bucket_pair),
		cmocka_unit_test(test_namespaces),
		cmocka_unit_test(test_publish_abort),
		cmocka_unit_test(test_delete),
		cmocka_unit_test(test_check_relocate_remove),
		cmocka_unit_test(test_stale_words),
		cmocka_unit_test(test_reap_owner),
		cmocka_unit_test(test_claim_race_threads),
		cmocka_unit_test(test_claim_race_processes),
		cmocka_unit_test(test_claim_race_lockstep),
		cmocka_unit_test(test_find_torn),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
