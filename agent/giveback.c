/* SPDX-License-Identifier: MIT */
/*
 * giveback.c - SSD give-back: a segment the store wants to give back
 * (--ssd-size: space comes back one whole segment at a time, oldest
 * first) takes its SSD-only values out of the index first, under the
 * CHECK protocol, or is vetoed while one of them is held, leased or being
 * read.  Those read (or probed) since their record was written are kept
 * instead, as far as --ssd-reinsert allows (reinsertion, as CacheLib's
 * Navy does): the store rewrites them at the head of the log, and the
 * entry, under CHECK all along, takes the new location
 * (kvp_reinsert_cb).  The store asks through the drives' owner table
 * (struct kvp_drv_owner, tier.c).
 */
#include "agent/tier_int.h"

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

	if (r->type != KVP_SSD_REC_VALUE || r->klen == 0 ||
	    r->klen > KVP_KEY_MAX)
		return 0;
	i = kvp_recover_find(s, r, kvp_key_hash(r->ns, r->key, r->klen), &w);
	if (i < 0 || kvp_load_relaxed(&s->entries[i].e_ssd) != r->loc)
		return 0; /* not the entry's copy any more */
	if (d->a->tier->busy[i]) {
		d->veto = true; /* a read or promotion of it is in flight */
		return 1;
	}
	/* relaxed: ours to change */
	loc = kvp_load_relaxed(&s->entries[i].e_loc);
	if (KVP_LOC_TIER(loc) == KVP_TIER_DRAM) {
		/* DRAM-resident: it just loses its SSD copy */
		kvp_ix_entry_ssd_agent(s, (uint64_t)i, 0);
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

/* Was slot i's value read (or probed) since its SSD record was written?
 * Its use word's tick is later than the write's (ticks are ~1 ms: a use
 * in the tick of the write does not count).  A tick from the future, a
 * client's garbage, does not count either (a hint, never trusted: it
 * could only win its own values a place in the share). */
static bool
kvp_read_since_written(struct kvp_agent *a, uint64_t i, uint64_t now)
{
	/* relaxed: a hint (kvp_shm.h, the use word) */
	uint64_t t = KVP_USE_TICK(kvp_load_relaxed(&a->seg.entries[i].e_use));

	/* wtick keeps the tick's low 32 bits (49 days of ticks): compared
	 * as a difference, so the test holds across its wrap */
	return (int32_t)((uint32_t)t - a->tier->wtick[i]) > 0 &&
	       t <= now + 1024u;
}

/* A candidate worth keeping, and how recently it was used. */
struct kvp_hot {
	uint64_t tick;
	uint32_t depth; /* in its chain (the use word's) */
	unsigned k;     /* its index among the candidates */
};

/* The most recently used first and, used in the same tick, the shallower
 * page of a chain first: what the share cuts off is a chain's tail, as
 * DRAM eviction's order does (agent/evict.c), so SSD stays
 * prefix-closed too. */
static int
kvp_hot_cmp(const void *x, const void *y)
{
	const struct kvp_hot *p = x, *q = y;

	if (p->tick != q->tick)
		return p->tick < q->tick ? 1 : -1;
	return p->depth > q->depth ? 1 : p->depth < q->depth ? -1 : 0;
}

/*
 * Ask the store to keep candidate c (READY, unheld, under CHECK): its
 * record is read back now and written at the head of the log once the
 * segment is gone; until kvp_reinsert_cb says where, the entry stays
 * under CHECK (no reader trusts a hold on it, no client deletes it).
 * True if the store took it.
 */
static bool
kvp_keep_record(struct kvp_agent *a, struct kvp_drive *ssd,
		const struct kvp_cand *c)
{
	struct kvp_tier *t = a->tier;
	struct kvp_entry *e = &a->seg.entries[c->slot];
	unsigned char key[256];
	struct kvp_ssd_rec r;
	struct kvp_keep *x;

	if (t->nkeep == t->capkeep) {
		unsigned cap = t->capkeep ? t->capkeep * 2 : 64;
		struct kvp_keep *n = realloc(t->keep, cap * sizeof(*n));

		if (!n)
			return false;
		t->keep = n;
		t->capkeep = cap;
	}
	memset(&r, 0, sizeof(r));
	r.type = KVP_SSD_REC_VALUE;
	r.klen = (uint32_t)kvp_entry_key(e, key);
	r.key = key;
	/* relaxed: stable under CHECK; this thread writes SSD locations */
	r.ns = kvp_load_relaxed(&e->e_ns);
	r.vlen = kvp_load_relaxed(&e->e_len);
	r.loc = kvp_load_relaxed(&e->e_ssd);
	if (r.klen == 0 || r.klen > KVP_KEY_MAX ||
	    kvp_drv_reinsert_agent(ssd, &r, t->nkeep))
		return false;
	x = &t->keep[t->nkeep++];
	x->slot = c->slot;
	x->word = c->word;
	x->vlen = r.vlen;
	t->keep_pending++;
	return true;
}

/*
 * The store needs room (--ssd-size): may segment seg go?  Its SSD-only
 * values leave the index (CHECK protocol, one hold scan); if any is held
 * or being read, the segment is vetoed (a pinned or in-use key keeps its
 * segment) and the store asks about the next oldest.  Those read since
 * their record was written, the most recently used first, are kept as
 * far as the store's share allows (--ssd-reinsert: a log full of hot
 * records still gives space back); they stay under CHECK until the store
 * says where their record went (kvp_reinsert_cb).
 */
int
kvp_giveback_segment_cb(void *arg, struct kvp_drive *ssd, uint32_t seg)
{
	struct kvp_agent *a = arg;
	struct kvp_seg *s = &a->seg;
	struct kvp_drop_ctx d = { a, NULL, 0, 0, false };
	struct kvp_cand *cand;
	struct kvp_hot *hot;
	bool *kept;
	unsigned k, n = 0, nhot = 0, removed = 0;
	uint64_t now = kvp_tick_now();

	if (kvp_drv_segment_foreach_agent(ssd, seg, kvp_drop_collect, &d) < 0 ||
	    d.veto) {
		free(d.slots);
		return 1;
	}
	cand = calloc(d.n + 1, sizeof(*cand));
	hot = calloc(d.n + 1, sizeof(*hot));
	kept = calloc(d.n + 1, sizeof(*kept));
	if (!cand || !hot || !kept) {
		free(cand);
		free(hot);
		free(kept);
		free(d.slots);
		return 1;
	}
	for (k = 0; k < d.n; k++) {
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[d.slots[k]]);

		if (KVP_IX_FLAGS(w) ||
		    (KVP_IX_STATE(w) != KVP_IX_READY &&
		     KVP_IX_STATE(w) != KVP_IX_DELETED) ||
		    !kvp_ix_cand_take_agent(s, d.slots[k], w, &cand[n])) {
			d.veto = true;
			continue;
		}
		n++;
	}
	kvp_ix_holds_scan_agent(s, cand, n);
	for (k = 0; k < n; k++)
		d.veto |= cand[k].held;
	/* unheld, all of them: the live ones read since they were written
	 * are kept, the most recently used first, while the share lasts (a
	 * deleted one is not kept: nothing will read it) */
	for (k = 0; k < n && !d.veto && a->cfg.ssd_reinsert_pct; k++)
		if (KVP_IX_STATE(cand[k].word) == KVP_IX_READY &&
		    kvp_read_since_written(a, cand[k].slot, now)) {
			/* relaxed: a hint, as above */
			uint64_t use = kvp_load_relaxed(
				&s->entries[cand[k].slot].e_use);

			hot[nhot].tick = KVP_USE_TICK(use);
			hot[nhot].depth = KVP_USE_DEPTH(use);
			hot[nhot++].k = k;
		}
	qsort(hot, nhot, sizeof(*hot), kvp_hot_cmp);
	for (k = 0; k < nhot; k++)
		kept[hot[k].k] = kvp_keep_record(a, ssd, &cand[hot[k].k]);
	for (k = 0; k < n; k++) {
		uint64_t w = cand[k].word;

		if (d.veto) { /* every CHECK released */
			kvp_ix_check_release(s, cand[k].slot, w);
		} else if (KVP_IX_STATE(w) == KVP_IX_DELETED) {
			/* its record goes with the segment, but a crash
			 * before the file is gone must find the delete in
			 * the index, not just the record (I20): it stays
			 * DELETED without an SSD copy, for the reclaim pass
			 * (stable under CHECK; this thread writes SSD
			 * locations) */
			kvp_ix_entry_ssd_agent(s, cand[k].slot, 0);
			kvp_ix_check_release(s, cand[k].slot, w);
			removed++;
		} else if (!kept[k]) {
			/* its key for the ghost set, read under our CHECK */
			uint64_t gh = kvp_ghost_key_agent(a, cand[k].slot);

			/* gone with its segment (no tombstone needed), and its
			 * unit of the index count with it */
			if (kvp_ix_remove(s, cand[k].slot, w))
				kvp_ix_count_give(s);
			/* put again soon, it is spared probation in DRAM (the
			 * ghost set, ghost.c; no evidence for the weights) */
			kvp_ghost_evicted_agent(a, cand[k].slot, gh);
			removed++;
		}
	}
	if (!d.veto) {
		kvp_crashpoint(A_SEG_RECLAIM);
		/* stat */
		kvp_actr_add(s->hdr, KVP_ACTR_SEGMENT_RECLAIM, 1);
		kvp_actr_add(s->hdr, KVP_ACTR_EVICT_SSD, removed);
	}
	free(kept);
	free(hot);
	free(cand);
	free(d.slots);
	return d.veto;
}

