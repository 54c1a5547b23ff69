/* SPDX-License-Identifier: MIT */
/*
 * ssd_log.c - the SSD log's writer: the active segment's summary, the
 * open batch (design 2: one header block, values 4 KiB aligned after
 * it, one WRITEV), value records and tombstones queued into it.
 * Design in tiers/ssd_int.h.
 */
#include "tiers/ssd_int.h"

int
kvp_sum_append(struct kvp_sseg *g, uint8_t type, uint32_t blk, uint64_t ns,
	       uint64_t seq, uint64_t vlen, const void *key, unsigned klen)
{
	size_t n = kvp_sum_ent_size(klen);
	struct kvp_ssd_sum_ent *e;

	if (g->sum_len + n > g->sum_cap) {
		size_t cap = g->sum_cap ? g->sum_cap * 2 : 4096;
		unsigned char *p;
		while (cap < g->sum_len + n)
			cap *= 2;
		p = realloc(g->sum, cap);
		if (!p)
			return -ENOMEM;
		g->sum = p;
		g->sum_cap = cap;
	}
	e = (struct kvp_ssd_sum_ent *)(g->sum + g->sum_len);
	memset(e, 0, n);
	e->se_type = type;
	e->se_klen = (uint8_t)klen;
	e->se_block = blk;
	e->se_ns = ns;
	e->se_seq = seq;
	e->se_vlen = vlen;
	memcpy(e + 1, key, klen);
	g->sum_len += n;
	return 0;
}

/* Open a batch at block blk of the active segment g (its header block is
 * counted, not yet written).  NULL: out of memory. */
static struct kvp_sreq *
kvp_batch_open(struct kvp_ssd *s, struct kvp_sseg *g, uint64_t blk)
{
	struct kvp_sreq *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->op = KVP_SSD_OP_BATCH;
	b->hdr = kvp_aligned(B);
	b->biov = calloc(KVP_SSD_BATCH_IOV, sizeof(*b->biov));
	if (!b->hdr || !b->biov) {
		free(b->hdr);
		free(b->biov);
		free(b);
		return NULL;
	}
	b->seg = g;
	b->bblk = blk;
	b->bnblocks = 1;
	b->bused = sizeof(struct kvp_ssd_batch_hdr);
	b->biov[0].iov_base = b->hdr;
	b->biov[0].iov_len = B;
	b->nbiov = 1;
	b->bbytes = B;
	s->batch = b;
	return b;
}

/* A batch's write is over (status in b->status): each record in it
 * completes with that status; the batch goes.  mu held on the thread
 * path. */
void
kvp_batch_finish(struct kvp_ssd *s, struct kvp_sreq *b)
{
	struct kvp_sreq *m = b->mhead, *next;

	kvp_crashpoint(A_SSD_BATCH_WRITTEN);
	if (!b->status) {
		s->dc.batches++;
		s->dc.dev_write_bytes += b->bbytes;
	}
	for (; m; m = next) {
		next = m->mnext;
		if (!m->status)
			m->status = b->status;
		if (m == b->mhead && !b->status && s->hc && !m->hdr &&
		    b->seg->version >= 3) {
			/* the header block goes to the cache when the poll
			 * hands this record back (on the tier thread: this
			 * may be a worker's) */
			m->hdr = b->hdr;
			b->hdr = NULL;
			m->hc_fill = true;
			m->hc_blk = (uint32_t)b->bblk;
		}
		kvp_req_done(s, m);
	}
	kvp_req_free(b);
}

/* Close the open batch: finish its header block and queue its write (one
 * WRITEV of the header block and every value).  Its records complete when
 * it does (an error that keeps it from being queued completes them now
 * with -EIO). */
void
kvp_batch_close(struct kvp_ssd *s)
{
	struct kvp_sreq *b = s->batch;
	int rc;

	if (!b)
		return;
	s->batch = NULL;
	kvp_bhdr_finish(b->hdr, b->seg->id, b->bblk, b->bnblocks, b->bnrec,
			b->bused);
	kvp_crashpoint(A_SSD_BATCH_BUILT);
	kvp_guard(s, b, true);
	rc = kvp_queue_rw(s, b, 0, true, b->biov, b->nbiov, b->bblk * B);
	if (rc) {
		b->status = -EIO;
		s->st.io_errors++;
		if (s->uring) {
			kvp_batch_finish(s, b);
			return;
		}
	}
	kvp_guard(s, b, false);
}

/*
 * Room in the open batch (opened here if there is none) for one record:
 * an entry of esz header bytes, vblocks value blocks, niov iovecs, a
 * summary entry for a key of klen bytes.  A batch that cannot take it is
 * closed first; a segment that cannot take it is sealed and a new one
 * started.  *delta: where the value starts, in blocks after the header.
 */
static int
kvp_batch_room(struct kvp_ssd *s, size_t esz, uint64_t vblocks, unsigned niov,
	       unsigned klen, unsigned *delta)
{
	int rc, tries;

	for (tries = 0; tries < 2; tries++) {
		struct kvp_sreq *b = s->batch;
		struct kvp_sseg *g = s->active;

		if (b && (b->seg != g || b->bused + esz > B ||
			  b->bnrec >= UINT16_MAX ||
			  (vblocks && b->bnblocks > KVP_SSD_DELTA_MAX) ||
			  b->nbiov + niov > KVP_SSD_BATCH_IOV)) {
			kvp_batch_close(s);
			b = NULL;
		}
		if (g) {
			uint64_t need = (b ? 0 : 1) + vblocks, sum;

			sum = kvp_rup(g->sum_len + kvp_sum_ent_size(klen)) / B;
			if (g->wpos + need + sum + 1 <= g->size / B) {
				if (!b) {
					b = kvp_batch_open(s, g, g->wpos);
					if (!b)
						return -ENOMEM;
					g->wpos++;
				}
				*delta = vblocks ? (unsigned)b->bnblocks : 0;
				g->wpos += vblocks;
				b->bnblocks += vblocks;
				return 0;
			}
		}
		kvp_batch_close(s); /* before its segment is sealed */
		rc = kvp_seg_new(s, 1 + vblocks, klen);
		if (rc)
			return rc;
	}
	return -E2BIG;
}

