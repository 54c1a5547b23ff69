/* SPDX-License-Identifier: MIT */
/*
 * drives.c - several SSD drives as one tier: one SSD store (struct
 * kvp_ssd) per --ssd-dir, behind the calls the tier thread makes of a
 * store (kvp_drv_*_agent mirror kvp_ssd_*_agent).  Tier thread only,
 * except recovery (below).
 *
 * Locations.  A store's location is (segment id << 32 | block), segment
 * ids below 2^28 (KVP_SSD_SEG_ID_MAX); the drive's id goes in the top 4
 * bits (KVP_DRV_LOC).  Every location the index holds names its drive,
 * and drive 0's locations are exactly a single store's, so a pool with
 * one --ssd-dir is what it always was.  A drive's id is stable: it is
 * written in its directory (file "DRIVE") the first time the
 * directory is used, so reordering, adding or removing --ssd-dir across
 * restarts never makes a location name another drive's record (and a
 * read checks the record's identity anyway: a mix-up reads -EBADMSG,
 * never wrong bytes).
 *
 * Placement.  A value goes to the drive its key hashes to (rendezvous
 * hashing on the drive ids), so the records
 * of one key stay on one drive, where recovery orders them by the store's
 * sequence numbers; unless that drive takes no writes (failed, full,
 * gone) or has far less room than the emptiest: then to the writable
 * drive with the most room.  Reads, promotions and tombstones go to the
 * drive their location names.  Hashing spreads demotion writes and, so,
 * later reads evenly over drives of equal size.
 *
 * Health.  An I/O error on a drive marks it FAILED: no writes for 30 s
 * (reads still go: its other records may read fine); a write refused for
 * room marks it FULL for 1 s; a directory removed or replaced while the
 * agent runs is GONE until restart (no writes; what it still has open
 * reads).  A directory that cannot be opened at start is MISSING: the pool
 * starts with the others, and entries naming it lose their SSD copy
 * (kvp_recover_lost_agent); so do entries naming an id another directory
 * serves now than the one the segment recorded (kvp_drv_adopt_dirs: a
 * copied DRIVE file listed first).  Every change is logged and published
 * in the header (h_drive_*: `kvpool stat`, /metrics).
 *
 * Recovery runs one thread per drive (the scans read the disks in
 * parallel), and each drive hands its records to the index on several
 * threads (the cores shared out, kvp_drv_recover_threads); the owner's
 * callback is safe for that (agent/recover.c: lock-free index claims of
 * distinct keys).
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "agent/tier_int.h"
#include "tiers/kvp_wait.h"

_Static_assert(KVP_SSD_DRIVES == 16, "a location's top 4 bits");
_Static_assert(KVP_SSD_SEG_ID_MAX < (1u << 28),
	       "segment ids leave a location's top 4 bits to the drive");

#define KVP_DRV_FAIL_NS (30ull * 1000000000ull)
#define KVP_DRV_FULL_NS 1000000000ull
#define KVP_DRV_CHECK_NS 1000000000ull

/* Publish drive d's state word (for tools). */
static void
kvp_drv_publish_state(struct kvp_drives *dv, struct kvp_drive *d)
{
	/* relaxed: statistics for readers of the header */
	kvp_store_relaxed(&dv->a->seg.hdr->h_drive_state[d->id],
			  KVP_DRIVE_WORD(d->state, d->errors));
}

static void
kvp_drv_set(struct kvp_drives *dv, struct kvp_drive *d, unsigned st,
	    const char *why)
{
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);

	if (st == KVP_DRIVE_FAILED)
		d->until = now + KVP_DRV_FAIL_NS;
	else if (st == KVP_DRIVE_FULL)
		d->until = now + KVP_DRV_FULL_NS;
	if (d->state != st) {
		kvp_log(st == KVP_DRIVE_OK   ? KVP_LOG_INFO :
			st == KVP_DRIVE_FULL ? KVP_LOG_WARN :
					       KVP_LOG_ERROR,
			"ssd", "drive %u (%s): %s -> %s%s%s", d->id, d->dir,
			kvp_drive_state_name(d->state),
			kvp_drive_state_name(st), why ? ": " : "",
			why ? why : "");
		d->state = st;
	}
	kvp_drv_publish_state(dv, d);
}

/* Can drive d take a write now?  FAILED and FULL drives are tried again
 * once their time is up (a success makes them OK). */
static bool
kvp_drv_writable(const struct kvp_drive *d, uint64_t now)
{
	if (!d->ssd)
		return false;
	switch (d->state) {
	case KVP_DRIVE_OK:
		return true;
	case KVP_DRIVE_FULL:
	case KVP_DRIVE_FAILED:
		return now >= d->until;
	default:
		return false;
	}
}

