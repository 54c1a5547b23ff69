/* SPDX-License-Identifier: MIT */
/*
 * ssd_io.c - the SSD store's requests and I/O (design 5): io_uring, or
 * the pread/pwrite worker pair where it is refused; reads and their
 * verification (design 6), submit and poll, the completion eventfd,
 * registered buffers.  Design in tiers/ssd_int.h.
 */
#include "tiers/ssd_int.h"

/* ---- requests ---- */

struct kvp_sreq *
kvp_req_new(struct kvp_ssd *s, uint64_t tag, uint32_t op, bool need_hdr)
{
	struct kvp_sreq *r;

	if (s->cfg.max_requests && s->outstanding >= s->cfg.max_requests)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->tag = tag;
	r->op = op;
	r->hdr = need_hdr ? kvp_aligned(B) : NULL;
	if (need_hdr && !r->hdr) {
		free(r);
		return NULL;
	}
	s->outstanding++;
	return r;
}

void
kvp_req_free(struct kvp_sreq *r)
{
	free(r->hdr);
	free(r->bounce);
	free(r->biov);
	free(r);
}

void
kvp_req_done(struct kvp_ssd *s, struct kvp_sreq *r)
{
	r->next = NULL;
	if (s->done_tail)
		s->done_tail->next = r;
	else
		s->done_head = r;
	s->done_tail = r;
}

/* A completion is ready without the ring's own signal (the pread path,
 * an error before any I/O): tell kvp_ssd_set_eventfd_agent's eventfd. */
static void
kvp_efd_signal(struct kvp_ssd *s)
{
	uint64_t one = 1;

	if (s->efd1 && write(s->efd1 - 1, &one, sizeof(one)) < 0)
		(void)0; /* a full counter is signalled anyway */
}

/* Run one transfer now (the pread/pwrite path). */
static ssize_t
kvp_sync_rw(int fd, bool wr, const struct iovec *iov, unsigned n, uint64_t off)
{
	ssize_t got = wr ? pwritev(fd, iov, (int)n, (off_t)off) :
			   preadv(fd, iov, (int)n, (off_t)off);

	return got < 0 ? -errno : got;
}

static int kvp_finish_read(struct kvp_ssd *s, struct kvp_sreq *r);

/* Thread path (mu held): one sub-operation of r is over. */
static void
kvp_sub_done_locked(struct kvp_ssd *s, struct kvp_sreq *r)
{
	if (--r->nsub)
		return;
	if (r->op == KVP_SSD_OP_BATCH) {
		kvp_batch_finish(s, r); /* frees r */
	} else {
		if (r->op == KVP_SSD_OP_READ && !r->status)
			r->status = kvp_finish_read(s, r);
		kvp_req_done(s, r);
	}
	pthread_cond_broadcast(&s->cv_done);
	kvp_efd_signal(s);
}

/*
 * Thread path (mu held): take the job at the head of the queue into
 * run[0], and while no read came for KVP_SSD_READ_RECENT_NS the write
 * parts after it that continue it (same batch, the next offset), up to
 * max jobs and KVP_SSD_BATCH_IOV iovecs: with no reader about a worker
 * writes as deep as a whole batch did (a part a call cut demotion's
 * queue on the device), and a read that comes finds one part ahead.
 * Returns how many jobs it took; *niov their iovecs.
 */
#define KVP_SSD_COALESCE 16u
static unsigned
kvp_jobs_take_locked(struct kvp_ssd *s, struct kvp_job **run, unsigned max,
		     unsigned *niov)
{
	struct kvp_job *j = s->jobs_head;
	unsigned n = 0;
	bool deep = j->wr && kvp_now_ns(CLOCK_MONOTONIC) - s->rd_last_ns >=
				     KVP_SSD_READ_RECENT_NS;

	*niov = 0;
	do {
		run[n++] = j;
		*niov += j->n;
		s->jobs_head = j->next;
		if (s->jobs_rtail == j)
			s->jobs_rtail = NULL;
		j = s->jobs_head;
	} while (deep && j && n < max && j->wr && j->r == run[n - 1]->r &&
		 j->off == run[n - 1]->off + run[n - 1]->total &&
		 *niov + j->n <= KVP_SSD_BATCH_IOV);
	if (!s->jobs_head)
		s->jobs_tail = NULL;
	return n;
}

