/* SPDX-License-Identifier: MIT */
/*
 * tier_agent.c - the agent's tier thread: everything slow between DRAM
 * and SSD.  One thread owns the SSD store, the staging allocator, every
 * DRAM free and every location change, so none of those race each other.
 *
 *  - Demotion: above the DRAM high watermark the evictor hands cold,
 *    unheld values here; their DRAM runs are written to SSD (copy first),
 *    the entry remembers the SSD copy (e_ssd), and the next eviction pass
 *    relocates it (CHECK protocol: DRAM freed only when unheld).
 *  - Reads off SSD: clients post requests into their ring (kvp_req) and
 *    sleep on their futex.  A whole-value read while DRAM is below the
 *    high watermark is promoted (read into new DRAM runs; the SSD copy
 *    stays); anything else is read into a staging span.  One resolve call
 *    gets at most half of the staging arena; its first key always fits (a
 *    value larger than the whole arena is -E2BIG); the rest is -EBUSY and
 *    the client asks again after copying.  Requests for bytes already in
 *    flight join that read (single flight).
 *  - Everything a client wrote (ring entries) is untrusted: slots, ranges
 *    and generations are validated; answers go back with a CAS on the
 *    exact request word, so a reused or withdrawn entry is never written.
 *
 * Location changes keep the generation (holds fence by slot), DRAM runs
 * being promoted into are marked busy so the orphan sweep (which runs on
 * this thread too) keeps them.
 */
#include <sys/statvfs.h>
#include <sys/uio.h>

#include "agent/agent_int.h"
#include "tiers/kvp_ssd.h"

#define KVP_TIER_MAX_OPS 1024u
#define KVP_TIER_MAX_DEMOTING 32u
#define KVP_AGENT_OWNER 0xfffeu /* claims made by the agent (recovery) */

enum { TOP_FREE = 0, TOP_STAGE, TOP_PROMOTE, TOP_DEMOTE, TOP_TOMB };

struct kvp_waiter {
	uint32_t client, ring;
	uint64_t word;  /* the TAKEN word we answer with a CAS */
	uint64_t cgen;  /* the client slot's state word when taken */
	uint64_t skip;  /* where its bytes start in the span */
};

/*
 * An operation in flight.  Its waiters are requests answered when it
 * completes: readers (STAGE, PROMOTE), or strict deletes (DEMOTE: the
 * tombstone follows once the value's location is known; TOMB: answered
 * when the tombstone is durable).
 */
struct kvp_top {
	int kind;
	uint64_t slot, gen, vlen;
	uint64_t astart, alen; /* STAGE: value extent read (4 KiB aligned) */
	uint32_t head, nslots; /* STAGE: span */
	uint32_t first;        /* PROMOTE, DEMOTE: DRAM first unit */
	struct kvp_waiter *w;
	unsigned nw, capw;
	struct iovec iov[64];
	unsigned niov;
};

/* Ops in flight on one index slot are counted in 16 bits: each op counts
 * once, so the count never exceeds KVP_TIER_MAX_OPS, however many reads
 * of one key clients post (a wrap would let the orphan sweep free DRAM a
 * promotion is still reading into). */
_Static_assert(KVP_TIER_MAX_OPS <= UINT16_MAX, "per-slot op count width");

struct kvp_tier {
	struct kvp_ssd *ssd;
	struct kvp_top ops[KVP_TIER_MAX_OPS];
	uint32_t freeops[KVP_TIER_MAX_OPS];
	uint32_t nfree;
	uint16_t *busy;         /* per index slot: ops in flight on it */
	uint8_t *tombed;        /* per index slot: a DELETED value whose
				 * tombstone is already written or queued */
	unsigned demoting;
	uint64_t write_fail_until; /* after an SSD write error: drop, not demote */
	bool *wake;             /* per client: answered this round */
	uint64_t total_bytes;   /* --ssd-size, or the file system's size */
	uint64_t published_ns;  /* last SSD usage published to the header */
};

static void kvp_tier_publish(struct kvp_agent *a);
static uint64_t kvp_entry_key(const struct kvp_entry *e, unsigned char key[256]);

bool
kvp_tier_busy_agent(struct kvp_agent *a, uint64_t slot)
{
	return a->tier && a->tier->busy[slot];
}

/* SSD writes failed a moment ago (full, vetoed, I/O error): eviction
 * drops cold values instead of demoting them, for a second. */
bool
kvp_tier_write_failing_agent(struct kvp_agent *a)
{
	return a->tier && kvp_now_ns(CLOCK_MONOTONIC) < a->tier->write_fail_until;
}

/* Demotion writes in flight are at their limit. */
bool
kvp_tier_demote_full_agent(struct kvp_agent *a)
{
	return a->tier && a->tier->demoting >= KVP_TIER_MAX_DEMOTING;
}

bool
kvp_tier_demoting_agent(struct kvp_agent *a)
{
	return a->tier && a->tier->demoting;
}

static struct kvp_top *
kvp_top_get(struct kvp_tier *t, int kind, uint64_t *tag)
{
	struct kvp_top *op;
	uint32_t k;

	if (!t->nfree)
		return NULL;
	k = t->freeops[--t->nfree];
	op = &t->ops[k];
	memset(op, 0, offsetof(struct kvp_top, iov));
	op->kind = kind;
	*tag = k + 1;
	return op;
}

static void
kvp_top_put(struct kvp_tier *t, struct kvp_top *op)
{
	free(op->w);
	op->w = NULL;
	op->kind = TOP_FREE;
	t->freeops[t->nfree++] = (uint32_t)(op - t->ops);
}

static int
kvp_top_add_waiter(struct kvp_top *op, const struct kvp_waiter *w)
{
	if (op->nw == op->capw) {
		unsigned cap = op->capw ? op->capw * 2 : 4;
		struct kvp_waiter *n = realloc(op->w, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		op->w = n;
		op->capw = cap;
	}
	op->w[op->nw++] = *w;
	return 0;
}

/* Fill iovecs with the DRAM run chain of [first..) covering bytes. */
static unsigned
kvp_runs_iov(struct kvp_seg *s, uint32_t first, uint64_t bytes, struct iovec *iov,
	     unsigned max)
{
	uint32_t p = first, next;
	unsigned n = 0;

	while (bytes && n < max && p < s->g.g_dram_pages) {
		uint64_t rb = 0;
		unsigned char *a = kvp_dram_run(s, p, &rb, &next);

		if (!a) /* a damaged chain: no I/O (the caller gives up) */
			return 0;
		iov[n].iov_base = a;
		iov[n].iov_len = rb < bytes ? rb : ((bytes + 4095) & ~4095ull);
		if (iov[n].iov_len > rb)
			iov[n].iov_len = rb;
		bytes -= rb < bytes ? rb : bytes;
		n++;
		if (!next)
			break;
		p = next - 1;
	}
	return bytes ? 0 : n;
}

/* ---- spans ---- */

static void
kvp_span_set_holder(struct kvp_span *sp, uint32_t client)
{
	uint64_t bit = 1ull << (client % 64), old;

	do /* relaxed: the CAS decides */
		old = kvp_load_relaxed(&sp->sp_holders[client / 64]);
	while (!kvp_cas(&sp->sp_holders[client / 64], old, old | bit)); /* full CAS */
}

static void
kvp_span_clear_holder(struct kvp_span *sp, uint32_t client)
{
	uint64_t bit = 1ull << (client % 64), old;

	do /* relaxed: the CAS decides */
		old = kvp_load_relaxed(&sp->sp_holders[client / 64]);
	while ((old & bit) && !kvp_cas(&sp->sp_holders[client / 64], old, old & ~bit));
}

static bool
kvp_span_unheld(const struct kvp_span *sp)
{
	unsigned k;

	for (k = 0; k < KVP_SPAN_HOLDER_WORDS; k++)
		if (kvp_load_acquire(&sp->sp_holders[k])) /* acquire: holders' CAS */
			return false;
	return true;
}

/* Free a READY span nobody holds (any agent thread; idempotent).  A span
 * already FREEING belongs to its freer and is left alone here. */
static bool
kvp_span_free_if_unheld(struct kvp_seg *s, uint32_t head, bool count_expired)
{
	struct kvp_span *sp = &s->spans[head];
	/* acquire: pairs with the state CASes */
	uint64_t w = kvp_load_acquire(&sp->sp_state);
	uint64_t fw = KVP_SP_WORDF(KVP_SP_GEN(w), KVP_SP_N(w), KVP_SP_FREEING, KVP_SP_AGENT);

	if (KVP_SP_STATE(w) != KVP_SP_READY || !kvp_span_unheld(sp) ||
	    /* full CAS: one freer */
	    !kvp_cas(&sp->sp_state, w, fw))
		return false;
	/* full: occupancy, by the FREEING CAS winner only; an adopter of a
	 * dead freer's span does not subtract again (a freer killed between
	 * its CAS and this leaves the count high until the arena is idle:
	 * kvp_staging_reconcile) */
	kvp_fetch_add(&s->hdr->h_staging_used, (uint64_t)0 - KVP_SP_N(w));
	kvp_span_finish_free(s, head, fw);
	if (count_expired)
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_STAGING_EXPIRED], 1); /* stat */
	return true;
}

