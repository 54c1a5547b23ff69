/* SPDX-License-Identifier: MIT */
/*
 * segment.c - the agent's side of the segment: create it (fully
 * initialised under a temporary name, then linked into place so no client
 * ever sees half a header), or re-attach to the one a previous agent left;
 * restore the header's identity and geometry copies when a client
 * overwrote them, and the file's size when a client shrank it; remove it
 * at the end.
 */
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>

#include "agent/agent_int.h"
#include "index/index_int.h"

static uint64_t
kvp_pow2_at_least(uint64_t v)
{
	uint64_t p = 16;

	while (p < v)
		p <<= 1;
	return p;
}

/*
 * The geometry of a new segment for cfg, and the layout it implies (the
 * one layout table, kvp_layout_compute).  0, or -EINVAL with a log line
 * naming what is out of range.
 */
int
kvp_shm_geometry(const struct kvp_agent_cfg *cfg, struct kvp_geom *g,
		 struct kvp_layout *L)
{
	char msg[160];

	memset(g, 0, sizeof(*g));
	/* 2-choice buckets of 8 stay below ~95% before a bucket pair fills:
	 * size the table so the configured entries fit at <= 80% */
	g->g_index_slots =
		kvp_pow2_at_least(cfg->index_entries + cfg->index_entries / 4);
	g->g_index_limit = cfg->index_entries;
	g->g_dram_unit = cfg->dram_unit;
	g->g_dram_pages = cfg->dram_bytes / cfg->dram_unit;
	g->g_max_value = cfg->max_value;
	g->g_max_clients = cfg->max_clients;
	g->g_holds_per_client = cfg->holds_per_client;
	g->g_max_leases = KVP_MAX_LEASES;
	/* the clients' remote mailboxes: only with a remote tier */
	g->g_rbox_kib = cfg->cluster_url[0] ? KVP_RBOX_KIB_DEFAULT : 0;
	if (cfg->ssd_dir[0]) {
		g->g_ring_entries = KVP_RING_ENTRIES;
		g->g_staging_slots = cfg->staging_bytes / cfg->staging_slot;
		g->g_staging_slot_bytes = cfg->staging_slot;
	}
	if (kvp_layout_compute(g, L, msg, sizeof(msg))) {
		kvp_log(KVP_LOG_ERROR, "shm",
			"%s (from --dram, --dram-unit, --index-entries, "
			"--max-clients, --holds-per-client, --staging, --staging-slot)",
			msg);
		return -EINVAL;
	}
	g->g_seg_size = L->end;
	kvp_geom_seal(g);
	return 0;
}

static void
kvp_shm_init(struct kvp_seg *s, const struct kvp_agent_cfg *cfg,
	     const struct kvp_geom *g)
{
	struct kvp_shm_header *h = s->hdr;
	char msg[256];

	memset(h, 0, KVP_PAGE);
	h->h_abi_major = KVP_ABI_MAJOR;
	h->h_abi_minor = KVP_ABI_MINOR;
	h->h_features = KVP_FEATURES;
	h->h_layout_sig = kvp_layout_sig();
	h->h_create_ns = kvp_now_ns(CLOCK_REALTIME);
	snprintf(h->h_pool, sizeof(h->h_pool), "%s", cfg->pool);
	h->h_geom[0] = *g;
	h->h_geom[1] = *g;

	/* the rest of the segment is zero (a new file reads as zeros): all
	 * client slots FREE, all index slots EMPTY, no holds */
	kvp_shm_bind(s, msg, sizeof(msg)); /* sound: computed just above */
	/* the whole arena is the unpopulated tail: populate.c frees it as
	 * its pages are populated (nobody else can see it yet) */
	kvp_dram_init_unpop(s);
	/* release: the magic is the last word written; a reader that checks
	 * it sees the whole header (the link() below publishes anyway) */
	kvp_store_release((kvp_aword_t *)&h->h_magic, KVP_SHM_MAGIC);
}

/* The agent's name to the allocator lock (its claim lives in the header);
 * a claim its predecessor left is void. */
static void
kvp_shm_agent_token(struct kvp_seg *s)
{
	kvp_dram_claim_bind(s, KVP_LOCK_TOKEN_AGENT);
}

