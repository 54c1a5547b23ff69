/* SPDX-License-Identifier: MIT */
/*
 * move.c - moving values between tiers, and what keeps the disk honest:
 * demotion (a cold DRAM value written to SSD, copy first: its DRAM is
 * freed later by a relocation under CHECK, victim.c), promotion (asked by
 * rings.c: a whole read with room in DRAM), and tombstones (a value with
 * an SSD copy that leaves the index: the tombstone names the record it
 * deletes, I20).  Each op started here carries its completion, below
 * (ops.c calls it); the stop flush that drives these is loop.c's.
 */
#include "agent/tier_int.h"

/* completions of the ops started here (ops.c calls them) */
static void kvp_complete_promote(struct kvp_agent *a, struct kvp_top *op,
				 const struct kvp_ssd_cqe *cq);
static void kvp_complete_demote(struct kvp_agent *a, struct kvp_top *op,
				const struct kvp_ssd_cqe *cq);
static void kvp_complete_tomb(struct kvp_agent *a, struct kvp_top *op,
			      const struct kvp_ssd_cqe *cq);

/* The key of an entry this thread owns (READY or under CHECK). */
uint64_t
kvp_entry_key(const struct kvp_entry *e, unsigned char key[256])
{
	uint64_t k;

	for (k = 0; k < 32; k++) {
		/* relaxed: stable */
		uint64_t wd = kvp_load_relaxed(&e->e_key[k]);
		memcpy(key + k * 8, &wd, 8);
	}
	return kvp_load_relaxed(&e->e_klen); /* relaxed: stable */
}

/*
 * A tombstone no strict delete waits for, that the store could not take
 * (its request limit, memory): kept in the agent's memory and queued
 * again every round, and at stop, so that no tombstone is ever dropped
 * (a dropped one lets the deleted or evicted value come back after a
 * restart).  Tier thread.
 */
struct kvp_tomb_later {
	uint64_t ns, target;
	uint32_t klen;
	unsigned char key[KVP_KEY_MAX];
};

void
kvp_tomb_later(struct kvp_tier *t, uint64_t ns, const unsigned char *key,
	       uint32_t klen, uint64_t target)
{
	struct kvp_tomb_later *x;

	if (t->nlater == t->caplater) {
		size_t cap = t->caplater ? t->caplater * 2 : 64;
		struct kvp_tomb_later *n = realloc(t->later, cap * sizeof(*n));

		if (!n) {
			kvp_log(KVP_LOG_ERROR, "ssd",
				"out of memory: a tombstone is lost (its "
				"value may come back after a restart)");
			return;
		}
		t->later = n;
		t->caplater = cap;
	}
	x = &t->later[t->nlater++];
	x->ns = ns;
	x->target = target;
	x->klen = klen;
	memcpy(x->key, key, klen);
}

/* Queue the tombstones that waited (each round, and at stop).  Returns
 * how many are still waiting. */
size_t
kvp_tomb_retry_agent(struct kvp_agent *a)
{
	struct kvp_tier *t = a->tier;

	while (t && t->nlater) {
		const struct kvp_tomb_later *x = &t->later[t->nlater - 1];

		if (kvp_drv_tombstone_agent(t->ssd, 0, x->ns, x->key, x->klen,
					    x->target))
			break; /* the store is full of requests: next round */
		t->nlater--;
	}
	return t ? t->nlater : 0;
}

/*
 * Queue the tombstone of DELETED slot 'slot' (its key is stable) that
 * deletes the value record at 'target', as an op of its own: its
 * completion answers the waiters (strict deletes) and marks the slot's
 * tombstone written (kvp_complete_tomb), and only then may the slot leave
 * the index (I20: forgotten before its tombstone is on disk, a deleted
 * value would come back at the next start on the same segment, from the
 * record recovery finds).  Marked KVP_TOMB_QUEUED meanwhile.  On failure
 * the waiters are answered -EIO; if there is no op, or the store has no
 * request or room for it yet, the slot stays KVP_TOMB_NONE (a later
 * eviction pass queues it again); any other failure owes the tombstone
 * (kvp_tomb_later) and lets the slot go.  0 or -errno.
 */