bool
kvp_drv_writable_agent(const struct kvp_drives *dv)
{
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);
	unsigned k;

	for (k = 0; k < dv->n; k++)
		if (kvp_drv_writable(&dv->d[k], now))
			return true;
	return false;
}

static struct kvp_drive *
kvp_drv_of(struct kvp_drives *dv, uint64_t loc)
{
	struct kvp_drive *d = dv->by_id[KVP_DRV_OF(loc)];

	return d && d->ssd ? d : NULL;
}

/* ---- drive ids ---- */

/* The id recorded in dir (0..15), -ENOENT (none yet), or -errno. */
static int
kvp_drv_read_id(const char *dir)
{
	char path[1100], buf[64];
	unsigned id;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/DRIVE", dir);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = 0;
	if (sscanf(buf, "kvpool-drive %u", &id) != 1 || id >= KVP_SSD_DRIVES)
		return -EBADMSG;
	return (int)id;
}

static int
kvp_drv_write_id(const char *dir, unsigned id)
{
	char path[1100], buf[64];
	int fd, n, rc = 0;

	snprintf(path, sizeof(path), "%s/DRIVE", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  0600);
	if (fd < 0)
		return -errno;
	n = snprintf(buf, sizeof(buf), "kvpool-drive %u\n", id);
	if (write(fd, buf, (size_t)n) != n || fsync(fd))
		rc = -EIO;
	close(fd);
	if (rc)
		unlink(path);
	else if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		fsync(fd);
		close(fd);
	}
	return rc;
}

/* ---- callbacks from the stores: locations gain their drive's id, then
 * the owner's callback (struct kvp_drv_owner, handed over at open) ---- */

static int
kvp_drv_recover_cb(void *arg, const struct kvp_ssd_rec *r)
{
	struct kvp_drive *d = arg;
	struct kvp_ssd_rec x = *r;
	int rc;

	KVP_ASSERT(KVP_DRV_OF(r->loc) == 0, "I32");
	x.loc = KVP_DRV_LOC(d->id, r->loc);
	if (x.type == KVP_SSD_REC_TOMBSTONE && x.target)
		x.target = KVP_DRV_LOC(d->id, r->target);
	/* no lock: the owner's recover is safe on several threads (every
	 * drive's recovery threads at once) */
	rc = d->all->own->recover(d->all->a, &x);
	return rc;
}

/* the index buckets of a record recovery reaches soon (a hint: no lock) */
static void
kvp_drv_recover_prefetch(void *arg, uint64_t hash, unsigned stage)
{
	struct kvp_drive *d = arg;

	d->all->own->prefetch(d->all->a, hash, stage);
}

static int
kvp_drv_giveback_cb(void *arg, struct kvp_ssd *ssd, uint32_t seg)
{
	struct kvp_drive *d = arg;

	(void)ssd;
	return d->all->own->giveback(d->all->a, d, seg);
}

static void
kvp_drv_reinsert_cb(void *arg, uint64_t tag, uint64_t old_loc, uint64_t new_loc)
{
	struct kvp_drive *d = arg;

	d->all->own->reinserted(d->all->a, tag,
				old_loc ? KVP_DRV_LOC(d->id, old_loc) : 0,
				new_loc ? KVP_DRV_LOC(d->id, new_loc) : 0);
}

struct kvp_drv_each {
	struct kvp_drive *d;
	kvp_ssd_rec_fn cb;
	void *arg;
};

static int
kvp_drv_each_cb(void *arg, const struct kvp_ssd_rec *r)
{
	struct kvp_drv_each *e = arg;
	struct kvp_ssd_rec x = *r;

	x.loc = KVP_DRV_LOC(e->d->id, r->loc);
	if (x.type == KVP_SSD_REC_TOMBSTONE && x.target)
		x.target = KVP_DRV_LOC(e->d->id, r->target);
	return e->cb(e->arg, &x);
}

int
kvp_drv_segment_foreach_agent(struct kvp_drive *d, uint32_t seg,
			      kvp_ssd_rec_fn cb, void *arg)
{
	struct kvp_drv_each e = { d, cb, arg };

	return kvp_ssd_segment_foreach_agent(d->ssd, seg, kvp_drv_each_cb, &e);
}

int
kvp_drv_reinsert_agent(struct kvp_drive *d, const struct kvp_ssd_rec *r,
		       uint64_t tag)
{
	struct kvp_ssd_rec x = *r;

	if (KVP_DRV_OF(r->loc) != d->id)
		return -EINVAL;
	x.loc = KVP_DRV_RAW(r->loc);
	return kvp_ssd_reinsert_agent(d->ssd, &x, tag);
}

/* ---- open, recover, close ---- */

/* Threads each of n drives recovers with: the online cores shared out
 * (every drive recovers at once, on its own thread and these). */
