/* SPDX-License-Identifier: MIT */
/*
 * check.c - the invariant checker (see kvp_check.h).  Read-only: it never
 * writes the segment, takes no lock in it and claims no client slot, so it
 * can look at a pool whose allocator lock a dead process holds.
 */
#include <stdarg.h>

#include "agent/kvp_check.h"

#define KVP_CHECK_PRINT_PER_INV 8

struct kvp_chk {
	const struct kvp_seg *s;
	FILE *out;
	struct kvp_check_report *r;
	unsigned printed[KVP_CHECK_MAX_INV];
	/* per client slot: 0 free, 1 live, 2 dead (LIVE/REAPING) */
	uint8_t *alive;
	uint8_t *reach;   /* per DRAM unit: 1 = first unit of a reachable run */
	uint64_t *pinned; /* per client: bytes its pin holds name */
};

static void __attribute__((format(printf, 3, 4)))
kvp_chk_viol(struct kvp_chk *k, unsigned inv, const char *fmt, ...)
{
	va_list ap;

	k->r->violations++;
	if (inv < KVP_CHECK_MAX_INV)
		k->r->by_inv[inv]++;
	if (!k->out || (inv < KVP_CHECK_MAX_INV &&
			k->printed[inv]++ >= KVP_CHECK_PRINT_PER_INV))
		return;
	fprintf(k->out, "I%u violated: ", inv);
	va_start(ap, fmt);
	vfprintf(k->out, fmt, ap);
	va_end(ap);
	fputc('\n', k->out);
}

/* Something the (next) agent repairs: a violation only while an agent is
 * up (it had the chance to), a note while it is down. */
static void __attribute__((format(printf, 3, 4)))
kvp_chk_repairable(struct kvp_chk *k, unsigned inv, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (k->r->agent_up) {
		kvp_chk_viol(k, inv, "%s", buf);
		return;
	}
	k->r->notes++;
	if (k->out && k->r->notes <= 16)
		fprintf(k->out, "note (I%u, the next agent repairs it): %s\n",
			inv, buf);
}

/* I14: both geometry copies of the header are the geometry this process
 * bound (a copy that differs was overwritten; the agent restores it). */
static void
kvp_chk_header(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	unsigned c;

	for (c = 0; c < 2; c++)
		if (memcmp(&s->hdr->h_geom[c], &s->g, sizeof(s->g)))
			kvp_chk_repairable(k, 14,
					   "geometry copy %u of the header was "
					   "overwritten",
					   c);
}

/* 1 live, 2 dead, 0 free (by the slot word; liveness by the kernel). */
static void
kvp_chk_clients(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	uint32_t c;

	for (c = 0; c < s->g.g_max_clients; c++) {
		/* acquire: pairs with the claim CAS / FREE store */
		uint64_t w = kvp_load_acquire(&s->clients[c].cs_state);
		unsigned st = KVP_CS_STATE(w);

		if (st == KVP_CS_FREE) {
			k->alive[c] = 0;
		} else if (st == KVP_CS_LIVE && kvp_shm_client_alive(s, c)) {
			k->alive[c] = 1;
			k->r->clients_live++;
		} else if (st == KVP_CS_LIVE || st == KVP_CS_REAPING) {
			k->alive[c] = 2;
			/* relaxed: cs_pid is for humans (liveness is the
			 * lock) */
			kvp_chk_repairable(
				k, 11,
				"client slot %u (pid %llu) is dead and not "
				"reaped (state %s)",
				c,
				(unsigned long long)kvp_load_relaxed(
					&s->clients[c].cs_pid),
				st == KVP_CS_LIVE ? "LIVE" : "REAPING");
		} else {
			k->alive[c] = 2;
			kvp_chk_viol(k, 10,
				     "client slot %u has unknown state %u", c,
				     st);
		}
	}
}

/* Walk the DRAM chain of READY/DELETED slot i at generation gen. */
static void
kvp_chk_chain(struct kvp_chk *k, uint64_t i, uint32_t gen, uint64_t loc,
	      uint64_t len)
{
	const struct kvp_seg *s = k->s;
	uint64_t np = s->g.g_dram_pages, unit = s->g.g_dram_unit, total = 0,
		 hops = 0;
	uint64_t p = KVP_LOC_VAL(loc);

	/* relaxed: stable while the entry is READY and not under CHECK */
	if (kvp_load_relaxed(&s->entries[i].e_run) !=
	    (p < np ? s->pages[p].pg_npages : 0))
		kvp_chk_viol(
			k, 16,
			"slot %llu: e_run %llu does not match its first run",
			(unsigned long long)i,
			(unsigned long long)kvp_load_relaxed(
				&s->entries[i].e_run));
	for (;;) {
		const struct kvp_page *pg;

		if (p >= np || ++hops > np) {
			kvp_chk_viol(
				k, 16,
				"slot %llu: DRAM chain leaves the arena (unit %llu)",
				(unsigned long long)i, (unsigned long long)p);
			return;
		}
		pg = &s->pages[p];
		if (pg->pg_state != KVP_PG_USED || pg->pg_owner != i + 1 ||
		    pg->pg_owner_gen != gen || pg->pg_npages == 0 ||
		    pg->pg_npages > np - p) {
			kvp_chk_viol(
				k, 9,
				"slot %llu gen %u: its run at unit %llu is %s, "
				"tagged slot %u gen %u",
				(unsigned long long)i, gen,
				(unsigned long long)p,
				pg->pg_state == KVP_PG_USED ? "USED" :
							      "not USED",
				pg->pg_owner ? pg->pg_owner - 1 : 0,
				pg->pg_owner_gen);
			return;
		}
		if (k->reach[p])
			kvp_chk_viol(k, 9,
				     "run at unit %llu is reachable twice",
				     (unsigned long long)p);
		k->reach[p] = 1;
		total += (uint64_t)pg->pg_npages * unit;
		if (!pg->pg_next)
			break;
		p = pg->pg_next - 1;
	}
	if (total < len ||
	    total - len >= (uint64_t)s->pages[p].pg_npages * unit)
		kvp_chk_viol(
			k, 9,
			"slot %llu: runs hold %llu bytes for a %llu-byte value",
			(unsigned long long)i, (unsigned long long)total,
			(unsigned long long)len);
}