void *
kvp_worker(void *arg)
{
	struct kvp_ssd *s = arg;
	/* the iovecs of parts written together (NULL: a part at a time) */
	struct iovec *iov = malloc(KVP_SSD_BATCH_IOV * sizeof(*iov));

	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct kvp_job *run[KVP_SSD_COALESCE], *j;
		unsigned n, k, niov, at = 0;
		uint64_t total = 0;
		ssize_t got;

		/* while reads come (one queued in the last 5 ms), writes
		 * leave a worker free for them (reads first): at most
		 * write_slots at once; the one writing wakes us when done */
		while ((!s->jobs_head ||
			(s->jobs_head->wr && s->writing >= s->write_slots &&
			 kvp_now_ns(CLOCK_MONOTONIC) - s->rd_last_ns <
				 KVP_SSD_READ_RECENT_NS)) &&
		       !s->stopping)
			pthread_cond_wait(&s->cv_work, &s->mu);
		if (!s->jobs_head)
			break;
		n = kvp_jobs_take_locked(s, run, iov ? KVP_SSD_COALESCE : 1,
					 &niov);
		j = run[0];
		s->writing += j->wr;
		pthread_mutex_unlock(&s->mu);
		for (k = 0; k < n; k++) {
			if (n > 1)
				memcpy(iov + at, run[k]->iov,
				       run[k]->n * sizeof(*iov));
			at += run[k]->n;
			total += run[k]->total;
		}
		got = kvp_sync_rw(j->r->seg->fd, j->wr, n > 1 ? iov : j->iov,
				  n > 1 ? niov : j->n, j->off);
		pthread_mutex_lock(&s->mu);
		if (got != (ssize_t)total && !j->r->status) {
			/* one request: the jobs taken together are its */
			j->r->status = got == -ENOSPC ? -ENOSPC : -EIO;
			s->dc.io_errors++;
		}
		if (j->wr) {
			s->dc.write_parts += n; /* stat */
			s->writing--;
			/* a write waiting for this worker may go */
			pthread_cond_signal(&s->cv_work);
		}
		for (k = 0; k < n; k++) {
			/* the last job's completion may free the request */
			kvp_sub_done_locked(s, run[k]->r);
			free(run[k]->part);
			free(run[k]);
		}
	}
	pthread_mutex_unlock(&s->mu);
	free(iov);
	return NULL;
}

/* Thread path: hold a request open while its sub-operations are queued
 * (a guard count), then let go. */
void
kvp_guard(struct kvp_ssd *s, struct kvp_sreq *r, bool take)
{
	if (s->uring)
		return;
	pthread_mutex_lock(&s->mu);
	if (take)
		r->nsub++;
	else
		kvp_sub_done_locked(s, r);
	pthread_mutex_unlock(&s->mu);
}

/* The registered buffer that holds all of iov (n == 1), or -1. */
static int
kvp_reg_index(const struct kvp_ssd *s, const struct iovec *iov, unsigned n)
{
	unsigned k;

	if (!s->registered || n != 1)
		return -1;
	for (k = 0; k < s->nreg; k++)
		if ((char *)iov[0].iov_base >= (char *)s->reg[k].iov_base &&
		    (char *)iov[0].iov_base + iov[0].iov_len <=
			    (char *)s->reg[k].iov_base + s->reg[k].iov_len)
			return (int)k;
	return -1;
}

/* An SQE, the queued ones submitted first if the ring is full; NULL if
 * there is still none. */
static struct io_uring_sqe *
kvp_sqe(struct kvp_ssd *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

	if (!sqe) {
		io_uring_submit(&s->ring);
		s->queued = 0;
		sqe = io_uring_get_sqe(&s->ring);
	}
	return sqe;
}

/*
 * The first 'len' bytes of part p (whole blocks, less than its length)
 * as a part of their own, ahead of it: p keeps the rest, and the batch
 * one more sub-operation.  NULL: out of memory (p is left whole).
 */
static struct kvp_wpart *
kvp_wr_carve(struct kvp_wpart *p, uint64_t len)
{
	struct kvp_wpart *q;
	unsigned cnt = 0, k;
	uint64_t acc = 0;

	while (acc < len)
		acc += p->iov[cnt++].iov_len;
	q = malloc(sizeof(*q) + cnt * sizeof(q->iov[0]));
	if (!q)
		return NULL;
	q->r = p->r;
	q->next = NULL;
	q->off = p->off;
	q->len = len;
	q->n = cnt;
	memcpy(q->iov, p->iov, cnt * sizeof(q->iov[0]));
	/* the last slice may be cut: q takes its head, p its tail */
	q->iov[cnt - 1].iov_len -= (size_t)(acc - len);
	k = acc > len ? cnt - 1 : cnt;
	if (acc > len) {
		p->iov[k].iov_base =
			(char *)p->iov[k].iov_base + q->iov[cnt - 1].iov_len;
		p->iov[k].iov_len = (size_t)(acc - len);
	}
	memmove(p->iov, p->iov + k, (p->n - k) * sizeof(p->iov[0]));
	p->n -= k;
	p->off += len;
	p->len -= len;
	p->r->nsub++;
	return q;
}

