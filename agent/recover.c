/* SPDX-License-Identifier: MIT */
/*
 * recover.c - the SSD store's callbacks into the index: a live record
 * found on disk at start becomes (or confirms) an index entry; a segment
 * the store wants to give back (--ssd-size) takes its SSD-only values out
 * of the index first, under the CHECK protocol, or is vetoed while one of
 * them is held, leased or being read.
 */
#include "agent/tier_int.h"

/* A live record found on disk at start: make it visible to every worker
 * (a fresh segment), or check it against the entry that survived. */
int
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
int
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
		    !kvp_ix_cand_take_agent(s, d.slots[k], w, &cand[n])) {
			d.veto = true;
			continue;
		}
		n++;
	}
	kvp_ix_holds_scan_agent(s, cand, n);
	for (k = 0; k < n; k++)
		d.veto |= cand[k].held;
	for (k = 0; k < n; k++) {
		uint64_t w = cand[k].word;
		if (d.veto) /* every CHECK released */
			kvp_ix_check_release(s, cand[k].slot, w);
		/* gone with its segment (no tombstone needed), and its unit of
		 * the index count with it */
		else if (kvp_ix_remove(s, cand[k].slot, w))
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