struct kvp_chk_key {
	uint64_t hash, slot;
};

static int
kvp_chk_key_cmp(const void *a, const void *b)
{
	const struct kvp_chk_key *x = a, *y = b;

	return x->hash < y->hash ? -1 : x->hash > y->hash ? 1 : 0;
}

static bool
kvp_chk_same_key(const struct kvp_seg *s, uint64_t a, uint64_t b)
{
	const struct kvp_entry *x = &s->entries[a], *y = &s->entries[b];
	unsigned q;

	/* relaxed: published by the entries' READY CAS */
	if (kvp_load_relaxed(&x->e_ns) != kvp_load_relaxed(&y->e_ns) ||
	    kvp_load_relaxed(&x->e_klen) != kvp_load_relaxed(&y->e_klen))
		return false;
	for (q = 0; q < 32; q++)
		if (kvp_load_relaxed(&x->e_key[q]) !=
		    kvp_load_relaxed(&y->e_key[q]))
			return false;
	return true;
}

/* I32: slot i's SSD copy (location ssd) names a drive id some directory
 * serves (the agent records it, h_drive_dir_*, before it recovers; an
 * agent that finds entries naming an id no directory serves, or another
 * directory than theirs, drops their SSD copy first).  One that names a
 * refused or missing drive reads nothing there. */
static void
kvp_chk_drive(struct kvp_chk *k, uint64_t i, uint64_t ssd)
{
	unsigned d = KVP_DRV_OF(ssd);

	/* relaxed: the agent's record, written before any entry names it */
	if (!kvp_load_relaxed(&k->s->hdr->h_drive_dir_ino[d]))
		kvp_chk_repairable(k, 32,
				   "slot %llu: its SSD copy names drive %u, "
				   "which no directory serves (refused or "
				   "missing)",
				   (unsigned long long)i, d);
}

