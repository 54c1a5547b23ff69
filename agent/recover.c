/* SPDX-License-Identifier: MIT */
/*
 * recover.c - the SSD store's callbacks into the index: a live record
 * found on disk at start becomes (or confirms) an index entry; a segment
 * the store wants to give back (--ssd-size) takes its SSD-only values out
 * of the index first, under the CHECK protocol, or is vetoed while one of
 * them is held, leased or being read.  Those read (or probed) since
 * their record was written are kept instead, as far as --ssd-reinsert
 * allows (reinsertion, as CacheLib's Navy does): the store rewrites them
 * at the head of the log, and the entry, under CHECK all along, takes the
 * new location (kvp_reinsert_cb).
 */
#include "agent/tier_int.h"

/* A record the index cannot take: its tombstone is owed (I20), written
 * once the store has room; recovery goes on (a store full of live values
 * must not stop the agent from starting: rule 6). */
static int
kvp_recover_decline(struct kvp_agent *a, const struct kvp_ssd_rec *r)
{
	kvp_tomb_later(a->tier, r->ns, r->key, r->klen, r->loc);
	return KVP_SSD_DECLINE_OWED;
}

/* Recovery is a stream of index inserts: the store calls this with the
 * hash of a record a few ahead of the one kvp_recover_cb gets, and the
 * lines that insert will touch (its two candidate buckets, the first
 * candidate's entry) are fetched meanwhile instead of missed one after
 * another. */
void
kvp_recover_prefetch(void *arg, uint64_t hash)
{
	struct kvp_agent *a = arg;
	struct kvp_seg *s = &a->seg;
	uint64_t i = kvp_ix_cand(s, hash, 0);

	__builtin_prefetch(&s->meta[i], 1);
	__builtin_prefetch(&s->meta[kvp_ix_cand(s, hash, KVP_IX_WAYS)], 1);
	__builtin_prefetch(&s->entries[i], 1);
	__builtin_prefetch((const char *)&s->entries[i] + 64, 1);
}

/* The entry of (ns, key): the READY one if there is one, else a DELETED
 * one.  A key deleted and put again has both (the DELETED one stays until
 * its tombstone is written, I20): the record of the new value is the
 * READY entry's, never the old one's to kill or let go. */
static int64_t
kvp_recover_find(struct kvp_seg *s, const struct kvp_ssd_rec *r, uint64_t hash,
		 uint64_t *w)
{
	int64_t i = kvp_ix_find(s, r->ns, hash, r->key, r->klen,
				KVP_IX_M(KVP_IX_READY), w);

	return i >= 0 ? i :
			kvp_ix_find(s, r->ns, hash, r->key, r->klen,
				    KVP_IX_M(KVP_IX_DELETED), w);
}

/* A live record found on disk at start: make it visible to every worker
 * (a fresh segment), or check it against the entry that survived. */