int
kvp_tomb_queue(struct kvp_agent *a, uint64_t slot, uint64_t target,
	       const struct kvp_waiter *w, unsigned nw)
{
	struct kvp_tier *t = a->tier;
	struct kvp_entry *e = &a->seg.entries[slot];
	unsigned char key[256];
	uint64_t tag = 0, klen = kvp_entry_key(e, key);
	/* relaxed: the key fields are stable (see above) */
	uint64_t ns = kvp_load_relaxed(&e->e_ns);
	/* acquire: pairs with the delete CAS (the generation it names) */
	uint64_t mw = kvp_load_acquire(&a->seg.meta[slot]);
	struct kvp_top *op = NULL;
	unsigned k;
	int rc = -EINVAL;

	if (klen == 0 || klen > KVP_KEY_MAX)
		goto fail;
	rc = -EBUSY;
	op = kvp_top_get(t, TOP_TOMB, kvp_complete_tomb, &tag);
	if (!op)
		goto fail;
	op->slot = slot;
	op->gen = KVP_IX_GEN(mw);
	for (k = 0; k < nw; k++) {
		rc = kvp_top_add_waiter(op, &w[k]);
		if (rc)
			goto fail_put;
	}
	/* earlier tombstones first: their order does not matter (each names
	 * its record), but the queue must drain */
	if (t->nlater)
		kvp_tomb_retry_agent(a);
	rc = t->nlater ? -EBUSY :
			 kvp_drv_tombstone_agent(t->ssd, tag, ns, key,
						 (uint32_t)klen, target);
	if (rc)
		goto fail_put;
	t->tombed[slot] = KVP_TOMB_QUEUED;
	kvp_crashpoint(A_TOMBSTONE);
	return 0;
fail_put:
	kvp_top_put(t, op);
fail:
	for (k = 0; k < nw; k++)
		kvp_answer(a, &w[k], -EIO, 0, -1);
	/* busy, no room yet, no memory: a later pass asks again.  Anything
	 * else (a drive that is gone, failing or full, a damaged key) would
	 * keep the slot forever: the tombstone is owed instead, written when
	 * the store takes it (kvp_tomb_retry_agent), as before this op */
	if (rc != -EBUSY && rc != -EAGAIN && rc != -ENOMEM) {
		if (klen && klen <= KVP_KEY_MAX)
			kvp_tomb_later(t, ns, key, (uint32_t)klen, target);
		t->tombed[slot] = KVP_TOMB_WRITTEN;
	}
	return rc;
}

/* A tombstone for a READY slot that leaves the index now (evicted, not
 * deleted: if it is lost, the value, still the key's latest, may come
 * back, which is no harm): nobody tracks it.  One the store cannot take
 * now is never dropped: it is queued again later (kvp_tomb_retry_agent). */
static void
kvp_tomb_untracked(struct kvp_agent *a, uint64_t slot, uint64_t target)
{
	struct kvp_tier *t = a->tier;
	struct kvp_entry *e = &a->seg.entries[slot];
	unsigned char key[256];
	uint64_t klen = kvp_entry_key(e, key);
	/* relaxed: the key fields are stable (under CHECK) */
	uint64_t ns = kvp_load_relaxed(&e->e_ns);

	if (klen == 0 || klen > KVP_KEY_MAX)
		return;
	if (t->nlater)
		kvp_tomb_retry_agent(a);
	if (t->nlater ||
	    kvp_drv_tombstone_agent(t->ssd, 0, ns, key, (uint32_t)klen, target))
		kvp_tomb_later(t, ns, key, (uint32_t)klen, target);
}

/* The tombstone op in flight on slot, if any (a strict delete joins it). */
struct kvp_top *
kvp_tomb_in_flight(struct kvp_tier *t, uint64_t slot)
{
	unsigned k;

	if (t->tombed[slot] != KVP_TOMB_QUEUED)
		return NULL;
	for (k = 0; k < KVP_TIER_MAX_OPS; k++)
		if (t->ops[k].kind == TOP_TOMB && t->ops[k].slot == slot)
			return &t->ops[k];
	return NULL;
}

