/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ring.c - a buggy or hostile worker against the agent.
 *
 * Everything a worker can write in the segment is untrusted by the agent:
 * its request ring (slot, generation, offset, length, call flags, state
 * words), its hold slots and hold high-water mark, lease records, the
 * staging spans it shares, and, since any process that maps the segment
 * can write any byte of it, the header's geometry copies, the page map,
 * the allocator's bins, counts and lock word, every client slot, and the
 * index (state words and entries).  Each fuzz input is a script of such
 * writes; the harness then runs the agent's tier thread (requests,
 * completions, eviction, demotion, repairs), its reaper round and its
 * evictor's hold scan in this process, against a real segment and a real
 * SSD store, runs the invariant checker over the damage, and lets the
 * sanitizers judge: the agent must neither crash nor read or write
 * outside the segment.  A second, innocent client keeps values the script
 * never touches (their index slots and DRAM units are left alone): after
 * every script each of them reads back with exactly its bytes, or is a
 * miss (evicted, as a full pool may), never wrong bytes or FAILED.
 *
 * Two builds of one file:
 *   - libFuzzer (clang -fsanitize=fuzzer,address,undefined
 *     -DKVP_LIBFUZZER): coverage-guided; tests/run.sh runs it for a
 *     while when clang is installed;
 *   - the default build (gcc, any variant): a driver that replays the
 *     files named on its command line, then runs random structured
 *     scripts for --seconds S (default 10) from --seed X.
 */
#include <ftw.h>
#include <getopt.h>

#include "agent/agent_int.h"
#include "agent/kvp_check.h"
#include "tests/agent/harness.h"

#define FZ_KEYS 12
#define FZ_VMAX (200u << 10)
#define FZ_PROT 8 /* the innocent client's values */
#define FZ_PSZ (40u << 10)

static struct kvp_agent fz_agent;
static struct kvp_client *fz_c;
static struct kvp_client *fz_p;    /* innocent: its values must survive */
static uint64_t fz_pslot[FZ_PROT]; /* their index slots (+1; 0: none now) */
static uint64_t fz_missed, fz_checked;
static uint64_t fz_slot[FZ_KEYS], fz_gen[FZ_KEYS], fz_len[FZ_KEYS];
static char fz_dir[128];