int
kvp_recover_cb(void *arg, const struct kvp_ssd_rec *r)
{
	struct kvp_agent *a = arg;
	struct kvp_seg *s = &a->seg;
	uint64_t hash, w;
	int64_t i;

	if (r->type != KVP_SSD_REC_VALUE || r->klen == 0 ||
	    r->klen > KVP_KEY_MAX)
		return KVP_SSD_DECLINE;
	/* the store's hash is the index's (kvp_key_hash is kvp_hash) */
	hash = r->hash ? r->hash : kvp_key_hash(r->ns, r->key, r->klen);
	i = kvp_recover_find(s, r, hash, &w);
	if (i >= 0) {
		/* the segment outlived the agent: same record, nothing to do
		 * (when it was written is not known: now, for reinsertion) */
		if (kvp_load_relaxed(&s->entries[i].e_ssd) == r->loc) {
			a->tier->wtick[i] = (uint32_t)kvp_tick_now();
			return 0;
		}
		/* a delete whose copy a reclaim took from it (or a demotion
		 * wrote before the completion came) while its file outlived
		 * the agent: the record is its copy again, so that the slot
		 * keeps the key deleted until the tombstone is written (I20),
		 * not only until the index forgets it (relaxed: no tier
		 * thread yet) */
		if (KVP_IX_STATE(w) == KVP_IX_DELETED &&
		    !kvp_load_relaxed(&s->entries[i].e_ssd)) {
			kvp_store_relaxed(&s->entries[i].e_ssd, r->loc);
			return 0;
		}
		return kvp_recover_decline(a, r); /* the entry knows better */
	}
	/* a unit of the index count first: at --index-entries the rest of
	 * the disk is declined like a full bucket pair */
	if (!kvp_ix_count_take(s))
		return kvp_recover_decline(a, r);
	i = kvp_ix_claim(s, KVP_AGENT_OWNER, r->ns, hash, r->key, r->klen, &w);
	if (i < 0) {
		kvp_ix_count_give(s);
		/* index full: tombstoned, never served */
		return kvp_recover_decline(a, r);
	}
	/* relaxed: published by the READY CAS */
	kvp_store_relaxed(&s->entries[i].e_len, r->vlen);
	kvp_store_relaxed(&s->entries[i].e_ssd, r->loc);
	kvp_store_relaxed(&s->entries[i].e_run, 0);
	/* not used since this start: oldest of all, depth unknown */
	kvp_store_relaxed(&s->entries[i].e_use, KVP_USE_MAKE(0, 0));
	kvp_store_relaxed(&s->entries[i].e_loc, KVP_LOC_MAKE(KVP_TIER_SSD, 0));
	if (kvp_ix_publish(s, (uint64_t)i, w)) {
		kvp_ix_count_give(s);
		return kvp_recover_decline(a, r);
	}
	a->tier->wtick[i] = (uint32_t)kvp_tick_now();
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
kvp_evict_segment_cb(void *arg, struct kvp_drive *ssd, uint32_t seg)
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
			 * (relaxed: stable under CHECK; this thread writes
			 * SSD locations) */
			kvp_store_relaxed(&s->entries[cand[k].slot].e_ssd, 0);
			kvp_ix_check_release(s, cand[k].slot, w);
			removed++;
		} else if (!kept[k]) {
			/* gone with its segment (no tombstone needed), and its
			 * unit of the index count with it */
			if (kvp_ix_remove(s, cand[k].slot, w))
				kvp_ix_count_give(s);
			removed++;
		}
	}
	if (!d.veto) {
		kvp_crashpoint(A_SEG_RECLAIM);
		/* stat */
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_SEGMENT_RECLAIM], 1);
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_EVICT_SSD], removed);
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
		/* relaxed: published by the relocation CAS below */
		kvp_store_relaxed(&s->entries[x->slot].e_ssd, new_loc);
		t->wtick[x->slot] = (uint32_t)kvp_tick_now();
		/* stats: agent threads add atomically */
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_SSD_REINSERT], 1);
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_SSD_REINSERT_BYTES],
			      x->vlen);
	}
	if (new_loc) {
		kvp_ix_relocate(s, x->slot, x->word);
	} else {
		if (kvp_ix_remove(s, x->slot, x->word))
			kvp_ix_count_give(s);
		/* stat */
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_EVICT_SSD], 1);
	}
	if (--t->keep_pending == 0)
		t->nkeep = 0;
}

/* Entry i (word w, its SSD location read) loses its SSD copy: a
 * DRAM-resident one keeps its value, an SSD-only one has nothing left to
 * read and leaves the index.  1 if it left.  At start only (no tier
 * threads yet). */
static unsigned
kvp_recover_lose_ssd(struct kvp_seg *s, uint64_t i, uint64_t w)
{
	if (KVP_LOC_TIER(kvp_load_relaxed(&s->entries[i].e_loc)) ==
	    KVP_TIER_DRAM) {
		/* relaxed: this thread writes locations (no threads yet) */
		kvp_store_relaxed(&s->entries[i].e_ssd, 0);
		return 0;
	}
	if (!kvp_ix_remove(s, i, w))
		return 0;
	kvp_ix_count_give(s);
	return 1;
}

/* After recovery: entries whose SSD copy did not survive (its segment is
 * gone: given back by the store, or lost) lose it.  A re-attaching agent
 * only. */