/*
 * May DELETED slot 'slot' leave the index now (its verdict under CHECK)?
 * Only once nothing on disk can bring it back (I20): it has no SSD copy,
 * or the tombstone of that copy is written.  Otherwise the tombstone is
 * queued now (if it is not yet, and ops are to spare) and the slot stays
 * DELETED until it completes; a tombstone in flight keeps the slot in any
 * case (its completion names it).  Not for a slot with a demotion in
 * flight (busy: the callers skip those).  Tier thread.
 */
bool
kvp_tier_may_forget_agent(struct kvp_agent *a, uint64_t slot)
{
	struct kvp_tier *t = a->tier;
	uint64_t ssd;

	if (!t)
		return true;
	if (t->tombed[slot] == KVP_TOMB_QUEUED)
		return false;
	/* relaxed: this thread is the only writer of SSD locations */
	ssd = kvp_load_relaxed(&a->seg.entries[slot].e_ssd);
	if (!ssd || t->tombed[slot] == KVP_TOMB_WRITTEN)
		return true;
	if (t->nfree > KVP_TOMB_OPS_RESERVE)
		kvp_tomb_queue(a, slot, ssd, NULL, 0);
	return t->tombed[slot] == KVP_TOMB_WRITTEN;
}

/* The demotion in flight on slot, if any (strict deletes wait for it). */
struct kvp_top *
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

unsigned
kvp_tier_demote_agent(struct kvp_agent *a, uint64_t slot, uint64_t word)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	struct kvp_entry *e = &s->entries[slot];
	unsigned char key[256];
	struct kvp_top *op;
	uint64_t tag, loc, vlen, klen, k;

	if (t->busy[slot] || kvp_tier_demote_full_agent(a) ||
	    kvp_now_ns(CLOCK_MONOTONIC) < t->write_fail_until ||
	    kvp_now_ns(CLOCK_MONOTONIC) < t->write_defer_until)
		return 0;
	/* relaxed: READY entry, this thread changes locations */
	loc = kvp_load_relaxed(&e->e_loc);
	vlen = kvp_load_relaxed(&e->e_len);
	klen = kvp_entry_key(e, key);
	if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM || klen == 0 ||
	    klen > KVP_KEY_MAX || vlen > kvp_drv_max_value_agent(t->ssd))
		return 0;
	op = kvp_top_get(t, TOP_DEMOTE, kvp_complete_demote, &tag);
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
		int rc = kvp_drv_write_agent(t->ssd, tag,
					     kvp_load_relaxed(&e->e_ns), key,
					     (uint32_t)klen, op->iov, op->niov,
					     KVP_SSD_SRC_PADDED);
		uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);

		if (rc == -EAGAIN) {
			/* the oldest segment is in use (a read of one of its
			 * keys, a pin): room comes when it ends, so wait a
			 * moment and keep the value; only a veto that lasts
			 * a second makes eviction drop values below */
			if (!t->write_defer_since)
				t->write_defer_since = now;
			if (now - t->write_defer_since < 1000000000ull) {
				kvp_top_put(t, op);
				t->write_defer_until = now + 2000000ull;
				return 0;
			}
			t->write_defer_since = 0;
		} else if (!rc) {
			t->write_defer_since = 0;
		}
		if (rc) {
			kvp_top_put(t, op);
			if (rc != -EBUSY) {
				/* no room on SSD (or worse): drop instead */
				if (kvp_now_ns(CLOCK_MONOTONIC) >
				    t->write_fail_until)
					kvp_log(KVP_LOG_WARN, "ssd",
						"demotion refused: %s; "
						"evicting without demotion for 1 s",
						rc == -EAGAIN ?
							"no room on SSD for 1 s (its "
							"oldest segment is pinned or "
							"being read)" :
							strerror(-rc));
				t->write_fail_until =
					kvp_now_ns(CLOCK_MONOTONIC) +
					1000000000ull;
			}
			return 0;
		}
	}
	KVP_ASSERT(t->busy[slot] < KVP_TIER_MAX_OPS &&
			   t->demoting < KVP_TIER_MAX_DEMOTING,
		   "I30");
	t->busy[slot]++;
	t->demoting++;
	t->demoting_bytes += vlen;
	kvp_crashpoint(A_DEMOTE_SUBMITTED);
	return 1;
}