/* Finish the free of a FREEING span whose freer is dead (freer named in
 * the word: client slot + 1, or KVP_SP_AGENT for a dead predecessor).
 * Takes the span over with a CAS first, so two adopters cannot both
 * finish it.  Returns 1 if it freed the span. */
unsigned
kvp_span_adopt_agent(struct kvp_seg *s, uint32_t head, unsigned dead_freer)
{
	struct kvp_span *sp = &s->spans[head];
	/* acquire: pairs with the freer's CAS */
	uint64_t w = kvp_load_acquire(&sp->sp_state);
	uint64_t fw = KVP_SP_WORDF(KVP_SP_GEN(w), KVP_SP_N(w), KVP_SP_FREEING, KVP_SP_AGENT);

	if (KVP_SP_STATE(w) != KVP_SP_FREEING || KVP_SP_FREER(w) != dead_freer ||
	    /* full CAS: the span is ours to finish */
	    !kvp_cas(&sp->sp_state, w, fw))
		return 0;
	kvp_span_finish_free(s, head, fw);
	return 1;
}

/* A dead client's span bits go (reaper thread); spans left unheld are
 * freed.  Idempotent. */
void
kvp_span_release_client_agent(struct kvp_seg *s, uint32_t client)
{
	uint64_t k;

	if (!s->spans)
		return;
	for (k = 0; k < s->g.g_staging_slots; k++) {
		struct kvp_span *sp = &s->spans[k];
		uint64_t w = kvp_load_acquire(&sp->sp_state); /* acquire */

		if (KVP_SP_STATE(w) == KVP_SP_FREEING) {
			/* it died freeing this span */
			kvp_span_adopt_agent(s, (uint32_t)k, client + 1);
			continue;
		}
		if (KVP_SP_STATE(w) != KVP_SP_READY && KVP_SP_STATE(w) != KVP_SP_READING)
			continue;
		kvp_span_clear_holder(sp, client);
		kvp_span_free_if_unheld(s, (uint32_t)k, true);
	}
}

/* Reclaim spans whose holders are gone (dead clients' bits included) and
 * finish frees a dying client left half-done.  Returns spans freed. */
unsigned
kvp_staging_sweep_agent(struct kvp_seg *s)
{
	unsigned n = 0;
	uint64_t k;
	uint32_t c;

	if (!s->spans)
		return 0;
	for (k = 0; k < s->g.g_staging_slots; k++) {
		struct kvp_span *sp = &s->spans[k];
		uint64_t w = kvp_load_acquire(&sp->sp_state); /* acquire */

		if (KVP_SP_STATE(w) == KVP_SP_FREEING) {
			/* a client freer that died (not yet reaped); a live
			 * one finishes its own free */
			unsigned f = KVP_SP_FREER(w);
			if (f && f <= s->g.g_max_clients &&
			    !kvp_shm_client_alive(s, f - 1))
				n += kvp_span_adopt_agent(s, (uint32_t)k, f);
			continue;
		}
		if (KVP_SP_STATE(w) != KVP_SP_READY)
			continue;
		/* bits of clients that are not LIVE any more (a LIVE one
		 * that died is the reaper's: it clears its bits) */
		for (c = 0; c < s->g.g_max_clients; c++) {
			uint64_t cw = kvp_load_acquire(&s->clients[c].cs_state); /* acquire */
			if ((cw & 0xff) != KVP_CS_LIVE &&
			    /* relaxed: a hint; the clear is a CAS */
			    (kvp_load_relaxed(&sp->sp_holders[c / 64]) >> (c % 64)) & 1)
				kvp_span_clear_holder(sp, c);
		}
		n += kvp_span_free_if_unheld(s, (uint32_t)k, true);
	}
	return n;
}

/* First fit of 'need' contiguous free slots; UINT32_MAX if none. */
static uint32_t
kvp_staging_find(struct kvp_seg *s, unsigned need)
{
	uint64_t S = s->g.g_staging_slots, k, run = 0;

	for (k = 0; k < S; k++) {
		/* acquire: pairs with the freer's release */
		uint64_t w = kvp_load_acquire(&s->spans[k].sp_state);

		run = KVP_SP_STATE(w) == KVP_SP_FREE ? run + 1 : 0;
		if (run == need)
			return (uint32_t)(k + 1 - need);
	}
	return UINT32_MAX;
}

/*
 * Staging occupancy, kept exactly: h_staging_used goes up by a span's
 * slots here, before the span leaves FREE (this thread is the only
 * allocator), and down by the same count from whoever wins the span's
 * READY -> FREEING CAS (a holder, or this thread), before the FREE
 * stores.  Occupancy only grows here, so the highest value returned here
 * is the exact peak; no sampling can miss it.
 */
static void
kvp_staging_account(struct kvp_seg *s, unsigned need)
{
	struct kvp_shm_header *h = s->hdr;
	/* full: the count goes up before the span's state stores */
	uint64_t used = kvp_fetch_add(&h->h_staging_used, need) + need;

	/* relaxed: written by this thread only; read by tools */
	if (used > kvp_load_relaxed(&h->h_staging_peak))
		kvp_store_relaxed(&h->h_staging_peak, used);
}

/*
 * A freer killed between its FREEING CAS and its subtraction leaves the
 * count high by its span.  When every slot is FREE (acquire: each freer
 * subtracted before its FREE store, and nothing leaves FREE but through
 * this thread), the true occupancy is 0: put the count right.  Returns
 * the slots that were unaccounted for.
 */
static uint64_t
kvp_staging_reconcile(struct kvp_seg *s)
{
	struct kvp_shm_header *h = s->hdr;
	uint64_t k, used;

	/* relaxed: a hint; the scan below decides */
	if (!s->spans || !kvp_load_relaxed(&h->h_staging_used))
		return 0;
	for (k = 0; k < s->g.g_staging_slots; k++)
		/* acquire: pairs with the freers' FREE release */
		if (KVP_SP_STATE(kvp_load_acquire(&s->spans[k].sp_state)) != KVP_SP_FREE)
			return 0;
	/* relaxed: ordered after the acquire loads above */
	used = kvp_load_relaxed(&h->h_staging_used);
	/* full CAS: nobody else changes it while every slot is free */
	if (used && kvp_cas(&h->h_staging_used, used, 0))
		return used;
	return 0;
}

/* ---- answers ---- */

/* Answer one waiter (I19).  The entry is claimed first, with a CAS from
 * the exact TAKEN word to ANSWERING: if the client withdrew the request,
 * or its slot was reaped and the entry reused, that CAS fails and nothing
 * at all is written into it (a span bit given to it is taken back).  Only
 * then the answer's fields, and DONE with a release. */
