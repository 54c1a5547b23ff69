/* SPDX-License-Identifier: MIT */
/*
 * recover.c - recovery: the SSD store's records into the index at start.
 * A live record found on disk becomes (or confirms) an index entry; one
 * the index cannot take gets its tombstone owed (I20); entries naming a
 * drive that serves nothing, or a record a dead predecessor was still
 * writing, lose their SSD copy.  The callbacks reach it through the
 * drives' owner table (struct kvp_drv_owner, tier.c).  Segment give-back
 * is giveback.c.
 */
#include "agent/tier_int.h"

/* A record the index cannot take: its tombstone is owed (I20), written
 * once the store has room; recovery goes on (a store full of live values
 * must not stop the agent from starting: rule 6). */
static pthread_mutex_t kvp_recover_mu = PTHREAD_MUTEX_INITIALIZER;

static int
kvp_recover_decline(struct kvp_agent *a, const struct kvp_ssd_rec *r)
{
	/* the tier's list of owed tombstones: recovery threads share it */
	pthread_mutex_lock(&kvp_recover_mu);
	kvp_tomb_later(a->tier, r->ns, r->key, r->klen, r->loc);
	pthread_mutex_unlock(&kvp_recover_mu);
	return KVP_SSD_DECLINE_OWED;
}

/* Recovery is a stream of index inserts: the store calls this twice with
 * the hash of a record ahead of the one kvp_recover_cb gets, and the
 * lines that insert will touch are fetched meanwhile instead of missed
 * one after another: stage 0, its two candidate buckets' state words;
 * stage 1 (those words in cache by then), the entry its claim will take
 * (all five lines: the key is written whole) and its write tick. */
void
kvp_recover_prefetch(void *arg, uint64_t hash, unsigned stage)
{
	struct kvp_agent *a = arg;
	struct kvp_seg *s = &a->seg;
	const char *e;
	int64_t i;
	unsigned l;

	if (stage == 0) {
		__builtin_prefetch(&s->meta[kvp_ix_cand(s, hash, 0)], 1);
		__builtin_prefetch(&s->meta[kvp_ix_cand(s, hash, KVP_IX_WAYS)],
				   1);
		return;
	}
	i = kvp_ix_claim_hint(s, hash);
	if (i < 0)
		return;
	e = (const char *)&s->entries[i];
	for (l = 0; l < sizeof(struct kvp_entry); l += 64)
		__builtin_prefetch(e + l, 1);
	__builtin_prefetch(&a->tier->wtick[i], 1);
}

/* The entry of (ns, key): the READY one if there is one, else a DELETED
 * one.  A key deleted and put again has both (the DELETED one stays until
 * its tombstone is written, I20): the record of the new value is the
 * READY entry's, never the old one's to kill or let go. */
int64_t
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
 * (a fresh segment), or check it against the entry that survived.  On
 * several recovery threads at once (every drive's, several each): the
 * keys they hand in are distinct (a key's records are on one drive, and
 * a drive hands in one record per key), the index's claim and publish
 * are lock-free CASes (index/kvp_index.h: concurrent claimants), the
 * count a CAS, wtick[] a slot of the key's own entry; only the owed
 * tombstones' list takes a lock. */
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
			kvp_ix_entry_ssd_agent(s, (uint64_t)i, r->loc);
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
	/* published by the READY CAS */
	kvp_ix_entry_recovered_agent(s, (uint64_t)i, r->vlen, r->loc);
	if (kvp_ix_publish(s, (uint64_t)i, w)) {
		kvp_ix_count_give(s);
		return kvp_recover_decline(a, r);
	}
	a->tier->wtick[i] = (uint32_t)kvp_tick_now();
	return 0;
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
		/* this thread writes locations (no threads yet) */
		kvp_ix_entry_ssd_agent(s, i, 0);
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
		    !ssd || kvp_drv_has_segment_agent(a->tier->ssd, ssd)) {
			/* a CHECK an earlier agent left on an entry not in
			 * DRAM (kvp_ix_clear_stale_agent): its segment is
			 * here, the entry stays */
			if (w & KVP_IX_CHECK)
				kvp_ix_check_release(s, i, w);
			continue;
		}
		/* its segment is gone: it leaves (CHECK or not) */
		if (kvp_recover_lose_ssd(s, i, w))
			lost++;
		else if (w & KVP_IX_CHECK)
			kvp_ix_check_release(s, i, w);
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
		unsigned ns = KVP_SP_N(w);

		if (KVP_SP_STATE(w) == KVP_SP_FREEING) {
			/* a free our predecessor was doing */
			kvp_span_adopt_agent(s, (uint32_t)j, KVP_SP_AGENT);
			continue;
		}
		if (KVP_SP_STATE(w) != KVP_SP_READING)
			continue;
		/* its slots were counted when it was allocated */
		kvp_span_count_sub(s, ns);
		kvp_span_drop_reading_agent(s, j, w);
	}
	for (j = 0; j < total; j++) {
		/* acquire: the last word written on the entry */
		uint64_t w = kvp_load_acquire(&s->rings[j].rq_state);
		/* one our predecessor took, or died answering, is served
		 * again */
		if (kvp_ring_requeue_agent(&s->rings[j], w))
			handed++;
	}
	if (handed)
		kvp_log(KVP_LOG_INFO, "ssd",
			"%llu requests taken by the previous agent are "
			"served again",
			(unsigned long long)handed);
}