static uint32_t
kvp_drv_recover_threads(unsigned n)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long per = cpus > 0 && n ? cpus / (long)n : 1;

	if (per < 1)
		per = 1;
	if (per > (long)KVP_SSD_RECOVER_THREADS_MAX)
		per = KVP_SSD_RECOVER_THREADS_MAX;
	return (uint32_t)per;
}

static void *
kvp_drv_recover_thread(void *arg)
{
	struct kvp_drive *d = arg;
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC);

	d->recovered = kvp_ssd_recover_agent(d->ssd, kvp_drv_recover_cb, d);
	d->recover_ns = kvp_now_ns(CLOCK_MONOTONIC) - t0;
	return NULL;
}

/* Does dir hold segment files? */
static bool
kvp_drv_has_segments(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool any = false;

	while (d && !any && (de = readdir(d)))
		any = strncmp(de->d_name, "seg-", 4) == 0;
	if (d)
		closedir(d);
	return any;
}

/* Give every listed directory its id: the one it recorded, or the lowest
 * free one (recorded now, once its store opened).  A directory that is
 * not there (several drives: a drive's directory is usually its mount
 * point, so it is never created) or claims an id another one has is
 * MISSING. */
static void
kvp_drv_assign_ids(struct kvp_drives *dv, int *ids)
{
	bool used[KVP_SSD_DRIVES] = { false };
	struct stat st;
	unsigned k, j, pass;

	for (k = 0; k < dv->n; k++) {
		struct kvp_drive *d = &dv->d[k];

		ids[k] = -EPERM;
		if (dv->n > 1 && (stat(d->dir, &st) || !S_ISDIR(st.st_mode))) {
			kvp_log(KVP_LOG_ERROR, "ssd",
				"%s is not there (with several --ssd-dir, each "
				"must exist): not used",
				d->dir);
			d->state = KVP_DRIVE_MISSING;
			ids[k] = -EPERM; /* not used */
			continue;
		}
		ids[k] = kvp_drv_read_id(d->dir);
		/* no DRIVE file to read (or no directory: the store's open
		 * says what is wrong with it) */
		if (ids[k] < 0 && ids[k] != -EBADMSG && ids[k] != -EIO)
			ids[k] = -ENOENT;
		if (ids[k] >= 0 && used[ids[k]]) {
			kvp_log(KVP_LOG_ERROR, "ssd",
				"%s says it is drive %d, as another "
				"--ssd-dir does (a copied directory?): not "
				"used",
				d->dir, ids[k]);
			d->state = KVP_DRIVE_MISSING;
			ids[k] = -EPERM; /* not used */
			continue;
		}
		if (ids[k] >= 0)
			used[ids[k]] = true;
		else if (ids[k] != -ENOENT) {
			kvp_log(KVP_LOG_ERROR, "ssd",
				"%s/DRIVE is unreadable (%s): not used", d->dir,
				strerror(-ids[k]));
			d->state = KVP_DRIVE_MISSING;
			ids[k] = -EPERM; /* not used */
		}
	}
	/* new ids: first to directories that already hold segments (a store
	 * from before drives had ids: its locations are drive 0's, so it
	 * gets 0 if no other directory has it), then to empty ones */
	for (pass = 0; pass < 2; pass++)
		for (k = 0; k < dv->n; k++) {
			if (ids[k] != -ENOENT ||
			    kvp_drv_has_segments(dv->d[k].dir) != (pass == 0))
				continue;
			for (j = 0; j < KVP_SSD_DRIVES && used[j]; j++)
				;
			ids[k] = (int)j; /* n <= 16: one is free */
			used[j] = true;
		}
	for (k = 0; k < dv->n; k++) {
		if (ids[k] >= 0) {
			dv->d[k].id = (unsigned)ids[k];
			dv->by_id[ids[k]] = &dv->d[k];
		}
	}
	/* a directory not used is reported under an id no other has, from
	 * the top (for tools only: no location names it) */
	for (k = 0, j = KVP_SSD_DRIVES; k < dv->n; k++) {
		if (ids[k] >= 0)
			continue;
		while (j > 0 && used[j - 1])
			j--;
		if (j == 0)
			break;
		used[--j] = true;
		dv->d[k].id = j;
		kvp_drv_publish_state(dv, &dv->d[k]);
	}
}

/* Which directory each id names, against what the segment recorded.  On
 * a re-attach, entries naming an id whose directory is not the one that
 * served it (another directory claims the id: a DRIVE file copied from
 * that drive and listed first; the directory was replaced; no directory
 * serves the id now) lose their SSD copy before recovery: a read would go
 * to another directory's records (FAILED for ever, and a put of the key
 * EEXIST), and that directory's own records are recovered under the id
 * instead.  Then each id records its directory (0: none).  Dropping
 * first: an agent that dies between the two drops again. */