static void
kvp_chk_index(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	uint64_t n = s->g.g_index_slots, i, nkeys = 0;
	struct kvp_chk_key *keys = calloc(n, sizeof(*keys));

	for (i = 0; i < n; i++) {
		/* acquire: pairs with the publish / claim CASes */
		uint64_t w = kvp_load_acquire(&s->meta[i]);
		unsigned st = KVP_IX_STATE(w), owner = KVP_IX_OWNER(w);
		const struct kvp_entry *e = &s->entries[i];
		uint64_t klen, hash, loc, len, ssd;
		unsigned char key[256];
		unsigned pos, q;

		if (w & KVP_IX_CHECK)
			kvp_chk_repairable(k, 5, "slot %llu is under CHECK",
					   (unsigned long long)i);
		if (KVP_IX_FLAGS(w) & ~KVP_IX_CHECK)
			kvp_chk_viol(k, 1, "slot %llu: unknown flags %#x",
				     (unsigned long long)i, KVP_IX_FLAGS(w));
		switch (st) {
		case KVP_IX_EMPTY:
			continue;
		case KVP_IX_RESERVED:
		case KVP_IX_CLAIM:
		case KVP_IX_PENDING:
			if (st == KVP_IX_PENDING)
				k->r->entries_pending++;
			if (owner == 0xffffu) {
				kvp_chk_repairable(
					k, 5,
					"slot %llu: a claim of a dead agent",
					(unsigned long long)i);
			} else if (owner == 0 || owner > s->g.g_max_clients) {
				kvp_chk_viol(
					k, 1,
					"slot %llu: claimed by client %u, which does "
					"not exist",
					(unsigned long long)i, owner);
			} else if (k->alive[owner - 1] != 1) {
				kvp_chk_repairable(
					k, 11,
					"slot %llu: half-done put of dead "
					"client %u",
					(unsigned long long)i, owner - 1);
			}
			if (st == KVP_IX_PENDING && keys)
				keys[nkeys++] = (struct kvp_chk_key){
					/* relaxed */
					kvp_load_relaxed(&e->e_hash), i
				};
			continue;
		case KVP_IX_READY:
		case KVP_IX_DELETED:
			break;
		default:
			kvp_chk_viol(k, 1, "slot %llu: unknown state %u",
				     (unsigned long long)i, st);
			continue;
		}
		/* relaxed: stable while READY/DELETED (the agent changes a
		 * location only under CHECK or with the slot busy) */
		klen = kvp_load_relaxed(&e->e_klen);
		hash = kvp_load_relaxed(&e->e_hash);
		loc = kvp_load_relaxed(&e->e_loc);
		len = kvp_load_relaxed(&e->e_len);
		ssd = kvp_load_relaxed(&e->e_ssd);
		if (st == KVP_IX_READY)
			k->r->entries_ready++;
		else
			k->r->entries_deleted++;
		if (klen == 0 || klen > KVP_KEY_MAX) {
			kvp_chk_viol(k, 1, "slot %llu: key length %llu",
				     (unsigned long long)i,
				     (unsigned long long)klen);
			continue;
		}
		for (q = 0; q < 32; q++) {
			/* relaxed */
			uint64_t wd = kvp_load_relaxed(&e->e_key[q]);
			memcpy(key + q * 8, &wd, 8);
		}
		/* relaxed: e_ns is stable like the fields above */
		if (kvp_key_hash(kvp_load_relaxed(&e->e_ns), key, klen) !=
			    hash ||
		    KVP_IX_FP(w) != kvp_ix_fp(hash))
			kvp_chk_viol(
				k, 1,
				"slot %llu: stored hash does not match its key",
				(unsigned long long)i);
		for (pos = 0; pos < KVP_IX_CANDS; pos++)
			if (kvp_ix_cand(s, hash, pos) == i)
				break;
		if (pos == KVP_IX_CANDS)
			kvp_chk_viol(
				k, 1,
				"slot %llu is not a candidate slot of its key",
				(unsigned long long)i);
		if (len == 0 || len > s->g.g_max_value)
			kvp_chk_viol(k, 16, "slot %llu: value length %llu",
				     (unsigned long long)i,
				     (unsigned long long)len);
		switch (KVP_LOC_TIER(loc)) {
		case KVP_TIER_DRAM:
			if (st == KVP_IX_READY)
				k->r->entries_dram++;
			kvp_chk_chain(k, i, KVP_IX_GEN(w), loc, len);
			break;
		case KVP_TIER_SSD:
			if (st == KVP_IX_READY)
				k->r->entries_ssd++;
			if (!ssd)
				kvp_chk_viol(
					k, 16,
					"slot %llu is SSD-resident without an SSD "
					"location",
					(unsigned long long)i);
			if (!s->g.g_ring_entries)
				kvp_chk_viol(
					k, 16,
					"slot %llu is SSD-resident in a pool "
					"without an SSD tier",
					(unsigned long long)i);
			break;
		default:
			kvp_chk_viol(k, 16,
				     "slot %llu: location %#llx names no tier",
				     (unsigned long long)i,
				     (unsigned long long)loc);
		}
		if (ssd)
			kvp_chk_drive(k, i, ssd);
		if (st == KVP_IX_READY && keys)
			keys[nkeys++] = (struct kvp_chk_key){ hash, i };
	}
	/* I2: one PENDING or READY slot per (namespace, key) */
	if (keys) {
		uint64_t a, b;

		qsort(keys, nkeys, sizeof(*keys), kvp_chk_key_cmp);
		for (a = 0; a < nkeys; a = b) {
			for (b = a + 1;
			     b < nkeys && keys[b].hash == keys[a].hash; b++) {
				uint64_t c;
				for (c = a; c < b; c++)
					if (kvp_chk_same_key(s, keys[c].slot,
							     keys[b].slot))
						kvp_chk_viol(
							k, 2,
							"slots %llu and %llu hold the "
							"same key",
							(unsigned long long)
								keys[c]
									.slot,
							(unsigned long long)
								keys[b]
									.slot);
			}
		}
		free(keys);
	}
}

/* I7, I8, I9: runs tile the arena, bins are derived, every used run is
 * reachable from its owner (or a put or promotion in progress). */