/*
 * The write pacer: send waiting parts while the device holds less than
 * its write depth, and always one when it holds none, so that the queue
 * drains.  While reads are on the device or were less than
 * KVP_SSD_READ_RECENT_NS ago, one write at a time: a part while a batch
 * keeps more than KVP_SSD_FEW_READS reads there (its own queue is what
 * each of them waits behind); otherwise a piece, the head of a part,
 * wr_piece bytes at most (the part's rest stays at the head of the
 * queue), and none joins the few reads on the device unless none went for
 * cfg.write_hold_ns: a get at a time finds at most one piece ahead of it
 * (its tail behind writes on a virtual disk: docs/performance.md, "Writes
 * in pieces while reads are about").  A read is never queued here: it
 * goes to the device at once (rule 9).  Invariant: parts wait only while
 * a write or a read is on the device (its completion calls this again:
 * the reap in kvp_ssd_poll_agent).
 */
static void
kvp_wr_pump(struct kvp_ssd *s)
{
	struct kvp_wpart *p;
	uint64_t now = s->wq_head ? kvp_now_ns(CLOCK_MONOTONIC) : 0;
	bool reading =
		s->rd_dev ||
		(s->wq_head && now - s->rd_last_ns < KVP_SSD_READ_RECENT_NS);
	bool few = reading && s->rd_dev <= KVP_SSD_FEW_READS;

	while ((p = s->wq_head)) {
		uint64_t cap = s->cfg.write_depth;
		struct io_uring_sqe *sqe;
		int bi;

		/* reads on the device, or one a moment ago (the next comes
		 * soon: a get at a time, a batch's next part): one write */
		if (reading)
			cap = few ? s->wr_piece : s->wr_part;
		/* a read or two on the device: no write joins them, unless
		 * none went for cfg.write_hold_ns (reads that never pause
		 * slow demotion to a piece that often, never stop it) */
		if (few && s->rd_dev &&
		    now - s->wr_last_ns < s->cfg.write_hold_ns) {
			s->st.write_held_read++; /* stat */
			break;
		}
		if (s->wr_dev_bytes &&
		    s->wr_dev_bytes + (p->len < cap ? p->len : cap) > cap)
			break;
		if (few && p->len > s->wr_piece) {
			struct kvp_wpart *q = kvp_wr_carve(p, s->wr_piece);

			if (q) {
				q->next = p;
				s->wq_head = q;
				s->wq_len++;
				p = q;
				s->st.write_pieces++; /* stat */
			}
		}
		sqe = kvp_sqe(s);
		if (!sqe)
			break;
		bi = kvp_reg_index(s, p->iov, p->n);
		if (bi >= 0) {
			io_uring_prep_write_fixed(sqe, p->r->seg->fd,
						  p->iov[0].iov_base,
						  (unsigned)p->iov[0].iov_len,
						  p->off, bi);
			s->st.fixed_ops++;
		} else {
			io_uring_prep_writev(sqe, p->r->seg->fd, p->iov, p->n,
					     p->off);
		}
		io_uring_sqe_set_data64(sqe,
					(uint64_t)(uintptr_t)p | KVP_UD_PART);
		s->wq_head = p->next;
		if (!s->wq_head)
			s->wq_tail = NULL;
		s->wq_len--;
		s->wr_dev_bytes += p->len;
		s->wr_last_ns = now;
		if (s->wr_dev_bytes > s->st.write_dev_peak)
			s->st.write_dev_peak = s->wr_dev_bytes; /* stat */
		s->queued++;
		s->st.write_parts++;
	}
}

/*
 * A batch's write (iov, n at off) cut into parts of at most s->wr_part
 * bytes, at multiples of it from off (block aligned, as every iovec of a
 * batch is), in order from *headp (linked by next; *tailp the last).
 * Returns their count, or -ENOMEM with none left.
 */
static int
kvp_wr_split(const struct kvp_ssd *s, struct kvp_sreq *r,
	     const struct iovec *iov, unsigned n, uint64_t off,
	     struct kvp_wpart **headp, struct kvp_wpart **tailp)
{
	struct kvp_wpart *head = NULL, *tail = NULL, *p;
	unsigned k = 0, nparts = 0;
	size_t at = 0; /* bytes of iov[k] already in a part */