static void
kvp_drv_adopt_dirs(struct kvp_drives *dv)
{
	struct kvp_agent *a = dv->a;
	struct kvp_shm_header *h = a->seg.hdr;
	unsigned j, stale = 0;
	uint64_t lost;

	for (j = 0; j < KVP_SSD_DRIVES && !a->seg_created; j++) {
		const struct kvp_drive *d = dv->by_id[j];
		/* relaxed: the agent's own words (a predecessor's, ordered
		 * by the segment lock we took) */
		uint64_t dev = kvp_load_relaxed(&h->h_drive_dir_dev[j]);
		uint64_t ino = kvp_load_relaxed(&h->h_drive_dir_ino[j]);

		if (ino && (!d || !d->ssd || (uint64_t)d->dev != dev ||
			    (uint64_t)d->ino != ino))
			stale |= 1u << j;
	}
	lost = dv->own->drop_drives(a, stale);
	for (j = 0; j < KVP_SSD_DRIVES; j++) {
		const struct kvp_drive *d = dv->by_id[j];
		bool served = d && d->ssd;

		if (stale >> j & 1)
			kvp_log(KVP_LOG_WARN, "ssd",
				"drive %u: %s is not the directory its entries "
				"were written in (a copied DRIVE file? a "
				"replaced directory?): they lose their SSD copy",
				j, served ? d->dir : "no directory");
		/* relaxed: read by the next agent (the segment lock orders
		 * it) and by tools */
		kvp_store_relaxed(&h->h_drive_dir_dev[j],
				  served ? (uint64_t)d->dev : 0);
		kvp_store_relaxed(&h->h_drive_dir_ino[j],
				  served ? (uint64_t)d->ino : 0);
	}
	if (lost)
		kvp_log(KVP_LOG_WARN, "ssd",
			"%llu SSD-only entries named a drive that is not "
			"theirs now: gone (a miss, never another drive's "
			"record)",
			(unsigned long long)lost);
}

int
kvp_drv_open_agent(struct kvp_agent *a, const struct kvp_drv_owner *own,
		   struct kvp_drives **out)
{
	struct kvp_drives *dv;
	int ids[KVP_SSD_DRIVES];
	pthread_t th[KVP_SSD_DRIVES];
	bool started[KVP_SSD_DRIVES] = { false };
	unsigned k, open = 0;
	int rc = -ENOENT;