/* An entry with an SSD copy is going away (deleted or evicted from the
 * index): its record is dead and a tombstone keeps it from coming back
 * after a restart.  A deleted one's is written already
 * (kvp_tier_may_forget_agent); an evicted one's is queued now.  Called
 * under CHECK, before the slot is emptied. */
void
kvp_tier_forget_agent(struct kvp_agent *a, uint64_t slot, uint64_t ssd_loc,
		      uint64_t vlen)
{
	kvp_drv_record_dead_agent(a->tier->ssd, ssd_loc, vlen);
	if (a->tier->tombed[slot] == KVP_TOMB_NONE) {
		kvp_crashpoint(A_TOMBSTONE);
		kvp_tomb_untracked(a, slot, ssd_loc);
	}
	a->tier->tombed[slot] = KVP_TOMB_NONE; /* the slot is emptied next */
}

/* The key a read must find in the record's header: a location that names
 * another key's record (or an older value of this key's slot) is then
 * -EBADMSG, never someone else's bytes.  The entry's key is stable while
 * the read is in flight (the slot is busy: not removable). */
void
kvp_read_identity(const struct kvp_entry *e, struct kvp_ssd_read *rd)
{
	/* relaxed: written before the READY publish, stable while READY */
	uint64_t klen = kvp_load_relaxed(&e->e_klen);

	rd->ns = kvp_load_relaxed(&e->e_ns);
	rd->klen = klen <= KVP_KEY_MAX ? (uint32_t)klen : 0;
	rd->key = rd->klen ? (const void *)e->e_key : NULL;
}

/*
 * Promotion: read the whole value of SSD-resident slot (generation gen,
 * vlen bytes, record at ssd) into new DRAM runs tagged (slot, gen), for
 * waiter w, while DRAM is below the high watermark (and --no-promote is
 * off).  The slot is busy while the read is in flight (the orphan sweep
 * keeps the runs); the location switches to DRAM at the completion
 * (kvp_complete_promote), the SSD copy stays.  Never waits for the
 * allocator lock.  True if in flight (w is answered then), false: stage.
 */
bool
kvp_promote_start_agent(struct kvp_agent *a, const struct kvp_waiter *w,
			uint64_t slot, uint64_t gen, uint64_t vlen,
			uint64_t ssd)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	struct kvp_ssd_read rd;
	struct kvp_top *op;
	uint32_t first = 0;
	uint64_t tag = 0;

	if (a->cfg.no_promote || kvp_dram_above_high_agent(a))
		return false;
	op = kvp_top_get(t, TOP_PROMOTE, kvp_complete_promote, &tag);
	if (!op)
		return false;
	if (kvp_dram_alloc_until(s, vlen, slot, (uint32_t)gen, &first, 0)) {
		kvp_top_put(t, op);
		return false;
	}
	op->slot = slot;
	op->gen = gen;
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
	kvp_read_identity(&s->entries[slot], &rd);
	if (op->niov && kvp_top_add_waiter(op, w) == 0 &&
	    kvp_drv_read_agent(t->ssd, tag, &rd) == 0) {
		KVP_ASSERT(t->busy[slot] < KVP_TIER_MAX_OPS, "I30");
		t->busy[slot]++;
		kvp_io_read_queued(t, op);
		kvp_crashpoint(A_PROMOTE_SUBMITTED);
		return true;
	}
	kvp_dram_free_agent(a, first, slot, (uint32_t)gen);
	kvp_top_put(t, op);
	return false;
}

/* A promotion completed: the DRAM copy is whole, so the location
 * switches to it (release: the bytes before the location; same
 * generation, the slot busy until now); on an error its runs go. */
static void
kvp_complete_promote(struct kvp_agent *a, struct kvp_top *op,
		     const struct kvp_ssd_cqe *cq)
{
	int status = cq->status;
	struct kvp_seg *s = &a->seg;
	unsigned k;

	if (!status) {
		/* the DRAM copy is complete before anyone reads this
		 * location */
		kvp_ix_entry_dram_agent(s, op->slot, op->first,
					s->pages[op->first].pg_npages);
		kvp_crashpoint(A_PROMOTE_SWITCHED);
		kvp_actr_add(s->hdr, KVP_ACTR_PROMOTE, 1); /* stat */
		kvp_actr_add(s->hdr, KVP_ACTR_SSD_READ_BYTES, op->vlen);
	} else {
		kvp_dram_free_agent(a, op->first, op->slot, (uint32_t)op->gen);
	}
	for (k = 0; k < op->nw; k++)
		kvp_answer(a, &op->w[k],
			   status ? (status == -ENOENT ? -EIO : status) : 0,
			   status ? 0 : KVP_WHERE_DRAM, -1);
}