	while (k < n) {
		unsigned j = k, cnt = 0;
		size_t a = at;
		uint64_t len = 0;

		/* count the slices this part takes */
		while (j < n && len < s->wr_part) {
			size_t take = iov[j].iov_len - a;

			if (take > s->wr_part - len)
				take = (size_t)(s->wr_part - len);
			len += take;
			cnt++;
			a += take;
			if (a == iov[j].iov_len) {
				j++;
				a = 0;
			}
		}
		if (!cnt)
			break;
		p = malloc(sizeof(*p) + cnt * sizeof(p->iov[0]));
		if (!p) {
			while (head) {
				p = head->next;
				free(head);
				head = p;
			}
			return -ENOMEM;
		}
		p->r = r;
		p->next = NULL;
		p->off = off;
		p->len = len;
		p->n = cnt;
		for (cnt = 0; cnt < p->n; cnt++) {
			size_t take = iov[k].iov_len - at;

			if (take > len)
				take = (size_t)len;
			p->iov[cnt].iov_base = (char *)iov[k].iov_base + at;
			p->iov[cnt].iov_len = take;
			len -= take;
			at += take;
			if (at == iov[k].iov_len) {
				k++;
				at = 0;
			}
		}
		off += p->len;
		if (tail)
			tail->next = p;
		else
			head = p;
		tail = p;
		nparts++;
	}
	*headp = head;
	*tailp = tail;
	return (int)nparts;
}

/*
 * Queue a batch's write to the pacer in parts (kvp_wr_split).  All parts
 * or none: -ENOMEM leaves nothing queued.
 */
static int
kvp_queue_write_parts(struct kvp_ssd *s, struct kvp_sreq *r,
		      const struct iovec *iov, unsigned n, uint64_t off)
{
	struct kvp_wpart *head, *tail;
	int nparts = kvp_wr_split(s, r, iov, n, off, &head, &tail);

	if (nparts < 0)
		return nparts;
	r->nsub += (unsigned)nparts;
	if (!head)
		return 0;
	if (s->wq_tail)
		s->wq_tail->next = head;
	else
		s->wq_head = head;
	s->wq_tail = tail;
	s->wq_len += (unsigned)nparts;
	kvp_wr_pump(s);
	/* stat: this batch's parts that wait for the device */
	s->st.write_parts_held +=
		s->wq_len < (unsigned)nparts ? s->wq_len : (unsigned)nparts;
	return 0;
}

/*
 * The pread/pwrite path: a batch's write as one job per part, behind the
 * jobs queued (a read that comes waits for the part a worker is writing,
 * not for a whole batch: reads first, rule 9).  All or none.
 */
static int
kvp_queue_write_jobs(struct kvp_ssd *s, struct kvp_sreq *r,
		     const struct iovec *iov, unsigned n, uint64_t off)
{
	struct kvp_wpart *head, *tail, *p, *next;
	struct kvp_job *jh = NULL, *jt = NULL, *j;
	int nparts = kvp_wr_split(s, r, iov, n, off, &head, &tail);

	if (nparts <= 0)
		return nparts;
	for (p = head; p; p = p->next) {
		j = calloc(1, sizeof(*j));
		if (!j) {
			for (j = jh; j; j = jh) {
				jh = j->next;
				free(j);
			}
			for (p = head; p; p = next) {
				next = p->next;
				free(p);
			}
			return -ENOMEM;
		}
		j->r = r;
		j->wr = true;
		j->iov = p->iov;
		j->n = p->n;
		j->off = p->off;
		j->total = p->len;
		j->part = p;
		if (jt)
			jt->next = j;
		else
			jh = j;
		jt = j;
	}
	pthread_mutex_lock(&s->mu);
	r->nsub += (unsigned)nparts;
	if (s->jobs_tail)
		s->jobs_tail->next = jh;
	else
		s->jobs_head = jh;
	s->jobs_tail = jt;
	pthread_cond_broadcast(&s->cv_work);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

/* Queue sub-operation idx of r.  With io_uring a write goes to the pacer
 * (kvp_queue_write_parts), a read to the device; without, to the workers
 * (a write's parts behind the queue, a read ahead of every write). */
int
kvp_queue_rw(struct kvp_ssd *s, struct kvp_sreq *r, unsigned idx, bool wr,
	     const struct iovec *iov, unsigned n, uint64_t off)
{
	uint64_t total = 0;
	unsigned k;

	for (k = 0; k < n; k++)
		total += iov[k].iov_len;
	r->want[idx] = total;
	if (!s->uring && wr)
		return kvp_queue_write_jobs(s, r, iov, n, off);
	if (!s->uring) {
		struct kvp_job *j = calloc(1, sizeof(*j));
		struct kvp_job **at;

		if (!j)
			return -ENOMEM;
		j->r = r;
		j->idx = idx;
		j->iov = iov;
		j->n = n;
		j->off = off;
		j->total = total;
		pthread_mutex_lock(&s->mu);
		r->nsub++;
		/* a read goes after the reads queued, ahead of every write
		 * queued (reads first, as on the io_uring path) */
		at = s->jobs_rtail ? &s->jobs_rtail->next : &s->jobs_head;
		j->next = *at;
		*at = j;
		s->jobs_rtail = j;
		s->rd_last_ns = kvp_now_ns(CLOCK_MONOTONIC);
		if (!j->next)
			s->jobs_tail = j;
		pthread_cond_signal(&s->cv_work);
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	if (wr)
		return kvp_queue_write_parts(s, r, iov, n, off);
	{
		struct io_uring_sqe *sqe = kvp_sqe(s);
		int bi = kvp_reg_index(s, iov, n);

		if (!sqe)
			return -EBUSY;
		if (bi >= 0) {
			io_uring_prep_read_fixed(sqe, r->seg->fd,
						 iov[0].iov_base,
						 (unsigned)iov[0].iov_len, off,
						 bi);
			s->st.fixed_ops++;
		} else {
			io_uring_prep_readv(sqe, r->seg->fd, iov, n, off);
		}
		io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)r | idx);
		r->nsub++;
		s->rd_dev++;
		s->rd_last_ns = kvp_now_ns(CLOCK_MONOTONIC);
		s->queued++;
	}
	return 0;
}