	dv = calloc(1, sizeof(*dv));
	if (!dv)
		return -ENOMEM;
	dv->a = a;
	dv->own = own;
	dv->efd = -1;
	dv->n = a->cfg.nssd_dirs ? a->cfg.nssd_dirs : 1;
	for (k = 0; k < dv->n; k++) {
		struct kvp_drive *d = &dv->d[k];

		d->all = dv;
		d->state = KVP_DRIVE_OK;
		snprintf(d->dir, sizeof(d->dir), "%s",
			 a->cfg.nssd_dirs ? a->cfg.ssd_dirs[k] :
					    a->cfg.ssd_dir);
	}
	for (k = 0; k < KVP_SSD_DRIVES; k++) {
		/* relaxed: statistics for readers of the header */
		kvp_store_relaxed(&a->seg.hdr->h_drive_state[k], 0);
		kvp_store_relaxed(&a->seg.hdr->h_drive_used[k], 0);
		kvp_store_relaxed(&a->seg.hdr->h_drive_total[k], 0);
	}
	kvp_drv_assign_ids(dv, ids);
	for (k = 0; k < dv->n; k++) {
		struct kvp_drive *d = &dv->d[k];
		struct kvp_ssd_cfg cfg;
		struct statvfs sv;
		struct stat st;

		if (ids[k] < 0)
			continue;
		memset(&cfg, 0, sizeof(cfg));
		cfg.dir = d->dir;
		cfg.segment_bytes = a->cfg.ssd_segment;
		cfg.capacity_bytes = a->cfg.ssd_size;
		cfg.durability = a->cfg.durability_strict ? KVP_SSD_STRICT :
							    KVP_SSD_RELAXED;
		cfg.giveback_cb = kvp_drv_giveback_cb;
		cfg.giveback_arg = d;
		cfg.reinsert_pct = a->cfg.ssd_reinsert_pct;
		cfg.header_cache_bytes = a->cfg.ssd_header_cache;
		cfg.write_depth = a->cfg.ssd_write_depth;
		/* the cores, shared by the drives' recoveries */
		cfg.recover_threads = kvp_drv_recover_threads(dv->n);
		cfg.reinsert_cb = kvp_drv_reinsert_cb;
		cfg.recover_prefetch = kvp_drv_recover_prefetch;
		rc = kvp_ssd_open_agent(&cfg, &d->ssd);
		if (!rc && kvp_drv_read_id(d->dir) == -ENOENT)
			rc = kvp_drv_write_id(d->dir, d->id);
		if (rc) {
			char why[160];

			snprintf(why, sizeof(why),
				 "cannot open the SSD store: %s",
				 strerror(-rc));
			if (d->ssd)
				kvp_ssd_close_agent(d->ssd);
			d->ssd = NULL;
			kvp_drv_set(dv, d, KVP_DRIVE_MISSING, why);
			continue;
		}
		if (stat(d->dir, &st) == 0) {
			d->dev = st.st_dev;
			d->ino = st.st_ino;
		}
		d->total = a->cfg.ssd_size;
		if (!d->total && statvfs(d->dir, &sv) == 0)
			d->total = (uint64_t)sv.f_blocks * sv.f_frsize;
		open++;
	}
	if (!open) {
		kvp_drv_close_agent(dv);
		return rc ? rc : -ENOENT;
	}
	kvp_drv_adopt_dirs(dv);
	/* recovery: one thread per drive (one drive: this thread) */
	for (k = 0; k < dv->n; k++) {
		struct kvp_drive *d = &dv->d[k];

		if (!d->ssd)
			continue;
		if (open > 1 && pthread_create(&th[k], NULL,
					       kvp_drv_recover_thread, d) == 0)
			started[k] = true;
		else
			kvp_drv_recover_thread(d);
	}
	for (k = 0; k < dv->n; k++)
		if (started[k])
			pthread_join(th[k], NULL);
	rc = 0;
	for (k = 0; k < dv->n; k++) {
		struct kvp_drive *d = &dv->d[k];
		char why[160];

		if (!d->ssd)
			continue;
		if (d->recovered < 0) {
			/* a store that cannot recover serves nothing (its
			 * records may be half reported: the index keeps what
			 * it took, reads of it are checked) */
			snprintf(why, sizeof(why), "recovery failed: %s",
				 strerror((int)-d->recovered));
			kvp_ssd_close_agent(d->ssd);
			d->ssd = NULL;
			kvp_drv_set(dv, d, KVP_DRIVE_MISSING, why);
			/* what it reported names a drive that serves
			 * nothing: gone (I32) */
			dv->own->drop_drives(a, 1u << d->id);
			/* relaxed: as in kvp_drv_adopt_dirs */
			kvp_store_relaxed(&a->seg.hdr->h_drive_dir_dev[d->id],
					  0);
			kvp_store_relaxed(&a->seg.hdr->h_drive_dir_ino[d->id],
					  0);
			if (--open == 0)
				rc = (int)d->recovered;
			continue;
		}
		kvp_log(KVP_LOG_INFO, "ssd",
			"drive %u in %s: %lld records recovered in %.3f s",
			d->id, d->dir, (long long)d->recovered,
			(double)d->recover_ns / 1e9);
		kvp_drv_publish_state(dv, d);
	}
	if (rc) {
		kvp_drv_close_agent(dv);
		return rc;
	}
	*out = dv;
	return 0;
}

void
kvp_drv_close_agent(struct kvp_drives *dv)
{
	unsigned k;

	if (!dv)
		return;
	for (k = 0; k < dv->n; k++)
		if (dv->d[k].ssd)
			kvp_ssd_close_agent(dv->d[k].ssd);
	kvp_wait_close_agent(dv->w);
	if (dv->efd >= 0)
		close(dv->efd);
	free(dv);
}

int64_t
kvp_drv_recovered_agent(const struct kvp_drives *dv)
{
	int64_t n = 0;
	unsigned k;

	for (k = 0; k < dv->n; k++)
		if (dv->d[k].ssd && dv->d[k].recovered > 0)
			n += dv->d[k].recovered;
	return n;
}

/* ---- I/O ---- */

/* Room left on drive d (as last published). */
static uint64_t
kvp_drv_room(const struct kvp_drive *d)
{
	return d->total > d->u.used_bytes ? d->total - d->u.used_bytes : 0;
}

