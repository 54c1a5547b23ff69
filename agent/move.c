/* SPDX-License-Identifier: MIT */
/*
 * move.c - moving values between tiers, and what keeps the disk honest:
 * demotion (a cold DRAM value written to SSD, copy first: its DRAM is
 * freed later by a relocation under CHECK, victim.c), tombstones (a value
 * with an SSD copy that leaves the index: the tombstone names the record
 * it deletes, I20), and the stop flush (every value only in DRAM written,
 * every pending tombstone written, at SIGTERM).  Promotions start in
 * rings.c (a whole read with room in DRAM) and complete in tier.c.
 */
#include "agent/tier_int.h"

/* The key of an entry this thread owns (READY or under CHECK). */
uint64_t
kvp_entry_key(const struct kvp_entry *e, unsigned char key[256])
{
	uint64_t k;

	for (k = 0; k < 32; k++) {
		uint64_t wd = kvp_load_relaxed(&e->e_key[k]); /* relaxed: stable */
		memcpy(key + k * 8, &wd, 8);
	}
	return kvp_load_relaxed(&e->e_klen); /* relaxed: stable */
}

/*
 * Queue a tombstone for the key of index slot 'slot' (READY, DELETED or
 * under CHECK: its key is stable) that deletes the value record at
 * 'target'.  The slot is marked tombed (its reclaim writes no second
 * one).  Waiters (strict deletes) are answered when it completes; on
 * failure they are answered here.  0 or -errno.
 */
int
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