int
kvp_ssd_read_agent(struct kvp_ssd *s, uint64_t tag,
		   const struct kvp_ssd_read *rd)
{
	struct kvp_sseg *g;
	struct kvp_sreq *r;
	uint64_t len, extent, astart, have = 0, hblk, vblk;
	uint32_t dst_off;
	unsigned k;
	int rc;

	if (!rd || !rd->vlen || rd->off > rd->vlen || rd->ndst == 0 ||
	    rd->ndst > KVP_SSD_MAX_IOV || !rd->dst)
		return -EINVAL;
	g = kvp_seg_find(s, KVP_SSD_LOC_SEG(rd->loc));
	if (!g)
		return -ENOENT;
	len = rd->len ? rd->len : rd->vlen - rd->off;
	if (len > rd->vlen - rd->off)
		return -EINVAL;
	extent = kvp_ssd_extent(rd->off, len, &dst_off);
	astart = rd->off - dst_off;
	if (g->version >= 3) {
		/* the batch header, and the value delta blocks after it */
		hblk = KVP_SSD_LOC_HDR(rd->loc);
		vblk = KVP_SSD_LOC_VALUE(rd->loc);
		if (KVP_SSD_LOC_DELTA(rd->loc) == 0)
			return -EINVAL;
	} else {
		/* the record's own header block, the value after it */
		hblk = KVP_SSD_LOC_BLOCK(rd->loc);
		vblk = hblk + 1;
	}
	if (hblk == 0 || vblk + (astart + extent) / B > g->size / B)
		return -EINVAL;
	r = kvp_req_new(s, tag, KVP_SSD_OP_READ, true);
	if (!r)
		return -EBUSY;
	r->seg = g;
	r->fmt = g->version;
	r->rd = *rd;
	r->rd.len = len;
	r->dst_off = dst_off;
	if (rd->key && rd->klen <= KVP_SSD_KEY_MAX) {
		memcpy(r->key, rd->key, rd->klen);
		r->rd.key = r->key;
	}
	/* the destination, trimmed to the extent */
	for (k = 0; k < rd->ndst && have < extent; k++) {
		if ((uintptr_t)rd->dst[k].iov_base % B) {
			kvp_req_free(r);
			s->outstanding--;
			return -EINVAL;
		}
		r->dst[k] = rd->dst[k];
		if (r->dst[k].iov_len > extent - have)
			r->dst[k].iov_len = (size_t)(extent - have);
		have += r->dst[k].iov_len;
	}
	r->ndst = k;
	if (have < extent) {
		kvp_req_free(r);
		s->outstanding--;
		return -EINVAL;
	}
	r->rd.dst = r->dst;
	r->rd.ndst = r->ndst;
	r->wiov[0].iov_base = r->hdr;
	r->wiov[0].iov_len = B;
	r->hc_blk = (uint32_t)hblk;
	/* format 3: a batch header the cache holds is checked as one read
	 * from disk would be (kvp_finish_read), and the device reads the
	 * extent only */
	r->hc_hit = g->version >= 3 && extent &&
		    kvp_hc_get(s->hc, g->id, (uint32_t)hblk, r->hdr);
	kvp_guard(s, r, true);
	if (r->hc_hit) {
		rc = kvp_queue_rw(s, r, 1, false, r->dst, r->ndst,
				  vblk * B + astart);
	} else if (astart == 0 && vblk == hblk + 1 &&
		   r->ndst + 1 < KVP_SSD_MAX_IOV) {
		/* the extent starts at the value, which follows the header:
		 * header and bytes are one contiguous transfer, one device
		 * operation */
		memcpy(&r->wiov[1], r->dst, r->ndst * sizeof(r->dst[0]));
		rc = kvp_queue_rw(s, r, 0, false, r->wiov, r->ndst + 1,
				  hblk * B);
	} else {
		rc = kvp_queue_rw(s, r, 0, false, r->wiov, 1, hblk * B);
		if (!rc && extent)
			rc = kvp_queue_rw(s, r, 1, false, r->dst, r->ndst,
					  vblk * B + astart);
	}
	if (rc) {
		/* what was queued completes and reports the error */
		r->status = -EIO;
		if (s->uring && r->nsub == 0) {
			kvp_req_done(s, r); /* nothing was queued */
			kvp_efd_signal(s);
		}
	}
	s->st.dev_read_bytes += (r->hc_hit ? 0 : B) + extent;
	if (g->version >= 3 && r->hc_hit)
		s->st.hdr_cached_reads++;
	else if (g->version >= 3)
		s->st.hdr_device_reads++;
	kvp_guard(s, r, false);
	return 0;
}

