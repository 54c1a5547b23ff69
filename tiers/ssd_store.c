/* SPDX-License-Identifier: MIT */
/*
 * ssd_store.c - the agent's SSD store: open (the directory and its
 * trust, the segment files found, the ring or the worker pair) and
 * close, statistics.  API and on-disk format in tiers/kvp_ssd.h,
 * the design and the map of the store's files in tiers/ssd_int.h,
 * operator notes in docs/ssd.md.
 */
#include "tiers/ssd_int.h"

uint64_t
kvp_ssd_max_value_agent(const struct kvp_ssd *s)
{
	uint64_t blocks = s->cfg.segment_bytes / B;

	/* file header, record header, one summary block, the trailer */
	return blocks > 4 ? (blocks - 4) * B : 0;
}

/* ---- open / close ---- */

/*
 * Open (creating it 0700 if missing) the store's directory and check that
 * it is ours alone: a directory owned by our effective uid that no one
 * else can write.  Another user's directory, or one they can write, could
 * hold segment files they made, which we would serve as values.  Every
 * file is then reached through this descriptor (openat), so a rename of
 * the path afterwards changes nothing.  0, or -errno with a log line.
 */
static int
kvp_ssd_dir_open(struct kvp_ssd *s)
{
	struct stat st;
	int rc;

	if (mkdir(s->dir, 0700) && errno != EEXIST) {
		rc = -errno;
		kvp_log(KVP_LOG_ERROR, "ssd", "cannot create %s: %s", s->dir,
			strerror(-rc));
		return rc;
	}
	s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0) {
		rc = -errno;
		kvp_log(KVP_LOG_ERROR, "ssd", "%s: %s", s->dir,
			rc == -ENOTDIR ?
				"not a directory (give --ssd-dir a directory, or a path to create)" :
				strerror(-rc));
		return rc;
	}
	if (fstat(s->dirfd, &st)) {
		rc = -errno;
		kvp_log(KVP_LOG_ERROR, "ssd", "%s: %s", s->dir, strerror(-rc));
		return rc;
	}
	if (st.st_uid != geteuid()) {
		kvp_log(KVP_LOG_ERROR, "ssd",
			"%s is owned by uid %u, not by this agent's "
			"uid %u: refused (its files could be anyone's); give --ssd-dir a "
			"directory of this user, or a path that does not exist yet",
			s->dir, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EACCES;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		kvp_log(KVP_LOG_ERROR, "ssd",
			"%s is writable by group or others (mode "
			"%04o): refused (anyone could plant segment files); chmod go-w %s",
			s->dir, (unsigned)(st.st_mode & 07777), s->dir);
		return -EACCES;
	}
	return 0;
}