static void
kvp_chk_dram(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	const struct kvp_dram_hdr *d = s->dram;
	uint64_t np = s->g.g_dram_pages, p = 0, used = 0, freeu = 0,
		 freeruns = 0, inbins = 0, unpop = 0;
	bool prev_free = false;
	unsigned b;

	while (p < np) {
		const struct kvp_page *pg = &s->pages[p];
		uint64_t n = pg->pg_npages;

		if (n == 0 || n > np - p) {
			kvp_chk_viol(
				k, 7,
				"run at unit %llu has length %llu (arena %llu units)",
				(unsigned long long)p, (unsigned long long)n,
				(unsigned long long)np);
			return;
		}
		if (s->pages[p + n - 1].pg_head != p + 1)
			kvp_chk_viol(
				k, 7,
				"run at unit %llu: its last unit names head %u",
				(unsigned long long)p,
				s->pages[p + n - 1].pg_head);
		if (pg->pg_state == KVP_PG_FREE) {
			if (prev_free)
				kvp_chk_viol(
					k, 8,
					"free run at unit %llu follows a free run",
					(unsigned long long)p);
			freeu += n;
			freeruns++;
			prev_free = true;
		} else if (pg->pg_state == KVP_PG_USED &&
			   pg->pg_owner == KVP_DRAM_OWNER_UNPOP &&
			   p + n == np) {
			/* the tail not yet populated (agent/populate.c) */
			unpop = n;
			prev_free = false;
		} else if (pg->pg_state == KVP_PG_USED) {
			uint64_t slot = (uint64_t)pg->pg_owner - 1;

			used += n;
			k->r->runs_used++;
			prev_free = false;
			if (!k->reach[p]) {
				/* not reachable: a put or a promotion in
				 * progress */
				uint64_t w =
					pg->pg_owner && slot < s->g.g_index_slots
						/* acquire */
						?
						kvp_load_acquire(
							&s->meta[slot]) :
						0;
				unsigned st = KVP_IX_STATE(w);
				bool ok = pg->pg_owner &&
					  slot < s->g.g_index_slots &&
					  KVP_IX_GEN(w) == pg->pg_owner_gen &&
					  (st == KVP_IX_PENDING ||
					   ((st == KVP_IX_READY ||
					     st == KVP_IX_DELETED) &&
					    /* relaxed: the promotion's
					     * target */
					    KVP_LOC_TIER(kvp_load_relaxed(
						    &s->entries[slot].e_loc)) ==
						    KVP_TIER_SSD &&
					    k->r->agent_up));
				if (!ok)
					kvp_chk_repairable(
						k, 9,
						"run at unit %llu (%llu units) "
						"tagged slot %llu gen %u is not reachable "
						"(slot state %u gen %u)",
						(unsigned long long)p,
						(unsigned long long)n,
						(unsigned long long)slot,
						pg->pg_owner_gen, st,
						KVP_IX_GEN(w));
			}
		} else {
			kvp_chk_viol(k, 7, "run at unit %llu has state %u",
				     (unsigned long long)p, pg->pg_state);
			return;
		}
		p += n;
	}
	k->r->units_used = used;
	k->r->units_free = freeu;
	/* relaxed: the agent writes it under the lock (we may race a
	 * populate step: the checker runs on a quiet pool) */
	if (kvp_load_relaxed(&d->dh_unpop_pages) != unpop)
		kvp_chk_viol(k, 8,
			     "unpopulated-units count %llu; the page map's "
			     "tail has %llu",
			     (unsigned long long)kvp_load_relaxed(
				     &d->dh_unpop_pages),
			     (unsigned long long)unpop);
	if (d->dh_used_pages != used || d->dh_free_pages != freeu)
		kvp_chk_viol(
			k, 8,
			"allocator counts %llu used + %llu free units; the page "
			"map has %llu + %llu",
			(unsigned long long)d->dh_used_pages,
			(unsigned long long)d->dh_free_pages,
			(unsigned long long)used, (unsigned long long)freeu);
	/* relaxed: a mirror for lock-free readers */
	if (kvp_load_relaxed(&d->dh_used_mirror) != d->dh_used_pages)
		kvp_chk_viol(k, 8, "used-units mirror %llu differs from %llu",
			     (unsigned long long)kvp_load_relaxed(
				     &d->dh_used_mirror),
			     (unsigned long long)d->dh_used_pages);
	for (b = 0; b < KVP_DRAM_BINS; b++) {
		uint32_t q = d->dh_bin[b];
		uint64_t steps = 0;

		for (; q; q = s->pages[q - 1].pg_next) {
			const struct kvp_page *pg;

			if (q > np || ++steps > freeruns) {
				kvp_chk_viol(
					k, 8,
					"free bin %u is damaged (loops or leaves the "
					"arena)",
					b);
				break;
			}
			pg = &s->pages[q - 1];
			if (pg->pg_state != KVP_PG_FREE ||
			    kvp_dram_bin(pg->pg_npages) != b)
				kvp_chk_viol(
					k, 8,
					"bin %u holds run at unit %u (state %u, %u "
					"units)",
					b, q - 1, pg->pg_state, pg->pg_npages);
			inbins++;
		}
	}
	if (inbins != freeruns)
		kvp_chk_viol(k, 8, "%llu free runs, %llu in the bins",
			     (unsigned long long)freeruns,
			     (unsigned long long)inbins);
}

/* I4, I11, I12: hold slots. */
static void
kvp_chk_holds(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	uint32_t hpc = s->g.g_holds_per_client, c, j;

	for (c = 0; c < s->g.g_max_clients; c++) {
		/* every slot, not only those under the mark: I12 */
		const kvp_aword_t *hs = kvp_slot_holds(s, c);
		uint64_t hwm = kvp_slot_hold_hwm_raw(s, c);

		if (hwm > hpc)
			kvp_chk_viol(
				k, 12,
				"client %u: hold high-water mark %llu > %u", c,
				(unsigned long long)hwm, hpc);
		for (j = 0; j < hpc; j++) {
			/* acquire: the holder's store */
			uint64_t hv = kvp_load_acquire(&hs[j]);
			uint64_t slot, w;

			if (!hv)
				continue;
			if (k->alive[c] == 0) {
				kvp_chk_viol(
					k, 11,
					"free client slot %u still holds slot %llu",
					c,
					(unsigned long long)KVP_HOLD_SLOT(hv));
				continue;
			}
			if (k->alive[c] == 2)
				continue; /* reported once per client above */
			k->r->holds++;
			if (j >= hwm)
				kvp_chk_viol(
					k, 12,
					"client %u: hold %u above its high-water "
					"mark %llu (the agent's scan misses it)",
					c, j, (unsigned long long)hwm);
			slot = KVP_HOLD_SLOT(hv);
			if (slot >= s->g.g_index_slots) {
				kvp_chk_viol(
					k, 13,
					"client %u: hold names slot %llu of %llu",
					c, (unsigned long long)slot,
					(unsigned long long)s->g.g_index_slots);
				continue;
			}
			w = kvp_load_acquire(&s->meta[slot]); /* acquire */
			if (KVP_IX_GEN(w) != KVP_HOLD_GEN(hv) ||
			    (KVP_IX_STATE(w) != KVP_IX_READY &&
			     KVP_IX_STATE(w) != KVP_IX_DELETED))
				kvp_chk_viol(
					k, 4,
					"client %u holds slot %llu gen %u, which is now "
					"state %u gen %u",
					c, (unsigned long long)slot,
					KVP_HOLD_GEN(hv), KVP_IX_STATE(w),
					KVP_IX_GEN(w));
			else if (hv & KVP_HOLD_PIN) {
				k->r->pins++;
				/* relaxed: stable while held */
				k->pinned[c] += kvp_load_relaxed(
					&s->entries[slot].e_len);
			}
		}
	}
}

