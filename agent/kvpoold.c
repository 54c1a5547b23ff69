/* SPDX-License-Identifier: MIT */
/*
 * kvpoold - the per-node kvpool agent.
 *
 * Owns the segment's lifecycle (creates it, or re-attaches after a
 * restart), runs the evictor and the reaper.  Workers never talk to it on
 * the hot path: they share the segment.
 */
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>

#include "agent/agent_int.h"
#include "agent/options.h"
#include "tiers/kvp_ssd.h"

/* The node's RAM (1 GiB if unknown). */
static uint64_t
kvp_ram_bytes(void)
{
	struct sysinfo si;

	if (sysinfo(&si) == 0)
		return (uint64_t)si.totalram * si.mem_unit;
	return 1ull << 30;
}

/* /dev/shm's free bytes (UINT64_MAX if unknown). */
static uint64_t
kvp_shm_free_bytes(void)
{
	struct statvfs sv;

	if (statvfs("/dev/shm", &sv) == 0)
		return (uint64_t)sv.f_bavail * sv.f_frsize;
	return UINT64_MAX;
}

static uint64_t
kvp_default_dram(void)
{
	uint64_t ram = kvp_ram_bytes(), shm_free = kvp_shm_free_bytes(), d;

	d = ram / 8;
	if (d > shm_free / 2)
		d = shm_free / 2;
	if (d < (64ull << 20))
		d = 64ull << 20;
	return d;
}

/* Segment bytes per index slot: its state word and its entry. */
#define KVP_INDEX_SLOT_BYTES (sizeof(kvp_aword_t) + sizeof(struct kvp_entry))

/*
 * The default --index-entries: one entry per DRAM unit (at least 65536:
 * every value takes a unit or more, so the index never refuses a value
 * DRAM has room for), and with an SSD tier of known size (--ssd-size) one
 * more per value of one unit the tier can hold (a record of one takes
 * kvp_ssd_record_bytes(unit) on disk: 16.25 KiB for the default 16 KiB,
 * its share of a batch's header block included),
 * so that the index limit does not drop values the SSD tier has room
 * for.  --dram-unit is the operator's word for the smallest value.  The index lives
 * in the segment: 328 bytes a slot, and segment.c gives N entries the
 * power of two of slots at or above 1.25 N (410 to 820 bytes an entry),
 * so the SSD tier's share is capped: the whole index within an eighth
 * of RAM and within half of what /dev/shm has free beside the DRAM tier
 * (the log says when the cap binds).  Without --ssd-size the tier may
 * grow to its whole file system, which says nothing about how much of it
 * the pool will use: DRAM's share only (the log says so).
 */
static void
kvp_default_index(struct kvp_agent_cfg *cfg)
{
	uint64_t dram = cfg->dram_bytes / cfg->dram_unit, ssd = 0;
	uint64_t budget = kvp_ram_bytes() / 8, shm = kvp_shm_free_bytes();
	uint64_t slots = 16, cap;

	if (dram < 65536)
		dram = 65536;
	if (cfg->ssd_dir[0] && cfg->ssd_size)
		ssd = cfg->ssd_size / kvp_ssd_record_bytes(cfg->dram_unit) *
		      (cfg->nssd_dirs ? cfg->nssd_dirs : 1);
	if (shm != UINT64_MAX) {
		uint64_t left = shm > cfg->dram_bytes ? shm - cfg->dram_bytes :
							0;
		if (budget > left / 2)
			budget = left / 2;
	}
	/* the most slots the budget buys (a power of two), filled to 4/5 at
	 * most: kvp_shm_geometry sizes N entries at 1.25 N slots, rounded up */
	while (slots < KVP_MAX_INDEX_SLOTS &&
	       slots * 2 * KVP_INDEX_SLOT_BYTES <= budget)
		slots <<= 1;
	cap = slots / 5 * 4;
	cfg->index_dram_share = dram;
	cfg->index_ssd_want = ssd;
	cfg->index_ssd_share = dram + ssd <= cap ? ssd :
			       cap > dram        ? cap - dram :
						   0;
	cfg->index_entries = dram + cfg->index_ssd_share;
}

