/* SPDX-License-Identifier: MIT */
/*
 * ssd_recover.c - the SSD store's recovery (design 3): every segment
 * read (a sealed one's summary, an unsealed one header by header), the
 * latest record per key handed to the owner, torn tails repaired.
 * Design in tiers/ssd_int.h.
 */
#include "shm/kvp_atomic.h"
#include "tiers/ssd_int.h"

/* ---- recovery ---- */

struct kvp_rrec {                    /* one key seen during recovery */
	uint64_t loc, seq, ns, vlen; /* its latest value record (loc 0: none) */
	uint64_t hash;               /* kvp_hash(ns, key, klen) */
	uint64_t tseq; /* its latest format-1 tombstone (0: none) */
	uint32_t koff; /* into the key arena */
	uint8_t klen;
};

struct kvp_rfault;

struct kvp_rtab {
	struct kvp_ssd *s;
	struct kvp_rrec *r;
	size_t n, cap;
	unsigned char *keys;
	size_t klen, kcap;
	/* open addressing: record index + 1, and the hash's high half (a
	 * probe compares it before it touches a record) */
	struct kvp_rslot {
		uint32_t idx, tag;
	} * slot;
	size_t nslot;
	uint64_t *dead; /* open addressing: locations tombstones target */
	size_t ndead, deadcap;
	unsigned char *sumbuf; /* a summary read (reused, segment by segment) */
	size_t sumcap;
	/* the thread faulting these arrays in (kvp_rfault_*), or NULL:
	 * stopped before any of them moves */
	struct kvp_rfault *rf;
};

/* Ask for huge pages under a large private array (recovery's tables):
 * a 4 KiB page fault each is most of a rebuild's time on a VM.  A hint:
 * ignored where transparent huge pages are off. */
static void
kvp_hint_huge(void *p, size_t n)
{
	uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;

	if (n >= (4u << 20) && (uintptr_t)p + n > a)
		madvise((void *)a, (uintptr_t)p + n - a, MADV_HUGEPAGE);
}

/*
 * The table's arrays (and the summary buffer) are populated on a second
 * thread while this one reads the summaries: their first touch (a page
 * fault each, 6-12 us a 4 KiB page on this guest; on 2 MiB pages the
 * kernel's zeroing and compaction) was a third of the table's time at
 * 100k records, all on this thread, with the other core idle.  The slot
 * array first (probed at random from the first record on), then the
 * summary buffer, the records and the keys a slice at a time, in the order
 * the summaries fill them; it stops at the next slice once the table is
 * built (what it did not reach is faulted in as before).  A hint:
 * MADV_POPULATE_WRITE only faults pages in, it never writes them.
 */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
struct kvp_rfault {
	unsigned char *p[4];
	size_t n[4];
	kvp_aword_t stop; /* 1: the table is built */
	pthread_t tid;
	bool started;
};

/* Fault in slice off of array k; false: stop (the table is built, or a
 * kernel without MADV_POPULATE_WRITE, before 5.14: EINVAL). */
static bool
kvp_rfault_slice(struct kvp_rfault *f, unsigned k, size_t off, size_t len)
{
	uintptr_t a = ((uintptr_t)f->p[k] + off) & ~(uintptr_t)4095;
	uintptr_t e = (uintptr_t)f->p[k] +
		      (off + len < f->n[k] ? off + len : f->n[k]);

	/* relaxed: a hint to stop early (kvp_rfault_stop); the join
	 * orders the rest */
	if (kvp_load_relaxed(&f->stop))
		return false;
	e = (e + 4095) & ~(uintptr_t)4095;
	return madvise((void *)a, e - a, MADV_POPULATE_WRITE) == 0 ||
	       errno != EINVAL;
}

static void *
kvp_rfault_run(void *arg)
{
	struct kvp_rfault *f = arg;
	const size_t slice = 1u << 20;
	size_t off;
	unsigned k;
	bool more = true;

	for (off = 0; f->p[0] && off < f->n[0]; off += slice)
		if (!kvp_rfault_slice(f, 0, off, slice))
			return NULL;
	for (off = 0; more; off += slice) {
		more = false;
		for (k = 1; k < 4; k++) {
			if (!f->p[k] || off >= f->n[k])
				continue;
			if (!kvp_rfault_slice(f, k, off, slice))
				return NULL;
			more = true;
		}
	}
	return NULL;
}