/* Verify the chunks of a read's extent that it fully covers against
 * crc[] (the value is vlen bytes in chunks of 1 << sh). */
static bool
kvp_read_chunks_ok(struct kvp_ssd *s, struct kvp_sreq *r, const uint32_t *crc,
		   unsigned sh, uint64_t vlen)
{
	uint64_t off = r->rd.off, len = r->rd.len, cs = 1ull << sh, c;
	uint64_t nch = (vlen + cs - 1) / cs;

	for (c = off / cs; c < nch && c * cs < off + len; c++) {
		uint64_t a = c * cs, e = a + cs < vlen ? a + cs : vlen;
		uint64_t pos = r->dst_off + (a - off), left = e - a;
		uint32_t v = 0;
		unsigned k = 0;

		if (a < off || e > off + len)
			continue; /* partly covered: not verifiable */
		/* walk the destination iovecs from byte pos */
		while (k < r->ndst && pos >= r->dst[k].iov_len)
			pos -= r->dst[k++].iov_len;
		while (left && k < r->ndst) {
			size_t take = r->dst[k].iov_len - pos;
			if (take > left)
				take = (size_t)left;
			v = kvp_crc32c(v, (char *)r->dst[k].iov_base + pos,
				       take);
			left -= take;
			pos = 0;
			k++;
		}
		if (left || v != crc[c])
			return false;
		s->dc.chunks_verified++;
	}
	return true;
}

/* Verify a read: its header (the batch's, format 3: CRC, where it was
 * written, the entry at the value's distance), the record's identity and
 * the chunks its extent fully covers. */
static int
kvp_finish_read(struct kvp_ssd *s, struct kvp_sreq *r)
{
	const struct kvp_ssd_rec_hdr *h = r->hdr;
	uint64_t cs, nch;
	uint32_t saved;
	size_t koff;

	if (r->fmt >= 3) {
		const unsigned char *key;
		const uint32_t *crc;
		struct kvp_ssd_bent e;

		if (!kvp_bhdr_valid(r->hdr, KVP_SSD_LOC_SEG(r->rd.loc),
				    KVP_SSD_LOC_HDR(r->rd.loc), UINT32_MAX) ||
		    !kvp_bent_find(r->hdr, KVP_SSD_LOC_DELTA(r->rd.loc), &e,
				   &key, &crc) ||
		    e.be_vlen != r->rd.vlen)
			goto bad;
		if (r->rd.key &&
		    (e.be_ns != r->rd.ns || e.be_klen != r->rd.klen ||
		     memcmp(key, r->rd.key, r->rd.klen)))
			goto bad;
		if (!kvp_read_chunks_ok(s, r, crc, e.be_chunk_shift, e.be_vlen))
			goto bad;
		return 0;
	}
	if (h->rh_magic != KVP_SSD_MAGIC_REC ||
	    h->rh_version < KVP_SSD_FORMAT_MIN || h->rh_version > 2 ||
	    h->rh_len < sizeof(*h) || h->rh_len > B ||
	    h->rh_type != KVP_SSD_REC_VALUE ||
	    h->rh_seg_id != KVP_SSD_LOC_SEG(r->rd.loc) ||
	    h->rh_block != KVP_SSD_LOC_BLOCK(r->rd.loc) ||
	    h->rh_vlen != r->rd.vlen ||
	    h->rh_chunk_shift < KVP_SSD_CHUNK_SHIFT_MIN ||
	    h->rh_chunk_shift > 40)
		goto bad;
	saved = h->rh_crc;
	((struct kvp_ssd_rec_hdr *)r->hdr)->rh_crc = 0;
	if (kvp_crc32c(0, h, h->rh_len) != saved)
		goto bad;
	if (r->rd.key && (h->rh_ns != r->rd.ns || h->rh_klen != r->rd.klen ||
			  memcmp(h + 1, r->rd.key, r->rd.klen)))
		goto bad;
	cs = 1ull << h->rh_chunk_shift;
	nch = (h->rh_vlen + cs - 1) / cs;
	koff = (sizeof(*h) + h->rh_klen + 3) & ~(size_t)3;
	if (nch != h->rh_nchunks || koff + 4 * nch > h->rh_len)
		goto bad;
	if (!kvp_read_chunks_ok(s, r, (const uint32_t *)((char *)r->hdr + koff),
				h->rh_chunk_shift, h->rh_vlen))
		goto bad;
	return 0;
bad:
	s->dc.crc_errors++;
	return -EBADMSG;
}