/* What the index of a segment this agent created costs, and what its
 * default (kvp_default_index) was made of. */
static void
kvp_log_index(const struct kvp_agent *a)
{
	const struct kvp_agent_cfg *cfg = &a->cfg;
	uint64_t slots = a->seg.g.g_index_slots, limit = a->seg.g.g_index_limit,
		 bytes = slots * KVP_INDEX_SLOT_BYTES;

	kvp_log(KVP_LOG_INFO, "agent",
		"index: %llu entries in %llu slots, %llu MiB (%llu bytes an "
		"entry)%s",
		(unsigned long long)limit, (unsigned long long)slots,
		(unsigned long long)(bytes >> 20),
		(unsigned long long)(limit ? bytes / limit : 0),
		cfg->index_dram_share ? "" : " (--index-entries)");
	if (!cfg->index_dram_share)
		return;
	kvp_log(KVP_LOG_INFO, "agent",
		"index by default: %llu entries for DRAM and %llu for the SSD "
		"tier (one per value of one --dram-unit, %llu KiB, each "
		"holds)",
		(unsigned long long)cfg->index_dram_share,
		(unsigned long long)cfg->index_ssd_share,
		(unsigned long long)(cfg->dram_unit >> 10));
	if (cfg->index_ssd_share < cfg->index_ssd_want)
		kvp_log(KVP_LOG_WARN, "agent",
			"the SSD tier holds about %llu values of one unit but "
			"the index has room for %llu of them (the default "
			"index stays within 1/8 of RAM and half of /dev/shm's "
			"free space): index pressure will drop SSD-resident "
			"values; give --index-entries to choose",
			(unsigned long long)cfg->index_ssd_want,
			(unsigned long long)cfg->index_ssd_share);
	if (cfg->ssd_dir[0] && !cfg->ssd_size)
		kvp_log(KVP_LOG_INFO, "agent",
			"no --ssd-size: the default index is sized for DRAM "
			"only; give --ssd-size (or --index-entries) to size "
			"it for the SSD tier too");
}

/*
 * Is the log file we opened ours?  A regular file owned by our effective
 * uid: a file another user made (or a device, a FIFO) is refused, never
 * appended to.  0, or -1 after a message on stderr.
 */
static int
kvp_log_check(int fd, const char *path)
{
	struct stat st;

	if (fstat(fd, &st) < 0) {
		fprintf(stderr, "kvpoold: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr,
			"kvpoold: log %s is not a regular file: refused (use "
			"--foreground to log to stderr)\n",
			path);
		return -1;
	}
	if (st.st_uid != geteuid()) {
		fprintf(stderr,
			"kvpoold: log %s is owned by uid %u, not by this agent's "
			"uid %u: refused; remove it, or give --log a file of your own\n",
			path, (unsigned)st.st_uid, (unsigned)geteuid());
		return -1;
	}
	/* O_NONBLOCK only kept a FIFO from blocking the open */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return 0;
}

/*
 * Open the daemon's log, before it forks (a refusal is said on the
 * terminal).  Never through a symlink (O_NOFOLLOW: a link planted in the
 * log's place is refused, not followed), created 0600, appended to only if
 * it is a regular file of ours.  --log FILE: that file.  Otherwise
 * <run>/kvpool/kvpoold.<pool>.log, <run> being /run for root and
 * $XDG_RUNTIME_DIR for other users: the kvpool directory is created 0700
 * and must be ours and writable by no one else, so no other user can
 * plant or pre-create the log (in /tmp anyone could do both).  Returns
 * the fd (path in path), or -1 after a message on stderr.
 */