void
kvp_recover_lost_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	uint64_t i, lost = 0;

	for (i = 0; i < s->g.g_index_slots; i++) {
		/* acquire: the publish */
		uint64_t w = kvp_load_acquire(&s->meta[i]);
		/* relaxed: this thread writes locations (no threads yet) */
		uint64_t ssd = kvp_load_relaxed(&s->entries[i].e_ssd);

		if ((KVP_IX_STATE(w) != KVP_IX_READY &&
		     KVP_IX_STATE(w) != KVP_IX_DELETED) ||
		    !ssd || kvp_drv_has_segment_agent(a->tier->ssd, ssd))
			continue;
		lost += kvp_recover_lose_ssd(s, i, w);
	}
	if (lost)
		kvp_log(KVP_LOG_WARN, "ssd",
			"%llu entries lost their SSD segment",
			(unsigned long long)lost);
}

/* Before recovery: entries whose SSD location names a drive id in ids (a
 * bit per id: its directory is not the one the locations were written
 * in, or none serves it) lose their SSD copy, so that no read goes to
 * another directory's records under their id (I32) and the directory
 * that has the id now recovers its own records into the index.  Returns
 * the entries that left.  A re-attaching agent only. */
uint64_t
kvp_recover_drop_drives_agent(struct kvp_agent *a, unsigned ids)
{
	struct kvp_seg *s = &a->seg;
	uint64_t i, lost = 0;

	for (i = 0; ids && i < s->g.g_index_slots; i++) {
		/* acquire: the publish */
		uint64_t w = kvp_load_acquire(&s->meta[i]);
		/* relaxed: this thread writes locations (no threads yet) */
		uint64_t ssd = kvp_load_relaxed(&s->entries[i].e_ssd);

		if ((KVP_IX_STATE(w) != KVP_IX_READY &&
		     KVP_IX_STATE(w) != KVP_IX_DELETED) ||
		    !ssd || !(ids >> KVP_DRV_OF(ssd) & 1))
			continue;
		lost += kvp_recover_lose_ssd(s, i, w);
	}
	return lost;
}

/* What a dead predecessor left in flight: its reads died with it (spans
 * READING -> free; a holder still waiting posts again), its frees of
 * spans are finished (I23), and the requests it took are handed back to
 * us (TAKEN or ANSWERING -> POSTED, same sequence, so the waiting
 * client's word still matches). */
void
kvp_recover_in_flight_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	uint64_t j, handed = 0,
		    total = (uint64_t)s->g.g_max_clients * s->g.g_ring_entries;

	for (j = 0; j < s->g.g_staging_slots; j++) {
		struct kvp_span *sp = &s->spans[j];
		/* acquire: its last word */
		uint64_t w = kvp_load_acquire(&sp->sp_state);
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
			/* relaxed: ours */
			kvp_store_relaxed(&sp->sp_holders[b], 0);
		for (b = 1; b < ns && j + b < s->g.g_staging_slots; b++)
			/* release */
			kvp_store_release(&s->spans[j + b].sp_state, 0);
		/* release: free again */
		kvp_store_release(&sp->sp_state, KVP_SP_WORD(KVP_SP_GEN(w) + 1,
							     0, KVP_SP_FREE));
	}
	for (j = 0; j < total; j++) {
		/* acquire: the last word written on the entry */
		uint64_t w = kvp_load_acquire(&s->rings[j].rq_state);
		/* full CAS: the client may withdraw it at the same time; one
		 * our predecessor died answering is served again */
		if ((KVP_RQ_STATE(w) == KVP_RQ_TAKEN ||
		     KVP_RQ_STATE(w) == KVP_RQ_ANSWERING) &&
		    kvp_cas(&s->rings[j].rq_state, w,
			    (w & ~0xffull) | KVP_RQ_POSTED))
			handed++;
	}
	if (handed)
		kvp_log(KVP_LOG_INFO, "ssd",
			"%llu requests taken by the previous agent are "
			"served again",
			(unsigned long long)handed);
}