static void
kvp_rfault_start(struct kvp_rfault *f, struct kvp_rtab *t, size_t keys)
{
	f->p[0] = (unsigned char *)t->slot;
	f->n[0] = t->nslot * sizeof(*t->slot);
	f->p[1] = t->sumbuf;
	f->n[1] = t->sumcap;
	f->p[2] = (unsigned char *)t->r;
	f->n[2] = t->cap * sizeof(*t->r);
	f->p[3] = t->keys;
	f->n[3] = keys < t->kcap ? keys : t->kcap;
	/* relaxed: before the thread starts */
	kvp_store_relaxed(&f->stop, 0);
	f->started = pthread_create(&f->tid, NULL, kvp_rfault_run, f) == 0;
	t->rf = f;
}

static void
kvp_rfault_stop(struct kvp_rfault *f)
{
	if (!f || !f->started)
		return;
	/* relaxed: a hint (kvp_rfault_run's load); the join orders */
	kvp_store_relaxed(&f->stop, 1);
	pthread_join(f->tid, NULL);
	f->started = false;
}

/* Size the table for about nrec records and kbytes of keys up front (no
 * rehash, no copy while the records stream in). */
static int
kvp_rtab_presize(struct kvp_rtab *t, size_t nrec, size_t kbytes)
{
	size_t ns = 1 << 16;

	while (ns < 2 * nrec + 2)
		ns *= 2;
	t->slot = calloc(ns, sizeof(*t->slot));
	t->r = malloc((nrec + 1) * sizeof(*t->r));
	t->keys = malloc(kbytes + 1);
	if (!t->slot || !t->r || !t->keys)
		return -ENOMEM;
	kvp_hint_huge(t->slot, ns * sizeof(*t->slot));
	kvp_hint_huge(t->r, (nrec + 1) * sizeof(*t->r));
	kvp_hint_huge(t->keys, kbytes + 1);
	t->nslot = ns;
	t->cap = nrec + 1;
	t->kcap = kbytes + 1;
	return 0;
}

static int
kvp_rtab_grow(struct kvp_rtab *t)
{
	size_t ns = t->nslot ? t->nslot * 2 : 1 << 16, k;
	struct kvp_rslot *n = calloc(ns, sizeof(*n));

	if (!n)
		return -ENOMEM;
	kvp_rfault_stop(t->rf); /* the old array goes */
	kvp_hint_huge(n, ns * sizeof(*n));
	for (k = 0; k < t->nslot; k++) {
		uint32_t v = t->slot[k].idx;
		if (v) {
			size_t h = t->r[v - 1].hash & (ns - 1);
			while (n[h].idx)
				h = (h + 1) & (ns - 1);
			n[h] = t->slot[k];
		}
	}
	free(t->slot);
	t->slot = n;
	t->nslot = ns;
	return 0;
}

static size_t
kvp_loc_slot(uint64_t loc, size_t cap)
{
	return (size_t)(kvp__fold(loc, 0x9e3779b97f4a7c15ull) & (cap - 1));
}

/* Remember that a tombstone targets the value record at loc. */
static int
kvp_rtab_kill(struct kvp_rtab *t, uint64_t loc)
{
	size_t h;

	if ((t->ndead + 1) * 2 > t->deadcap) {
		size_t cap = t->deadcap ? t->deadcap * 2 : 1 << 12, k;
		uint64_t *n = calloc(cap, sizeof(*n));

		if (!n)
			return -ENOMEM;
		for (k = 0; k < t->deadcap; k++) {
			if (!t->dead[k])
				continue;
			h = kvp_loc_slot(t->dead[k], cap);
			while (n[h])
				h = (h + 1) & (cap - 1);
			n[h] = t->dead[k];
		}
		free(t->dead);
		t->dead = n;
		t->deadcap = cap;
	}
	for (h = kvp_loc_slot(loc, t->deadcap); t->dead[h];
	     h = (h + 1) & (t->deadcap - 1))
		if (t->dead[h] == loc)
			return 0;
	t->dead[h] = loc;
	t->ndead++;
	return 0;
}