static int
kvp_log_open(const char *pool, const char *given, char *path, size_t cap)
{
	const int flags = O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW |
			  O_NONBLOCK | O_CLOEXEC;
	const char *run = geteuid() == 0 ? "/run" : getenv("XDG_RUNTIME_DIR");
	char dir[512], file[KVP_POOL_NAME_MAX + 16];
	struct stat st;
	int dfd, fd;

	if (given) {
		snprintf(path, cap, "%s", given);
		fd = open(given, flags, 0600);
		if (fd < 0) {
			int err = errno;
			struct stat lst;
			bool seen = lstat(given, &lst) == 0;

			/* say why (a kernel may answer EACCES, not ELOOP, for
			 * a symlink in a sticky directory) */
			if (seen && S_ISLNK(lst.st_mode)) {
				fprintf(stderr,
					"kvpoold: log %s is a symlink: refused (never "
					"followed); give --log the file itself\n",
					given);
				return -1;
			}
			/* protected_regular refuses another user's file in a
			 * sticky directory: say whose it is */
			if (err == EACCES && seen && lst.st_uid != geteuid()) {
				fprintf(stderr,
					"kvpoold: log %s is owned by uid %u, not by "
					"this agent's uid %u: refused; remove it, or give "
					"--log a file of your own\n",
					given, (unsigned)lst.st_uid,
					(unsigned)geteuid());
				return -1;
			}
			fprintf(stderr, "kvpoold: cannot open the log %s: %s\n",
				given, strerror(err));
			return -1;
		}
		if (kvp_log_check(fd, given)) {
			close(fd);
			return -1;
		}
		return fd;
	}
	if (!run || run[0] != '/' || strlen(run) > sizeof(dir) - 16) {
		fprintf(stderr,
			"kvpoold: no private directory for the log: XDG_RUNTIME_DIR "
			"is not set (a login session sets it); give --log FILE, or "
			"--foreground to log to stderr\n");
		return -1;
	}
	snprintf(dir, sizeof(dir), "%s/kvpool", run);
	snprintf(file, sizeof(file), "kvpoold.%s.log", pool);
	snprintf(path, cap, "%s/%s", dir, file);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr,
			"kvpoold: cannot create %s for the log: %s; give --log FILE, "
			"or --foreground to log to stderr\n",
			dir, strerror(errno));
		return -1;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0 || fstat(dfd, &st) < 0) {
		fprintf(stderr, "kvpoold: %s: %s%s\n", dir, strerror(errno),
			errno == ELOOP || errno == ENOTDIR ?
				" (must be a directory, not a "
				"symlink: remove it)" :
				"");
		if (dfd >= 0)
			close(dfd);
		return -1;
	}
	if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		fprintf(stderr,
			"kvpoold: %s (uid %u, mode %04o) must be owned by this "
			"agent's uid %u and writable by no one else: refused for the log; "
			"remove it (rm -r %s) or chmod go-w %s\n",
			dir, (unsigned)st.st_uid,
			(unsigned)(st.st_mode & 07777), (unsigned)geteuid(),
			dir, dir);
		close(dfd);
		return -1;
	}
	fd = openat(dfd, file, flags, 0600);
	close(dfd);
	if (fd < 0) {
		fprintf(stderr, "kvpoold: cannot open the log %s: %s\n", path,
			strerror(errno));
		return -1;
	}
	if (kvp_log_check(fd, path)) {
		close(fd);
		return -1;
	}
	return fd;
}

static volatile sig_atomic_t kvp_got_signal;

static void
kvp_on_signal(int sig)
{
	kvp_got_signal = sig;
}

static bool
kvp_any_client_alive(struct kvp_seg *s)
{
	uint32_t i;

	for (i = 0; i < s->g.g_max_clients; i++) {
		/* acquire: pairs with the claim CAS */
		uint64_t w = kvp_load_acquire(&s->clients[i].cs_state);
		if (KVP_CS_STATE(w) != KVP_CS_FREE &&
		    kvp_shm_client_alive(s, i))
			return true;
	}
	return false;
}