static int
kvp_shm_set_perms(int fd, const char *group)
{
	struct group *gr;

	if (!group[0])
		return fchmod(fd, 0600) < 0 ? -errno : 0;
	gr = getgrnam(group);
	if (!gr) {
		kvp_log(KVP_LOG_ERROR, "shm", "unknown group '%s'", group);
		return -EINVAL;
	}
	if (fchown(fd, (uid_t)-1, gr->gr_gid) < 0 || fchmod(fd, 0660) < 0)
		return -errno;
	return 0;
}

/* ---- the backing: tmpfs (4 KiB pages) or hugetlbfs (2 MiB pages) ---- */

#define KVP_HUGE_PAGE (2ull << 20)
#define KVP_HUGETLBFS_MAGIC 0x958458f6ul /* linux/magic.h */

/* A count from /sys/kernel/mm/hugepages/hugepages-2048kB/<what> (0 if
 * unreadable). */
static uint64_t
kvp_huge_count(const char *what)
{
	char path[128];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path),
		 "/sys/kernel/mm/hugepages/hugepages-2048kB/%s", what);
	f = fopen(path, "re");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

static int
kvp_huge_pick(const char *dir, void *arg)
{
	char *out = arg;

	if (strlen(dir) >= 200 || access(dir, W_OK) != 0)
		return 0;
	snprintf(out, 200, "%s", dir);
	return 1;
}

/*
 * Where a new segment goes: a hugetlbfs directory in dir (2 MiB pages), or
 * "" for /dev/shm.  With --hugepages auto, a host without a usable mount
 * or without enough free huge pages gets 4 KiB pages and one log line
 * saying why and how to enable them; with on, that is an error (-ENOMEM).
 */
static int
kvp_shm_backing(const struct kvp_agent_cfg *cfg, uint64_t size, char *dir)
{
	uint64_t need = size / KVP_HUGE_PAGE, avail;
	struct statfs fs;
	char why[256];

	dir[0] = 0;
	if (cfg->hugepages == KVP_HUGE_OFF)
		return 0;
	if (cfg->hugetlbfs[0])
		snprintf(dir, 200, "%s", cfg->hugetlbfs);
	else
		kvp_hugetlbfs_each(kvp_huge_pick, dir);
	avail = kvp_huge_count("free_hugepages") -
		kvp_huge_count("resv_hugepages");
	if (avail > kvp_huge_count("free_hugepages"))
		avail = 0;
	if (!dir[0])
		snprintf(
			why, sizeof(why),
			"no hugetlbfs mount of 2 MiB pages writable here "
			"(mount -t hugetlbfs -o pagesize=2M none /dev/hugepages)");
	else if (statfs(dir, &fs) != 0 ||
		 (unsigned long)fs.f_type != KVP_HUGETLBFS_MAGIC ||
		 (uint64_t)fs.f_bsize != KVP_HUGE_PAGE)
		snprintf(why, sizeof(why),
			 "%.150s is not a hugetlbfs mount of 2 MiB pages", dir);
	else if (avail < need)
		snprintf(why, sizeof(why),
			 "%llu free 2 MiB pages, the segment needs %llu "
			 "(echo %llu > /proc/sys/vm/nr_hugepages, or "
			 "vm.nr_hugepages in /etc/sysctl.conf)",
			 (unsigned long long)avail, (unsigned long long)need,
			 (unsigned long long)(kvp_huge_count("nr_hugepages") +
					      need - avail));
	else
		return 0;
	dir[0] = 0;
	if (cfg->hugepages == KVP_HUGE_ON) {
		kvp_log(KVP_LOG_ERROR, "shm", "--hugepages on: %s", why);
		return -ENOMEM;
	}
	kvp_log(KVP_LOG_INFO, "shm",
		"4 KiB pages (each worker maps the arena page by page): %s",
		why);
	return 0;
}