static void
kvp_answer(struct kvp_agent *a, const struct kvp_waiter *w, int64_t res, uint64_t where,
	   int span_head)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_req *q = &s->rings[(uint64_t)w->client * s->g.g_ring_entries + w->ring];
	/* acquire: the slot must still be the client that asked */
	bool same = kvp_load_acquire(&s->clients[w->client].cs_state) == w->cgen;

	/* full CAS: TAKEN(seq) -> ANSWERING(seq); the entry is ours to write */
	if (!same ||
	    !kvp_cas(&q->rq_state, w->word, (w->word & ~0xffull) | KVP_RQ_ANSWERING)) {
		if (span_head >= 0) {
			kvp_span_clear_holder(&s->spans[span_head], w->client);
			kvp_span_free_if_unheld(s, (uint32_t)span_head, true);
		}
		return;
	}
	/* relaxed: published by the DONE release below */
	kvp_store_relaxed(&q->rq_result, (uint64_t)res);
	kvp_store_relaxed(&q->rq_where, where);
	kvp_crashpoint(A_REQ_ANSWERING);
	/* release: the answer before DONE; pairs with the client's acquire */
	kvp_store_release(&q->rq_state, (w->word & ~0xffull) | KVP_RQ_DONE);
	a->tier->wake[w->client] = true;
}

static void
kvp_wake_clients(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	uint32_t c;

	for (c = 0; c < s->g.g_max_clients; c++) {
		if (!a->tier->wake[c])
			continue;
		a->tier->wake[c] = false;
		kvp_ifetch_add(&s->clients[c].cs_io_futex, 1); /* full: then wake */
		kvp_futex_wake(&s->clients[c].cs_io_futex);
	}
}

/* ---- requests ---- */

struct kvp_callstate {
	uint32_t client;
	uint64_t call;
	uint64_t used; /* staging slots given to this call */
};

/* Join a read already in flight for these bytes (single flight). */
static bool
kvp_try_join(struct kvp_agent *a, uint64_t slot, uint64_t off, uint64_t len,
	     struct kvp_waiter *w)
{
	struct kvp_tier *t = a->tier;
	unsigned k;

	if (!t->busy[slot])
		return false;
	for (k = 0; k < KVP_TIER_MAX_OPS; k++) {
		struct kvp_top *op = &t->ops[k];

		if (op->slot != slot)
			continue;
		if (op->kind == TOP_PROMOTE ||
		    (op->kind == TOP_STAGE && off >= op->astart &&
		     off + len <= op->astart + op->alen)) {
			if (op->kind == TOP_STAGE) {
				w->skip = off - op->astart;
				kvp_span_set_holder(&a->seg.spans[op->head], w->client);
			}
			if (kvp_top_add_waiter(op, w))
				return false;
			kvp_fetch_add(&a->seg.hdr->h_actr[KVP_ACTR_SINGLE_FLIGHT], 1); /* stat */
			return true;
		}
	}
	return false;
}

/* The key a read must find in the record's header: a location that names
 * another key's record (or an older value of this key's slot) is then
 * -EBADMSG, never someone else's bytes.  The entry's key is stable while
 * the read is in flight (the slot is busy: not removable). */
static void
kvp_read_identity(const struct kvp_entry *e, struct kvp_ssd_read *rd)
{
	/* relaxed: written before the READY publish, stable while READY */
	uint64_t klen = kvp_load_relaxed(&e->e_klen);

	rd->ns = kvp_load_relaxed(&e->e_ns);
	rd->klen = klen <= KVP_KEY_MAX ? (uint32_t)klen : 0;
	rd->key = rd->klen ? (const void *)e->e_key : NULL;
}

/*
 * Queue a tombstone for the key of index slot 'slot' (READY, DELETED or
 * under CHECK: its key is stable) that deletes the value record at
 * 'target'.  The slot is marked tombed (its reclaim writes no second
 * one).  Waiters (strict deletes) are answered when it completes; on
 * failure they are answered here.  0 or -errno.
 */
static int
kvp_tomb_queue(struct kvp_agent *a, uint64_t slot, uint64_t target, const struct kvp_waiter *w,
	       unsigned nw)
{
	struct kvp_tier *t = a->tier;
	struct kvp_entry *e = &a->seg.entries[slot];
	unsigned char key[256];
	uint64_t tag, klen = kvp_entry_key(e, key);
	struct kvp_top *op;
	unsigned k;
	int rc = -EINVAL;

	if (klen == 0 || klen > KVP_KEY_MAX)
		goto fail;
	rc = -EBUSY;
	op = kvp_top_get(t, TOP_TOMB, &tag);
	if (!op)
		goto fail;
	op->slot = slot;
	for (k = 0; k < nw; k++) {
		rc = kvp_top_add_waiter(op, &w[k]);
		if (rc) {
			kvp_top_put(t, op);
			goto fail;
		}
	}
	/* relaxed: the key fields are stable (see above) */
	rc = kvp_ssd_tombstone_agent(t->ssd, tag, kvp_load_relaxed(&e->e_ns), key,
				     (uint32_t)klen, target);
	if (rc) {
		kvp_top_put(t, op);
		goto fail;
	}
	t->tombed[slot] = 1;
	return 0;
fail:
	for (k = 0; k < nw; k++)
		kvp_answer(a, &w[k], -EIO, 0, -1);
	return rc;
}

/* The demotion in flight on slot, if any (strict deletes wait for it). */
static struct kvp_top *
kvp_demote_in_flight(struct kvp_tier *t, uint64_t slot)
{
	unsigned k;

	if (!t->busy[slot])
		return NULL;
	for (k = 0; k < KVP_TIER_MAX_OPS; k++)
		if (t->ops[k].kind == TOP_DEMOTE && t->ops[k].slot == slot)
			return &t->ops[k];
	return NULL;
}

/*
 * A strict delete (KVP_RQ_DELETE): the client asks the agent to delete
 * (slot, gen) and to answer once the value's tombstone is durable.  The
 * agent marks the entry DELETED itself (readers holding it finish their
 * copies; the evictor reclaims it later), then: a value with an SSD copy
 * gets its tombstone now, answered when written (strict durability: a
 * write completes once fdatasync'd); a value being demoted gets it when
 * the demotion completes; a DRAM-only value is answered at once (nothing
 * on disk can bring it back).  Answers: 0, -ENOENT (no longer there),
 * -EIO (deleted, but the tombstone could not be written).
 */
static void
kvp_serve_delete(struct kvp_agent *a, struct kvp_waiter *w, uint64_t slot, uint64_t gen)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_top *dem;
	uint64_t mw, ssd;
	int tries;

	if (slot >= s->g.g_index_slots) {
		kvp_answer(a, w, -EINVAL, 0, -1);
		return;
	}
	for (tries = 0;; tries++) {
		/* acquire: pairs with the publish CAS */
		mw = kvp_load_acquire(&s->meta[slot]);
		if (KVP_IX_STATE(mw) != KVP_IX_READY || KVP_IX_GEN(mw) != (gen & KVP_IX_GEN_MASK) ||
		    tries > 64) {
			kvp_answer(a, w, -ENOENT, 0, -1);
			return;
		}
		/* full CAS: READY(g) -> DELETED(g), as a client's delete does;
		 * no CHECK of ours is pending outside an eviction pass, so a
		 * flag found here is cleared with it */
		if (kvp_cas(&s->meta[slot], mw,
			    (mw & ~(uint64_t)(0xfu | KVP_IX_CHECK)) | KVP_IX_DELETED))
			break;
	}
	/* full: tells the reclaim pass it has work */
	kvp_fetch_add(&s->hdr->h_delete_seq, 1);
	dem = kvp_demote_in_flight(a->tier, slot);
	if (dem) {
		/* the tombstone needs the record's location: after the write */
		if (kvp_top_add_waiter(dem, w))
			kvp_answer(a, w, -EIO, 0, -1);
		return;
	}
	/* relaxed: this thread is the only writer of SSD locations */
	ssd = kvp_load_relaxed(&s->entries[slot].e_ssd);
	if (!ssd || a->tier->tombed[slot]) {
		kvp_answer(a, w, 0, 0, -1);
		return;
	}
	kvp_tomb_queue(a, slot, ssd, w, 1);
}