/*
 * The start failed after the segment was there.  A segment this agent
 * created is removed (nothing was served from it; left in place, the next
 * start would re-attach to it with these sizes), unless a client mapped it
 * meanwhile; one it re-attached to is kept (its values and its clients
 * are the previous agent's).
 */
static void
kvp_start_failed(struct kvp_agent *a)
{
	/* release: the populate threads stop at their next chunk */
	kvp_store_release(&a->stop, 1);
	kvp_populate_stop_agent(a);
	if (a->seg_created && !kvp_any_client_alive(&a->seg)) {
		kvp_shm_remove_agent(a);
		kvp_log(KVP_LOG_INFO, "agent",
			"start failed: the segment it created, %s, removed",
			a->seg.path);
	} else {
		kvp_log(KVP_LOG_INFO, "agent", "start failed: %s kept (%s)",
			a->seg.path,
			a->seg_created ? "a client maps it" : "re-attached to");
	}
	kvp__seg_unmap(&a->seg);
}

int
main(int argc, char **argv)
{
	static struct kvp_agent agent;
	struct kvp_agent *a = &agent;
	struct kvp_agent_cfg *cfg = &a->cfg;
	char logpath[sizeof(cfg->log_file) + 64];
	pthread_t evictor, reaper;
	struct sigaction sa;
	sigset_t stopset, waitset;
	int rc, logfd = -1, ready[2] = { -1, -1 };

	/* the agent's own probe of a peer's worker address (cluster.c): a
	 * process of its own, so a UCX abort on the address ends only it;
	 * _exit: nothing of it is left to flush or check */
	if (argc == 3 && !strcmp(argv[1], "--ucx-probe"))
		_exit(kvp_cluster_probe(argv[2]));
	rc = kvp_opts_parse(argc, argv, cfg);
	if (rc >= 0)
		return rc;
	if (cfg->verbose)
		kvp_log_set_level(KVP_LOG_DEBUG);
	if (!cfg->dram_bytes)
		cfg->dram_bytes = kvp_default_dram();
	cfg->dram_bytes -= cfg->dram_bytes % cfg->dram_unit;
	if (cfg->dram_bytes < cfg->dram_unit) {
		fprintf(stderr,
			"kvpoold: --dram must hold at least one --dram-unit\n");
		return 2;
	}
	if (!cfg->index_entries)
		kvp_default_index(cfg);
	if (cfg->max_value > cfg->dram_bytes)
		cfg->max_value = cfg->dram_bytes;
	if (cfg->ssd_dir[0]) {
		if (!cfg->staging_bytes)
			cfg->staging_bytes = kvp_opts_default("staging");
		if (!cfg->staging_slot) {
			/* spans sized to the value (issue 29): 64 KiB slots,
			 * a larger value taking several, so a 64 KiB value
			 * does not hold a 1 MiB slot; at most an eighth of the
			 * arena, and large enough for at most 65,535 */
			uint64_t lo = (cfg->staging_bytes + 65534) / 65535;

			cfg->staging_slot = 64u << 10;
			if (cfg->staging_slot > cfg->staging_bytes / 8)
				cfg->staging_slot = (cfg->staging_bytes / 8) &
						    ~4095ull;
			if (cfg->staging_slot < lo)
				cfg->staging_slot = (lo + 4095) & ~4095ull;
		}
		if (cfg->staging_slot < 4096 ||
		    cfg->staging_bytes / cfg->staging_slot < 1 ||
		    cfg->staging_bytes / cfg->staging_slot > 65535) {
			fprintf(stderr,
				"kvpoold: --staging must hold 1..65535 slots of "
				"--staging-slot (>= 4K)\n");
			return 2;
		}
		if (cfg->max_clients > KVP_MAX_CLIENTS_STAGING) {
			fprintf(stderr,
				"kvpoold: with an SSD tier, at most %u clients\n",
				KVP_MAX_CLIENTS_STAGING);
			return 2;
		}
	}
	if (cfg->dram_low_pct >= cfg->dram_high_pct && cfg->dram_high_pct) {
		fprintf(stderr,
			"kvpoold: --dram-low must be below --dram-high\n");
		return 2;
	}

	if (!cfg->foreground) {
		pid_t pid;
		char byte;

		logfd = kvp_log_open(cfg->pool,
				     cfg->log_file[0] ? cfg->log_file : NULL,
				     logpath, sizeof(logpath));
		if (logfd < 0)
			return 1;
		if (pipe(ready) < 0)
			return 1;
		pid = fork();
		if (pid < 0)
			return 1;
		if (pid > 0) {
			/* wait for the child to have its segment ready */
			close(ready[1]);
			if (read(ready[0], &byte, 1) != 1) {
				fprintf(stderr,
					"kvpoold: failed to start; see %s\n",
					logpath);
				return 1;
			}
			printf("kvpoold: pool '%s' ready (pid %d), log %s\n",
			       cfg->pool, (int)pid, logpath);
			return 0;
		}
		close(ready[0]);
		setsid();
		if (dup2(logfd, STDERR_FILENO) < 0)
			return 1;
		close(logfd);
		setvbuf(stderr, NULL, _IOLBF, 0);
		if (!freopen("/dev/null", "r", stdin) ||
		    !freopen("/dev/null", "w", stdout))
			return 1;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = kvp_on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* SIGTERM/SIGINT stay blocked (held pending) except inside the
	 * sigsuspend below: every thread started from here inherits the
	 * block, so main takes them, and a signal that comes between the
	 * flag test and the wait is not lost (pause() could sleep forever) */
	sigemptyset(&stopset);
	sigaddset(&stopset, SIGTERM);
	sigaddset(&stopset, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stopset, &waitset);
	sigdelset(&waitset, SIGTERM);
	sigdelset(&waitset, SIGINT);

	rc = kvp_shm_create_or_attach_agent(a);
	if (rc) {
		kvp_log(KVP_LOG_ERROR, "agent", "cannot start on pool '%s': %s",
			cfg->pool,
			rc == -EADDRINUSE ? "another agent is running" :
					    strerror(-rc));
		return 1;
	}
	if (a->seg_created)
		kvp_log_index(a);
	kvp_evict_start_agent(a); /* the eviction policy's weights */
	/* populate behind the serving agent (the allocator hands out only
	 * what is populated) */
	rc = kvp_populate_start_agent(a);
	if (rc) {
		kvp_start_failed(a);
		return 1;
	}
	/* the SSD tier's recovery writes the index at random: populated
	 * first, by every thread */
	if (cfg->ssd_dir[0]) {
		kvp_populate_hold_agent(a, true);
		kvp_populate_meta_agent(a);
	}
	rc = kvp_tier_open_agent(a);
	/* the arena's turn (it waited for the rebuild's inserts) */
	kvp_populate_hold_agent(a, false);
	if (rc) {
		kvp_start_failed(a);
		return 1;
	}
	/* restart recovery: reap whoever died meanwhile, then free runs
	 * that no entry owns any more (an eviction cut short by a crash) */
	{
		unsigned reaped;
		uint64_t orphans;

		reaped = kvp_reaper_round_agent(a);
		/* relaxed: no threads yet */
		kvp_store_relaxed(&a->gc_request, 0);
		orphans = kvp_dram_gc_agent(a);
		/* lock held: the tier thread sweeps */
		if (orphans == UINT64_MAX) {
			/* relaxed: no threads yet */
			kvp_store_relaxed(&a->gc_request, 1);
			orphans = 0;
		}
		/* stat */
		kvp_actr_add(a->seg.hdr, KVP_ACTR_ORPHAN_PAGES, orphans);
		if (reaped || orphans)
			kvp_log(KVP_LOG_INFO, "agent",
				"recovery: %u dead clients reaped, "
				"%llu orphan units freed",
				reaped, (unsigned long long)orphans);
	}
	/* the /metrics endpoint on its own thread, before the agent announces
	 * itself (tools find its port in the header) */
	if (kvp_metrics_http_start_agent(a)) {
		kvp_tier_close_agent(a);
		kvp_start_failed(a);
		return 1;
	}
	a->start_ns = kvp_now_ns(CLOCK_REALTIME);
	/* the HBM tier's helpers (they come up on the tier thread's rounds) */
	if (kvp_hbm_start_agent(a))
		kvp_log(KVP_LOG_WARN, "hbm",
			"cannot start the HBM helpers: no HBM tier");
	/* the remote tier (its thread; a directory that is down is retried,
	 * a configuration that cannot work is fatal) */
	if (cfg->cluster_url[0] && kvp_cluster_start_agent(a)) {
		kvp_hbm_stop_agent(a);
		kvp_metrics_http_stop_agent(a);
		kvp_tier_close_agent(a);
		kvp_start_failed(a);
		return 1;
	}
	if (pthread_create(&evictor, NULL, kvp_tier_main_agent, a) ||
	    pthread_create(&reaper, NULL, kvp_reaper_main_agent, a)) {
		kvp_log(KVP_LOG_ERROR, "agent", "cannot start threads");
		return 1;
	}
	/* policy the clients read as hints (the agent itself uses cfg), and
	 * for humans and tools: the agent is serving (recovery is done, and
	 * the tier thread runs: published before it, the pid said so while
	 * a putter that found DRAM full had no evictor to answer it, and
	 * got -EBUSY after its 50 ms where -ENOSPC was due; test_index_pool
	 * under TSan) */
	kvp_shm_publish_agent(a);
	kvp_log(KVP_LOG_INFO, "agent",
		"kvpoold %d.%d serving pool '%s' (pid %d, "
		"incarnation %llu)",
		KVP_ABI_MAJOR, KVP_ABI_MINOR, cfg->pool, (int)getpid(),
		(unsigned long long)kvp_load_relaxed(
			&a->seg.hdr->h_incarnation));
	if (ready[1] >= 0) {
		if (write(ready[1], "r", 1) != 1)
			kvp_log(KVP_LOG_WARN, "agent", "parent went away");
		close(ready[1]);
	}
	/* the same moment for a service manager (agent/notify.c) */
	kvp_notify_agent("READY=1\nSTATUS=serving pool '%s'", cfg->pool);
	while (!kvp_got_signal)
		sigsuspend(&waitset);
	kvp_log(KVP_LOG_INFO, "agent", "signal %d: stopping",
		(int)kvp_got_signal);
	kvp_notify_agent("STOPPING=1\nSTATUS=stopping%s",
			 a->tier && cfg->stop_flush_ms ?
				 ": writing DRAM-only values to SSD" :
				 "");
	/* first: its reads of SSD values need the tier thread; it leaves the
	 * directory and closes its client handles */
	kvp_cluster_stop_agent(a);
	kvp_metrics_http_stop_agent(a);
	kvp_store_release(&a->stop, 1); /* release: threads acquire it */
	/* the evictor sees the stop */
	kvp_wake_agent(&a->seg);
	pthread_join(evictor, NULL);
	pthread_join(reaper, NULL);
	kvp_hbm_stop_agent(a); /* its helpers are clients: before the count */
	kvp_populate_stop_agent(a);
	kvp_tier_close_agent(a);
	kvp_evict_free_agent(a);
	if (!cfg->keep_on_exit && !kvp_any_client_alive(&a->seg)) {
		kvp_shm_remove_agent(a);
		kvp_log(KVP_LOG_INFO, "agent",
			"no live clients: segment removed");
	} else {
		kvp_log(KVP_LOG_INFO, "agent",
			"segment kept for its live clients; a "
			"restarted agent re-attaches to it");
	}
	kvp__seg_unmap(&a->seg);
	return 0;
}