/* I17, I24: every staging slot is free, a span's head or its body; a
 * span's holders are live clients; a free span has no holders. */
static void
kvp_chk_staging(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	uint64_t S = s->g.g_staging_slots, j, body_left = 0, body_head = 0;
	uint32_t body_gen = 0;

	if (!s->spans)
		return;
	for (j = 0; j < S; j++) {
		const struct kvp_span *sp = &s->spans[j];
		uint64_t w = kvp_load_acquire(&sp->sp_state); /* acquire */
		unsigned st = KVP_SP_STATE(w), q, n = KVP_SP_N(w);
		uint64_t hbits = 0;

		if (st == KVP_SP_BODY) {
			if (!body_left ||
			    w != KVP_SP_BODYW(body_gen, body_head))
				kvp_chk_viol(
					k, 17,
					"staging slot %llu is a body of span %u, "
					"which does not cover it",
					(unsigned long long)j, KVP_SP_N(w));
			else
				body_left--;
			k->r->spans_in_use++;
			continue;
		}
		if (body_left)
			kvp_chk_viol(
				k, 17,
				"span %llu is %u slots long but slot %llu is not "
				"its body",
				(unsigned long long)body_head,
				(unsigned)(body_left + 1),
				(unsigned long long)j);
		body_left = 0;
		for (q = 0; q < KVP_SPAN_HOLDER_WORDS; q++)
			/* acquire */
			hbits |= kvp_load_acquire(&sp->sp_holders[q]);
		if (st == KVP_SP_FREE) {
			if (hbits)
				kvp_chk_viol(
					k, 17,
					"free staging slot %llu has holders",
					(unsigned long long)j);
			continue;
		}
		k->r->spans_in_use++;
		if (st != KVP_SP_READING && st != KVP_SP_READY &&
		    st != KVP_SP_FREEING) {
			kvp_chk_viol(k, 17, "staging slot %llu has state %u",
				     (unsigned long long)j, st);
			continue;
		}
		if (n == 0 || n > S - j) {
			kvp_chk_viol(k, 17,
				     "span %llu is %u slots long (arena %llu)",
				     (unsigned long long)j, n,
				     (unsigned long long)S);
			continue;
		}
		body_left = n - 1;
		body_head = j;
		body_gen = KVP_SP_GEN(w);
		if (st == KVP_SP_READING)
			kvp_chk_repairable(
				k, 17, "span %llu is being read by %s",
				(unsigned long long)j,
				k->r->agent_up ? "the agent" : "a dead agent");
		if (st == KVP_SP_FREEING) {
			unsigned f = KVP_SP_FREER(w);
			if (f == KVP_SP_AGENT)
				kvp_chk_repairable(
					k, 17, "span %llu is being freed by %s",
					(unsigned long long)j,
					k->r->agent_up ? "the agent" :
							 "a dead agent");
			else if (f == 0 || f > s->g.g_max_clients ||
				 k->alive[f - 1] != 1)
				kvp_chk_repairable(
					k, 23,
					"span %llu is being freed by dead "
					"client %u",
					(unsigned long long)j, f ? f - 1 : 0);
		}
		for (q = 0;
		     q < KVP_MAX_CLIENTS_STAGING && q < s->g.g_max_clients;
		     q++) {
			/* relaxed: read above with acquire */
			if (!((kvp_load_relaxed(&sp->sp_holders[q / 64]) >>
			       (q % 64)) &
			      1))
				continue;
			if (k->alive[q] != 1)
				kvp_chk_repairable(
					k, 11,
					"span %llu is held by dead client %u",
					(unsigned long long)j, q);
		}
		if (st == KVP_SP_READY && !hbits)
			kvp_chk_repairable(
				k, 17,
				"span %llu is READY with no holder and not "
				"freed",
				(unsigned long long)j);
	}
	if (body_left)
		kvp_chk_viol(k, 17, "span %llu runs past the arena's end",
			     (unsigned long long)body_head);
	/* relaxed: statistics */
	if (kvp_load_relaxed(&s->hdr->h_staging_peak) > S ||
	    kvp_load_relaxed(&s->hdr->h_staging_used) >
		    kvp_load_relaxed(&s->hdr->h_staging_peak))
		kvp_chk_viol(
			k, 24,
			"staging used %llu / peak %llu / slots %llu do not add up",
			(unsigned long long)kvp_load_relaxed(
				&s->hdr->h_staging_used),
			(unsigned long long)kvp_load_relaxed(
				&s->hdr->h_staging_peak),
			(unsigned long long)S);
}