/* Handle one TAKEN request.  Answers at once, or leaves it to an I/O. */
static void
kvp_serve_one(struct kvp_agent *a, struct kvp_waiter *w, struct kvp_callstate *cs)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	struct kvp_req *q = &s->rings[(uint64_t)w->client * s->g.g_ring_entries + w->ring];
	/* relaxed: published by the client's POSTED release, acquired by
	 * our CAS to TAKEN; untrusted, validated below */
	uint64_t slot = kvp_load_relaxed(&q->rq_slot), gen = kvp_load_relaxed(&q->rq_gen);
	uint64_t off = kvp_load_relaxed(&q->rq_off), len = kvp_load_relaxed(&q->rq_len);
	uint64_t call = kvp_load_relaxed(&q->rq_call), mw, loc, ssd, vlen, S, sb;
	struct kvp_entry *e;
	struct kvp_top *op;
	uint64_t tag = 0, extent;
	uint32_t dst_off = 0;
	unsigned need;
	int rc;

	if (call & KVP_RQ_DELETE) {
		kvp_serve_delete(a, w, slot, gen);
		return;
	}
	if (call & KVP_RQ_FIRST || cs->client != w->client ||
	    cs->call != (call & 0xffffffffull)) {
		cs->client = w->client;
		cs->call = call & 0xffffffffull;
		cs->used = 0;
	}
	if (slot >= s->g.g_index_slots) {
		kvp_answer(a, w, -EINVAL, 0, -1);
		return;
	}
	e = &s->entries[slot];
	/* acquire: pairs with the publish CAS */
	mw = kvp_load_acquire(&s->meta[slot]);
	if (KVP_IX_GEN(mw) != (gen & KVP_IX_GEN_MASK) ||
	    (KVP_IX_STATE(mw) != KVP_IX_READY && KVP_IX_STATE(mw) != KVP_IX_DELETED)) {
		kvp_log(KVP_LOG_DEBUG, "io", "request for slot %llu gen %llu: slot is at "
			"gen %u state %u", (unsigned long long)slot, (unsigned long long)gen,
			KVP_IX_GEN(mw), KVP_IX_STATE(mw));
		kvp_answer(a, w, -ENOENT, 0, -1);
		return;
	}
	/* relaxed: this thread is the only writer of locations */
	loc = kvp_load_relaxed(&e->e_loc);
	ssd = kvp_load_relaxed(&e->e_ssd);
	vlen = kvp_load_relaxed(&e->e_len);
	if (KVP_LOC_TIER(loc) == KVP_TIER_DRAM) {
		kvp_answer(a, w, 0, KVP_WHERE_DRAM, -1);
		return;
	}
	if (off > vlen || !ssd) {
		kvp_answer(a, w, off > vlen ? -EINVAL : -EIO, 0, -1);
		return;
	}
	if (len > vlen - off)
		len = vlen - off;
	if (kvp_try_join(a, slot, off, len, w))
		return;
	/* promotion: the whole value into DRAM, if DRAM has room */
	if ((call & KVP_RQ_WHOLE) && off == 0 && len == vlen && !a->cfg.no_promote &&
	    !kvp_dram_above_high_agent(a)) {
		uint32_t first = 0;

		op = kvp_top_get(t, TOP_PROMOTE, &tag);
		/* never waits for the allocator lock: staged instead */
		if (op && kvp_dram_alloc_until(s, vlen, slot, KVP_IX_GEN(mw), &first, 0) == 0) {
			struct kvp_ssd_read rd;

			op->slot = slot;
			op->gen = KVP_IX_GEN(mw);
			op->vlen = vlen;
			op->first = first;
			op->niov = kvp_runs_iov(s, first, vlen, op->iov, 64);
			memset(&rd, 0, sizeof(rd));
			rd.loc = ssd;
			rd.vlen = vlen;
			rd.off = 0;
			rd.len = vlen;
			rd.ndst = op->niov;
			rd.dst = op->iov;
			kvp_read_identity(e, &rd);
			if (op->niov && kvp_top_add_waiter(op, w) == 0 &&
			    kvp_ssd_read_agent(t->ssd, tag, &rd) == 0) {
				t->busy[slot]++;
				kvp_crashpoint(A_PROMOTE_SUBMITTED);
				return;
			}
			kvp_dram_free_agent(a, first, slot, KVP_IX_GEN(mw));
		}
		if (op)
			kvp_top_put(t, op);
	}
	/* staging: the extent only; at most half the arena per call */
	S = s->g.g_staging_slots;
	sb = s->g.g_staging_slot_bytes;
	extent = kvp_ssd_extent(off, len, &dst_off);
	need = (unsigned)((extent + sb - 1) / sb);
	if (need == 0)
		need = 1;
	if (need > S) {
		kvp_answer(a, w, -E2BIG, 0, -1);
		return;
	}
	if (cs->used && cs->used + need > S / 2) {
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_BUSY_REJECT], 1); /* stat */
		kvp_answer(a, w, -EBUSY, 0, -1);
		return;
	}
	op = kvp_top_get(t, TOP_STAGE, &tag);
	{
		uint32_t head = kvp_staging_find(s, need);
		struct kvp_ssd_read rd;
		uint64_t hw0;
		unsigned k;

		if (head == UINT32_MAX && kvp_staging_sweep_agent(s))
			head = kvp_staging_find(s, need);
		if (!op || head == UINT32_MAX) {
			if (op)
				kvp_top_put(t, op);
			kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_BUSY_REJECT], 1); /* stat */
			kvp_answer(a, w, -EBUSY, 0, -1);
			return;
		}
		/* acquire: the free word we allocate from (its generation) */
		hw0 = kvp_load_acquire(&s->spans[head].sp_state);
		kvp_staging_account(s, need);
		for (k = 1; k < need; k++)
			/* release: a body slot of this span, not free */
			kvp_store_release(&s->spans[head + k].sp_state,
					  KVP_SP_BODYW(KVP_SP_GEN(hw0), head));
		for (k = 0; k < KVP_SPAN_HOLDER_WORDS; k++)
			kvp_store_relaxed(&s->spans[head].sp_holders[k], 0); /* relaxed: ours */
		kvp_store_relaxed(&s->spans[head].sp_slot, slot + 1);
		kvp_store_relaxed(&s->spans[head].sp_off, off - dst_off);
		kvp_store_relaxed(&s->spans[head].sp_len, extent);
		{
			/* acquire: the free state we allocate from */
			uint64_t sw = kvp_load_acquire(&s->spans[head].sp_state);
			/* release: a span in flight */
			kvp_store_release(&s->spans[head].sp_state,
					  KVP_SP_WORD(KVP_SP_GEN(sw), need, KVP_SP_READING));
		}
		w->skip = dst_off;
		kvp_span_set_holder(&s->spans[head], w->client);
		op->slot = slot;
		op->gen = KVP_IX_GEN(mw);
		op->vlen = vlen;
		op->head = head;
		op->nslots = need;
		op->astart = off - dst_off;
		op->alen = extent;
		op->iov[0].iov_base = s->staging + (uint64_t)head * sb;
		op->iov[0].iov_len = (size_t)((uint64_t)need * sb);
		op->niov = 1;
		memset(&rd, 0, sizeof(rd));
		rd.loc = ssd;
		rd.vlen = vlen;
		rd.off = off;
		rd.len = len;
		rd.ndst = 1;
		rd.dst = op->iov;
		kvp_read_identity(e, &rd);
		cs->used += need;
		rc = kvp_top_add_waiter(op, w);
		if (rc == 0)
			rc = kvp_ssd_read_agent(t->ssd, tag, &rd);
		if (rc) {
			kvp_span_clear_holder(&s->spans[head], w->client);
			/* release: READY with no holder frees it below */
			kvp_store_release(&s->spans[head].sp_state,
					  KVP_SP_WORD(KVP_SP_GEN(kvp_load_relaxed(&s->spans[head].sp_state)),
						      need, KVP_SP_READY));
			kvp_span_free_if_unheld(s, head, false);
			kvp_top_put(t, op);
			kvp_answer(a, w, rc == -EBUSY ? -EBUSY : -EIO, 0, -1);
			return;
		}
		t->busy[slot]++;
		kvp_crashpoint(A_STAGE_SUBMITTED);
	}
}

