/* SPDX-License-Identifier: MIT */
/*
 * ssd_segs.c - the SSD store's segment files: names, opening (never
 * through a symlink), seal and start, making room (design 4: whole
 * segments, oldest first, tombstones rewritten, reinsertion), and the
 * calls the owner makes on segments (oldest, foreach, reinsert, drop,
 * info, usage).  Design in tiers/ssd_int.h.
 */
#include "tiers/ssd_int.h"

/* ---- segments ---- */

/* A segment file's name in the directory: exactly seg-%08x.kvs. */
static void
kvp_seg_name(uint32_t id, char *out, size_t cap)
{
	snprintf(out, cap, "seg-%08x.kvs", id);
}

/*
 * The id of a segment file's name, or 0 if the name is not exactly
 * "seg-" 8 lowercase hex digits ".kvs" with an id in
 * 1..KVP_SSD_SEG_ID_MAX.  (sscanf would take "seg-1.kvs", "seg- +1.kvx"
 * or "seg-ffffffff.kvs", whose id + 1 wraps to 0.)
 */
uint32_t
kvp_seg_name_id(const char *name)
{
	uint32_t id = 0;
	unsigned k;

	if (strncmp(name, "seg-", 4) || strlen(name) != 16 ||
	    strcmp(name + 12, ".kvs"))
		return 0;
	for (k = 4; k < 12; k++) {
		char ch = name[k];
		unsigned d;

		if (ch >= '0' && ch <= '9')
			d = (unsigned)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			d = (unsigned)(ch - 'a') + 10;
		else
			return 0;
		id = id << 4 | d;
	}
	return id <= KVP_SSD_SEG_ID_MAX ? id : 0;
}

/* Open a file of the store's directory (never through a symlink). */
int
kvp_open_file(struct kvp_ssd *s, const char *name, int flags)
{
	int fd = -1;

	flags |= O_NOFOLLOW | O_CLOEXEC;
	if (s->direct) {
		fd = openat(s->dirfd, name, flags | O_DIRECT, 0600);
		if (fd < 0 && errno == EINVAL) {
			kvp_log(KVP_LOG_WARN, "ssd",
				"O_DIRECT refused in %s: buffered I/O", s->dir);
			s->direct = false;
		}
	}
	if (fd < 0 && !s->direct)
		fd = openat(s->dirfd, name, flags, 0600);
	return fd < 0 ? -errno : fd;
}

/*
 * Is what we opened (or found) in the directory ours alone?  A regular
 * file owned by our effective uid, writable by no one else: anything else
 * was put there by someone else (or made writable to them), and serving
 * it would hand out values we never wrote.  0, or -EACCES with why in msg.
 */
int
kvp_file_ours(const struct stat *st, char *msg, size_t cap)
{
	if (!S_ISREG(st->st_mode)) {
		snprintf(msg, cap, "not a regular file");
		return -EACCES;
	}
	if (st->st_uid != geteuid()) {
		snprintf(msg, cap, "owned by uid %u, not this agent's uid %u",
			 (unsigned)st->st_uid, (unsigned)geteuid());
		return -EACCES;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(msg, cap, "writable by group or others (mode %04o)",
			 (unsigned)(st->st_mode & 07777));
		return -EACCES;
	}
	return 0;
}

struct kvp_sseg *
kvp_seg_find(const struct kvp_ssd *s, uint32_t id)
{
	unsigned k;

	for (k = 0; k < s->nsegs; k++)
		if (s->segs[k]->id == id)
			return s->segs[k];
	return NULL;
}