/* The drive a value of key (ns, key) is written to first (see the top). */
static struct kvp_drive *
kvp_drv_place(struct kvp_drives *dv, uint64_t ns, const void *key,
	      uint32_t klen, uint64_t now)
{
	uint64_t h = kvp_key_hash(ns, key, klen), top = 0;
	struct kvp_drive *pref = &dv->d[0], *best = NULL;
	unsigned k;

	for (k = 0; k < dv->n; k++) {
		struct kvp_drive *d = &dv->d[k];
		/* rendezvous hashing on the drive's id: the order of
		 * --ssd-dir does not matter, and adding or leaving out a
		 * drive moves only the keys that go to or came from it */
		uint64_t w =
			(h ^ ((uint64_t)(d->id + 1) * 0x9e3779b97f4a7c15ull)) *
			0xff51afd7ed558ccdull;

		w ^= w >> 33;
		if (k == 0 || w > top) {
			top = w;
			pref = d;
		}
		if (kvp_drv_writable(d, now) &&
		    (!best || kvp_drv_room(d) > kvp_drv_room(best)))
			best = d;
	}
	if (!best || !kvp_drv_writable(pref, now))
		return best;
	/* much less room than the emptiest, and little left */
	if (kvp_drv_room(pref) < kvp_drv_room(best) / 4 &&
	    kvp_drv_room(pref) < pref->total / 10)
		return best;
	return pref;
}

/* A drive refused a request: FULL or FAILED, by its code. */
static void
kvp_drv_refused(struct kvp_drives *dv, struct kvp_drive *d, int rc)
{
	if (rc == -ENOSPC)
		kvp_drv_set(dv, d, KVP_DRIVE_FULL, "no room for a write");
	else if (rc != -EBUSY && rc != -EAGAIN && rc != -ENOMEM &&
		 rc != -EINVAL && rc != -E2BIG) {
		char why[96];

		d->errors++;
		snprintf(why, sizeof(why), "a write failed: %s", strerror(-rc));
		kvp_drv_set(dv, d, KVP_DRIVE_FAILED, why);
	}
}

/*
 * kvp_ssd_write_agent() on the drive the key is placed on, or, if that
 * one refuses (no room, an error, a veto), on each other writable drive.
 * Returns 0 or the most telling refusal: -EINVAL / -E2BIG at once (the
 * value's), -EBUSY (some drive's queue is full: soon), -EAGAIN (a veto:
 * soon), else -ENOSPC (no drive takes writes) or the first error.
 */
int
kvp_drv_write_agent(struct kvp_drives *dv, uint64_t tag, uint64_t ns,
		    const void *key, uint32_t klen, const struct iovec *src,
		    unsigned nsrc, unsigned flags)
{
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);
	struct kvp_drive *first = kvp_drv_place(dv, ns, key, klen, now);
	bool busy = false, again = false;
	int err = -ENOSPC;
	unsigned k, i0;

	if (!first)
		return -ENOSPC;
	i0 = (unsigned)(first - dv->d);
	for (k = 0; k < dv->n; k++) {
		struct kvp_drive *d = &dv->d[(i0 + k) % dv->n];
		int rc;

		if (!kvp_drv_writable(d, now))
			continue;
		rc = kvp_ssd_write_agent(d->ssd, tag, ns, key, klen, src, nsrc,
					 flags);
		if (!rc)
			return 0;
		if (rc == -EINVAL || rc == -E2BIG)
			return rc;
		busy |= rc == -EBUSY;
		again |= rc == -EAGAIN;
		if (err == -ENOSPC)
			err = rc;
		kvp_drv_refused(dv, d, rc);
	}
	return busy ? -EBUSY : again ? -EAGAIN : err;
}

/* A tombstone goes to the drive of the record it deletes.  A drive not
 * there (MISSING) has nothing to delete: a tombstone no one waits for
 * (tag 0) is done; one a strict delete waits for fails (-EIO). */
int
kvp_drv_tombstone_agent(struct kvp_drives *dv, uint64_t tag, uint64_t ns,
			const void *key, uint32_t klen, uint64_t target)
{
	struct kvp_drive *d = kvp_drv_of(dv, target);

	if (!d)
		return tag ? -EIO : 0;
	return kvp_ssd_tombstone_agent(d->ssd, tag, ns, key, klen,
				       KVP_DRV_RAW(target));
}

int
kvp_drv_read_agent(struct kvp_drives *dv, uint64_t tag,
		   const struct kvp_ssd_read *rd)
{
	struct kvp_drive *d = kvp_drv_of(dv, rd->loc);
	struct kvp_ssd_read x = *rd;

	if (!d)
		return -ENOENT;
	x.loc = KVP_DRV_RAW(rd->loc);
	return kvp_ssd_read_agent(d->ssd, tag, &x);
}

void
kvp_drv_submit_agent(struct kvp_drives *dv)
{
	unsigned k;

	for (k = 0; k < dv->n; k++)
		if (dv->d[k].ssd)
			kvp_ssd_submit_agent(dv->d[k].ssd);
}

unsigned
kvp_drv_outstanding_agent(const struct kvp_drives *dv)
{
	unsigned k, n = 0;

	for (k = 0; k < dv->n; k++)
		if (dv->d[k].ssd)
			n += kvp_ssd_outstanding_agent(dv->d[k].ssd);
	return n;
}