/* Parse a node list ("0", "0-3,8-11") into a mask; the highest node + 1. */
static unsigned
kvp_numa_online(unsigned long *mask, unsigned maxbits)
{
	char buf[256], *p = buf;
	unsigned top = 0;
	FILE *f = fopen("/sys/devices/system/node/online", "re");

	memset(mask, 0, maxbits / 8);
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	while (*p >= '0' && *p <= '9') {
		unsigned long lo = strtoul(p, &p, 10), hi = lo, k;

		if (*p == '-')
			hi = strtoul(p + 1, &p, 10);
		for (k = lo; k <= hi && k < maxbits; k++) {
			mask[k / (8 * sizeof(long))] |=
				1ul << (k % (8 * sizeof(long)));
			top = (unsigned)k + 1;
		}
		if (*p == ',')
			p++;
	}
	return top;
}

/*
 * Place the segment's memory (--numa): interleaved over every node (the
 * default on a multi-node host: workers on every socket read the arena),
 * or bound to one node.  Before any page is populated; the policy is the
 * file's (shared), so whichever process faults a page in, it lands there.
 * One log line on a single-node host.  0, or -EINVAL (no such node).
 */
static int
kvp_shm_numa(struct kvp_agent *a)
{
	unsigned long mask[16], one[16];
	unsigned top = kvp_numa_online(mask, sizeof(mask) * 8), n = 0, k;
	int mode, node = a->cfg.numa;
	long rc;

	for (k = 0; k < top; k++)
		n += (mask[k / (8 * sizeof(long))] >>
		      (k % (8 * sizeof(long)))) &
		     1;
	if (node == KVP_NUMA_OFF)
		return 0;
	if (node >= 0) {
		if ((unsigned)node >= top ||
		    !((mask[node / (8 * sizeof(long))] >>
		       (node % (8 * sizeof(long)))) &
		      1)) {
			kvp_log(KVP_LOG_ERROR, "numa",
				"--numa %d: no such node online (%u node%s)",
				node, n, n == 1 ? "" : "s");
			return -EINVAL;
		}
		memset(one, 0, sizeof(one));
		one[node / (8 * sizeof(long))] = 1ul
						 << (node % (8 * sizeof(long)));
		mode = 2; /* MPOL_BIND */
	} else if (n <= 1) {
		kvp_log(KVP_LOG_INFO, "numa",
			"one NUMA node: the segment needs no placement");
		return 0;
	} else {
		memcpy(one, mask, sizeof(one));
		mode = 3; /* MPOL_INTERLEAVE */
	}
	rc = syscall(SYS_mbind, a->seg.base, a->seg.size, mode, one,
		     (unsigned long)top + 1, 0ul);
	if (rc) {
		kvp_log(KVP_LOG_WARN, "numa",
			"mbind: %s (placement left to the "
			"kernel)",
			strerror(errno));
		return 0;
	}
	if (node >= 0)
		kvp_log(KVP_LOG_INFO, "numa", "segment bound to node %d", node);
	else
		kvp_log(KVP_LOG_INFO, "numa",
			"segment interleaved over %u nodes", n);
	return 0;
}

/*
 * Create the segment file under a temporary name in dir, size it and map
 * it: nothing is populated (populate.c does it behind the ready agent).
 * On tmpfs, /dev/shm must have the room now (later, a page it cannot give
 * would be a SIGBUS in whoever touches it); on hugetlbfs, the mapping
 * reserves every huge page at once.  0, -EEXIST (raced), or -errno.
 */
static int
kvp_shm_make(struct kvp_agent *a, const char *dir, const char *name, char *tmp,
	     size_t cap)
{
	struct kvp_seg *s = &a->seg;
	struct statvfs sv;
	int rc;

	snprintf(tmp, cap, "%.200s%s.new.%ld", dir, name, (long)getpid());
	s->fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		     0600);
	if (s->fd < 0) {
		rc = -errno;
		kvp_log(KVP_LOG_ERROR, "shm", "create %s: %s", tmp,
			strerror(-rc));
		return rc;
	}
	rc = kvp_shm_set_perms(s->fd, a->cfg.group);
	if (rc)
		goto err;
	if (!a->seg_page_bytes && fstatvfs(s->fd, &sv) == 0 &&
	    (uint64_t)sv.f_bavail * sv.f_frsize < s->size) {
		kvp_log(KVP_LOG_ERROR, "shm",
			"cannot reserve %llu MiB in %s: %llu MiB free "
			"(lower --dram or grow /dev/shm)",
			(unsigned long long)(s->size >> 20), dir,
			(unsigned long long)(((uint64_t)sv.f_bavail *
					      sv.f_frsize) >>
					     20));
		rc = -ENOSPC;
		goto err;
	}
	if (ftruncate(s->fd, (off_t)s->size) < 0) {
		rc = -errno;
		kvp_log(KVP_LOG_ERROR, "shm", "size %s: %s", tmp,
			strerror(-rc));
		goto err;
	}
	s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd,
		       0);
	if (s->base == MAP_FAILED) {
		rc = -errno;
		s->base = NULL;
		kvp_log(KVP_LOG_ERROR, "shm", "mmap %s: %s", tmp,
			strerror(-rc));
		goto err;
	}
	return 0;