static bool
kvp_rtab_killed(const struct kvp_rtab *t, uint64_t loc)
{
	size_t h;

	if (!t->deadcap)
		return false;
	for (h = kvp_loc_slot(loc, t->deadcap); t->dead[h];
	     h = (h + 1) & (t->deadcap - 1))
		if (t->dead[h] == loc)
			return true;
	return false;
}

/* The table line a record of this hash will probe first (a hint). */
static void
kvp_rtab_prefetch(struct kvp_rtab *t, uint64_t hash)
{
	if (t->nslot)
		__builtin_prefetch(&t->slot[hash & (t->nslot - 1)]);
}

/* Keep the latest value record of (ns, key), and what deletes it: the
 * targets of format-2 tombstones, the latest format-1 tombstone. */
static int
kvp_rtab_add(struct kvp_rtab *t, const struct kvp_ssd_rec *r)
{
	const unsigned char *key = r->key;
	struct kvp_rrec *x = NULL;
	uint64_t hash;
	size_t h;

	if (r->type == KVP_SSD_REC_TOMBSTONE) {
		struct kvp_sseg *g =
			kvp_seg_find(t->s, KVP_SSD_LOC_SEG(r->loc));

		if (g) /* it keeps an older record dead */
			g->live_bytes += kvp_ssd_record_bytes(0);
		if (r->target)
			return kvp_rtab_kill(t, r->target);
	}
	if ((t->n + 1) * 2 > t->nslot && kvp_rtab_grow(t))
		return -ENOMEM;
	hash = r->hash ? r->hash : kvp_hash(r->ns, key, r->klen);
	h = hash & (t->nslot - 1);
	for (; t->slot[h].idx; h = (h + 1) & (t->nslot - 1)) {
		struct kvp_rrec *y;

		if (t->slot[h].tag != (uint32_t)(hash >> 32))
			continue;
		y = &t->r[t->slot[h].idx - 1];
		if (y->ns == r->ns && y->klen == r->klen &&
		    !memcmp(t->keys + y->koff, key, r->klen)) {
			x = y;
			break;
		}
	}
	if (!x) {
		if (t->n == t->cap) {
			size_t cap = t->cap ? t->cap * 2 : 4096;
			struct kvp_rrec *n;

			kvp_rfault_stop(t->rf); /* the array may move */
			n = realloc(t->r, cap * sizeof(*n));
			if (!n)
				return -ENOMEM;
			t->r = n;
			t->cap = cap;
		}
		if (t->klen + r->klen > t->kcap) {
			size_t cap = t->kcap ? t->kcap * 2 : 1 << 20;
			unsigned char *n;
			while (cap < t->klen + r->klen)
				cap *= 2;
			kvp_rfault_stop(t->rf); /* the array may move */
			n = realloc(t->keys, cap);
			if (!n)
				return -ENOMEM;
			t->keys = n;
			t->kcap = cap;
		}
		memcpy(t->keys + t->klen, key, r->klen);
		x = &t->r[t->n];
		memset(x, 0, sizeof(*x));
		x->ns = r->ns;
		x->hash = hash;
		x->koff = (uint32_t)t->klen;
		x->klen = (uint8_t)r->klen;
		t->klen += r->klen;
		t->slot[h].idx = (uint32_t)++t->n;
		t->slot[h].tag = (uint32_t)(hash >> 32);
	}
	if (r->type == KVP_SSD_REC_TOMBSTONE) {
		if (r->seq > x->tseq)
			/* format 1: kills up to its sequence */
			x->tseq = r->seq;
	} else if (!x->loc || r->seq > x->seq) {
		x->loc = r->loc;
		x->seq = r->seq;
		x->vlen = r->vlen;
	}
	return 0;
}