void
kvp_drv_pacer_agent(struct kvp_drives *dv, uint64_t out[3])
{
	struct kvp_ssd_stats st;
	unsigned k;

	out[0] = out[1] = out[2] = 0;
	for (k = 0; k < dv->n; k++) {
		if (!dv->d[k].ssd)
			continue;
		kvp_ssd_stats_agent(dv->d[k].ssd, &st);
		out[0] += st.write_parts;
		out[1] += st.write_pieces;
		out[2] += st.write_held_read;
	}
}

/* Completions of drive d: their locations gain its id; their statuses
 * tell its health. */
static void
kvp_drv_reaped(struct kvp_drives *dv, struct kvp_drive *d,
	       struct kvp_ssd_cqe *cq, int n)
{
	int k;

	for (k = 0; k < n; k++) {
		/* a store's location leaves the drive's bits free (I32) */
		KVP_ASSERT(KVP_DRV_OF(cq[k].loc) == 0, "I32");
		if (cq[k].loc)
			cq[k].loc = KVP_DRV_LOC(d->id, cq[k].loc);
		if (cq[k].status == -EIO) {
			char why[64];

			d->errors++;
			snprintf(why, sizeof(why), "%s error",
				 cq[k].op == KVP_SSD_OP_READ ? "read" :
							       "write");
			if (d->state != KVP_DRIVE_GONE)
				kvp_drv_set(dv, d, KVP_DRIVE_FAILED, why);
			else
				kvp_drv_publish_state(dv, d);
		} else if (cq[k].status == -ENOSPC &&
			   cq[k].op != KVP_SSD_OP_READ) {
			kvp_drv_set(dv, d, KVP_DRIVE_FULL,
				    "no room for a write");
		} else if (!cq[k].status && cq[k].op != KVP_SSD_OP_READ &&
			   (d->state == KVP_DRIVE_FULL ||
			    d->state == KVP_DRIVE_FAILED)) {
			kvp_drv_set(dv, d, KVP_DRIVE_OK, "a write succeeded");
		}
	}
}

/*
 * Reap up to max completions from every drive, the drives taken in turn
 * (one busy drive does not starve the others).  timeout_ms as
 * kvp_ssd_poll_agent(); with several drives busy, the wait is for any of
 * them (their rings signal one eventfd), in slices otherwise.
 */
int
kvp_drv_poll_agent(struct kvp_drives *dv, struct kvp_ssd_cqe *cq, unsigned max,
		   int timeout_ms)
{
	unsigned k, got = 0, busy = 0;
	struct kvp_drive *only = NULL;

	for (k = 0; k < dv->n && got < max; k++) {
		struct kvp_drive *d = &dv->d[(dv->next + k) % dv->n];
		int n;

		if (!d->ssd)
			continue;
		if (kvp_ssd_outstanding_agent(d->ssd)) {
			busy++;
			only = d;
		}
		n = kvp_ssd_poll_agent(d->ssd, cq + got, max - got, 0);
		if (n > 0) {
			kvp_drv_reaped(dv, d, cq + got, n);
			got += (unsigned)n;
		}
	}
	dv->next = dv->n ? (dv->next + 1) % dv->n : 0;
	if (got || !timeout_ms || !busy)
		return (int)got;
	if (busy == 1) {
		int n = kvp_ssd_poll_agent(only->ssd, cq, max, timeout_ms);

		if (n > 0)
			kvp_drv_reaped(dv, only, cq, n);
		return n;
	}
	if (kvp_drv_wait_agent(dv, NULL, 0, timeout_ms)) {
		/* no eventfd: a slice on one busy drive */
		int n = kvp_ssd_poll_agent(
			only->ssd, cq, max,
			timeout_ms < 0 || timeout_ms > 1 ? 1 : timeout_ms);

		if (n > 0)
			kvp_drv_reaped(dv, only, cq, n);
		return n;
	}
	return kvp_drv_poll_agent(dv, cq, max, 0);
}

int
kvp_drv_record_dead_agent(struct kvp_drives *dv, uint64_t loc, uint64_t vlen)
{
	struct kvp_drive *d = kvp_drv_of(dv, loc);

	return d ? kvp_ssd_record_dead_agent(d->ssd, KVP_DRV_RAW(loc), vlen) :
		   -ENOENT;
}

uint64_t
kvp_drv_max_value_agent(const struct kvp_drives *dv)
{
	uint64_t m = UINT64_MAX;
	unsigned k;

	for (k = 0; k < dv->n; k++)
		if (dv->d[k].ssd) {
			uint64_t v = kvp_ssd_max_value_agent(dv->d[k].ssd);

			if (v < m)
				m = v;
		}
	return m == UINT64_MAX ? 0 : m;
}