err:
	unlink(tmp);
	close(s->fd);
	s->fd = -1;
	return rc;
}

static int
kvp_shm_create(struct kvp_agent *a, const char *name)
{
	struct kvp_agent_cfg *cfg = &a->cfg;
	struct kvp_seg *s = &a->seg;
	char tmp[320], final[320], dir[200], found[320];
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC);
	struct kvp_layout L;
	struct kvp_geom g;
	int rc, fd;

	rc = kvp_shm_geometry(cfg, &g, &L);
	if (rc)
		return rc;
	/* a segment of this pool anywhere (/dev/shm or a hugetlbfs mount):
	 * re-attach to it, never make a second one */
	fd = kvp_shm_open_path(name, O_RDONLY | O_NONBLOCK, found,
			       sizeof(found));
	if (fd >= 0 || fd != -ENOENT) {
		if (fd >= 0)
			close(fd);
		return -EEXIST;
	}
	s->size = g.g_seg_size;
	rc = kvp_shm_backing(cfg, s->size, dir);
	if (rc)
		return rc;
	a->seg_page_bytes = dir[0] ? KVP_HUGE_PAGE : 0;
	rc = dir[0] ? kvp_shm_make(a, dir, name, tmp, sizeof(tmp)) : -1;
	if (rc && dir[0]) {
		if (cfg->hugepages == KVP_HUGE_ON)
			return rc;
		kvp_log(KVP_LOG_INFO, "shm",
			"4 KiB pages: the huge page pool in %s could not back "
			"the segment (%s)",
			dir, strerror(-rc));
		dir[0] = 0;
		a->seg_page_bytes = 0;
	}
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/dev/shm");
		rc = kvp_shm_make(a, dir, name, tmp, sizeof(tmp));
		if (rc)
			return rc;
	}
	snprintf(final, sizeof(final), "%.200s%s", dir, name);
	rc = kvp_shm_numa(a);
	if (rc)
		goto err_unmap;
	s->hdr = (struct kvp_shm_header *)s->base;
	kvp_shm_init(s, cfg, &g);
	kvp_shm_agent_token(s);
	rc = kvp_shm_lock_take(s->fd, KVP_LOCK_AGENT);
	if (rc)
		goto err_unmap;
	if (link(tmp, final) < 0) {
		rc = -errno;
		goto err_unmap;
	}
	unlink(tmp);
	snprintf(s->path, sizeof(s->path), "%s", final);
	kvp_log(KVP_LOG_INFO, "shm",
		"created %s: %llu MiB (DRAM %llu MiB in %llu "
		"units of %llu KiB, index %llu slots, %u clients; %s pages) "
		"in %.3f s",
		final, (unsigned long long)(s->size >> 20),
		(unsigned long long)((g.g_dram_pages * g.g_dram_unit) >> 20),
		(unsigned long long)g.g_dram_pages,
		(unsigned long long)(g.g_dram_unit >> 10),
		(unsigned long long)g.g_index_slots, g.g_max_clients,
		a->seg_page_bytes ? "2 MiB" : "4 KiB",
		(double)(kvp_now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
	return 0;

err_unmap:
	munmap(s->base, s->size);
	s->base = NULL;
	unlink(tmp);
	close(s->fd);
	s->fd = -1;
	return rc;
}

/*
 * The agent's rule for a segment it did not create (on top of the
 * client's, kvp_shm_trusted): it must be owned by the agent's effective
 * uid, and writable by group only as --group made it (mode 0660, the
 * configured group).  A segment someone else created first (squatting the
 * pool's name) would hand them everything the pool's users store.  Before
 * anything is written to it.  0, or -EACCES with a log line that says
 * what to remove.
 */
static int
kvp_shm_check_adopt_agent(struct kvp_agent *a, const char *name)
{
	const char *group = a->cfg.group;
	struct stat st;
	struct group *gr = NULL;
	unsigned mode;

	if (fstat(a->seg.fd, &st) < 0)
		return -errno;
	mode = (unsigned)(st.st_mode & 07777);
	if (st.st_uid != geteuid()) {
		kvp_log(KVP_LOG_ERROR, "shm",
			"/dev/shm%s is owned by uid %u, not by this "
			"agent's uid %u: refused (another user created it); remove it "
			"(rm /dev/shm%s) unless that user's agent serves this pool, and restart",
			name, (unsigned)st.st_uid, (unsigned)geteuid(), name);
		return -EACCES;
	}
	if (group[0])
		gr = getgrnam(group);
	if (group[0] && !gr) {
		kvp_log(KVP_LOG_ERROR, "shm", "unknown group '%s'", group);
		return -EINVAL;
	}
	if (mode & S_IWOTH) { /* kvp_shm_trusted refused it already */
		kvp_log(KVP_LOG_ERROR, "shm",
			"/dev/shm%s is writable by everyone (mode "
			"%04o): refused; remove it and restart",
			name, mode);
		return -EACCES;
	}
	if ((mode & S_IWGRP) && !gr) {
		kvp_log(KVP_LOG_ERROR, "shm",
			"/dev/shm%s is writable by gid %u (mode %04o) "
			"and this agent has no --group: refused; restart with the --group it "
			"was made for, or remove it (rm /dev/shm%s) and restart",
			name, (unsigned)st.st_gid, mode, name);
		return -EACCES;
	}
	if ((mode & S_IWGRP) && (st.st_gid != gr->gr_gid || mode != 0660)) {
		kvp_log(KVP_LOG_ERROR, "shm",
			"/dev/shm%s is writable by gid %u (mode %04o), "
			"not the 0660 segment of --group %s (gid %u): refused; restart with "
			"the --group it was made for, or remove it (rm /dev/shm%s) and restart",
			name, (unsigned)st.st_gid, mode, group,
			(unsigned)gr->gr_gid, name);
		return -EACCES;
	}
	if (gr && (st.st_gid != gr->gr_gid || mode != 0660)) {
		/* ours and private: share it as this agent was asked to */
		int rc = kvp_shm_set_perms(a->seg.fd, group);

		if (rc)
			return rc;
		kvp_log(KVP_LOG_INFO, "shm",
			"/dev/shm%s: mode 0660 for --group %s", name, group);
	}
	return 0;
}

/* Re-attach to a live segment after an agent restart: validate, lock,
 * bump the incarnation, repair what the previous agent left mid-way. */
static int
kvp_shm_attach(struct kvp_agent *a, const char *name)
{
	struct kvp_seg *s = &a->seg;
	char msg[512];
	uint64_t inc;
	unsigned cleared;
	int rc;

	rc = kvp_seg_map(a->cfg.pool, true, s, msg, sizeof(msg));
	if (rc) {
		kvp_log(KVP_LOG_ERROR, "shm", "cannot attach to %s: %s", name,
			msg);
		return rc;
	}
	rc = kvp_shm_check_adopt_agent(a, name);
	if (rc) {
		kvp__seg_unmap(s);
		return rc;
	}
	rc = kvp_shm_lock_take(s->fd, KVP_LOCK_AGENT);
	if (rc) {
		kvp_log(KVP_LOG_ERROR, "agent",
			"another kvpoold (pid %llu) is serving "
			"pool '%s'",
			(unsigned long long)kvp_load_relaxed(
				&s->hdr->h_agent_pid),
			a->cfg.pool);
		kvp__seg_unmap(s);
		return -EADDRINUSE;
	}
	kvp_shm_agent_token(s);
	{
		struct statfs fs;

		a->seg_page_bytes =
			fstatfs(s->fd, &fs) == 0 &&
					(unsigned long)fs.f_type ==
						KVP_HUGETLBFS_MAGIC ?
				KVP_HUGE_PAGE :
				0;
	}
	/* full: the incarnation tells workers an agent restarted */
	inc = kvp_fetch_add(&s->hdr->h_incarnation, 1) + 1;
	kvp_crashpoint(A_ATTACH);
	/* bins a dead predecessor may have left half-updated; a client
	 * holding the lock (maybe stopped) is not waited for long: the
	 * bins are sound unless someone died holding it, which the next
	 * locker repairs anyway */
	rc = kvp_dram_lock_until(s,
				 kvp_now_ns(CLOCK_MONOTONIC) + 2000000000ull);
	if (rc == 0) {
		rc = kvp_dram_rebuild_locked(s);
		kvp_dram_unlock(s);
	}
	if (rc == -EBUSY) {
		kvp_log(KVP_LOG_WARN, "dram",
			"the allocator lock is held by a live client: "
			"bins not rebuilt at attach");
	} else if (rc) {
		/* a broken run chain: the tier thread rebuilds the map from
		 * the index (kvp_dram_repair_agent) */
		kvp_log(KVP_LOG_WARN, "dram",
			"allocator map damaged (%s): the agent "
			"repairs it from the index",
			kvp_strerror(rc));
		kvp_dram_report_damage(s);
	}
	cleared = kvp_ix_clear_stale_agent(s, a->cfg.ssd_dir[0] != 0);
	a->cfg.dram_unit = s->g.g_dram_unit;
	a->cfg.max_clients = s->g.g_max_clients;
	kvp_log(KVP_LOG_INFO, "shm",
		"re-attached to %s (incarnation %llu, %llu MiB, "
		"existing geometry kept; %u interrupted checks undone)",
		name, (unsigned long long)inc,
		(unsigned long long)(s->size >> 20), cleared);
	return 0;
}

/*
 * A shrunk segment file.  Anyone who may write the segment may also
 * ftruncate its file, and every access of the agent past the new end is
 * a SIGBUS: one call of a hostile or broken client would kill the agent.
 * The guard: a SIGBUS at an address of the segment while the file is
 * shorter than the segment restores the file's size (ftruncate,
 * async-signal-safe) and returns, so the access is made again and finds
 * a page of zeros; the reaper sees the count, says so and repairs what
 * it can (kvp_shm_check_size_agent).  Any other SIGBUS (the file is whole:
 * /dev/shm out of room, a bad huge page) takes the default action, as it
 * did without the guard.  The bytes past the cut are lost (the index
 * entries there read EMPTY: their keys are misses; the header is
 * restored from the agent's copy), never a crash.
 */
static unsigned char *kvp_guard_base;
static uint64_t kvp_guard_size;
static int kvp_guard_fd = -1;
static kvp_aword_t kvp_guard_hits; /* SIGBUSes the guard absorbed */
static kvp_aword_t kvp_guard_cut;  /* the shortest size seen there + 1 */

/* Lower *w to v + 1 unless it is lower (0: none yet); lock-free. */
static void
kvp_cut_min(kvp_aword_t *w, uint64_t v)
{
	for (;;) {
		/* acquire: the word as others left it */
		uint64_t o = kvp_load_acquire(w);

		/* full CAS: the lower cut wins */
		if ((o && o <= v + 1) || kvp_cas(w, o, v + 1))
			return;
	}
}

static void
kvp_shm_on_sigbus(int sig, siginfo_t *si, void *uc)
{
	/* this thread's faults in a row at one address with the file whole:
	 * another thread restored the size first (retry), or the fault is
	 * not a cut (after a few: the default action) */
	static __thread unsigned char *last;
	static __thread unsigned again;
	unsigned char *p = (unsigned char *)si->si_addr;
	struct stat st;

	(void)uc;
	if (kvp_guard_fd < 0 || p < kvp_guard_base ||
	    p >= kvp_guard_base + kvp_guard_size ||
	    fstat(kvp_guard_fd, &st) < 0) {
		signal(sig, SIG_DFL); /* faults again: the default action */
		return;
	}
	if ((uint64_t)st.st_size < kvp_guard_size) {
		kvp_cut_min(&kvp_guard_cut, (uint64_t)st.st_size);
		if (ftruncate(kvp_guard_fd, (off_t)kvp_guard_size) < 0) {
			signal(sig, SIG_DFL);
			return;
		}
		/* a lock-free add: async-signal-safe; read by the reaper */
		kvp_fetch_add(&kvp_guard_hits, 1);
		last = p;
		again = 0;
		return;
	}
	again = p == last ? again + 1 : 1;
	last = p;
	if (again > 3)
		signal(sig, SIG_DFL);
}

static int
kvp_shm_guard(struct kvp_agent *a)
{
	struct sigaction sa;

	kvp_guard_base = a->seg.base;
	kvp_guard_size = a->seg.size;
	kvp_guard_fd = a->seg.fd;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = kvp_shm_on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL) < 0) {
		kvp_log(KVP_LOG_ERROR, "shm", "sigaction(SIGBUS): %s",
			strerror(errno));
		return -errno;
	}
	return 0;
}