/* Call cb for every record of g (summary when sealed, else headers). */
int
kvp_seg_records(struct kvp_ssd *s, struct kvp_sseg *g, kvp_ssd_rec_fn cb,
		void *arg, bool repair, struct kvp_rtab *pf)
{
	unsigned char *buf = kvp_aligned(B);
	struct kvp_ssd_trailer tr;
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	/* sealed: the trailer points at the summary */
	if (pread(g->fd, buf, B, (off_t)(g->size - B)) == (ssize_t)B) {
		uint32_t crc;

		memcpy(&tr, buf, sizeof(tr));
		crc = tr.st_crc;
		tr.st_crc = 0;
		if (tr.st_magic == KVP_SSD_MAGIC_TRAIL &&
		    tr.st_seg_id == g->id &&
		    kvp_crc32c(0, &tr, sizeof(tr)) == crc &&
		    tr.st_sum_off % B == 0 &&
		    tr.st_sum_off + tr.st_sum_len <= g->size - B) {
			uint64_t bytes = kvp_rup(tr.st_sum_len), p = 0;
			unsigned char *sum;

			/* recovery reuses one buffer for every summary (each
			 * new one would be page faults first) */
			/* (an empty summary too: a segment sealed with no
			 * record still needs a buffer to read nothing into) */
			if (pf && (pf->sumcap < bytes || !pf->sumbuf)) {
				kvp_rfault_stop(pf->rf); /* the buffer goes */
				free(pf->sumbuf);
				pf->sumcap = 0;
				if (posix_memalign((void **)&pf->sumbuf, B,
						   bytes ? bytes : B))
					pf->sumbuf = NULL;
				else
					pf->sumcap = bytes;
				if (pf->sumbuf)
					kvp_hint_huge(pf->sumbuf, bytes);
			}
			sum = pf ? pf->sumbuf : kvp_aligned(bytes);
			if (!sum) {
				free(buf);
				return -ENOMEM;
			}
			if ((bytes &&
			     pread(g->fd, sum, bytes, (off_t)tr.st_sum_off) !=
				     (ssize_t)bytes) ||
			    kvp_crc32c(0, sum, tr.st_sum_len) !=
				    tr.st_sum_crc) {
				kvp_log(KVP_LOG_WARN, "ssd",
					"segment %08x: bad summary; "
					"scanning its records",
					g->id);
				if (!pf)
					free(sum);
				goto scan;
			}
			s->st.recover_read_bytes += bytes + B;
			g->sealed = true;
			g->wpos = tr.st_sum_off / B;
			g->max_seq = tr.st_max_seq;
			while (p + sizeof(struct kvp_ssd_sum_ent) <=
				       tr.st_sum_len &&
			       !rc) {
				/* a group of entries: their hashes first, and
				 * the table lines they will touch prefetched
				 * (recovery), then the callback for each */
				struct kvp_ssd_sum_ent e[16];
				uint64_t at[16], h[16];
				unsigned n = 0, k;

				while (n < 16 &&
				       p + sizeof(struct kvp_ssd_sum_ent) <=
					       tr.st_sum_len) {
					memcpy(&e[n], sum + p, sizeof(e[n]));
					if (e[n].se_klen == 0 ||
					    p + kvp_sum_ent_size(e[n].se_klen) >
						    tr.st_sum_len ||
					    (uint64_t)(g->version >= 3 ?
							       e[n].se_block >>
								       8 :
							       e[n].se_block) *
							    B >=
						    tr.st_sum_off) {
						tr.st_sum_len = p; /* stop */
						break;
					}
					at[n] = p;
					h[n] = 0;
					if (pf) {
						h[n] = kvp_hash(
							e[n].se_ns,
							sum + p + sizeof(e[n]),
							e[n].se_klen);
						kvp_rtab_prefetch(pf, h[n]);
					}
					p += kvp_sum_ent_size(e[n].se_klen);
					n++;
				}
				for (k = 0; k < n && !rc; k++) {
					struct kvp_ssd_rec rec;

					kvp_rec_from_sum(g, &e[k],
							 sum + at[k] +
								 sizeof(e[k]),
							 &rec);
					rec.hash = h[k];
					rc = cb(arg, &rec);
				}
				if (!n)
					break;
			}
			if (!pf)
				free(sum);
			free(buf);
			return rc;
		}
	}
scan : {
	uint64_t blk = 1;

	while (g->version >= 3 && blk + 1 < g->size / B) {
		/* format 3: batch by batch */
		const struct kvp_ssd_batch_hdr *bh = (const void *)buf;
		uint32_t pos = sizeof(*bh);
		struct kvp_ssd_bent e;
		const unsigned char *key;
		const uint32_t *crc;
		unsigned k;
		bool bad = false;

		if (pread(g->fd, buf, B, (off_t)(blk * B)) != (ssize_t)B)
			break;
		s->st.recover_read_bytes += B;
		if (!kvp_bhdr_valid(buf, g->id, blk, g->size / B) ||
		    (blk + bh->bh_nblocks) * B > g->valid_end) {
			bool zero = true;
			for (k = 0; k < B && zero; k++)
				zero = buf[k] == 0;
			if (!zero)
				kvp_log(KVP_LOG_WARN, "ssd",
					"segment %08x: bad batch at "
					"block %llu: the rest of the file is not served",
					g->id, (unsigned long long)blk);
			break;
		}
		/* every entry holds together, or none is taken */
		for (k = 0; k < bh->bh_nrec && !bad; k++)
			bad = !kvp_bent_next(buf, &pos, &e, &key, &crc);
		if (bad) {
			kvp_log(KVP_LOG_WARN, "ssd",
				"segment %08x: bad batch entry at block %llu: "
				"the rest of the file is not served",
				g->id, (unsigned long long)blk);
			break;
		}
		pos = sizeof(*bh);
		for (k = 0; k < bh->bh_nrec && !rc; k++) {
			struct kvp_ssd_rec rec;

			kvp_bent_next(buf, &pos, &e, &key, &crc);
			rec.loc = KVP_SSD_LOC(g->id,
					      KVP_SSD_LOW3(blk, e.be_delta));
			rec.seq = e.be_seq;
			rec.ns = e.be_ns;
			rec.vlen = e.be_type == KVP_SSD_REC_VALUE ? e.be_vlen :
								    0;
			rec.target = e.be_type == KVP_SSD_REC_TOMBSTONE ?
					     e.be_vlen :
					     0;
			rec.hash = 0;
			rec.key = key;
			rec.klen = e.be_klen;
			rec.type = e.be_type;
			if (e.be_seq > g->max_seq)
				g->max_seq = e.be_seq;
			if (repair)
				kvp_sum_append(g, e.be_type,
					       KVP_SSD_LOC_BLOCK(rec.loc),
					       e.be_ns, e.be_seq, e.be_vlen,
					       key, e.be_klen);
			g->nrecs++;
			rc = cb(arg, &rec);
		}
		if (rc)
			break;
		blk += bh->bh_nblocks;
	}
	while (g->version < 3 && blk + 1 < g->size / B) {
		const struct kvp_ssd_rec_hdr *h = (const void *)buf;
		struct kvp_ssd_rec rec;

		if (pread(g->fd, buf, B, (off_t)(blk * B)) != (ssize_t)B)
			break;
		s->st.recover_read_bytes += B;
		if (!kvp_hdr_valid(g, h, blk) ||
		    (blk + 1) * B + kvp_rup(h->rh_type == KVP_SSD_REC_VALUE ?
						    h->rh_vlen :
						    0) >
			    g->valid_end) {
			bool zero = true;
			unsigned k;
			for (k = 0; k < B && zero; k++)
				zero = buf[k] == 0;
			if (!zero)
				kvp_log(KVP_LOG_WARN, "ssd",
					"segment %08x: bad record at "
					"block %llu: the rest of the file is not served",
					g->id, (unsigned long long)blk);
			break;
		}
		rec.loc = KVP_SSD_LOC(g->id, blk);
		rec.hash = 0;
		rec.seq = h->rh_seq;
		rec.ns = h->rh_ns;
		rec.vlen = h->rh_type == KVP_SSD_REC_VALUE ? h->rh_vlen : 0;
		rec.target = h->rh_type == KVP_SSD_REC_TOMBSTONE ? h->rh_vlen :
								   0;
		rec.key = h + 1;
		rec.klen = h->rh_klen;
		rec.type = h->rh_type;
		if (h->rh_seq > g->max_seq)
			g->max_seq = h->rh_seq;
		if (repair)
			kvp_sum_append(g, h->rh_type, (uint32_t)blk, h->rh_ns,
				       h->rh_seq, h->rh_vlen, rec.key,
				       rec.klen);
		g->nrecs++;
		rc = cb(arg, &rec);
		if (rc)
			break;
		blk += 1 + kvp_rup(rec.vlen) / B;
	}
	if (repair && !rc) {
		/* torn tail: clear the first bad block, then seal here (the
		 * summary must fit before the trailer) */
		memset(buf, 0, B);
		if (blk + 1 < g->size / B &&
		    pwrite(g->fd, buf, B, (off_t)(blk * B)) != (ssize_t)B)
			rc = -EIO;
		g->wpos = blk;
		while (g->wpos * B + kvp_rup(g->sum_len) > g->size - B &&
		       g->nrecs) {
			/* no room for the summary: cannot happen with reserved
			 * space; drop the last record's entry */
			rc = -EUCLEAN;
			break;
		}
		if (!rc)
			rc = kvp_seg_seal(s, g);
	}
}
	free(buf);
	return rc;
}