int
kvp_ssd_submit_agent(struct kvp_ssd *s)
{
	int rc;

	kvp_batch_close(s);
	if (s->uring)
		kvp_wr_pump(s);
	if (!s->uring || !s->queued)
		return 0;
	rc = io_uring_submit(&s->ring);
	if (rc < 0)
		return rc;
	s->queued = 0;
	return 0;
}

static void
kvp_reap_cqe(struct kvp_ssd *s, struct io_uring_cqe *cqe)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	struct kvp_sreq *r;
	unsigned idx = (unsigned)(ud & 1);
	uint64_t want;

	if (ud & KVP_UD_PART) {
		/* a part of a batch's write: its bytes leave the device */
		struct kvp_wpart *p =
			(struct kvp_wpart *)(uintptr_t)(ud & ~(uint64_t)3);

		r = p->r;
		want = p->len;
		s->wr_dev_bytes -= p->len;
		free(p);
	} else {
		r = (struct kvp_sreq *)(uintptr_t)(ud & ~(uint64_t)3);
		if (!r)
			return;
		want = r->want[idx];
		if (r->op == KVP_SSD_OP_READ) {
			s->rd_dev--;
			s->rd_last_ns = kvp_now_ns(CLOCK_MONOTONIC);
		}
	}
	if (cqe->res < 0) {
		if (!r->status)
			r->status = cqe->res == -ENOSPC ? -ENOSPC : -EIO;
		s->dc.io_errors++;
	} else if ((uint64_t)cqe->res != want && !r->status) {
		r->status = -EIO; /* short transfer */
		s->dc.io_errors++;
	}
	if (--r->nsub)
		return;
	if (r->op == KVP_SSD_OP_BATCH) {
		kvp_batch_finish(s, r);
		return;
	}
	if (r->op == KVP_SSD_OP_READ && !r->status)
		r->status = kvp_finish_read(s, r);
	kvp_req_done(s, r);
}