/*
 * The segment file's size, each reaper round: a client that shrank it is
 * undone here even before any access faults (and counted when one did).
 * Returns 1 when the size was restored this round.
 */
int
kvp_shm_check_size_agent(struct kvp_agent *a)
{
	static uint64_t hits_seen;
	struct kvp_seg *s = &a->seg;
	struct stat st;
	uint64_t hits;
	int fixed = 0;

	if (fstat(s->fd, &st) == 0 && (uint64_t)st.st_size < s->size) {
		kvp_cut_min(&a->cut_due, (uint64_t)st.st_size);
		kvp_log(KVP_LOG_ERROR, "shm",
			"%s was cut to %llu of %llu bytes by another process "
			"(ftruncate): size restored; what lay past the cut is "
			"lost (its keys read as misses)",
			s->path, (unsigned long long)st.st_size,
			(unsigned long long)s->size);
		if (ftruncate(s->fd, (off_t)s->size) < 0)
			kvp_log(KVP_LOG_ERROR, "shm",
				"restoring the size of %s: %s", s->path,
				strerror(errno));
		fixed = 1;
	}
	/* acquire: pairs with the handler's add (another thread's, maybe) */
	hits = kvp_load_acquire(&kvp_guard_hits);
	{
		/* acquire: pairs with the handler's CAS; the cut it saw is
		 * the tier thread's to undo now (full CAS: taken once) */
		uint64_t c = kvp_load_acquire(&kvp_guard_cut);

		if (c && kvp_cas(&kvp_guard_cut, c, 0))
			kvp_cut_min(&a->cut_due, c - 1);
	}
	if (hits != hits_seen) {
		kvp_log(KVP_LOG_ERROR, "shm",
			"%llu access(es) past a cut of %s faulted and were "
			"served zeros after the size was restored",
			(unsigned long long)(hits - hits_seen), s->path);
		hits_seen = hits;
		fixed = 1;
	}
	if (fixed) {
		/* the allocator's map may be zeros now: verify and repair;
		 * the index count counted entries that are gone: recount; the
		 * header's own words, if the cut took them: publish again
		 * (identity and geometry: kvp_shm_repair_header_agent) */
		kvp_dram_report_damage(s);
		kvp_store_release(&a->ix_recount_due, 1); /* release: flag */
		kvp_shm_publish_agent(a);
	}
	return fixed;
}