static int
fz_rm(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void
fz_cleanup(void)
{
	if (fz_c)
		kvp_close(fz_c);
	fz_c = NULL;
	if (fz_p)
		kvp_close(fz_p);
	fz_p = NULL;
	if (fz_agent.seg.base) {
		kvp_tier_close_agent(&fz_agent);
		kvp_shm_remove_agent(&fz_agent);
		kvp__seg_unmap(&fz_agent.seg);
	}
	if (fz_dir[0])
		nftw(fz_dir, fz_rm, 8, FTW_DEPTH | FTW_PHYS);
}

/* Run the agent until its I/O has drained (bounded). */
static void
fz_agent_settle(void)
{
	int k;

	for (k = 0; k < 200; k++)
		if (!kvp_tier_step_agent(&fz_agent, 5))
			break;
}

static void
fz_refresh_keys(void)
{
	unsigned k;

	for (k = 0; k < FZ_KEYS; k++) {
		char key[64];
		uint32_t kl =
			(uint32_t)snprintf(key, sizeof(key), "fuzz-key-%u", k);
		uint64_t w;
		int64_t i = kvp_ix_find(&fz_c->seg, fz_c->nsid,
					kvp_key_hash(fz_c->nsid, key, kl), key,
					kl, KVP_IX_M(KVP_IX_READY), &w);

		fz_slot[k] = i >= 0 ? (uint64_t)i : 0;
		fz_gen[k] = i >= 0 ? KVP_IX_GEN(w) : 0;
		fz_len[k] =
			i >= 0 ? kvp_load_relaxed(&fz_c->seg.entries[i].e_len) :
				 0;
	}
}

static uint32_t
fz_pkey(char *k, unsigned i)
{
	return (uint32_t)snprintf(k, 64, "innocent-%u", i);
}

/* Put the innocent values that are missing (evicted), and note the index
 * slot of each, so that scripts leave those slots alone. */
static void
fz_protect(void)
{
	unsigned char *v = malloc(FZ_PSZ);
	unsigned k;

	if (!v)
		abort();
	for (k = 0; k < FZ_PROT; k++) {
		char key[64];
		uint32_t kl = fz_pkey(key, k);
		uint64_t w;
		int64_t i;

		kvpt_fill(v, FZ_PSZ, key, kl, 3);
		if (kvp_exists(fz_p, key, kl) != 1)
			kvp_put(fz_p, key, kl, v, FZ_PSZ);
		i = kvp_ix_find(&fz_p->seg, fz_p->nsid,
				kvp_key_hash(fz_p->nsid, key, kl), key, kl,
				KVP_IX_M(KVP_IX_READY), &w);
		fz_pslot[k] = i >= 0 ? (uint64_t)i + 1 : 0;
	}
	free(v);
}

/* Is index slot i one of the innocent values'? */
static bool
fz_protected_slot(uint64_t i)
{
	unsigned k;

	for (k = 0; k < FZ_PROT; k++)
		if (fz_pslot[k] == i + 1)
			return true;
	return false;
}

/* Is DRAM unit u inside a run of an innocent value (or its tail tag)? */
static bool
fz_protected_unit(uint64_t u)
{
	const struct kvp_seg *s = &fz_p->seg;
	unsigned k;

	for (k = 0; k < FZ_PROT; k++) {
		uint64_t i = fz_pslot[k], loc, p, hops = 0;

		if (!i--)
			continue;
		/* relaxed: the harness's own look between scripts */
		loc = kvp_load_relaxed(&s->entries[i].e_loc);
		if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM)
			continue;
		for (p = KVP_LOC_VAL(loc);
		     p < s->g.g_dram_pages && hops++ < 64;) {
			uint32_t len = s->pages[p].pg_npages,
				 next = s->pages[p].pg_next;

			if (!len || len > s->g.g_dram_pages - p)
				break;
			if (u >= p && u < p + len)
				return true;
			if (!next)
				break;
			p = next - 1;
		}
	}
	return false;
}

/* After a script: every innocent value reads back with its bytes, or is
 * a miss; anything else is a finding.  An SSD-resident one is read
 * through the agent, so the agent's tier thread runs meanwhile (as it
 * would in kvpoold). */
static void
fz_verify_protected(void)
{
	unsigned char *v = malloc(FZ_PSZ);
	pthread_t tier;
	unsigned k;

	if (!v)
		abort();
	kvp_store_release(&fz_agent.stop, 0); /* release: the thread's flag */
	if (pthread_create(&tier, NULL, kvp_tier_main_agent, &fz_agent))
		abort();
	for (k = 0; k < FZ_PROT; k++) {
		char key[64];
		uint32_t kl = fz_pkey(key, k);
		ssize_t n = kvp_get(fz_p, key, kl, v, FZ_PSZ);

		fz_checked++;
		if (n == -ENOENT) {
			fz_missed++;
			continue;
		}
		if (n != (ssize_t)FZ_PSZ ||
		    !kvpt_check(v, FZ_PSZ, key, kl, 3)) {
			fprintf(stderr, "fuzz_ring: innocent value %u: %s\n", k,
				n < 0 ? kvp_strerror((int)n) : "wrong bytes");
			abort();
		}
	}
	/* release: the thread acquires it */
	kvp_store_release(&fz_agent.stop, 1);
	kvp_ifetch_add(&fz_agent.seg.hdr->h_evict_wake, 1); /* full: wake it */
	kvp_futex_wake(&fz_agent.seg.hdr->h_evict_wake);
	pthread_join(tier, NULL);
	free(v);
}