/* I19: requests a dead agent took are handed back by the next one. */
static void
kvp_chk_rings(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	uint64_t c, r, R = s->g.g_ring_entries;

	if (!s->rings)
		return;
	for (c = 0; c < s->g.g_max_clients; c++) {
		if (k->alive[c] != 1)
			continue;
		for (r = 0; r < R; r++) {
			/* acquire: the last word on the entry */
			uint64_t w =
				kvp_load_acquire(&s->rings[c * R + r].rq_state);
			if (KVP_RQ_STATE(w) > KVP_RQ_ANSWERING)
				kvp_chk_viol(
					k, 19,
					"client %llu request %llu has state %u",
					(unsigned long long)c,
					(unsigned long long)r, KVP_RQ_STATE(w));
			else if (KVP_RQ_STATE(w) == KVP_RQ_TAKEN ||
				 KVP_RQ_STATE(w) == KVP_RQ_ANSWERING)
				kvp_chk_repairable(
					k, 19,
					"client %llu request %llu is taken by "
					"%s",
					(unsigned long long)c,
					(unsigned long long)r,
					k->r->agent_up ? "the agent" :
							 "a dead agent");
		}
	}
}

/* I35: the HBM map.  Every word a reader would use now (its slot's
 * generation, its GPU UP at its pool generation) names a value that is in
 * the index, lies inside its pool, and shares no unit with another such
 * word.  (The words are shared memory a client could write: a violation
 * is damage or an agent bug; readers check each word before use.) */
struct kvp_chk_hbm {
	uint64_t first, end;
	uint64_t slot;
};

static int
kvp_chk_hbm_cmp(const void *x, const void *y)
{
	const struct kvp_chk_hbm *p = x, *q = y;

	return p->first < q->first ? -1 : p->first > q->first;
}

static void
kvp_chk_hbm(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	unsigned g;

	for (g = 0; g < KVP_GPU_MAX; g++) {
		/* acquire: the agent's release (fields first) */
		uint64_t gw = kvp_load_acquire(&s->hdr->h_gpu[g].gs_state);
		uint64_t unit, bytes, i, n = 0, cap = 0;
		struct kvp_chk_hbm *v = NULL;

		if (KVP_GS_STATE(gw) != KVP_GPU_UP)
			continue;
		/* relaxed: written before UP */
		unit = kvp_load_relaxed(&s->hdr->h_gpu[g].gs_unit);
		bytes = kvp_load_relaxed(&s->hdr->h_gpu[g].gs_bytes);
		if (!unit || (unit & (unit - 1)) || bytes < unit) {
			kvp_chk_viol(k, 35,
				     "GPU slot %u: unit %llu, %llu bytes", g,
				     (unsigned long long)unit,
				     (unsigned long long)bytes);
			continue;
		}
		for (i = 0; i < s->g.g_index_slots; i++) {
			/* acquire: the agent's release */
			uint64_t w = kvp_load_acquire(&s->hbm[i]);
			uint64_t m = kvp_load_acquire(&s->meta[i]), len, off;

			if (!(w & KVP_HBM_VALID) || KVP_HBM_GPU(w) != g ||
			    KVP_HBM_GGEN(w) != (KVP_GS_GEN(gw) & 0xfff) ||
			    KVP_HBM_IXGEN(w) != (KVP_IX_GEN(m) & 0xffffff) ||
			    (KVP_IX_STATE(m) != KVP_IX_READY &&
			     KVP_IX_STATE(m) != KVP_IX_DELETED))
				continue; /* not a word any reader uses */
			/* relaxed: stable for a READY generation */
			len = kvp_load_relaxed(&s->entries[i].e_len);
			off = KVP_HBM_UNIT(w) * unit;
			if (!len || off > bytes || len > bytes - off) {
				kvp_chk_viol(
					k, 35,
					"slot %llu: HBM copy at %llu + %llu "
					"is outside GPU slot %u's %llu bytes",
					(unsigned long long)i,
					(unsigned long long)off,
					(unsigned long long)len, g,
					(unsigned long long)bytes);
				continue;
			}
			if (n == cap) {
				struct kvp_chk_hbm *nv;

				cap = cap ? cap * 2 : 1024;
				nv = realloc(v, cap * sizeof(*v));
				if (!nv) {
					kvp_chk_viol(k, 0, "out of memory");
					free(v);
					return;
				}
				v = nv;
			}
			v[n].first = KVP_HBM_UNIT(w);
			v[n].end = KVP_HBM_UNIT(w) + (len + unit - 1) / unit;
			v[n].slot = i;
			n++;
		}
		if (n > 1)
			qsort(v, n, sizeof(*v), kvp_chk_hbm_cmp);
		for (i = 1; i < n; i++)
			if (v[i].first < v[i - 1].end)
				kvp_chk_viol(
					k, 35,
					"GPU slot %u: the HBM copies of slots "
					"%llu and %llu share unit %llu",
					g, (unsigned long long)v[i - 1].slot,
					(unsigned long long)v[i].slot,
					(unsigned long long)v[i].first);
		free(v);
	}
}