/* The header's words the agent owns besides identity and geometry: its
 * policy (hints clients read), its pid, start time and incarnation.  At
 * start, and again after a cut of the file may have zeroed them. */
void
kvp_shm_publish_agent(struct kvp_agent *a)
{
	struct kvp_shm_header *h = a->seg.hdr;
	const struct kvp_agent_cfg *cfg = &a->cfg;

	/* plain words the agent alone writes (read by clients as they pin,
	 * put, delete: hints) */
	h->h_max_pinned = cfg->max_pinned;
	h->h_dram_high_pct = cfg->dram_high_pct;
	h->h_dram_low_pct = cfg->dram_low_pct;
	h->h_durability = cfg->ssd_dir[0] && cfg->durability_strict;
	kvp_tier_publish_enabled_agent(a); /* h_ssd_enabled: agent/tier.c's */
	/* relaxed: for humans and tools */
	kvp_store_relaxed(&h->h_agent_start_ns, a->start_ns);
	if (kvp_load_relaxed(&h->h_incarnation) != a->incarnation)
		kvp_store_relaxed(&h->h_incarnation, a->incarnation);
	/* release: the words above before the pid that says we serve */
	kvp_store_release(&h->h_agent_pid, (uint64_t)getpid());
}

int
kvp_shm_create_or_attach_agent(struct kvp_agent *a)
{
	char name[KVP_POOL_NAME_MAX + 16];
	int rc, tries;

	rc = kvp_shm_name(a->cfg.pool, name, sizeof(name));
	if (rc) {
		kvp_log(KVP_LOG_ERROR, "agent", "bad pool name '%s'",
			a->cfg.pool);
		return rc;
	}
	a->seg_created = false;
	for (tries = 0; tries < 3; tries++) {
		rc = kvp_shm_create(a, name);
		if (rc != -EEXIST) {
			a->seg_created = rc == 0;
			break;
		}
		rc = kvp_shm_attach(a, name);
		if (rc != -ENOTCONN) /* vanished in between: create again */
			break;
	}
	if (rc)
		return rc;
	/* whatever a previous agent left of the index count: recount it (a
	 * segment just created counts 0 of 0 entries: nothing to recount,
	 * and a full scan of the index in the first round would make the
	 * first putter that finds DRAM full wait for it) */
	if (!a->seg_created)
		/* release: no threads yet */
		kvp_store_release(&a->ix_recount_due, 1);
	else /* the first recount every 10 s is 10 s on */
		a->ix_recount_ns = kvp_now_ns(CLOCK_MONOTONIC);
	rc = kvp_shm_guard(a);
	if (rc)
		return rc;
	if (a->seg.hdr->h_incarnation == 0)
		/* first agent: 1 */
		kvp_fetch_add(&a->seg.hdr->h_incarnation, 1);
	/* relaxed: ours from here on (kvp_shm_publish_agent) */
	a->incarnation = kvp_load_relaxed(&a->seg.hdr->h_incarnation);
	return 0;
}