/* Take every POSTED request of every live client. */
static unsigned
kvp_serve_rings(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_callstate cs = { UINT32_MAX, 0, 0 };
	uint32_t c, r, n = 0;

	for (c = 0; c < s->g.g_max_clients; c++) {
		/* acquire: pairs with the claim CAS */
		uint64_t cw = kvp_load_acquire(&s->clients[c].cs_state);
		struct kvp_req *ring = &s->rings[(uint64_t)c * s->g.g_ring_entries];

		if ((cw & 0xff) != KVP_CS_LIVE)
			continue;
		for (r = 0; r < s->g.g_ring_entries; r++) {
			/* acquire: pairs with the client's POSTED release */
			uint64_t w = kvp_load_acquire(&ring[r].rq_state);
			struct kvp_waiter wt;

			if ((w & 0xff) != KVP_RQ_POSTED)
				continue;
			wt.client = c;
			wt.ring = r;
			wt.cgen = cw;
			wt.skip = 0;
			wt.word = (w & ~0xffull) | KVP_RQ_TAKEN;
			/* full CAS: the request is ours */
			if (!kvp_cas(&ring[r].rq_state, w, wt.word))
				continue;
			kvp_crashpoint(A_REQ_TAKEN);
			kvp_serve_one(a, &wt, &cs);
			n++;
		}
	}
	return n;
}

/* ---- completions ---- */

static void
kvp_complete(struct kvp_agent *a, const struct kvp_ssd_cqe *cq)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	struct kvp_top *op;
	unsigned k;

	if (cq->tag == 0 || cq->tag > KVP_TIER_MAX_OPS)
		return;
	op = &t->ops[cq->tag - 1];
	if (op->kind == TOP_DEMOTE)
		a->idle_used = 0; /* its DRAM can go now: work for the evictor */
	if (cq->status && cq->status != -ENOSPC)
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_SSD_ERRORS], 1); /* stat */
	switch (op->kind) {
	case TOP_STAGE: {
		struct kvp_span *sp = &s->spans[op->head];
		/* acquire: our own READING word */
		uint64_t w = kvp_load_acquire(&sp->sp_state);

		/* release: the bytes before READY; pairs with holders */
		kvp_store_release(&sp->sp_state,
				  KVP_SP_WORD(KVP_SP_GEN(w), op->nslots, KVP_SP_READY));
		kvp_crashpoint(A_STAGE_READY);
		for (k = 0; k < op->nw; k++) {
			if (cq->status) {
				kvp_span_clear_holder(sp, op->w[k].client);
				kvp_answer(a, &op->w[k], cq->status == -ENOENT ? -EIO : cq->status,
					   0, -1);
			} else {
				kvp_answer(a, &op->w[k], 0,
					   (uint64_t)(op->head + 1) | (op->w[k].skip << 32),
					   (int)op->head);
			}
		}
		if (!cq->status) {
			kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_STAGED], 1); /* stat */
			kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_SSD_READ_BYTES], op->alen);
		}
		kvp_span_free_if_unheld(s, op->head, false);
		t->busy[op->slot]--;
		break;
	}
	case TOP_PROMOTE:
		if (!cq->status) {
			struct kvp_entry *e = &s->entries[op->slot];
			/* relaxed: published by the e_loc release below */
			kvp_store_relaxed(&e->e_run, s->pages[op->first].pg_npages);
			/* release: the DRAM copy is complete before anyone
			 * reads this location */
			kvp_store_release(&e->e_loc, KVP_LOC_MAKE(KVP_TIER_DRAM, op->first));
			kvp_crashpoint(A_PROMOTE_SWITCHED);
			kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_PROMOTE], 1); /* stat */
			kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_SSD_READ_BYTES], op->vlen);
		} else {
			kvp_dram_free_agent(a, op->first, op->slot, (uint32_t)op->gen);
		}
		for (k = 0; k < op->nw; k++)
			kvp_answer(a, &op->w[k], cq->status ? (cq->status == -ENOENT ? -EIO
							       : cq->status) : 0,
				   cq->status ? 0 : KVP_WHERE_DRAM, -1);
		t->busy[op->slot]--;
		break;
	case TOP_DEMOTE:
		if (!cq->status) {
			/* relaxed: read only for SSD-resident entries, which
			 * this one becomes through a later CHECK CAS */
			kvp_store_relaxed(&s->entries[op->slot].e_ssd, cq->loc);
			kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_DEMOTE], 1); /* stat */
			kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_DEMOTE_BYTES], op->vlen);
			kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_SSD_WRITE_BYTES], op->vlen);
			/* strict deletes that came while it was written: the
			 * record exists now, so it gets its tombstone (the
			 * slot is DELETED and busy: nobody reclaimed it) */
			if (op->nw)
				kvp_tomb_queue(a, op->slot, cq->loc, op->w, op->nw);
		} else {
			if (kvp_now_ns(CLOCK_MONOTONIC) > t->write_fail_until)
				kvp_log(KVP_LOG_WARN, "ssd", "demotion failed: %s; evicting "
					"without demotion for 1 s", strerror(-cq->status));
			t->write_fail_until = kvp_now_ns(CLOCK_MONOTONIC) + 1000000000ull;
			/* nothing reached the disk: a waiting delete is done */
			for (k = 0; k < op->nw; k++)
				kvp_answer(a, &op->w[k], 0, 0, -1);
		}
		t->busy[op->slot]--;
		t->demoting--;
		break;
	case TOP_TOMB:
		for (k = 0; k < op->nw; k++)
			kvp_answer(a, &op->w[k], cq->status ? -EIO : 0, 0, -1);
		break;
	default:
		return;
	}
	kvp_top_put(t, op);
}

/* ---- demotion and forgetting ---- */

/* The key of an entry this thread owns (READY or under CHECK). */
static uint64_t
kvp_entry_key(const struct kvp_entry *e, unsigned char key[256])
{
	uint64_t k;

	for (k = 0; k < 32; k++) {
		uint64_t wd = kvp_load_relaxed(&e->e_key[k]); /* relaxed: stable */
		memcpy(key + k * 8, &wd, 8);
	}
	return kvp_load_relaxed(&e->e_klen); /* relaxed: stable */
}

unsigned
kvp_tier_demote_agent(struct kvp_agent *a, uint64_t slot, uint64_t word)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	struct kvp_entry *e = &s->entries[slot];
	unsigned char key[256];
	struct kvp_top *op;
	uint64_t tag, loc, vlen, klen, k;

	if (t->busy[slot] || t->demoting >= KVP_TIER_MAX_DEMOTING ||
	    kvp_now_ns(CLOCK_MONOTONIC) < t->write_fail_until)
		return 0;
	/* relaxed: READY entry, this thread changes locations */
	loc = kvp_load_relaxed(&e->e_loc);
	vlen = kvp_load_relaxed(&e->e_len);
	klen = kvp_entry_key(e, key);
	if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM || klen == 0 || klen > KVP_KEY_MAX ||
	    vlen > kvp_ssd_max_value_agent(t->ssd))
		return 0;
	op = kvp_top_get(t, TOP_DEMOTE, &tag);
	if (!op)
		return 0;
	op->slot = slot;
	op->gen = KVP_IX_GEN(word);
	op->vlen = vlen;
	op->first = (uint32_t)KVP_LOC_VAL(loc);
	op->niov = kvp_runs_iov(s, op->first, vlen, op->iov, 64);
	/* the last iovec must end at the value's end */
	if (op->niov) {
		uint64_t tot = 0;
		for (k = 0; k + 1 < op->niov; k++)
			tot += op->iov[k].iov_len;
		op->iov[op->niov - 1].iov_len = (size_t)(vlen - tot);
	}
	if (!op->niov) {
		kvp_top_put(t, op);
		return 0;
	}
	{
		int rc = kvp_ssd_write_agent(t->ssd, tag, kvp_load_relaxed(&e->e_ns), key,
					     (uint32_t)klen, op->iov, op->niov,
					     KVP_SSD_SRC_PADDED);
		if (rc) {
			kvp_top_put(t, op);
			if (rc != -EBUSY) {
				/* no room on SSD (or worse): drop instead */
				if (kvp_now_ns(CLOCK_MONOTONIC) > t->write_fail_until)
					kvp_log(KVP_LOG_WARN, "ssd", "demotion refused: %s; "
						"evicting without demotion for 1 s",
						strerror(-rc));
				t->write_fail_until = kvp_now_ns(CLOCK_MONOTONIC) + 1000000000ull;
			}
			return 0;
		}
	}
	t->busy[slot]++;
	t->demoting++;
	kvp_crashpoint(A_DEMOTE_SUBMITTED);
	return 1;
}