/* A demotion completed: the entry remembers its SSD copy (the DRAM is
 * freed by a later relocation under CHECK, victim.c); strict deletes that
 * waited for it get their tombstone now.  A failed write makes eviction
 * drop instead of demote for a second. */
static void
kvp_complete_demote(struct kvp_agent *a, struct kvp_top *op,
		    const struct kvp_ssd_cqe *cq)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	unsigned k;

	a->idle_used = 0; /* its DRAM can go now: work for the evictor */
	if (!cq->status) {
		/* read only for SSD-resident entries, which this one
		 * becomes through a later CHECK CAS */
		kvp_ix_entry_ssd_agent(s, op->slot, cq->loc);
		t->wtick[op->slot] = (uint32_t)kvp_tick_now();
		kvp_actr_add(s->hdr, KVP_ACTR_DEMOTE, 1); /* stat */
		kvp_actr_add(s->hdr, KVP_ACTR_DEMOTE_BYTES, op->vlen);
		kvp_actr_add(s->hdr, KVP_ACTR_SSD_WRITE_BYTES, op->vlen);
		/* the record exists now (the slot is DELETED and busy:
		 * nobody reclaimed it) */
		if (op->nw)
			kvp_tomb_queue(a, op->slot, cq->loc, op->w, op->nw);
	} else {
		/* the drive is marked (drives.c): the other drives take the
		 * next demotions; with none left, eviction drops for 1 s */
		if (!kvp_drv_writable_agent(t->ssd)) {
			if (kvp_now_ns(CLOCK_MONOTONIC) > t->write_fail_until)
				kvp_log(KVP_LOG_WARN, "ssd",
					"demotion failed: %s; evicting "
					"without demotion for 1 s",
					strerror(-cq->status));
			t->write_fail_until =
				kvp_now_ns(CLOCK_MONOTONIC) + 1000000000ull;
		}
		/* nothing reached the disk: a waiting delete is done */
		for (k = 0; k < op->nw; k++)
			kvp_answer(a, &op->w[k], 0, 0, -1);
	}
	KVP_ASSERT(t->demoting > 0 && t->demoting_bytes >= op->vlen, "I30");
	t->demoting--;
	t->demoting_bytes -= op->vlen;
}

/* A tombstone completed: strict deletes waiting for it are answered
 * (written and, in strict mode, fdatasync'd: 0; else -EIO), and its slot,
 * still DELETED at the generation it was queued for (I20: nothing else
 * empties it meanwhile), may now leave the index: the next reclaim pass
 * takes it.  A failed write is not tried again (its drive is failing, as
 * before this op: the value may come back, the strict delete was told
 * -EIO). */
static void
kvp_complete_tomb(struct kvp_agent *a, struct kvp_top *op,
		  const struct kvp_ssd_cqe *cq)
{
	int status = cq->status;
	struct kvp_tier *t = a->tier;
	/* acquire: pairs with the delete CAS */
	uint64_t w = kvp_load_acquire(&a->seg.meta[op->slot]);
	unsigned k;

	for (k = 0; k < op->nw; k++)
		kvp_answer(a, &op->w[k], status ? -EIO : 0, 0, -1);
	KVP_ASSERT(t->tombed[op->slot] == KVP_TOMB_QUEUED, "I20");
	/* the state word is the clients' to read (and a hostile one's to
	 * damage): a slot that moved on has no tombstone of ours */
	t->tombed[op->slot] = KVP_IX_STATE(w) == KVP_IX_DELETED &&
					      KVP_IX_GEN(w) == op->gen ?
				      KVP_TOMB_WRITTEN :
				      KVP_TOMB_NONE;
	a->last_reclaim_ns = 0; /* the reclaim pass runs next round */
}