static int
fz_setup(void)
{
	struct kvp_agent_cfg *cfg = &fz_agent.cfg;
	unsigned char *v;
	unsigned k;

	kvp_log_set_level(KVP_LOG_ERROR);
	snprintf(fz_dir, sizeof(fz_dir), "/var/tmp/kvp-fuzz-%d-XXXXXX",
		 (int)getpid());
	if (!mkdtemp(fz_dir))
		return -1;
	atexit(fz_cleanup);
	memset(&fz_agent, 0, sizeof(fz_agent));
	fz_agent.seg.fd = -1;
	if (kvpt_pool_name(cfg->pool, sizeof(cfg->pool), "fz%d", (int)getpid()))
		return -1;
	cfg->dram_bytes = 4u << 20;
	cfg->dram_unit = 16u << 10;
	cfg->index_entries = 256;
	cfg->max_value = 1u << 20;
	cfg->max_clients = 8;
	cfg->holds_per_client = 64;
	cfg->dram_high_pct = 0; /* everything goes to SSD */
	cfg->dram_low_pct = 0;
	cfg->reap_ms = 100;
	snprintf(cfg->ssd_dir, sizeof(cfg->ssd_dir), "%s", fz_dir);
	cfg->ssd_size = 16u << 20;
	cfg->ssd_segment = 4u << 20;
	cfg->staging_bytes = 256u << 10;
	cfg->staging_slot = 64u << 10;
	if (kvp_shm_create_or_attach_agent(&fz_agent) ||
	    kvp_populate_start_agent(&fz_agent) ||
	    kvp_tier_open_agent(&fz_agent) ||
	    kvp_open(cfg->pool, "fuzz", &fz_c))
		return -1;
	v = malloc(FZ_VMAX);
	if (!v)
		return -1;
	for (k = 0; k < FZ_KEYS; k++) {
		char key[64];
		uint32_t kl =
			(uint32_t)snprintf(key, sizeof(key), "fuzz-key-%u", k);
		uint64_t len = 4096 + (uint64_t)k * 17000;

		memset(v, (int)k, len);
		kvp_put(fz_c, key, kl, v, len);
		fz_agent_settle();
	}
	free(v);
	fz_agent_settle();
	/* from now on DRAM keeps values (the innocent ones stay there) */
	cfg->dram_high_pct = 60;
	cfg->dram_low_pct = 40;
	if (kvp_open(cfg->pool, "fuzz", &fz_p))
		return -1;
	fz_protect();
	fz_agent_settle();
	fz_refresh_keys();
	return 0;
}

/* The input, read as a little script. */
struct fz_in {
	const uint8_t *p;
	size_t n;
};

static uint64_t
fz_u64(struct fz_in *in, unsigned bytes)
{
	uint64_t v = 0;
	unsigned k;

	for (k = 0; k < bytes && in->n; k++, in->p++, in->n--)
		v |= (uint64_t)*in->p << (8 * k);
	return v;
}

/* A value a worker might write for a field: often valid, sometimes near
 * a boundary, sometimes raw garbage. */
static uint64_t
fz_field(struct fz_in *in, uint64_t valid, uint64_t bound)
{
	switch (fz_u64(in, 1) % 6) {
	case 0:
		return valid;
	case 1:
		return valid + fz_u64(in, 1);
	case 2:
		return bound + fz_u64(in, 1);
	case 3:
		return bound - 1 - (fz_u64(in, 1) % (bound ? bound : 1));
	case 4:
		return (uint64_t)0 - fz_u64(in, 1);
	default:
		return fz_u64(in, 8);
	}
}