/* An entry with an SSD copy is going away (deleted or evicted from the
 * index): its record is dead and a tombstone keeps it from coming back
 * after a restart.  Called under CHECK, before the slot is emptied. */
void
kvp_tier_forget_agent(struct kvp_agent *a, uint64_t slot, uint64_t ssd_loc, uint64_t vlen)
{
	kvp_ssd_record_dead_agent(a->tier->ssd, ssd_loc, vlen);
	kvp_crashpoint(A_TOMBSTONE);
	/* a strict delete (or the stop flush) already wrote it */
	if (a->tier->tombed[slot]) {
		a->tier->tombed[slot] = 0;
		return;
	}
	kvp_tomb_queue(a, slot, ssd_loc, NULL, 0);
	a->tier->tombed[slot] = 0; /* the slot is emptied next */
}

/* ---- recovery and giving SSD space back ---- */

/* A live record found on disk at start: make it visible to every worker
 * (a fresh segment), or check it against the entry that survived. */
static int
kvp_recover_cb(void *arg, const struct kvp_ssd_rec *r)
{
	struct kvp_agent *a = arg;
	struct kvp_seg *s = &a->seg;
	uint64_t hash, w;
	int64_t i;

	if (r->type != KVP_SSD_REC_VALUE || r->klen == 0 || r->klen > KVP_KEY_MAX)
		return KVP_SSD_DECLINE;
	hash = kvp_key_hash(r->ns, r->key, r->klen);
	i = kvp_ix_find(s, r->ns, hash, r->key, r->klen,
			KVP_IX_M(KVP_IX_READY) | KVP_IX_M(KVP_IX_DELETED), &w);
	if (i >= 0) {
		/* the segment outlived the agent: same record, nothing to do */
		if (kvp_load_relaxed(&s->entries[i].e_ssd) == r->loc)
			return 0;
		return KVP_SSD_DECLINE; /* the entry knows better */
	}
	/* a unit of the index count first: at --index-entries the rest of
	 * the disk is declined like a full bucket pair */
	if (!kvp_ix_count_take(s))
		return KVP_SSD_DECLINE;
	i = kvp_ix_claim(s, KVP_AGENT_OWNER, r->ns, hash, r->key, r->klen, &w);
	if (i < 0) {
		kvp_ix_count_give(s);
		return KVP_SSD_DECLINE; /* index full: tombstoned, never served */
	}
	/* relaxed: published by the READY CAS */
	kvp_store_relaxed(&s->entries[i].e_len, r->vlen);
	kvp_store_relaxed(&s->entries[i].e_ssd, r->loc);
	kvp_store_relaxed(&s->entries[i].e_run, 0);
	kvp_store_relaxed(&s->entries[i].e_ref, 0);
	kvp_store_relaxed(&s->entries[i].e_loc, KVP_LOC_MAKE(KVP_TIER_SSD, 0));
	if (kvp_ix_publish(s, (uint64_t)i, w)) {
		kvp_ix_count_give(s);
		return KVP_SSD_DECLINE;
	}
	return 0;
}

struct kvp_drop_ctx {
	struct kvp_agent *a;
	uint64_t *slots;
	unsigned n, cap;
	bool veto;
};

static int
kvp_drop_collect(void *arg, const struct kvp_ssd_rec *r)
{
	struct kvp_drop_ctx *d = arg;
	struct kvp_seg *s = &d->a->seg;
	uint64_t w, loc;
	int64_t i;

	if (r->type != KVP_SSD_REC_VALUE || r->klen == 0 || r->klen > KVP_KEY_MAX)
		return 0;
	i = kvp_ix_find(s, r->ns, kvp_key_hash(r->ns, r->key, r->klen), r->key, r->klen,
			KVP_IX_M(KVP_IX_READY) | KVP_IX_M(KVP_IX_DELETED), &w);
	if (i < 0 || kvp_load_relaxed(&s->entries[i].e_ssd) != r->loc)
		return 0; /* not the entry's copy any more */
	if (d->a->tier->busy[i]) {
		d->veto = true; /* a read or promotion of it is in flight */
		return 1;
	}
	loc = kvp_load_relaxed(&s->entries[i].e_loc); /* relaxed: ours to change */
	if (KVP_LOC_TIER(loc) == KVP_TIER_DRAM) {
		/* DRAM-resident: it just loses its SSD copy */
		kvp_store_relaxed(&s->entries[i].e_ssd, 0);
		return 0;
	}
	if (d->n == d->cap) {
		unsigned cap = d->cap ? d->cap * 2 : 256;
		uint64_t *n = realloc(d->slots, cap * sizeof(*n));
		if (!n) {
			d->veto = true;
			return 1;
		}
		d->slots = n;
		d->cap = cap;
	}
	d->slots[d->n++] = (uint64_t)i;
	return 0;
}

/*
 * The store needs room (--ssd-size): may segment seg go?  Its SSD-only
 * values leave the index (CHECK protocol, one hold scan); if any is held
 * or being read, the segment is vetoed (a pinned or in-use key keeps its
 * segment) and the store asks about the next oldest.
 */
static int
kvp_evict_segment_cb(void *arg, struct kvp_ssd *ssd, uint32_t seg)
{
	struct kvp_agent *a = arg;
	struct kvp_seg *s = &a->seg;
	struct kvp_drop_ctx d = { a, NULL, 0, 0, false };
	struct kvp_cand *cand;
	unsigned k, n = 0;

	if (kvp_ssd_segment_foreach_agent(ssd, seg, kvp_drop_collect, &d) < 0 || d.veto) {
		free(d.slots);
		return 1;
	}
	cand = calloc(d.n + 1, sizeof(*cand));
	if (!cand) {
		free(d.slots);
		return 1;
	}
	for (k = 0; k < d.n; k++) {
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[d.slots[k]]);

		if (KVP_IX_FLAGS(w) ||
		    (KVP_IX_STATE(w) != KVP_IX_READY && KVP_IX_STATE(w) != KVP_IX_DELETED) ||
		    !kvp_dram_check_take_agent(s, d.slots[k], w, &cand[n])) {
			d.veto = true;
			continue;
		}
		n++;
	}
	/* full fence: step 2 */
	kvp_fence_full();
	kvp_dram_holds_scan_agent(s, cand, n);
	for (k = 0; k < n; k++)
		d.veto |= cand[k].held;
	for (k = 0; k < n; k++) {
		uint64_t w = cand[k].word;
		if (d.veto) /* full CAS: release every CHECK */
			kvp_cas(&s->meta[cand[k].slot], w, w & ~(uint64_t)KVP_IX_CHECK);
		/* full CAS: gone with its segment (no tombstone needed), and
		 * its unit of the index count with it */
		else if (kvp_cas(&s->meta[cand[k].slot], w,
				 KVP_IX_WORD(KVP_IX_NEXTGEN(w), 0, 0, KVP_IX_EMPTY)))
			kvp_ix_count_give(s);
	}
	if (!d.veto) {
		kvp_crashpoint(A_SEG_RECLAIM);
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_SEGMENT_RECLAIM], 1); /* stat */
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_EVICT_SSD], n);
	}
	free(cand);
	free(d.slots);
	return d.veto;
}

/* ---- lifecycle ---- */