static int
kvp_collect_cb(void *arg, const struct kvp_ssd_rec *r)
{
	return kvp_rtab_add(arg, r);
}

/*
 * The owner's part of recovery: every live record (the latest value
 * record of its key that no tombstone kills) handed to cb, on several
 * threads at once (cfg.recover_threads, each a contiguous share of the
 * table: the owner's callback must be safe for that, as the agent's index
 * inserts are: lock-free claims of distinct keys).  The table is only
 * read meanwhile; what the store itself must do for a record the owner
 * declined (a tombstone) is done after, on this thread, and each thread
 * adds its segments' live bytes under mu once per segment it leaves.
 */
struct kvp_rpart {
	struct kvp_ssd *s;
	const struct kvp_rtab *t;
	kvp_ssd_rec_fn cb;
	void *arg;
	size_t from, to;
	pthread_mutex_t *mu;
	uint64_t kept, owed;
	size_t *tomb; /* records whose tombstone the store writes */
	size_t ntomb, tombcap;
	int rc;
};

static void
kvp_rpart_live(struct kvp_rpart *p, struct kvp_sseg *sg, uint64_t bytes)
{
	if (!sg || !bytes)
		return;
	pthread_mutex_lock(p->mu);
	sg->live_bytes += bytes;
	pthread_mutex_unlock(p->mu);
}