/* Does the segment of loc exist (on a drive that is there)? */
bool
kvp_drv_has_segment_agent(const struct kvp_drives *dv, uint64_t loc)
{
	const struct kvp_drive *d = dv->by_id[KVP_DRV_OF(loc)];
	struct kvp_ssd_seg_info si;

	return d && d->ssd &&
	       kvp_ssd_segment_info_agent(
		       d->ssd, KVP_SSD_LOC_SEG(KVP_DRV_RAW(loc)), &si) == 0;
}

void
kvp_drv_register_buffers_agent(struct kvp_drives *dv, const struct iovec *reg,
			       unsigned n)
{
	unsigned k;

	for (k = 0; k < dv->n; k++)
		if (dv->d[k].ssd)
			kvp_ssd_register_buffers_agent(dv->d[k].ssd, reg, n);
}

/* ---- health and usage ---- */

/* Is drive d's directory still the one it opened? */
static void
kvp_drv_check_dir(struct kvp_drives *dv, struct kvp_drive *d)
{
	struct stat st;

	if (!d->ssd || d->state == KVP_DRIVE_GONE)
		return;
	if (stat(d->dir, &st) || st.st_dev != d->dev || st.st_ino != d->ino)
		kvp_drv_set(dv, d, KVP_DRIVE_GONE,
			    "its directory was removed or replaced: no more "
			    "writes to it until a restart");
}

/*
 * Usage, summed over the drives, into *u; each drive's into the header;
 * and, once a second, each directory checked.  At most every 50 ms
 * (kvp_tier_publish).
 */
void
kvp_drv_usage_agent(struct kvp_drives *dv, struct kvp_ssd_usage *u,
		    uint64_t *total)
{
	struct kvp_shm_header *h = dv->a->seg.hdr;
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);
	bool check = now - dv->checked_ns >= KVP_DRV_CHECK_NS;
	unsigned k;

	if (check)
		dv->checked_ns = now;
	memset(u, 0, sizeof(*u));
	*total = 0;
	for (k = 0; k < dv->n; k++) {
		struct kvp_drive *d = &dv->d[k];

		if (!d->ssd)
			continue;
		if (check)
			kvp_drv_check_dir(dv, d);
		kvp_ssd_usage_agent(d->ssd, &d->u);
		u->used_bytes += d->u.used_bytes;
		u->live_bytes += d->u.live_bytes;
		u->capacity_bytes += d->u.capacity_bytes;
		u->nsegments += d->u.nsegments;
		*total += d->total;
		/* relaxed: statistics for readers of the header */
		kvp_store_relaxed(&h->h_drive_used[d->id], d->u.used_bytes);
		kvp_store_relaxed(&h->h_drive_total[d->id], d->total);
	}
}

/* ---- waiting ---- */

/* The eventfd every store signals when a completion is ready (created on
 * first use); -1 if there is none. */
int
kvp_drv_eventfd_agent(struct kvp_drives *dv)
{
	unsigned k;

	if (dv->efd >= 0)
		return dv->efd;
	dv->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (dv->efd < 0)
		return -1;
	for (k = 0; k < dv->n; k++)
		if (dv->d[k].ssd &&
		    kvp_ssd_set_eventfd_agent(dv->d[k].ssd, dv->efd)) {
			close(dv->efd);
			dv->efd = -1;
			return -1;
		}
	return dv->efd;
}

/*
 * Sleep until a completion is ready on any drive, or *word moves from val
 * (word != NULL: a client posted a request), or timeout_ms passes.
 * 0 (woken or timed out), or -ENOSYS: no such sleep here (io_uring
 * refused): the caller polls in slices as before.
 */
int
kvp_drv_wait_agent(struct kvp_drives *dv, const kvp_aint_t *word, unsigned val,
		   int timeout_ms)
{
	/* KVP_TIER_WAIT_SLICES=1: the old 1 ms slices (to measure) */
	if (!dv->w && !dv->wait_failed && getenv("KVP_TIER_WAIT_SLICES")) {
		kvp_log(KVP_LOG_INFO, "ssd",
			"KVP_TIER_WAIT_SLICES: the tier thread waits for I/O "
			"in 1 ms slices");
		dv->wait_failed = true;
	}
	if (!dv->w && !dv->wait_failed) {
		int efd = kvp_drv_eventfd_agent(dv), rc = -EBADF;

		if (efd < 0 || (rc = kvp_wait_open_agent(efd, &dv->w))) {
			kvp_log(KVP_LOG_INFO, "ssd",
				"no eventfd wait (%s): the tier thread waits "
				"for I/O in 1 ms slices",
				strerror(-rc));
			dv->wait_failed = true;
			dv->w = NULL;
		}
	}
	if (!dv->w)
		return -ENOSYS;
	return kvp_wait_agent(dv->w, word, val, timeout_ms) < 0 ? -ENOSYS : 0;
}