int
kvp_tier_open_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_ssd_cfg cfg;
	struct kvp_tier *t;
	struct iovec reg[2];
	int64_t n;
	uint32_t k;
	int rc;

	if (!a->cfg.ssd_dir[0]) {
		s->hdr->h_ssd_enabled = 0;
		return 0;
	}
	if (!s->rings) {
		kvp_log(KVP_LOG_ERROR, "ssd", "this segment was created without an SSD tier "
			"(no staging arena): stop the workers, remove /dev/shm/kvpool.%s and "
			"restart with --ssd-dir", a->cfg.pool);
		return -EPROTO;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->busy = calloc(s->g.g_index_slots, sizeof(*t->busy));
	t->tombed = calloc(s->g.g_index_slots, 1);
	t->wake = calloc(s->g.g_max_clients, sizeof(bool));
	if (!t->busy || !t->tombed || !t->wake) {
		rc = -ENOMEM;
		goto err_free;
	}
	for (k = 0; k < KVP_TIER_MAX_OPS; k++)
		t->freeops[k] = KVP_TIER_MAX_OPS - 1 - k;
	t->nfree = KVP_TIER_MAX_OPS;
	memset(&cfg, 0, sizeof(cfg));
	cfg.dir = a->cfg.ssd_dir;
	cfg.segment_bytes = a->cfg.ssd_segment;
	cfg.capacity_bytes = a->cfg.ssd_size;
	cfg.durability = a->cfg.durability_strict ? KVP_SSD_STRICT : KVP_SSD_RELAXED;
	cfg.evict_cb = kvp_evict_segment_cb;
	cfg.evict_arg = a;
	rc = kvp_ssd_open_agent(&cfg, &t->ssd);
	if (rc) {
		kvp_log(KVP_LOG_ERROR, "ssd", "cannot open the SSD store in %s: %s",
			a->cfg.ssd_dir, strerror(-rc));
		goto err_free;
	}
	a->tier = t;
	t->total_bytes = a->cfg.ssd_size;
	if (!t->total_bytes) {
		struct statvfs sv;

		if (statvfs(a->cfg.ssd_dir, &sv) == 0)
			t->total_bytes = (uint64_t)sv.f_blocks * sv.f_frsize;
	}
	n = kvp_ssd_recover_agent(t->ssd, kvp_recover_cb, a);
	if (n < 0) {
		rc = (int)n;
		kvp_log(KVP_LOG_ERROR, "ssd", "recovery failed: %s", strerror(-rc));
		goto err_close;
	}
	/* entries whose SSD copy did not survive (segment gone) */
	{
		uint64_t i, lost = 0;
		struct kvp_ssd_seg_info si;

		for (i = 0; i < s->g.g_index_slots; i++) {
			uint64_t w = kvp_load_acquire(&s->meta[i]); /* acquire */
			uint64_t ssd = kvp_load_relaxed(&s->entries[i].e_ssd);

			if ((KVP_IX_STATE(w) != KVP_IX_READY && KVP_IX_STATE(w) != KVP_IX_DELETED) ||
			    !ssd || kvp_ssd_segment_info_agent(t->ssd, KVP_SSD_LOC_SEG(ssd), &si) == 0)
				continue;
			if (KVP_LOC_TIER(kvp_load_relaxed(&s->entries[i].e_loc)) == KVP_TIER_DRAM)
				kvp_store_relaxed(&s->entries[i].e_ssd, 0);
			else if (kvp_cas(&s->meta[i], w, /* full CAS: no holders at start */
					 KVP_IX_WORD(KVP_IX_NEXTGEN(w), 0, 0, KVP_IX_EMPTY))) {
				kvp_ix_count_give(s);
				lost++;
			}
		}
		if (lost)
			kvp_log(KVP_LOG_WARN, "ssd", "%llu entries lost their SSD segment",
				(unsigned long long)lost);
	}
	/* what a dead predecessor left in flight: its reads died with it
	 * (spans READING -> free; a holder still waiting re-posts), and the
	 * requests it took are handed back to us (TAKEN -> POSTED, same
	 * sequence, so the waiting client's word still matches) */
	{
		uint64_t j, handed = 0, total = (uint64_t)s->g.g_max_clients *
						 s->g.g_ring_entries;

		for (j = 0; j < s->g.g_staging_slots; j++) {
			struct kvp_span *sp = &s->spans[j];
			uint64_t w = kvp_load_acquire(&sp->sp_state); /* acquire */
			unsigned b, ns = KVP_SP_N(w);

			if (KVP_SP_STATE(w) == KVP_SP_FREEING) {
				/* a free our predecessor was doing */
				kvp_span_adopt_agent(s, (uint32_t)j, KVP_SP_AGENT);
				continue;
			}
			if (KVP_SP_STATE(w) != KVP_SP_READING)
				continue;
			/* full: its slots were counted when it was allocated */
			kvp_fetch_add(&s->hdr->h_staging_used, (uint64_t)0 - ns);
			for (b = 0; b < KVP_SPAN_HOLDER_WORDS; b++)
				kvp_store_relaxed(&sp->sp_holders[b], 0); /* relaxed: ours */
			for (b = 1; b < ns && j + b < s->g.g_staging_slots; b++)
				kvp_store_release(&s->spans[j + b].sp_state, 0); /* release */
			/* release: free again */
			kvp_store_release(&sp->sp_state,
					  KVP_SP_WORD(KVP_SP_GEN(w) + 1, 0, KVP_SP_FREE));
		}
		for (j = 0; j < total; j++) {
			/* acquire: the last word written on the entry */
			uint64_t w = kvp_load_acquire(&s->rings[j].rq_state);
			/* full CAS: the client may withdraw it at the same time;
			 * one our predecessor died answering is served again */
			if (((w & 0xff) == KVP_RQ_TAKEN || (w & 0xff) == KVP_RQ_ANSWERING) &&
			    kvp_cas(&s->rings[j].rq_state, w, (w & ~0xffull) | KVP_RQ_POSTED))
				handed++;
		}
		if (handed)
			kvp_log(KVP_LOG_INFO, "ssd", "%llu requests taken by the previous agent "
				"are served again", (unsigned long long)handed);
	}
	reg[0].iov_base = s->arena;
	reg[0].iov_len = s->g.g_dram_pages * s->g.g_dram_unit;
	reg[1].iov_base = s->staging;
	reg[1].iov_len = s->g.g_staging_slots * s->g.g_staging_slot_bytes;
	kvp_ssd_register_buffers_agent(t->ssd, reg, 2);
	s->hdr->h_ssd_enabled = 1;
	kvp_tier_publish(a);
	kvp_log(KVP_LOG_INFO, "ssd", "SSD tier in %s: %lld records recovered; staging %llu "
		"x %llu KiB", a->cfg.ssd_dir, (long long)n,
		(unsigned long long)s->g.g_staging_slots,
		(unsigned long long)(s->g.g_staging_slot_bytes >> 10));
	return 0;

err_close:
	kvp_ssd_close_agent(t->ssd);
	a->tier = NULL;
err_free:
	free(t->busy);
	free(t->tombed);
	free(t->wake);
	free(t);
	return rc;
}

void
kvp_tier_close_agent(struct kvp_agent *a)
{
	struct kvp_tier *t = a->tier;

	if (!t)
		return;
	a->seg.hdr->h_ssd_enabled = 0;
	kvp_ssd_close_agent(t->ssd);
	a->tier = NULL;
	free(t->busy);
	free(t->tombed);
	free(t->wake);
	free(t);
}

/* SSD usage into the header for tools and /metrics (at most every 50 ms),
 * and the staging count put right when the arena is idle. */
static void
kvp_tier_publish(struct kvp_agent *a)
{
	struct kvp_tier *t = a->tier;
	struct kvp_shm_header *h = a->seg.hdr;
	struct kvp_ssd_usage u;
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), lost;

	if (now - t->published_ns < 50ull * 1000 * 1000)
		return;
	t->published_ns = now;
	kvp_ssd_usage_agent(t->ssd, &u);
	/* relaxed: statistics for readers of the header */
	kvp_store_relaxed(&h->h_ssd_used_bytes, u.used_bytes);
	kvp_store_relaxed(&h->h_ssd_live_bytes, u.live_bytes);
	kvp_store_relaxed(&h->h_ssd_total_bytes, t->total_bytes);
	lost = kvp_staging_reconcile(&a->seg);
	if (lost)
		kvp_log(KVP_LOG_INFO, "ssd", "staging count corrected by %llu slots (a "
			"client died while freeing a span)", (unsigned long long)lost);
}