static void *
kvp_rpart_run(void *arg)
{
	struct kvp_rpart *p = arg;
	const struct kvp_rtab *t = p->t;
	struct kvp_ssd *s = p->s;
	struct kvp_sseg *last_seg = NULL;
	uint64_t live = 0;
	size_t k;

	for (k = p->from; k < p->to && p->rc >= 0; k++) {
		const struct kvp_rrec *x = &t->r[k];
		struct kvp_ssd_rec rec;
		int rc;

		/* the owner's lines for the records a few ahead (its index),
		 * in two stages */
		if (s->cfg.recover_prefetch && k + 2 * KVP_SSD_PREFETCH < p->to)
			s->cfg.recover_prefetch(
				p->arg, t->r[k + 2 * KVP_SSD_PREFETCH].hash, 0);
		if (s->cfg.recover_prefetch && k + KVP_SSD_PREFETCH < p->to)
			s->cfg.recover_prefetch(
				p->arg, t->r[k + KVP_SSD_PREFETCH].hash, 1);
		/* no value, a format-1 tombstone at or after it, or a
		 * tombstone that names it: the key is not live */
		if (!x->loc || x->tseq >= x->seq || kvp_rtab_killed(t, x->loc))
			continue;
		/* records come in segment order: one lookup per segment */
		if (!last_seg || last_seg->id != KVP_SSD_LOC_SEG(x->loc)) {
			kvp_rpart_live(p, last_seg, live);
			live = 0;
			last_seg = kvp_seg_find(s, KVP_SSD_LOC_SEG(x->loc));
		}
		rec.loc = x->loc;
		rec.seq = x->seq;
		rec.ns = x->ns;
		rec.vlen = x->vlen;
		rec.target = 0;
		rec.hash = x->hash;
		rec.key = t->keys + x->koff;
		rec.klen = x->klen;
		rec.type = KVP_SSD_REC_VALUE;
		rc = p->cb(p->arg, &rec);
		if (rc == KVP_SSD_DECLINE_OWED) {
			p->owed++;
		} else if (rc == KVP_SSD_DECLINE) {
			if (p->ntomb == p->tombcap) {
				size_t nc = p->tombcap ? 2 * p->tombcap : 64;
				size_t *n = realloc(p->tomb, nc * sizeof(*n));

				if (!n) {
					p->rc = -ENOMEM;
					break;
				}
				p->tomb = n;
				p->tombcap = nc;
			}
			p->tomb[p->ntomb++] = k;
		} else if (rc == 0) {
			p->kept++;
			live += kvp_ssd_record_bytes(x->vlen);
		} else {
			p->rc = rc;
		}
	}
	kvp_rpart_live(p, last_seg, live);
	return NULL;
}