int
kvp_seg_insert(struct kvp_ssd *s, struct kvp_sseg *g)
{
	unsigned k;

	if (s->nsegs == s->capsegs) {
		unsigned cap = s->capsegs ? s->capsegs * 2 : 16;
		struct kvp_sseg **n = realloc(s->segs, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->segs = n;
		s->capsegs = cap;
	}
	for (k = s->nsegs; k > 0 && s->segs[k - 1]->id > g->id; k--)
		s->segs[k] = s->segs[k - 1];
	s->segs[k] = g;
	s->nsegs++;
	return 0;
}

void
kvp_seg_free(struct kvp_sseg *g)
{
	if (g->fd >= 0)
		close(g->fd);
	free(g->sum);
	free(g);
}

/* Write the active segment's summary and trailer: it is sealed. */
int
kvp_seg_seal(struct kvp_ssd *s, struct kvp_sseg *g)
{
	struct kvp_ssd_trailer *tr;
	uint64_t sum_off = g->wpos * B, sum_bytes = kvp_rup(g->sum_len);
	unsigned char *buf;
	int rc = 0;

	if (g->sealed)
		return 0;
	if (sum_off + sum_bytes > g->size - B)
		return -ENOSPC; /* cannot happen: space is reserved */
	buf = kvp_aligned(sum_bytes + B);
	if (!buf)
		return -ENOMEM;
	if (g->sum_len) /* a segment sealed empty (recovered with no records) */
		memcpy(buf, g->sum, g->sum_len);
	if (sum_bytes &&
	    pwrite(g->fd, buf, sum_bytes, (off_t)sum_off) != (ssize_t)sum_bytes)
		rc = -EIO;
	tr = (struct kvp_ssd_trailer *)(buf + sum_bytes);
	tr->st_magic = KVP_SSD_MAGIC_TRAIL;
	tr->st_version = KVP_SSD_FORMAT;
	tr->st_seg_id = g->id;
	tr->st_seg_size = g->size;
	tr->st_create_seq = g->create_seq;
	tr->st_sum_off = sum_off;
	tr->st_sum_len = g->sum_len;
	tr->st_max_seq = g->max_seq;
	tr->st_sum_crc = kvp_crc32c(0, g->sum, g->sum_len);
	tr->st_nrecs = (uint32_t)g->nrecs;
	tr->st_crc = 0;
	tr->st_crc = kvp_crc32c(0, tr, sizeof(*tr));
	if (!rc && pwrite(g->fd, buf + sum_bytes, B, (off_t)(g->size - B)) !=
			   (ssize_t)B)
		rc = -EIO;
	if (!rc && s->cfg.durability == KVP_SSD_STRICT && fdatasync(g->fd))
		rc = -EIO;
	free(buf);
	if (rc) {
		s->st.io_errors++;
		return rc;
	}
	g->sealed = true;
	free(g->sum);
	g->sum = NULL;
	g->sum_len = g->sum_cap = 0;
	s->st.segs_sealed++;
	if (s->active == g)
		s->active = NULL;
	return 0;
}

static int kvp_make_room(struct kvp_ssd *s);

/* Start a new active segment (sealing the old one, making room). */
static int
kvp_seg_start(struct kvp_ssd *s)
{
	struct kvp_ssd_file_hdr *fh;
	struct kvp_sseg *g;
	char name[32];
	int rc;

	if (s->next_id > KVP_SSD_SEG_ID_MAX) {
		/* never wrap: id 0 is no segment, and a lower id would sort
		 * as the oldest (reclaimed first, shadowed at recovery) */
		if (!s->ids_exhausted_logged)
			kvp_log(KVP_LOG_ERROR, "ssd",
				"no segment id left in %s (the highest, "
				"%08x, is taken): move the directory away or empty it",
				s->dir, KVP_SSD_SEG_ID_MAX);
		s->ids_exhausted_logged = true;
		return -ENOSPC;
	}
	kvp_batch_close(s); /* its records are in the segment sealed next */
	if (s->active) {
		rc = kvp_seg_seal(s, s->active);
		if (rc)
			return rc;
	}
	rc = kvp_make_room(s);
	if (rc)
		return rc;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->id = s->next_id++;
	g->size = s->cfg.segment_bytes;
	g->valid_end = g->size;
	g->create_seq = s->next_seq;
	g->version = KVP_SSD_FORMAT;
	g->wpos = 1;
	kvp_seg_name(g->id, name, sizeof(name));
	g->fd = kvp_open_file(s, name, O_RDWR | O_CREAT | O_EXCL);
	if (g->fd < 0) {
		rc = g->fd;
		free(g);
		return rc;
	}
	rc = posix_fallocate(g->fd, 0, (off_t)g->size);
	if (rc) {
		close(g->fd);
		unlinkat(s->dirfd, name, 0);
		free(g);
		if (rc == ENOSPC)
			s->st.enospc++;
		return -rc;
	}
	fh = kvp_aligned(B);
	if (!fh) {
		rc = -ENOMEM;
		goto err;
	}
	fh->fh_magic = KVP_SSD_MAGIC_FILE;
	fh->fh_version = KVP_SSD_FORMAT;
	fh->fh_hdr_size = sizeof(*fh);
	fh->fh_seg_id = g->id;
	fh->fh_create_seq = g->create_seq;
	fh->fh_seg_size = g->size;
	fh->fh_ctime_ns = kvp_now_ns(CLOCK_REALTIME);
	fh->fh_crc = 0;
	fh->fh_crc = kvp_crc32c(0, fh, sizeof(*fh));
	if (pwrite(g->fd, fh, B, 0) != (ssize_t)B) {
		free(fh);
		rc = -EIO;
		goto err;
	}
	free(fh);
	rc = kvp_seg_insert(s, g);
	if (rc)
		goto err;
	s->active = g;
	s->st.segs_created++;
	return 0;
err:
	close(g->fd);
	unlinkat(s->dirfd, name, 0);
	free(g);
	return rc;
}

/* Forget the kept records from index 'from' on (their owner is told
 * nothing: a veto undid them). */
void
kvp_reins_discard(struct kvp_ssd *s, unsigned from)
{
	while (s->nreins > from) {
		struct kvp_reins *x = &s->reins[--s->nreins];

		s->reins_bytes -= x->len;
		free(x->buf);
	}
}

/* Their segment stayed after all: the kept records from index 'from' on
 * live where they were (the owner is told so) and are forgotten. */
static void
kvp_reins_in_place(struct kvp_ssd *s, unsigned from)
{
	unsigned k;

	for (k = from; k < s->nreins; k++)
		if (s->cfg.reinsert_cb)
			s->cfg.reinsert_cb(s->cfg.giveback_arg, s->reins[k].tag,
					   s->reins[k].old_loc,
					   s->reins[k].old_loc);
	kvp_reins_discard(s, from);
}

/*
 * Write the records the reclaims kept into g, the segment just started
 * (NULL: it could not be), first, leaving room in it for the record of
 * 'need' blocks and a key of klen bytes that asked for it; then
 * (fdatasync'd in strict mode, the old copies being gone) tell the owner
 * where each lives, or 0: it did not fit, or its write failed, and it is
 * gone with its old segment (nothing of it is in the summary, and what a
 * failed write left is overwritten by the next record).  Synchronous: a
 * reclaim blocks already.
 */
static void
kvp_reins_flush(struct kvp_ssd *s, struct kvp_sseg *g, uint64_t need,
		unsigned klen)
{
	unsigned char *hdr = kvp_aligned(B);
	bool wrote = false;
	unsigned k;

	if (!hdr)
		g = NULL;
	for (k = 0; k < s->nreins; k++) {
		/* each a batch of its own: header block, value */
		struct kvp_reins *x = &s->reins[k];
		uint64_t nb = 1 + kvp_rup(x->vlen) / B, blk, sum;
		struct iovec v = { x->val, (size_t)x->vlen }, io[2];
		uint32_t nchunks;
		size_t esz;

		x->new_loc = 0;
		if (!g)
			continue;
		sum = kvp_rup(g->sum_len + kvp_sum_ent_size(x->klen) +
			      kvp_sum_ent_size(klen)) /
		      B;
		if (g->wpos + nb + need + sum + 1 > g->size / B)
			continue; /* the write that asked comes first */
		blk = g->wpos;
		kvp_chunk_shift(x->vlen, &nchunks);
		esz = kvp_bent_size(x->klen, nchunks);
		memset(hdr, 0, B);
		kvp_bent_fill(hdr + sizeof(struct kvp_ssd_batch_hdr),
			      KVP_SSD_REC_VALUE, 1, x->ns, s->next_seq, x->key,
			      x->klen, x->vlen, 0, &v, 1);
		kvp_bhdr_finish(
			hdr, g->id, blk, nb, 1,
			(uint32_t)(sizeof(struct kvp_ssd_batch_hdr) + esz));
		/* the summary entry first: a record on disk that the summary
		 * lacks could come back from a torn tail's header scan */
		if (kvp_sum_append(g, KVP_SSD_REC_VALUE, KVP_SSD_LOW3(blk, 1),
				   x->ns, s->next_seq, x->vlen, x->key,
				   x->klen))
			continue;
		io[0].iov_base = hdr;
		io[0].iov_len = B;
		io[1].iov_base = x->val;
		io[1].iov_len = kvp_rup(x->vlen);
		if (pwritev(g->fd, io, 2, (off_t)(blk * B)) !=
		    (ssize_t)(nb * B)) {
			g->sum_len -= kvp_sum_ent_size(x->klen);
			s->st.io_errors++;
			g = NULL; /* the rest would not fare better */
			continue;
		}
		g->wpos += nb;
		g->dirty = true;
		g->nrecs++;
		g->live_bytes += x->len;
		g->max_seq = s->next_seq;
		s->next_seq++;
		s->st.reinserted++;
		s->st.reinserted_bytes += x->vlen;
		s->st.dev_write_bytes += nb * B;
		x->new_loc = KVP_SSD_LOC(g->id, KVP_SSD_LOW3(blk, 1));
		wrote = true;
	}
	free(hdr);
	if (wrote && s->cfg.durability == KVP_SSD_STRICT && s->active &&
	    fdatasync(s->active->fd)) {
		s->st.io_errors++;
		kvp_log(KVP_LOG_ERROR, "ssd",
			"segment %08x: fdatasync of reinserted records: %s",
			s->active->id, strerror(errno));
	}
	for (k = 0; k < s->nreins && s->cfg.reinsert_cb; k++)
		s->cfg.reinsert_cb(s->cfg.giveback_arg, s->reins[k].tag,
				   s->reins[k].old_loc, s->reins[k].new_loc);
	kvp_reins_discard(s, 0);
}

/* Start a new active segment for a record of 'need' blocks and a key of
 * klen bytes: seal the old one, make room (the owner may keep records of
 * what it gives back: they go first into the new one). */
int
kvp_seg_new(struct kvp_ssd *s, uint64_t need, unsigned klen)
{
	int rc = kvp_seg_start(s);

	if (s->nreins)
		kvp_reins_flush(s, rc ? NULL : s->active, need, klen);
	return rc;
}

/* Are records written to segment g queued, in flight, or complete but not
 * yet handed back to the owner? */
static bool
kvp_seg_writing(const struct kvp_sseg *g)
{
	return g->wr_inflight != 0;
}

/*
 * --ssd-size: give back whole segments until one more fits.  Strictly
 * oldest first: a tombstone then always outlives the older records it
 * shadows, so nothing deleted can come back.  If the owner vetoes the
 * oldest (a key in it is held, pinned or being read), the room is
 * deferred: -EAGAIN now, asked again on the next write.
 */
static int
kvp_make_room(struct kvp_ssd *s)
{
	if (!s->cfg.capacity_bytes)
		return 0;
	while ((uint64_t)(s->nsegs + 1) * s->cfg.segment_bytes >
	       s->cfg.capacity_bytes) {
		struct kvp_sseg *g = s->nsegs ? s->segs[0] : NULL;
		unsigned mark = s->nreins;
		int veto;

		if (!g || !g->sealed || g == s->active) {
			s->st.enospc++;
			return -ENOSPC;
		}
		if (kvp_seg_writing(g)) {
			/* its last batches are still being written, or their
			 * completions wait for the owner's poll (a round that
			 * filled several segments): their records would be
			 * reported in a segment that is gone, and a write
			 * queued on its descriptor could land in the next file
			 * to get that number; room once they are handed back */
			kvp_ssd_submit_agent(s);
			return -EAGAIN;
		}
		s->in_giveback = true;
		veto = s->cfg.giveback_cb ?
			       s->cfg.giveback_cb(s->cfg.giveback_arg, s,
						  g->id) :
			       0;
		s->in_giveback = false;
		if (veto) {
			/* the owner undid what it kept of this one */
			kvp_reins_discard(s, mark);
			s->st.segs_vetoed++;
			s->st.enospc++;
			return -EAGAIN;
		}
		if (kvp_ssd_segment_drop_agent(s, g->id)) {
			/* still there: what it kept stays where it was */
			kvp_reins_in_place(s, mark);
			return -EIO;
		}
	}
	return 0;
}

/* ---- segments for the owner ---- */

int
kvp_ssd_record_dead_agent(struct kvp_ssd *s, uint64_t loc, uint64_t vlen)
{
	struct kvp_sseg *g = kvp_seg_find(s, KVP_SSD_LOC_SEG(loc));
	uint64_t b = kvp_ssd_record_bytes(vlen);

	if (!g)
		return -ENOENT;
	g->live_bytes = g->live_bytes > b ? g->live_bytes - b : 0;
	return 0;
}

int
kvp_ssd_oldest_segment_agent(const struct kvp_ssd *s, uint32_t after,
			     uint32_t *id)
{
	unsigned k;

	for (k = 0; k < s->nsegs; k++)
		if (s->segs[k]->sealed && s->segs[k]->id > after) {
			*id = s->segs[k]->id;
			return 0;
		}
	return -ENOENT;
}

int
kvp_ssd_segment_foreach_agent(struct kvp_ssd *s, uint32_t id, kvp_ssd_rec_fn cb,
			      void *arg)
{
	struct kvp_sseg *g = kvp_seg_find(s, id);

	if (!g)
		return -ENOENT;
	if (!g->sealed && g->sum) {
		/* the active segment: its summary is in memory */
		size_t p = 0;
		int rc = 0;
		while (p + sizeof(struct kvp_ssd_sum_ent) <= g->sum_len &&
		       !rc) {
			struct kvp_ssd_sum_ent e;
			struct kvp_ssd_rec rec;

			memcpy(&e, g->sum + p, sizeof(e));
			kvp_rec_from_sum(g, &e, g->sum + p + sizeof(e), &rec);
			rc = cb(arg, &rec);
			p += kvp_sum_ent_size(e.se_klen);
		}
		return rc;
	}
	return kvp_seg_records(s, g, cb, arg, false, NULL);
}

int
kvp_ssd_reinsert_agent(struct kvp_ssd *s, const struct kvp_ssd_rec *r,
		       uint64_t tag)
{
	struct kvp_reins *x;
	struct kvp_sseg *g;
	uint64_t len, vbytes, hblk, vblk;
	bool ok;

	if (!s->in_giveback || !r || r->type != KVP_SSD_REC_VALUE || !r->vlen ||
	    !r->key || !r->klen || r->klen > KVP_SSD_KEY_MAX)
		return -EINVAL;
	g = kvp_seg_find(s, KVP_SSD_LOC_SEG(r->loc));
	if (!g || !g->sealed)
		return -ENOENT;
	len = kvp_ssd_record_bytes(r->vlen);
	vbytes = kvp_rup(r->vlen);
	if (g->version >= 3) {
		hblk = KVP_SSD_LOC_HDR(r->loc);
		vblk = KVP_SSD_LOC_VALUE(r->loc);
	} else {
		hblk = KVP_SSD_LOC_BLOCK(r->loc);
		vblk = hblk + 1;
	}
	if (hblk == 0 || vblk <= hblk || vblk + vbytes / B > g->size / B)
		return -EINVAL;
	/* the share: a log full of hot records still gives space back */
	if (s->reins_bytes + len >
	    s->cfg.segment_bytes / 100 * s->cfg.reinsert_pct)
		return -ENOSPC;
	if (s->nreins == s->capreins) {
		unsigned cap = s->capreins ? s->capreins * 2 : 64;
		struct kvp_reins *n = realloc(s->reins, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		s->reins = n;
		s->capreins = cap;
	}
	x = &s->reins[s->nreins];
	/* the header block, then the value (format 2: they are adjacent) */
	x->buf = kvp_aligned(B + vbytes);
	if (!x->buf)
		return -ENOMEM;
	x->val = x->buf + B;
	s->st.dev_read_bytes += B + vbytes;
	if (pread(g->fd, x->buf, B, (off_t)(hblk * B)) != (ssize_t)B ||
	    pread(g->fd, x->val, vbytes, (off_t)(vblk * B)) !=
		    (ssize_t)vbytes) {
		s->st.io_errors++;
		free(x->buf);
		return -EIO;
	}
	/* what was written there, whole: the record asked for */
	if (g->version >= 3) {
		const unsigned char *key;
		const uint32_t *crc;
		struct kvp_ssd_bent e;
		struct iovec v = { x->val, (size_t)r->vlen };
		uint32_t got[KVP_SSD_MAX_CHUNKS];

		ok = kvp_bhdr_valid(x->buf, g->id, hblk, g->size / B) &&
		     kvp_bent_find(x->buf, KVP_SSD_LOC_DELTA(r->loc), &e, &key,
				   &crc) &&
		     e.be_vlen == r->vlen && e.be_ns == r->ns &&
		     e.be_klen == r->klen && !memcmp(key, r->key, r->klen);
		if (ok) {
			kvp_chunk_crcs(got, e.be_nchunks, e.be_chunk_shift,
				       e.be_vlen, &v, 1);
			ok = !memcmp(got, crc, 4u * e.be_nchunks);
		}
	} else {
		const struct kvp_ssd_rec_hdr *h = (const void *)x->buf;

		ok = kvp_hdr_valid(g, h, hblk) &&
		     h->rh_type == KVP_SSD_REC_VALUE && h->rh_vlen == r->vlen &&
		     h->rh_ns == r->ns && h->rh_klen == r->klen &&
		     !memcmp(h + 1, r->key, r->klen) &&
		     kvp_value_crcs_ok(h, x->val);
	}
	if (!ok) {
		s->st.crc_errors++;
		free(x->buf);
		return -EBADMSG;
	}
	x->tag = tag;
	x->old_loc = r->loc;
	x->ns = r->ns;
	x->vlen = r->vlen;
	x->klen = r->klen;
	memcpy(x->key, r->key, r->klen);
	x->len = len;
	s->reins_bytes += len;
	s->nreins++;
	return 0;
}

int
kvp_ssd_segment_drop_agent(struct kvp_ssd *s, uint32_t id)
{
	struct kvp_sseg *g = kvp_seg_find(s, id);
	char name[32];
	unsigned k;

	if (!g)
		return -ENOENT;
	if (g == s->active || kvp_seg_writing(g))
		return -EBUSY;
	/* what is queued on its descriptor goes to the kernel first (which
	 * then holds the file): a later file could get the number */
	kvp_ssd_submit_agent(s);
	kvp_seg_name(id, name, sizeof(name));
	if (unlinkat(s->dirfd, name, 0) && errno != ENOENT)
		return -errno;
	for (k = 0; k < s->nsegs; k++)
		if (s->segs[k] == g) {
			memmove(&s->segs[k], &s->segs[k + 1],
				(s->nsegs - k - 1) * sizeof(s->segs[0]));
			s->nsegs--;
			break;
		}
	/* reads in flight hold their own reference to the file */
	kvp_hc_drop_seg(s->hc, id);
	kvp_seg_free(g);
	s->st.segs_dropped++;
	return 0;
}

int
kvp_ssd_segment_info_agent(const struct kvp_ssd *s, uint32_t id,
			   struct kvp_ssd_seg_info *info)
{
	const struct kvp_sseg *g = kvp_seg_find(s, id);

	if (!g)
		return -ENOENT;
	info->live_bytes = g->live_bytes;
	info->nrecords = g->nrecs;
	info->size = g->size;
	info->sealed = g->sealed;
	info->active = g == s->active;
	return 0;
}

void
kvp_ssd_usage_agent(const struct kvp_ssd *s, struct kvp_ssd_usage *u)
{
	unsigned k;

	memset(u, 0, sizeof(*u));
	u->capacity_bytes = s->cfg.capacity_bytes;
	u->segment_bytes = s->cfg.segment_bytes;
	u->nsegments = s->nsegs;
	for (k = 0; k < s->nsegs; k++) {
		u->used_bytes += s->segs[k]->size;
		u->live_bytes += s->segs[k]->live_bytes;
	}
	u->oldest_id = s->nsegs ? s->segs[0]->id : 0;
	u->active_id = s->active ? s->active->id : 0;
}