int
kvp_ssd_poll_agent(struct kvp_ssd *s, struct kvp_ssd_cqe *out, unsigned max,
		   int timeout_ms)
{
	unsigned n = 0;
	bool synced = false;

	kvp_ssd_submit_agent(s);
	if (s->uring) {
		struct io_uring_cqe *cqe;

		if (!s->done_head && timeout_ms != 0 && s->outstanding) {
			struct __kernel_timespec ts = {
				timeout_ms / 1000,
				(long long)(timeout_ms % 1000) * 1000000
			};
			if (io_uring_wait_cqe_timeout(
				    &s->ring, &cqe,
				    timeout_ms > 0 ? &ts : NULL) == 0) {
				kvp_reap_cqe(s, cqe);
				io_uring_cqe_seen(&s->ring, cqe);
			}
		}
		while (io_uring_peek_cqe(&s->ring, &cqe) == 0) {
			kvp_reap_cqe(s, cqe);
			io_uring_cqe_seen(&s->ring, cqe);
		}
		/* writes left the device: the next parts go */
		kvp_wr_pump(s);
		if (s->queued && io_uring_submit(&s->ring) >= 0)
			s->queued = 0;
	}
	if (!s->uring) {
		pthread_mutex_lock(&s->mu);
		if (!s->done_head && timeout_ms != 0 && s->outstanding) {
			if (timeout_ms < 0) {
				pthread_cond_wait(&s->cv_done, &s->mu);
			} else {
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec +=
					(long)(timeout_ms % 1000) * 1000000L;
				ts.tv_sec += timeout_ms / 1000 +
					     ts.tv_nsec / 1000000000L;
				ts.tv_nsec %= 1000000000L;
				pthread_cond_timedwait(&s->cv_done, &s->mu,
						       &ts);
			}
		}
	}
	while (s->done_head && n < max) {
		struct kvp_sreq *r = s->done_head;

		if (r->op != KVP_SSD_OP_READ && !r->status &&
		    s->cfg.durability == KVP_SSD_STRICT && !synced) {
			/* batch-level durability: one fdatasync per poll
			 * for every segment written in the batch */
			unsigned k;
			for (k = 0; k < s->nsegs; k++)
				if (!s->segs[k]->sealed &&
				    fdatasync(s->segs[k]->fd))
					r->status = -EIO;
			s->st.fsyncs++;
			synced = true;
		}
		s->done_head = r->next;
		if (!s->done_head)
			s->done_tail = NULL;
		out[n].tag = r->tag;
		out[n].loc = r->op == KVP_SSD_OP_READ ? r->rd.loc : r->loc;
		out[n].seq = r->seq;
		out[n].status = r->status;
		out[n].dst_off = r->dst_off;
		out[n].op = r->op;
		out[n].flags = 0;
		if (r->op == KVP_SSD_OP_READ && r->fmt >= 3)
			out[n].flags = r->hc_hit ? KVP_SSD_CQE_HDR_CACHED :
						   KVP_SSD_CQE_HDR_READ;
		/* header blocks for the cache: a batch's just written (given
		 * to its first record), a read's checked from disk */
		if (!r->status && (r->hc_fill || (r->op == KVP_SSD_OP_READ &&
						  r->fmt >= 3 && !r->hc_hit)))
			kvp_hc_put(s->hc, r->seg->id, r->hc_blk, r->hdr);
		if (r->op != KVP_SSD_OP_READ)
			/* handed back: its segment may go now */
			r->seg->wr_inflight--;
		if (!r->status) {
			if (r->op == KVP_SSD_OP_READ) {
				s->st.reads++;
				s->st.read_bytes += r->rd.len;
			} else if (r->op == KVP_SSD_OP_WRITE) {
				s->st.writes++;
				s->st.write_bytes += r->vlen;
			} else {
				s->st.tombstones++;
			}
		} else if (r->status == -ENOSPC) {
			s->st.enospc++;
		}
		s->outstanding--;
		kvp_req_free(r);
		n++;
	}
	if (!s->uring)
		pthread_mutex_unlock(&s->mu);
	return (int)n;
}

unsigned
kvp_ssd_outstanding_agent(const struct kvp_ssd *s)
{
	return s->outstanding;
}

int
kvp_ssd_set_eventfd_agent(struct kvp_ssd *s, int efd)
{
	int rc = 0;

	if (s->uring)
		rc = io_uring_register_eventfd(&s->ring, efd);
	if (!rc) {
		pthread_mutex_lock(&s->mu);
		s->efd1 = efd + 1;
		pthread_mutex_unlock(&s->mu);
	}
	return rc;
}

int
kvp_ssd_register_buffers_agent(struct kvp_ssd *s, const struct iovec *regions,
			       unsigned n)
{
	uint64_t bytes = 0;
	unsigned k;
	int rc;

	if (!s->uring)
		return -EOPNOTSUPP;
	if (s->outstanding)
		return -EBUSY;
	if (n > KVP_SSD_REG_MAX)
		return -EINVAL;
	for (k = 0; k < n; k++) {
		if (regions[k].iov_len > KVP_SSD_REG_BYTES_MAX)
			return -EINVAL;
		bytes += regions[k].iov_len;
	}
	if (s->registered) {
		io_uring_unregister_buffers(&s->ring);
		s->registered = false;
	}
	rc = io_uring_register_buffers(&s->ring, regions, n);
	if (rc) {
		kvp_log(KVP_LOG_INFO, "ssd",
			"buffer registration refused (%s): plain "
			"reads and writes",
			strerror(-rc));
		return rc;
	}
	memcpy(s->reg, regions, n * sizeof(*regions));
	s->nreg = n;
	s->registered = true;
	kvp_log(KVP_LOG_INFO, "ssd",
		"%llu MiB registered in %u buffers: reads into them are "
		"READ_FIXED",
		(unsigned long long)(bytes >> 20), n);
	return 0;
}