int
kvp_ssd_open_agent(const struct kvp_ssd_cfg *cfg, struct kvp_ssd **out)
{
	struct kvp_ssd *s;
	char path[1300];
	struct dirent *de;
	DIR *d;
	int rc;

	if (!cfg || !cfg->dir || !*cfg->dir ||
	    strlen(cfg->dir) >= sizeof(s->dir))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	if (!s->cfg.segment_bytes)
		s->cfg.segment_bytes = KVP_SSD_SEGMENT_DEFAULT;
	if (s->cfg.segment_bytes < KVP_SSD_SEGMENT_MIN ||
	    s->cfg.segment_bytes > KVP_SSD_SEGMENT_MAX ||
	    s->cfg.segment_bytes % B ||
	    (s->cfg.capacity_bytes &&
	     s->cfg.capacity_bytes < 2 * s->cfg.segment_bytes)) {
		free(s);
		return -EINVAL;
	}
	if (!s->cfg.queue_depth)
		s->cfg.queue_depth = 128;
	if (!s->cfg.max_requests)
		s->cfg.max_requests = 4096;
	if (!s->cfg.write_depth)
		s->cfg.write_depth = KVP_SSD_WRITE_DEPTH_DEFAULT;
	if (!s->cfg.write_hold_ns)
		s->cfg.write_hold_ns = KVP_SSD_WRITE_HOLD_NS;
	/* parts of a quarter of the depth, whole blocks, one at least */
	s->wr_part = (s->cfg.write_depth / 4) & ~(uint64_t)(B - 1);
	if (s->wr_part < B)
		s->wr_part = B;
	s->wr_piece = (s->wr_part / 16) & ~(uint64_t)(B - 1);
	if (s->wr_piece < B)
		s->wr_piece = B;
	snprintf(s->dir, sizeof(s->dir), "%s", cfg->dir);
	s->lockfd = -1;
	s->dirfd = -1;
	s->next_seq = 1;
	s->next_id = 1;
	s->direct = true;
	s->zero = kvp_aligned(B);
	if (!s->zero) {
		free(s);
		return -ENOMEM;
	}
	rc = kvp_ssd_dir_open(s);
	if (rc)
		goto err;
	s->lockfd = openat(s->dirfd, "LOCK",
			   O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (s->lockfd < 0 || flock(s->lockfd, LOCK_EX | LOCK_NB)) {
		rc = s->lockfd < 0 ? -errno : -EBUSY;
		if (rc == -EBUSY)
			kvp_log(KVP_LOG_ERROR, "ssd",
				"%s is in use by another kvpoold "
				"(its LOCK is held)",
				s->dir);
		else
			kvp_log(KVP_LOG_ERROR, "ssd", "%s/LOCK: %s", s->dir,
				strerror(-rc));
		goto err;
	}
	{
		int dfd = dup(s->dirfd);

		d = dfd >= 0 ? fdopendir(dfd) : NULL;
		if (!d) {
			rc = -errno;
			if (dfd >= 0)
				close(dfd);
			goto err;
		}
	}
	while ((de = readdir(d))) {
		uint32_t id = kvp_seg_name_id(de->d_name);
		struct kvp_sseg *g;
		struct kvp_ssd_file_hdr *fh;
		struct stat st;
		char why[96];
		uint32_t crc;

		if (!id) {
			if (strcmp(de->d_name, ".") &&
			    strcmp(de->d_name, "..") &&
			    strcmp(de->d_name, "LOCK") &&
			    strcmp(de->d_name, "DRIVE")) /* agent/drives.c */
				kvp_log(KVP_LOG_WARN, "ssd",
					"%s/%s: not a segment file name "
					"(seg-XXXXXXXX.kvs, ids 00000001..%08x): ignored",
					s->dir, de->d_name, KVP_SSD_SEG_ID_MAX);
			continue;
		}
		/* a new segment never reuses the id of a file that is there,
		 * served or not (its O_EXCL create would fail for good) */
		if (id >= s->next_id)
			/* at most KVP_SSD_SEG_ID_MAX + 1 */
			s->next_id = id + 1;
		snprintf(path, sizeof(path), "%s/%s", s->dir, de->d_name);
		if (cfg->wipe) {
			unlinkat(s->dirfd, de->d_name, 0);
			continue;
		}
		/* look before opening: a FIFO or a device is never opened */
		if (fstatat(s->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			kvp_log(KVP_LOG_WARN, "ssd", "%s: %s: skipped", path,
				strerror(errno));
			continue;
		}
		if (kvp_file_ours(&st, why, sizeof(why))) {
			kvp_log(KVP_LOG_WARN, "ssd",
				"%s: %s: skipped, never served (remove "
				"it, or move it away)",
				path, why);
			continue;
		}
		g = calloc(1, sizeof(*g));
		fh = kvp_aligned(B);
		if (!g || !fh) {
			free(g);
			free(fh);
			closedir(d);
			rc = -ENOMEM;
			goto err;
		}
		g->fd = kvp_open_file(s, de->d_name, O_RDWR);
		if (g->fd < 0 || fstat(g->fd, &st)) {
			kvp_log(KVP_LOG_WARN, "ssd", "%s: unreadable: skipped",
				path);
			goto skip;
		}
		if (kvp_file_ours(&st, why, sizeof(why))) { /* what we opened */
			kvp_log(KVP_LOG_WARN, "ssd",
				"%s: %s: skipped, never served", path, why);
			goto skip;
		}
		if (pread(g->fd, fh, B, 0) != (ssize_t)B) {
			kvp_log(KVP_LOG_WARN, "ssd", "%s: unreadable: skipped",
				path);
			goto skip;
		}
		crc = fh->fh_crc;
		fh->fh_crc = 0;
		if (fh->fh_magic == KVP_SSD_MAGIC_FILE && fh->fh_seg_id == id &&
		    kvp_crc32c(0, fh, sizeof(*fh)) == crc &&
		    fh->fh_seg_size > (uint64_t)st.st_size &&
		    fh->fh_seg_size % B == 0 &&
		    fh->fh_seg_size <= KVP_SSD_SEGMENT_MAX) {
			/* truncated (a torn tail of another kind): give the
			 * file its size back; the scan stops at the first bad
			 * record */
			kvp_log(KVP_LOG_WARN, "ssd",
				"%s: truncated to %lld bytes: repairing", path,
				(long long)st.st_size);
			g->valid_end = (uint64_t)st.st_size;
			if (ftruncate(g->fd, (off_t)fh->fh_seg_size) == 0)
				st.st_size = (off_t)fh->fh_seg_size;
		}
		if (fh->fh_magic != KVP_SSD_MAGIC_FILE || fh->fh_seg_id != id ||
		    kvp_crc32c(0, fh, sizeof(*fh)) != crc ||
		    fh->fh_seg_size != (uint64_t)st.st_size ||
		    fh->fh_seg_size % B ||
		    fh->fh_seg_size < KVP_SSD_SEGMENT_MIN) {
			kvp_log(KVP_LOG_WARN, "ssd",
				"%s: bad file header: skipped, never served",
				path);
			goto skip;
		}
		if (fh->fh_version < KVP_SSD_FORMAT_MIN ||
		    fh->fh_version > KVP_SSD_FORMAT) {
			kvp_log(KVP_LOG_ERROR, "ssd",
				"%s: format %u, this build reads %u..%u: "
				"move the directory away",
				path, fh->fh_version, KVP_SSD_FORMAT_MIN,
				KVP_SSD_FORMAT);
			free(fh);
			kvp_seg_free(g);
			closedir(d);
			rc = -EPROTO;
			goto err;
		}
		g->id = id;
		g->version = fh->fh_version;
		g->size = fh->fh_seg_size;
		if (!g->valid_end)
			g->valid_end = g->size;
		g->create_seq = fh->fh_create_seq;
		if (g->create_seq > s->next_seq)
			s->next_seq = g->create_seq;
		free(fh);
		if (kvp_seg_insert(s, g)) {
			kvp_seg_free(g);
			closedir(d);
			rc = -ENOMEM;
			goto err;
		}
		continue;
skip:
		free(fh);
		kvp_seg_free(g);
	}
	closedir(d);
	if (getenv("KVP_SSD_FORCE_PREAD")) {
		kvp_log(KVP_LOG_INFO, "ssd",
			"KVP_SSD_FORCE_PREAD: pread/pwrite thread path");
	} else if ((rc = io_uring_queue_init(s->cfg.queue_depth, &s->ring,
					     0)) == 0) {
		s->uring = true;
	} else {
		kvp_log(KVP_LOG_WARN, "ssd",
			"io_uring refused (%s): pread/pwrite thread "
			"path",
			strerror(-rc));
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv_work, NULL);
	pthread_cond_init(&s->cv_done, NULL);
	if (!s->uring) {
		s->write_slots = KVP_SSD_WORKERS > 1 ? KVP_SSD_WORKERS - 1 : 1;
		for (s->nworkers = 0; s->nworkers < KVP_SSD_WORKERS;
		     s->nworkers++)
			if (pthread_create(&s->workers[s->nworkers], NULL,
					   kvp_worker, s))
				break;
		if (!s->nworkers) {
			rc = -EAGAIN;
			goto err;
		}
	}
	s->st.uring = s->uring;
	s->st.direct = s->direct;
	/* no memory for it: reads read their header blocks from disk */
	s->hc = kvp_hc_new(cfg->header_cache_bytes);
	*out = s;
	return 0;
err:
	if (s->lockfd >= 0)
		close(s->lockfd);
	if (s->dirfd >= 0)
		close(s->dirfd);
	while (s->nsegs)
		kvp_seg_free(s->segs[--s->nsegs]);
	free(s->segs);
	free(s->zero);
	free(s);
	return rc;
}

void
kvp_ssd_close_agent(struct kvp_ssd *s)
{
	struct kvp_ssd_cqe cq[32];

	if (!s)
		return;
	while (s->outstanding && kvp_ssd_poll_agent(s, cq, 32, -1) >= 0)
		;
	if (s->active)
		kvp_seg_seal(s, s->active);
	/* a clean stop leaves nothing in a cache (buffered I/O, or the
	 * device's), whatever the durability mode */
	{
		unsigned k;

		for (k = 0; k < s->nsegs; k++)
			if (s->segs[k]->dirty && s->segs[k]->fd >= 0 &&
			    fdatasync(s->segs[k]->fd))
				kvp_log(KVP_LOG_ERROR, "ssd",
					"segment %08x: fdatasync at close: %s",
					s->segs[k]->id, strerror(errno));
	}
	if (s->uring)
		io_uring_queue_exit(&s->ring);
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->cv_work);
	pthread_mutex_unlock(&s->mu);
	while (s->nworkers)
		pthread_join(s->workers[--s->nworkers], NULL);
	while (s->nsegs)
		kvp_seg_free(s->segs[--s->nsegs]);
	free(s->segs);
	kvp_reins_discard(s, 0); /* none outside a write */
	free(s->reins);
	kvp_hc_free(s->hc);
	if (s->lockfd >= 0)
		close(s->lockfd);
	if (s->dirfd >= 0)
		close(s->dirfd);
	free(s->zero);
	free(s);
}

void
kvp_ssd_stats_agent(struct kvp_ssd *s, struct kvp_ssd_stats *st)
{
	/* the thread path's workers count under mu (the tier thread's
	 * publish reads them every 50 ms), into dc: the tier thread counts
	 * into st without mu */
	pthread_mutex_lock(&s->mu);
	*st = s->st;
	st->batches += s->dc.batches;
	st->dev_write_bytes += s->dc.dev_write_bytes;
	st->chunks_verified += s->dc.chunks_verified;
	st->crc_errors += s->dc.crc_errors;
	st->io_errors += s->dc.io_errors;
	st->write_parts += s->dc.write_parts;
	st->inflight_requests = s->outstanding;
	st->registered = s->registered;
	pthread_mutex_unlock(&s->mu);
}