static int
kvp_recover_inserts(struct kvp_ssd *s, const struct kvp_rtab *t,
		    kvp_ssd_rec_fn cb, void *arg, uint64_t *kept,
		    uint64_t *declined, unsigned *nthreads)
{
	/* a thread is worth starting for this many records at least */
	enum {
		KVP_RPART_MIN = 8192
	};
	struct kvp_rpart part[KVP_SSD_RECOVER_THREADS_MAX];
	pthread_t tid[KVP_SSD_RECOVER_THREADS_MAX];
	bool started[KVP_SSD_RECOVER_THREADS_MAX];
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	unsigned np = s->cfg.recover_threads, k;
	int rc = 0;

	if (np < 1)
		np = 1;
	if (np > KVP_SSD_RECOVER_THREADS_MAX)
		np = KVP_SSD_RECOVER_THREADS_MAX;
	while (np > 1 && t->n / np < KVP_RPART_MIN)
		np--;
	memset(part, 0, sizeof(part));
	for (k = 0; k < np; k++) {
		part[k].s = s;
		part[k].t = t;
		part[k].cb = cb;
		part[k].arg = arg;
		part[k].from = t->n * k / np;
		part[k].to = t->n * (k + 1) / np;
		part[k].mu = &mu;
		started[k] = k > 0 &&
			     pthread_create(&tid[k], NULL, kvp_rpart_run,
					    &part[k]) == 0;
	}
	/* this thread takes the first share, and any a thread was not had
	 * for */
	for (k = 0; k < np; k++)
		if (!started[k])
			kvp_rpart_run(&part[k]);
	*nthreads = 1;
	for (k = 1; k < np; k++)
		*nthreads += started[k];
	/* every thread done before the store writes (a tombstone may start
	 * a segment: the threads look segments up) */
	for (k = 0; k < np; k++)
		if (started[k])
			pthread_join(tid[k], NULL);
	for (k = 0; k < np; k++) {
		size_t j;

		*kept += part[k].kept;
		*declined += part[k].owed + part[k].ntomb;
		if (part[k].rc < 0 && rc >= 0)
			rc = part[k].rc;
		/* declined: the store's tombstone, so it never comes back */
		for (j = 0; j < part[k].ntomb && rc >= 0; j++) {
			const struct kvp_rrec *x = &t->r[part[k].tomb[j]];

			rc = kvp_ssd_tombstone_agent(s, 0, x->ns,
						     t->keys + x->koff, x->klen,
						     x->loc);
		}
		free(part[k].tomb);
	}
	pthread_mutex_destroy(&mu);
	return rc;
}