static void
fz_one(const uint8_t *data, size_t size)
{
	struct fz_in in = { data, size };
	struct kvp_seg *s = &fz_c->seg;
	struct kvp_shm_header *h = s->hdr;
	uint32_t me = fz_c->slot;
	struct kvp_req *ring = &s->rings[(uint64_t)me * s->g.g_ring_entries];
	kvp_aword_t *holds = &s->holds[(uint64_t)me * s->g.g_holds_per_client];
	unsigned steps = 0, r;
	uint64_t k;

	while (in.n && steps++ < 64) {
		unsigned op = (unsigned)fz_u64(&in, 1);
		unsigned key = (unsigned)fz_u64(&in, 1) % FZ_KEYS;

		switch (op % 14) {
		case 0:
		case 1:
		case 2: { /* a request (the common case) */
			struct kvp_req *q =
				&ring[fz_u64(&in, 1) % s->g.g_ring_entries];
			/* relaxed: ours */
			uint64_t w = kvp_load_relaxed(&q->rq_state);

			kvp_store_relaxed(&q->rq_slot,
					  fz_field(&in, fz_slot[key],
						   s->g.g_index_slots));
			kvp_store_relaxed(&q->rq_gen,
					  fz_field(&in, fz_gen[key], 1u << 24));
			kvp_store_relaxed(&q->rq_off,
					  fz_field(&in, 0, fz_len[key]));
			kvp_store_relaxed(&q->rq_len, fz_field(&in, fz_len[key],
							       fz_len[key]));
			kvp_store_relaxed(
				&q->rq_call,
				fz_field(&in, KVP_RQ_FIRST | KVP_RQ_WHOLE | 1,
					 KVP_RQ_WHOLE));
			kvp_store_relaxed(&q->rq_result, fz_u64(&in, 8));
			kvp_store_relaxed(&q->rq_where, fz_u64(&in, 8));
			/* release: a POSTED word, or garbage */
			kvp_store_release(&q->rq_state,
					  op % 8 == 2 ? fz_u64(&in, 8) :
							(((w >> 8) + 1) << 8) |
								KVP_RQ_POSTED);
			break;
		}
		case 3: /* hold slots and the high-water mark */
			kvp_store_release(
				&holds[fz_u64(&in, 1) % s->g.g_holds_per_client],
				fz_u64(&in, 1) & 1 ?
					KVP_HOLD_MAKE(fz_slot[key], fz_gen[key])
					/* release */
					:
					fz_u64(&in, 8));
			kvp_store_relaxed(&s->clients[me].cs_hold_hwm,
					  fz_field(&in, s->g.g_holds_per_client,
						   s->g.g_holds_per_client));
			break;
		case 4: { /* a lease record */
			struct kvp_lease_slot *ls =
				&s->leases[fz_u64(&in, 2) % s->g.g_max_leases];

			kvp_store_relaxed(&ls->ls_slot,
					  fz_field(&in, fz_slot[key],
						   s->g.g_index_slots));
			kvp_store_relaxed(&ls->ls_expiry,
					  kvp_now_ns(CLOCK_MONOTONIC) +
						  fz_u64(&in, 4) * 1000);
			kvp_store_relaxed(&ls->ls_owner, fz_u64(&in, 2));
			/* release */
			kvp_store_release(
				&ls->ls_state,
				fz_u64(&in, 1) & 1 ?
					KVP_LS_WORD(fz_u64(&in, 4),
						    fz_u64(&in, 2),
						    fz_u64(&in, 1) % 4) :
					fz_u64(&in, 8));
			break;
		}
		case 5: { /* a staging span word a worker damaged */
			struct kvp_span *sp =
				&s->spans[fz_u64(&in, 1) % s->g.g_staging_slots];

			if (fz_u64(&in, 1) & 1)
				/* release */
				kvp_store_release(&sp->sp_state,
						  fz_u64(&in, 8));
			else
				kvp_store_release(
					&sp->sp_holders[fz_u64(&in, 1) %
							KVP_SPAN_HOLDER_WORDS],
					fz_u64(&in, 8)); /* release */
			break;
		}
		case 6: /* let the agent run in between */
			fz_agent_settle();
			break;
		case 7: /* the reaper's round and the evictor's scan */
			kvp_reaper_round_agent(&fz_agent);
			kvp_dram_round_agent(&fz_agent);
			break;
		/* a word of a header geometry copy, or its identity */
		case 8: {
			unsigned c = (unsigned)fz_u64(&in, 1);
			uint64_t *g = (uint64_t *)&h->h_geom[c & 1];

			if (c & 2)
				g[fz_u64(&in, 1) % (sizeof(struct kvp_geom) /
						    8)] = fz_u64(&in, 8);
			else
				((uint32_t *)g)[fz_u64(&in, 1) %
						(sizeof(struct kvp_geom) / 4)] =
					(uint32_t)fz_field(&in, 1, 1u << 20);
			if (c & 4)
				h->h_abi_major = (uint16_t)fz_u64(&in, 2);
			break;
		}
		/* a field of a page map entry (not an innocent value's) */
		case 9: {
			uint64_t u = fz_field(&in, fz_u64(&in, 2),
					      s->g.g_dram_pages) %
				     s->g.g_dram_pages;
			uint32_t *f = (uint32_t *)&s->pages[u];

			if (fz_protected_unit(u))
				break;
			f[fz_u64(&in, 1) % 8] = (uint32_t)fz_field(
				&in, u + 1, s->g.g_dram_pages);
			break;
		}
		case 10: { /* the allocator's bins, counts, damage flag, lock;
			    * the index count */
			unsigned what = (unsigned)fz_u64(&in, 1) % 8;

			if (what == 0)
				s->dram->dh_bin[fz_u64(&in, 1) % KVP_DRAM_BINS] =
					(uint32_t)fz_field(&in, 1,
							   s->g.g_dram_pages);
			else if (what == 1)
				s->dram->dh_free_pages =
					fz_field(&in, 1, s->g.g_dram_pages);
			else if (what == 2)
				s->dram->dh_used_pages =
					fz_field(&in, 1, s->g.g_dram_pages);
			else if (what == 3)
				kvp_store_relaxed(&s->dram->dh_damaged,
						  fz_u64(&in, 1));
			else if (what == 6) /* relaxed: hostile */
				kvp_store_relaxed(&h->h_ix_used,
						  fz_field(&in, 0,
							   s->g.g_index_limit));
			else if (what == 7) /* relaxed: hostile */
				kvp_store_relaxed(&h->h_ix_req, fz_u64(&in, 1));
			else if (what == 4) /* a lock word no holder wrote */
				/* release: hostile */
				kvp_istore_release(
					&s->dram->dh_lock,
					(unsigned int)fz_field(&in, me + 1,
							       0x10000));
			/* a claim (a forged one makes the lock look held) */
			else
				/* release: hostile */
				kvp_istore_release(
					fz_u64(&in, 1) & 1 ?
						&s->hdr->h_agent_alloc_claim :
						&s->clients[fz_u64(&in, 1) %
							    s->g.g_max_clients]
							 .cs_alloc_claim,
					(unsigned int)fz_u64(&in, 4));
			break;
		}
		case 11: { /* a field of any client slot */
			struct kvp_client_slot *cs =
				&s->clients[fz_u64(&in, 1) % s->g.g_max_clients];
			unsigned what = (unsigned)fz_u64(&in, 1) % 8;

			if (what == 0) /* relaxed: hostile */
				kvp_store_relaxed(&cs->cs_state,
						  fz_field(&in, KVP_CS_LIVE,
							   4));
			else if (what == 1)
				kvp_store_relaxed(&cs->cs_pid, fz_u64(&in, 4));
			else if (what == 2)
				kvp_store_relaxed(&cs->cs_start_time,
						  fz_u64(&in, 8));
			else if (what == 3)
				kvp_store_relaxed(&cs->cs_hold_hwm,
						  fz_u64(&in, 8));
			else if (what == 4)
				kvp_store_relaxed(&cs->cs_ctr[fz_u64(&in, 1) %
							      KVP_CTR_SLOTS],
						  fz_u64(&in, 8));
			else if (what == 5) /* its share of the index count */
				kvp_store_relaxed(
					&cs->cs_ix_resv,
					fz_field(&in, KVP_IXR_HAVE_SLOT, 8));
			else if (what == 6)
				kvp_store_relaxed(
					&cs->cs_ix_slot,
					fz_field(&in,
						 KVP_HOLD_MAKE(fz_slot[key],
							       fz_gen[key]),
						 s->g.g_index_slots));
			else
				kvp_store_relaxed(&cs->cs_hist[fz_u64(&in, 1) %
							       KVP_HIST_SLOTS]
							      [fz_u64(&in, 1) %
							       KVP_HIST_WORDS],
						  fz_u64(&in, 8));
			break;
		}
		case 12: { /* an index state word (not an innocent value's) */
			uint64_t i = fz_field(&in, fz_slot[key],
					      s->g.g_index_slots) %
				     s->g.g_index_slots;
			/* relaxed: hostile */
			uint64_t w = kvp_load_relaxed(&s->meta[i]);

			if (fz_protected_slot(i))
				break;
			switch (fz_u64(&in, 1) % 4) {
			case 0:
				w ^= KVP_IX_CHECK;
				break;
			case 1:
				w = (w & ~0xfull) | (fz_u64(&in, 1) & 0xf);
				break;
			case 2:
				w = KVP_IX_WORD(KVP_IX_GEN(w), KVP_IX_FP(w),
						fz_u64(&in, 2),
						KVP_IX_STATE(w));
				break;
			default:
				w = fz_u64(&in, 8);
				break;
			}
			/* release: hostile */
			kvp_store_release(&s->meta[i], w);
			break;
		}
		/* an index entry's field (not an innocent value's) */
		default: {
			uint64_t i = fz_field(&in, fz_slot[key],
					      s->g.g_index_slots) %
				     s->g.g_index_slots;
			struct kvp_entry *e = &s->entries[i];
			kvp_aword_t *f[] = { &e->e_loc,  &e->e_len,  &e->e_ns,
					     &e->e_hash, &e->e_klen, &e->e_use,
					     &e->e_ssd,  &e->e_run };

			if (fz_protected_slot(i))
				break;
			/* relaxed: hostile */
			kvp_store_relaxed(
				f[fz_u64(&in, 1) % 8],
				fz_u64(&in, 1) & 1 ?
					KVP_LOC_MAKE(
						fz_u64(&in, 1) & 3,
						fz_field(&in, 0,
							 s->g.g_dram_pages)) :
					fz_u64(&in, 8));
			break;
		}
		}
	}
	/* the damage as it stands: the checker must get through it */
	{
		struct kvp_check_report rep;

		kvp_check_seg(s, NULL, &rep);
	}
	fz_agent_settle();
	kvp_reaper_round_agent(&fz_agent);
	/* the worker reads its answers the way kvpool.h does, then cleans up
	 * for the next input: withdraw requests, drop holds, reset spans */
	for (r = 0; r < s->g.g_ring_entries; r++) {
		uint64_t w = kvp_load_acquire(&ring[r].rq_state); /* acquire */
		uint64_t where = kvp_load_relaxed(&ring[r].rq_where);

		if (KVP_RQ_STATE(w) == KVP_RQ_DONE &&
		    kvp_load_relaxed(&ring[r].rq_result) == 0 &&
		    !(where & KVP_WHERE_DRAM) && (where & 0xffffffffull) &&
		    (where & 0xffffffffull) - 1 < s->g.g_staging_slots)
			kvp__span_release(
				fz_c, (uint32_t)((where & 0xffffffffull) - 1));
		kvp_store_release(&ring[r].rq_state,
				  (((w >> 8) + 1) << 8) | KVP_RQ_FREE);
	}
	for (k = 0; k < s->g.g_holds_per_client; k++)
		kvp_store_release(&holds[k], 0); /* release */
	kvp_store_relaxed(&s->clients[me].cs_hold_hwm, 0);
	fz_agent_settle();
	for (k = 0; k < s->g.g_staging_slots; k++) {
		unsigned b;

		for (b = 0; b < KVP_SPAN_HOLDER_WORDS; b++)
			kvp_store_relaxed(&s->spans[k].sp_holders[b], 0);
		kvp_store_release(&s->spans[k].sp_state, 0); /* release */
	}
	for (k = 0; k < s->g.g_max_leases; k++)
		kvp_store_release(&s->leases[k].ls_state, 0); /* release */
	/* what the agent repairs on its own, now, for the next script: the
	 * header (reaper round), a lock word nobody owns (after 2 s: here at
	 * once) and the page map (rate-limited: here at once) */
	kvp_shm_repair_header_agent(&fz_agent);
	/* nobody holds the lock between scripts: a word or claims the
	 * script forged go (a live forged holder is a wedge the agent waits
	 * out, test_hostile) */
	kvp_istore_release(&s->dram->dh_lock, 0);            /* release */
	kvp_istore_release(&s->hdr->h_agent_alloc_claim, 0); /* release */
	for (k = 0; k < s->g.g_max_clients; k++)
		/* release */
		kvp_istore_release(&s->clients[k].cs_alloc_claim, 0);
	fz_agent.dram_damaged = true;
	fz_agent.last_repair_ns = 0;
	kvp_dram_repair_agent(&fz_agent);
	for (k = 0; k < s->g.g_max_clients; k++) {
		/* client slots nobody owns: the ones the script invented */
		if (k != fz_c->slot && k != fz_p->slot)
			/* release */
			kvp_store_release(&s->clients[k].cs_state, 0);
	}
	/* relaxed: the harness's own clients, restored */
	kvp_store_relaxed(&s->clients[fz_c->slot].cs_state, fz_c->slot_word);
	kvp_store_relaxed(&s->clients[fz_p->slot].cs_state, fz_p->slot_word);
	kvp_store_relaxed(&s->clients[fz_c->slot].cs_hold_hwm, 0);
	/* both harness clients are idle between scripts */
	kvp__ixr_set(fz_c, KVP_IXR_IDLE);
	kvp__ixr_set(fz_p, KVP_IXR_IDLE);
	/* the index count a script wrote: the agent's recount (due every
	 * second near the limit) puts it right; here at once */
	for (k = 0; k < s->g.g_max_clients; k++)
		if (k != fz_c->slot && k != fz_p->slot)
			/* release */
			kvp_store_release(&s->clients[k].cs_ix_resv, 0);
	kvp_ix_recount_agent(&fz_agent);
	fz_agent_settle();
	fz_verify_protected();
	fz_protect();
	fz_refresh_keys();
}