/* I22, I25: leases. */
static void
kvp_chk_leases(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), j;

	for (j = 0; j < s->g.g_max_leases; j++) {
		const struct kvp_lease_slot *ls = &s->leases[j];
		uint64_t w = kvp_load_acquire(&ls->ls_state); /* acquire */
		unsigned o = KVP_LS_OWNER(w);

		switch (KVP_LS_STATE(w)) {
		case KVP_LS_FREE:
			break;
		case KVP_LS_LIVE:
			k->r->leases_live++;
			/* relaxed: published by the LIVE release */
			if (kvp_load_relaxed(&ls->ls_slot) >=
			    s->g.g_index_slots)
				kvp_chk_viol(
					k, 13, "lease %llu names slot %llu",
					(unsigned long long)j,
					(unsigned long long)kvp_load_relaxed(
						&ls->ls_slot));
			/* the reaper frees expired leases within its period;
			 * relaxed: ls_expiry published by the LIVE release */
			if (kvp_load_relaxed(&ls->ls_expiry) + 2000000000ull <
			    now)
				kvp_chk_repairable(
					k, 22,
					"lease %llu expired %llu ms ago and "
					"is still LIVE",
					(unsigned long long)j,
					(unsigned long long)((now -
							      kvp_load_relaxed(
								      &ls->ls_expiry)) /
							     1000000));
			break;
		case KVP_LS_RESERVED:
			if (o == 0 || o > s->g.g_max_clients ||
			    k->alive[o - 1] != 1)
				kvp_chk_repairable(
					k, 23,
					"lease %llu is half-taken by dead "
					"client %u",
					(unsigned long long)j, o ? o - 1 : 0);
			break;
		default:
			kvp_chk_viol(k, 22, "lease %llu has state %u",
				     (unsigned long long)j, KVP_LS_STATE(w));
		}
	}
}

/*
 * I27: the index holds at most --index-entries entries (READY and
 * DELETED), and h_ix_used counts exactly those plus one per put holding a
 * unit for its unpublished slot: never fewer (a unit given back early
 * would let the index pass its limit), and more only until the agent
 * recounts (a process died while changing it).  A live client taking or
 * giving a unit now makes the exact comparison moot: the re-check sees.
 */
static void
kvp_chk_ix_count(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	uint64_t live = k->r->entries_ready + k->r->entries_deleted,
		 inflight = 0;
	/* acquire: after the scan of kvp_chk_index */
	uint64_t used = kvp_load_acquire(&s->hdr->h_ix_used);
	bool unsure = false;
	uint32_t c;

	for (c = 0; c < s->g.g_max_clients; c++) {
		/* acquire: pairs with the client's release stores */
		uint64_t f = kvp_load_acquire(&s->clients[c].cs_ix_resv), sw, m;
		unsigned kind = KVP_IXR_KIND(f);

		if (kind == KVP_IXR_IDLE)
			continue;
		if (kind != KVP_IXR_HAVE_SLOT || k->alive[c] != 1) {
			unsure = true; /* mid-change, or dead: the reaper's */
			continue;
		}
		/* acquire: written before HAVE_SLOT */
		sw = kvp_load_acquire(&s->clients[c].cs_ix_slot);
		if (KVP_HOLD_SLOT(sw) >= s->g.g_index_slots) {
			kvp_chk_viol(
				k, 27,
				"client %u holds a unit for slot %llu, which does "
				"not exist",
				c, (unsigned long long)KVP_HOLD_SLOT(sw));
			continue;
		}
		/* acquire: pairs with the claim / publish CAS */
		m = kvp_load_acquire(&s->meta[KVP_HOLD_SLOT(sw)]);
		if (KVP_IX_GEN(m) == KVP_HOLD_GEN(sw) &&
		    KVP_IX_STATE(m) != KVP_IX_READY &&
		    KVP_IX_STATE(m) != KVP_IX_DELETED)
			inflight++;
	}
	if (live > s->g.g_index_limit)
		kvp_chk_viol(
			k, 27,
			"%llu entries in the index, more than --index-entries %llu",
			(unsigned long long)live,
			(unsigned long long)s->g.g_index_limit);
	if (used < live)
		kvp_chk_viol(
			k, 27,
			"the index entry count is %llu, below the %llu entries it "
			"counts",
			(unsigned long long)used, (unsigned long long)live);
	else if (!unsure && used != live + inflight)
		kvp_chk_repairable(
			k, 27,
			"the index entry count is %llu for %llu entries and %llu "
			"puts in flight (the agent recounts it)",
			(unsigned long long)used, (unsigned long long)live,
			(unsigned long long)inflight);
}

/* A counter summed over the client shards and the retired shard. */
static uint64_t
kvp_chk_ctr_sum(const struct kvp_seg *s, enum kvp_ctr c)
{
	uint64_t v = 0;
	uint32_t i;

	for (i = 0; i < s->g.g_max_clients; i++)
		/* acquire: see below */
		v += kvp_load_acquire(&s->clients[i].cs_ctr[c]);
	/* acquire: a closing client adds to the retired shard first */
	return v + kvp_load_acquire(&s->hdr->h_actr[KVP_ACTR_RETIRED0 + c]);
}

/* I26: counters add up (sub-counts read before their totals, so a
 * concurrent writer can only make the total look larger). */