/*
 * The header's identity and geometry copies are for other processes; the
 * agent's own are private (a->seg.g).  A copy that no longer matches (a
 * stray or hostile write) is rewritten, one copy at a time, so a process
 * mapping the segment meanwhile always finds one sound copy.  Returns the
 * number of fields repaired.  Reaper thread, every round.
 */
unsigned
kvp_shm_repair_header_agent(struct kvp_agent *a)
{
	struct kvp_shm_header *h = a->seg.hdr;
	unsigned k, n = 0;

	for (k = 0; k < 2; k++) {
		if (!memcmp(&h->h_geom[k], &a->seg.g, sizeof(a->seg.g)))
			continue;
		memcpy(&h->h_geom[k], &a->seg.g, sizeof(a->seg.g));
		n++;
	}
	if (h->h_abi_major != KVP_ABI_MAJOR ||
	    h->h_abi_minor != KVP_ABI_MINOR ||
	    h->h_layout_sig != kvp_layout_sig()) {
		h->h_abi_major = KVP_ABI_MAJOR;
		h->h_abi_minor = KVP_ABI_MINOR;
		h->h_layout_sig = kvp_layout_sig();
		n++;
	}
	/* relaxed: the magic is only ever this value once created */
	if (kvp_load_relaxed((kvp_aword_t *)&h->h_magic) != KVP_SHM_MAGIC) {
		/* release */
		kvp_store_release((kvp_aword_t *)&h->h_magic, KVP_SHM_MAGIC);
		n++;
	}
	if (n)
		kvp_log(KVP_LOG_WARN, "shm",
			"the segment header was overwritten by a "
			"client (%u fields): restored from the agent's own copy",
			n);
	return n;
}

int
kvp_shm_remove_agent(struct kvp_agent *a)
{
	char name[KVP_POOL_NAME_MAX + 16];

	if (kvp_shm_name(a->cfg.pool, name, sizeof(name)) || !a->seg.path[0])
		return -EINVAL;
	return unlink(a->seg.path) < 0 ? -errno : 0;
}