/* One round of the tier thread: SSD completions, requests from the rings,
 * the orphan sweep the reaper asked for, the DRAM round (eviction,
 * demotion, reclaim), submissions and wake-ups.  Waits at most wait_ms
 * (0: not at all) for I/O in flight.  Returns true when I/O is still in
 * flight (the caller should come back at once). */
bool
kvp_tier_step_agent(struct kvp_agent *a, int wait_ms)
{
	struct kvp_shm_header *h = a->seg.hdr;
	struct kvp_tier *t = a->tier;
	struct kvp_ssd_cqe cq[64];
	int n, k;

	if (t) {
		while ((n = kvp_ssd_poll_agent(t->ssd, cq, 64, 0)) > 0)
			for (k = 0; k < n; k++)
				kvp_complete(a, &cq[k]);
		kvp_serve_rings(a);
		kvp_tier_publish(a);
	}
	/* full CAS: a sweep the reaper asked for */
	if (kvp_cas(&a->gc_request, 1, 0)) {
		uint64_t freed = kvp_dram_gc_agent(a);

		if (freed == UINT64_MAX) {
			/* the allocator lock is held: next round */
			kvp_store_release(&a->gc_request, 1); /* release: our own flag */
		} else {
			kvp_fetch_add(&h->h_actr[KVP_ACTR_REAP_PAGES], freed); /* stat */
			if (freed)
				kvp_log(KVP_LOG_INFO, "reaper", "%llu units of unfinished "
					"puts freed", (unsigned long long)freed);
		}
	}
	/* frees that waited for the allocator lock, and a damaged map */
	kvp_dram_deferred_agent(a);
	kvp_dram_repair_agent(a);
	kvp_dram_round_agent(a);
	if (!t)
		return false;
	kvp_ssd_submit_agent(t->ssd);
	kvp_wake_clients(a);
	if (!kvp_ssd_outstanding_agent(t->ssd))
		return false;
	/* I/O in flight: wait for it, wait_ms at a time, so new requests
	 * are not left waiting */
	n = kvp_ssd_poll_agent(t->ssd, cq, 64, wait_ms);
	for (k = 0; k < n; k++)
		kvp_complete(a, &cq[k]);
	kvp_wake_clients(a);
	return true;
}

/* What a stop flush still has to do: READY values only in DRAM, and
 * deleted values with an SSD copy but no tombstone. */
static uint64_t
kvp_flush_left(struct kvp_agent *a, uint64_t *tombs)
{
	struct kvp_seg *s = &a->seg;
	uint64_t i, n = 0;

	*tombs = 0;
	for (i = 0; i < s->g.g_index_slots; i++) {
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]);
		const struct kvp_entry *e = &s->entries[i];

		/* relaxed: this thread writes locations */
		if (KVP_IX_STATE(w) == KVP_IX_READY &&
		    KVP_LOC_TIER(kvp_load_relaxed(&e->e_loc)) == KVP_TIER_DRAM &&
		    !kvp_load_relaxed(&e->e_ssd))
			n++;
		else if (KVP_IX_STATE(w) == KVP_IX_DELETED && kvp_load_relaxed(&e->e_ssd) &&
			 !a->tier->tombed[i])
			(*tombs)++;
	}
	return n;
}

/*
 * A clean stop with an SSD tier (SIGTERM, --stop-flush-secs): every READY
 * value that lives only in DRAM is written to SSD and every deleted value
 * with an SSD copy gets its tombstone, so that a restart, with or without
 * the segment, finds exactly the keys and latest values the pool had.
 * Held values are written too (a hold keeps bytes from being freed, not
 * from being read); requests keep being served meanwhile (each wait is a
 * round of the tier thread).  Bounded by deadline_ns (CLOCK_MONOTONIC).
 * Returns the number of values and tombstones left unwritten.
 */
uint64_t
kvp_tier_flush_agent(struct kvp_agent *a, uint64_t deadline_ns)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	uint64_t i, written = 0, tombs = 0, left = 0, ltombs = 0, t0 = kvp_now_ns(CLOCK_MONOTONIC);
	unsigned pass;

	if (!t)
		return 0;
	for (pass = 0; pass < 4; pass++) {
		for (i = 0; i < s->g.g_index_slots; i++) {
			/* acquire: pairs with the publish CAS */
			uint64_t w = kvp_load_acquire(&s->meta[i]);
			struct kvp_entry *e = &s->entries[i];
			unsigned st = KVP_IX_STATE(w);

			if (kvp_now_ns(CLOCK_MONOTONIC) >= deadline_ns)
				goto out;
			if (st == KVP_IX_DELETED) {
				/* relaxed: this thread writes SSD locations */
				uint64_t ssd = kvp_load_relaxed(&e->e_ssd);

				if (!ssd || t->tombed[i] || t->busy[i])
					continue; /* busy: a demotion; next pass */
				while (t->nfree < 2 && kvp_now_ns(CLOCK_MONOTONIC) < deadline_ns)
					kvp_tier_step_agent(a, 1);
				tombs += kvp_tomb_queue(a, i, ssd, NULL, 0) == 0;
				continue;
			}
			/* relaxed: stable while READY; this thread moves it */
			if (st != KVP_IX_READY ||
			    KVP_LOC_TIER(kvp_load_relaxed(&e->e_loc)) != KVP_TIER_DRAM ||
			    kvp_load_relaxed(&e->e_ssd) || t->busy[i])
				continue;
			while ((t->demoting >= KVP_TIER_MAX_DEMOTING || t->nfree < 2) &&
			       kvp_now_ns(CLOCK_MONOTONIC) < deadline_ns)
				kvp_tier_step_agent(a, 1);
			if (kvp_tier_write_failing_agent(a)) {
				kvp_log(KVP_LOG_ERROR, "ssd", "stop: SSD writes fail: values only "
					"in DRAM are lost");
				goto out;
			}
			written += kvp_tier_demote_agent(a, i, w);
		}
		/* let every write land (and the evictor relocate) */
		while (kvp_ssd_outstanding_agent(t->ssd) &&
		       kvp_now_ns(CLOCK_MONOTONIC) < deadline_ns)
			kvp_tier_step_agent(a, 5);
		if (!kvp_flush_left(a, &ltombs) && !ltombs)
			break;
	}
out:
	while (kvp_ssd_outstanding_agent(t->ssd) && kvp_now_ns(CLOCK_MONOTONIC) < deadline_ns)
		kvp_tier_step_agent(a, 5);
	left = kvp_flush_left(a, &ltombs);
	kvp_log(left || ltombs ? KVP_LOG_WARN : KVP_LOG_INFO, "ssd", "stop: %llu values written "
		"to SSD and %llu tombstones in %.2f s; %llu values and %llu tombstones left "
		"unwritten%s", (unsigned long long)written, (unsigned long long)tombs,
		(double)(kvp_now_ns(CLOCK_MONOTONIC) - t0) / 1e9, (unsigned long long)left,
		(unsigned long long)ltombs,
		left || ltombs ? " (deadline, SSD full or failing, or values still being put)"
			       : "");
	return left + ltombs;
}

/* The tier thread.  On stop, with an SSD tier, it flushes (above). */
void *
kvp_tier_main_agent(void *arg)
{
	struct kvp_agent *a = arg;
	struct kvp_shm_header *h = a->seg.hdr;

	while (!kvp_load_acquire(&a->stop)) { /* acquire: main's release */
		unsigned int seq = kvp_iload_acquire(&h->h_evict_wake);

		if (kvp_tier_step_agent(a, 1))
			continue;
		if (kvp_load_acquire(&a->stop)) /* acquire: main's release */
			break;
		/* sleep until a client kicks or posts, or 100 ms */
		kvp_futex_wait(&h->h_evict_wake, seq, 100ull * 1000 * 1000);
	}
	if (a->tier && a->cfg.stop_flush_ms)
		kvp_tier_flush_agent(a, kvp_now_ns(CLOCK_MONOTONIC) +
					       (uint64_t)a->cfg.stop_flush_ms * 1000000ull);
	return NULL;
}