/* Queue a value record (src) or a tombstone (target: the location of
 * the value record it deletes, written where a value's length goes) into
 * the open batch. */
static int
kvp_queue_record(struct kvp_ssd *s, uint64_t tag, uint8_t type, uint64_t ns,
		 const void *key, uint32_t klen, const struct iovec *src,
		 unsigned nsrc, unsigned flags, uint64_t target)
{
	bool zero_copy = s->direct ? (flags & KVP_SSD_SRC_PADDED) : true;
	uint64_t vlen = 0, vblocks;
	uint32_t nchunks = 0;
	unsigned k, niov = 0, delta = 0;
	struct kvp_sreq *r, *b;
	struct kvp_sseg *g;
	size_t esz;
	int rc;

	if (!key || klen == 0 || klen > KVP_SSD_KEY_MAX ||
	    nsrc > KVP_SSD_MAX_IOV - 2)
		return -EINVAL;
	for (k = 0; k < nsrc; k++) {
		vlen += src[k].iov_len;
		if (((uintptr_t)src[k].iov_base % B) ||
		    (k + 1 < nsrc && src[k].iov_len % B))
			zero_copy = false;
	}
	if (type == KVP_SSD_REC_VALUE &&
	    (vlen == 0 || vlen > kvp_ssd_max_value_agent(s)))
		return vlen ? -E2BIG : -EINVAL;
	if (type != KVP_SSD_REC_VALUE)
		vlen = 0;
	else
		kvp_chunk_shift(vlen, &nchunks);
	esz = kvp_bent_size(klen, nchunks);
	vblocks = kvp_rup(vlen) / B;
	if (vlen)
		/* buffered I/O: a zero pad to the next block */
		niov = zero_copy ? nsrc + (!s->direct && vlen % B) : 1;
	r = kvp_req_new(s, tag,
			type == KVP_SSD_REC_VALUE ? KVP_SSD_OP_WRITE :
						    KVP_SSD_OP_TOMBSTONE,
			false);
	if (!r)
		return -EBUSY;
	if (vlen && !zero_copy) {
		/* before the room is taken: nothing can fail after it */
		unsigned char *c = kvp_aligned(kvp_rup(vlen));
		uint64_t at = 0;

		if (!c) {
			s->outstanding--;
			kvp_req_free(r);
			return -ENOMEM;
		}
		for (k = 0; k < nsrc; k++) {
			memcpy(c + at, src[k].iov_base, src[k].iov_len);
			at += src[k].iov_len;
		}
		r->bounce = c;
	}
	rc = kvp_batch_room(s, esz, vblocks, niov, klen, &delta);
	if (rc) {
		s->outstanding--;
		kvp_req_free(r);
		return rc;
	}
	b = s->batch;
	g = b->seg;
	g->dirty = true;
	r->seg = g;
	r->seq = s->next_seq++;
	r->vlen = vlen;
	r->loc = KVP_SSD_LOC(g->id, KVP_SSD_LOW3(b->bblk, delta));
	if (r->bounce)
		s->st.copied_bytes += vlen;
	kvp_bent_fill((unsigned char *)b->hdr + b->bused, type, delta, ns,
		      r->seq, key, klen, vlen, target, src, nsrc);
	b->bused += (uint32_t)esz;
	b->bnrec++;
	if (vlen && zero_copy) {
		for (k = 0; k < nsrc; k++) {
			struct iovec *v = &b->biov[b->nbiov++];

			v->iov_base = src[k].iov_base;
			v->iov_len = k + 1 < nsrc || !s->direct ?
					     src[k].iov_len :
					     kvp_rup(src[k].iov_len);
		}
		if (!s->direct && vlen % B) {
			b->biov[b->nbiov].iov_base = s->zero;
			b->biov[b->nbiov++].iov_len = kvp_rup(vlen) - vlen;
		}
	} else if (vlen) {
		b->biov[b->nbiov].iov_base = r->bounce;
		b->biov[b->nbiov++].iov_len = kvp_rup(vlen);
	}
	b->bbytes += vblocks * B;
	kvp_sum_append(g, type, KVP_SSD_LOC_BLOCK(r->loc), ns, r->seq,
		       type == KVP_SSD_REC_VALUE ? vlen : target, key, klen);
	g->nrecs++;
	g->wr_inflight++; /* until its completion is polled */
	g->live_bytes += kvp_ssd_record_bytes(vlen);
	if (r->seq > g->max_seq)
		g->max_seq = r->seq;
	if (b->mtail)
		b->mtail->mnext = r;
	else
		b->mhead = r;
	b->mtail = r;
	return 0;
}

int
kvp_ssd_write_agent(struct kvp_ssd *s, uint64_t tag, uint64_t ns,
		    const void *key, uint32_t klen, const struct iovec *src,
		    unsigned nsrc, unsigned flags)
{
	return kvp_queue_record(s, tag, KVP_SSD_REC_VALUE, ns, key, klen, src,
				nsrc, flags, 0);
}

int
kvp_ssd_tombstone_agent(struct kvp_ssd *s, uint64_t tag, uint64_t ns,
			const void *key, uint32_t klen, uint64_t target)
{
	if (!target)
		return -EINVAL;
	return kvp_queue_record(s, tag, KVP_SSD_REC_TOMBSTONE, ns, key, klen,
				NULL, 0, 0, target);
}