#ifdef KVP_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;

	if (!ready) {
		if (fz_setup())
			abort();
		ready = 1;
	}
	fz_one(data, size);
	return 0;
}
#else
int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "seconds", required_argument, NULL, 's' },
		{ "seed", required_argument, NULL, 'x' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned seconds = 10;
	uint64_t seed = (uint64_t)time(NULL), runs = 0, t_end;
	uint8_t buf[1024];
	int opt, k;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			seconds = (unsigned)atoi(optarg);
			break;
		case 'x':
			seed = strtoull(optarg, NULL, 0);
			break;
		default:
			fprintf(stderr,
				"usage: fuzz_ring [--seconds S] [--seed X] [FILE...]\n");
			return 2;
		}
	}
	printf("seed %llu\n", (unsigned long long)seed);
	if (fz_setup()) {
		printf("setup failed\n0 passed, 1 failed\n");
		return 1;
	}
	for (k = optind; k < argc; k++) { /* replay */
		FILE *f = fopen(argv[k], "rb");
		size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;

		if (f)
			fclose(f);
		fz_one(buf, n);
		runs++;
	}
	t_end = kvp_now_ns(CLOCK_MONOTONIC) + (uint64_t)seconds * 1000000000ull;
	while (kvp_now_ns(CLOCK_MONOTONIC) < t_end) {
		size_t n = 16 + (seed % (sizeof(buf) - 16)), j;

		for (j = 0; j < n; j++) {
			seed ^= seed << 13;
			seed ^= seed >> 7;
			seed ^= seed << 17;
			buf[j] = (uint8_t)seed;
		}
		fz_one(buf, n);
		runs++;
	}
	printf("fuzz_ring: %llu scripts, agent survived; %llu requests answered BUSY, "
	       "%llu staged, %llu promoted\n",
	       (unsigned long long)runs,
	       (unsigned long long)
		       fz_agent.seg.hdr->h_actr[KVP_ACTR_BUSY_REJECT],
	       (unsigned long long)fz_agent.seg.hdr->h_actr[KVP_ACTR_STAGED],
	       (unsigned long long)fz_agent.seg.hdr->h_actr[KVP_ACTR_PROMOTE]);
	printf("1 passed, 0 failed\n");
	return 0;
}
#endif