int64_t
kvp_ssd_recover_agent(struct kvp_ssd *s, kvp_ssd_rec_fn cb, void *arg)
{
	struct kvp_rtab t;
	struct kvp_rfault rf;
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC), t1 = t0, kept = 0,
		 declined = 0;
	unsigned g, nthreads = 1;
	int rc = 0;

	memset(&t, 0, sizeof(t));
	memset(&rf, 0, sizeof(rf));
	t.s = s;
	{
		/* the trailers say how many records and key bytes the sealed
		 * segments hold (a trailer whose CRC fails is not believed);
		 * an unsealed one is guessed (a record per two blocks, 128
		 * key bytes each): growth covers a short guess, and a table
		 * that cannot be had at that size grows from small */
		unsigned char *buf = kvp_aligned(B);
		size_t nrec = 0, kb = 0, sumb = 0;

		for (g = 0; g < s->nsegs && buf; g++) {
			struct kvp_sseg *sg = s->segs[g];
			struct kvp_ssd_trailer tr;
			uint32_t crc = 0;

			memset(&tr, 0, sizeof(tr));
			if (pread(sg->fd, buf, B, (off_t)(sg->size - B)) ==
			    (ssize_t)B) {
				memcpy(&tr, buf, sizeof(tr));
				crc = tr.st_crc;
				tr.st_crc = 0;
			}
			if (tr.st_magic == KVP_SSD_MAGIC_TRAIL &&
			    tr.st_seg_id == sg->id &&
			    kvp_crc32c(0, &tr, sizeof(tr)) == crc &&
			    tr.st_sum_len < sg->size &&
			    tr.st_nrecs <= tr.st_sum_len / 32) {
				nrec += tr.st_nrecs;
				kb += tr.st_sum_len;
				if (kvp_rup(tr.st_sum_len) > sumb)
					sumb = kvp_rup(tr.st_sum_len);
			} else {
				nrec += sg->size / B / 2;
				kb += sg->size / B / 2 * 128;
			}
		}
		free(buf);
		if (nrec && kvp_rtab_presize(&t, nrec, kb)) {
			free(t.slot);
			free(t.r);
			free(t.keys);
			t.slot = NULL;
			t.r = NULL;
			t.keys = NULL;
			t.nslot = t.cap = t.kcap = 0;
		}
		/* the largest summary's buffer too (kvp_seg_records reuses
		 * it segment by segment) */
		if (sumb && !posix_memalign((void **)&t.sumbuf, B, sumb))
			t.sumcap = sumb;
		/* the keys' room is the summaries' bytes; the keys are
		 * those less an entry's fixed part each */
		if (t.slot)
			kvp_rfault_start(
				&rf, &t,
				kb - (kb > nrec * sizeof(struct kvp_ssd_sum_ent) ?
					      nrec * sizeof(struct kvp_ssd_sum_ent) :
					      0));
	}
	for (g = 0; g < s->nsegs; g++)
		s->segs[g]->live_bytes = 0;
	for (g = 0; g < s->nsegs && !rc; g++)
		rc = kvp_seg_records(s, s->segs[g], kvp_collect_cb, &t, true,
				     &t);
	/* the inserts want both cores */
	kvp_rfault_stop(&rf);
	if (rc)
		goto out;
	for (g = 0; g < s->nsegs; g++)
		if (s->segs[g]->max_seq >= s->next_seq)
			s->next_seq = s->segs[g]->max_seq + 1;
	t1 = kvp_now_ns(CLOCK_MONOTONIC);
	rc = kvp_recover_inserts(s, &t, cb, arg, &kept, &declined, &nthreads);
	/* the tombstones of declined records, on disk before we go on */
	while (rc >= 0 && s->outstanding) {
		struct kvp_ssd_cqe cq[32];
		if (kvp_ssd_poll_agent(s, cq, 32, -1) < 0)
			break;
	}
out:
	s->st.recovered = kept;
	s->st.recover_ns = kvp_now_ns(CLOCK_MONOTONIC) - t0;
	if (rc >= 0)
		kvp_log(KVP_LOG_INFO, "ssd",
			"recovered %llu records (%zu keys seen, %llu "
			"declined) from %u segments in %.3f s (disk and "
			"table %.3f s, the owner's inserts %.3f s on %u "
			"threads)",
			(unsigned long long)kept, t.n,
			(unsigned long long)declined, s->nsegs,
			(double)s->st.recover_ns / 1e9, (double)(t1 - t0) / 1e9,
			(double)(t0 + s->st.recover_ns - t1) / 1e9, nthreads);
	free(t.r);
	free(t.keys);
	free(t.slot);
	free(t.dead);
	free(t.sumbuf);
	return rc < 0 ? rc : (int64_t)kept;
}