/*
 * Where the record of an entry kept at reclaim (kvp_keep_record, tag: its
 * place in t->keep) went.  The entry has been under CHECK since, unheld:
 * it takes the new location (the relocation clears CHECK, same
 * generation: holds fence the slot, and only this thread reads SSD
 * locations), or, if the record could not be written, it goes as the
 * rest of its segment went.  new_loc == old_loc: the segment stayed.
 */
void
kvp_reinsert_cb(void *arg, uint64_t tag, uint64_t old_loc, uint64_t new_loc)
{
	struct kvp_agent *a = arg;
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	const struct kvp_keep *x;

	KVP_ASSERT(tag < t->nkeep && t->keep_pending > 0, "I5");
	if (tag >= t->nkeep)
		return;
	x = &t->keep[tag];
	/* a CHECK this agent set and kept since (I5) */
	KVP_ASSERT(x->word & KVP_IX_CHECK, "I4, I5");
	if (new_loc && new_loc != old_loc) {
		/* the copy is on disk, the old record gone with its segment,
		 * the entry still names it (under CHECK) */
		kvp_crashpoint(A_SEG_REINSERT);
		/* published by the relocation CAS below */
		kvp_ix_entry_ssd_agent(s, x->slot, new_loc);
		t->wtick[x->slot] = (uint32_t)kvp_tick_now();
		/* stats: agent threads add atomically */
		kvp_actr_add(s->hdr, KVP_ACTR_SSD_REINSERT, 1);
		kvp_actr_add(s->hdr, KVP_ACTR_SSD_REINSERT_BYTES, x->vlen);
	}
	if (new_loc) {
		kvp_ix_relocate(s, x->slot, x->word);
	} else {
		/* as a value gone with its segment (kvp_giveback_segment_cb) */
		uint64_t gh = kvp_ghost_key_agent(a, x->slot);

		if (kvp_ix_remove(s, x->slot, x->word))
			kvp_ix_count_give(s);
		kvp_ghost_evicted_agent(a, x->slot, gh);
		/* stat */
		kvp_actr_add(s->hdr, KVP_ACTR_EVICT_SSD, 1);
	}
	if (--t->keep_pending == 0)
		t->nkeep = 0;
}