static void
kvp_chk_counters(struct kvp_chk *k)
{
	const struct kvp_seg *s = k->s;
	static const struct {
		enum kvp_ctr part[5];
		enum kvp_ctr whole;
		const char *what;
	} rules[] = {
		{ { KVP_CTR_GET_HIT, KVP_CTR_GET_MISS, KVP_CTR_RESOLVE_OK,
		    KVP_CTR_RESOLVE_MISS, KVP_CTR_RESOLVE_FAILED },
		  KVP_CTR_GET,
		  "get outcomes exceed gets" },
		{ { KVP_CTR_EXISTS_HIT, KVP_CTR__N, KVP_CTR__N, KVP_CTR__N,
		    KVP_CTR__N },
		  KVP_CTR_EXISTS,
		  "exists hits exceed probes" },
		{ { KVP_CTR_PUT_EXISTS, KVP_CTR_PUT_BUSY, KVP_CTR_PUT_NOSPC,
		    KVP_CTR__N, KVP_CTR__N },
		  KVP_CTR_PUT,
		  "put refusals exceed puts" },
	};
	unsigned r, q;
	uint32_t c;

	for (r = 0; r < sizeof(rules) / sizeof(rules[0]); r++) {
		uint64_t part = 0, whole = 0;

		for (q = 0; q < 5; q++)
			if (rules[r].part[q] != KVP_CTR__N)
				part += kvp_chk_ctr_sum(s, rules[r].part[q]);
		whole = kvp_chk_ctr_sum(s, rules[r].whole);
		if (part > whole)
			kvp_chk_viol(k, 26, "%s (%llu > %llu)", rules[r].what,
				     (unsigned long long)part,
				     (unsigned long long)whole);
	}
	for (c = 0; c < s->g.g_max_clients; c++) {
		/* relaxed: statistics */
		uint64_t g =
			kvp_load_relaxed(
				&s->clients[c].cs_ctr[KVP_CTR_PINNED_DRAM]) +
			kvp_load_relaxed(
				&s->clients[c].cs_ctr[KVP_CTR_PINNED_SSD]);

		if (k->alive[c] == 0 && g)
			kvp_chk_viol(
				k, 26,
				"free client slot %u reports %llu bytes pinned",
				c, (unsigned long long)g);
		else if (k->alive[c] == 1 && g != k->pinned[c])
			kvp_chk_viol(
				k, 26,
				"client %u reports %llu bytes pinned; its pins "
				"name %llu",
				c, (unsigned long long)g,
				(unsigned long long)k->pinned[c]);
	}
}

unsigned
kvp_check_seg(const struct kvp_seg *s, FILE *out, struct kvp_check_report *r)
{
	struct kvp_chk k;

	memset(r, 0, sizeof(*r));
	memset(&k, 0, sizeof(k));
	k.s = s;
	k.out = out;
	k.r = r;
	r->agent_up = kvp_shm_agent_alive(s);
	k.alive = calloc(s->g.g_max_clients, 1);
	k.reach = calloc(s->g.g_dram_pages, 1);
	k.pinned = calloc(s->g.g_max_clients, sizeof(uint64_t));
	if (!k.alive || !k.reach || !k.pinned) {
		kvp_chk_viol(&k, 0, "out of memory");
		goto out;
	}
	/* I15: an agent attached at least once */
	if (kvp_load_relaxed(&s->hdr->h_incarnation) == 0) /* relaxed */
		kvp_chk_viol(&k, 15,
			     "incarnation is 0: no agent ever attached");
	kvp_chk_header(&k);
	kvp_chk_clients(&k);
	kvp_chk_index(&k);
	kvp_chk_ix_count(&k);
	kvp_chk_dram(&k);
	kvp_chk_holds(&k);
	kvp_chk_staging(&k);
	kvp_chk_rings(&k);
	kvp_chk_leases(&k);
	kvp_chk_hbm(&k);
	kvp_chk_counters(&k);
out:
	free(k.alive);
	free(k.reach);
	free(k.pinned);
	return r->violations;
}

unsigned
kvp_check_wait(const struct kvp_seg *s, unsigned wait_ms, FILE *out,
	       struct kvp_check_report *r)
{
	uint64_t end =
		kvp_now_ns(CLOCK_MONOTONIC) + (uint64_t)wait_ms * 1000000ull;

	while (kvp_check_seg(s, NULL, r) && kvp_now_ns(CLOCK_MONOTONIC) < end) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		/* a re-check period, not a synchronisation */
		nanosleep(&ts, NULL);
	}
	return r->violations ? kvp_check_seg(s, out, r) : 0;
}

void
kvp_check_summary(const struct kvp_check_report *r, FILE *out)
{
	unsigned i, n = 0;

	if (!r->violations) {
		fprintf(out,
			"check: OK (agent %s): %llu entries (%llu DRAM, %llu SSD), %llu "
			"deleted, %llu pending; %llu runs / %llu units used, %llu free; "
			"%llu holds (%llu pins), %llu staging slots, %llu leases, %llu live "
			"clients%s\n",
			r->agent_up ? "up" : "down",
			(unsigned long long)r->entries_ready,
			(unsigned long long)r->entries_dram,
			(unsigned long long)r->entries_ssd,
			(unsigned long long)r->entries_deleted,
			(unsigned long long)r->entries_pending,
			(unsigned long long)r->runs_used,
			(unsigned long long)r->units_used,
			(unsigned long long)r->units_free,
			(unsigned long long)r->holds,
			(unsigned long long)r->pins,
			(unsigned long long)r->spans_in_use,
			(unsigned long long)r->leases_live,
			(unsigned long long)r->clients_live,
			r->notes ?
				"; notes above: repaired when an agent attaches" :
				"");
		return;
	}
	fprintf(out, "check: %u violation%s (", r->violations,
		r->violations == 1 ? "" : "s");
	for (i = 0; i < KVP_CHECK_MAX_INV; i++)
		if (r->by_inv[i])
			fprintf(out, "%sI%u x%u", n++ ? ", " : "", i,
				r->by_inv[i]);
	fprintf(out, ")\n");
}
