/* SPDX-License-Identifier: MIT */
/*
 * kvpoold - the per-node kvpool agent.
 *
 * Owns the segment's lifecycle (creates it, or re-attaches after a
 * restart), runs the evictor and the reaper.  Workers never talk to it on
 * the hot path: they share the segment.
 */
#include <ctype.h>
#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>

#include "agent/agent_int.h"
#include "tiers/kvp_ssd.h"

static void
kvp_usage(FILE *f)
{
	fprintf(f,
		"usage: kvpoold [options]\n"
		"  --pool NAME             pool name, 1-63 of [A-Za-z0-9_.-] (default: default);\n"
		"                          segment /dev/shm/kvpool.NAME (or kvpool.NAME on\n"
		"                          the hugetlbfs mount, --hugepages)\n"
		"  --dram SIZE             DRAM tier size (default: 1/8 of RAM, at most half of\n"
		"                          /dev/shm's free space, at least 64M)\n"
		"  --index-entries N       most keys the index holds; cold ones leave it to make\n"
		"                          room (default: one per --dram-unit of DRAM,\n"
		"                          >= 65536, plus what --ssd-size (per drive) holds\n"
		"                          of one-unit values; the index within 1/8 of RAM)\n"
		"  --max-value SIZE        largest value (default 64M, at most the DRAM tier)\n"
		"  --dram-unit SIZE        allocation unit, power of two 4K..4M (default 16K)\n"
		"  --dram-high PCT         evict (demote) above this DRAM use (default 98;\n"
		"                          0 with --dram-low 0: demote every value at once)\n"
		"  --dram-low PCT          ... down to this (default 96)\n"
		"  --max-clients N         client slots (default 128)\n"
		"  --holds-per-client N    concurrent holds per client (default 65536:\n"
		"                          16,384 pages of 4 objects pinned; 8 B each)\n"
		"  --group G               share the segment with group G (mode 0660; default 0600)\n"
		"  --reap-ms MS            reaper period (default 100)\n"
		"  --ssd-dir DIR           SSD tier in DIR (default: none, DRAM only); repeat it,\n"
		"                          one per drive (up to 16): values are spread over\n"
		"                          them by key; with several, each DIR must exist (a\n"
		"                          missing or failing one is reported, the others serve)\n"
		"  --ssd-size SIZE         SSD capacity in on-disk bytes, per --ssd-dir\n"
		"                          (default: no limit)\n"
		"  --ssd-segment SIZE      SSD segment file size (default 256M)\n"
		"  --ssd-reinsert PCT      when a segment is given back, rewrite the values read\n"
		"                          since they were written at the head of the log, up\n"
		"                          to PCT%% of a segment (default 25, 0..90; 0: drop)\n"
		"  --staging SIZE          staging arena for SSD reads (default 64M)\n"
		"  --staging-slot SIZE     staging slot (default 1M, at most staging/8)\n"
		"  --durability MODE       relaxed (default) or strict (batch fdatasync; a\n"
		"                          delete returns once its tombstone is durable)\n"
		"  --stop-flush-secs N     on SIGTERM, write values only in DRAM to SSD for\n"
		"                          at most N seconds (default 600; 0: drop them)\n"
		"  --no-promote            SSD reads go through staging only, never into DRAM\n"
		"  --max-pinned-per-client SIZE  cap on the bytes one client pins, in pinsets\n"
		"                          and live leases together (default: none)\n"
		"  --metrics-addr HOST:PORT  Prometheus /metrics endpoint (default 127.0.0.1:9464;\n"
		"                          [::1]:PORT for IPv6, port 0 picks one, off disables)\n"
		"  --hugepages MODE        auto (default): 2 MiB pages from a hugetlbfs mount\n"
		"                          when its pool has room, else 4 KiB with a log line\n"
		"                          saying how to enable them; on: 2 MiB or fail; off\n"
		"  --hugetlbfs DIR         the hugetlbfs mount to use (default: the first\n"
		"                          2 MiB one in /proc/self/mountinfo)\n"
		"  --numa MODE             interleave (the default on a multi-node host), a\n"
		"                          node number (bind the segment there), or off\n"
		"  --populate-threads N    threads populating the segment behind the ready\n"
		"                          agent (default: online CPUs, at most 8)\n"
		"  --populate-rate SIZE    populate at most SIZE bytes/s (default: no limit)\n");
	fprintf(f,
		"  --hbm-gpu N             an HBM tier on CUDA device N (repeat: up to 8 GPUs;\n"
		"                          a helper per GPU, kvpool-gpud, owns its pool)\n"
		"  --hbm-size SIZE         the HBM pool of each GPU (default 1G)\n"
		"  --cluster URL           share pages with other nodes: the directory,\n"
		"                          redis://[:PASSWORD@]HOST:PORT (transfers: UCX)\n"
		"  --cluster-password-file FILE  the directory's password (first line)\n"
		"  --node NAME             this node in the cluster (default: the hostname)\n"
		"  --cluster-ttl-ms N      membership and directory TTL (default 3000)\n"
		"  --cluster-publish-ms N  publish changes of the index every N ms (default 20)\n"
		"  --remote-lease-ms N     a peer's lease on a page it fetches (default 5000)\n"
		"  --remote-timeout-ms N   a fetch gives up after N ms without progress (2000)\n"
		"  --remote-buffer SIZE    receive buffer of remote fetches (default 64M)\n"
		"  --keep                  never remove the segment on SIGTERM\n"
		"  --foreground            do not daemonize; log to stderr\n"
		"  --log FILE              log file when daemonized (default\n"
		"                          /run/kvpool/kvpoold.NAME.log for root,\n"
		"                          $XDG_RUNTIME_DIR/kvpool/kvpoold.NAME.log otherwise)\n"
		"  --verbose               debug log lines\n"
		"sizes take K, M, G, T suffixes (binary).\n");
}

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
	static const struct option opts[] = {
		{ "pool", required_argument, NULL, 'p' },
		{ "dram", required_argument, NULL, 'd' },
		{ "index-entries", required_argument, NULL, 'i' },
		{ "max-value", required_argument, NULL, 'm' },
		{ "dram-unit", required_argument, NULL, 'u' },
		{ "dram-high", required_argument, NULL, 'H' },
		{ "dram-low", required_argument, NULL, 'L' },
		{ "max-clients", required_argument, NULL, 'c' },
		{ "holds-per-client", required_argument, NULL, 'o' },
		{ "group", required_argument, NULL, 'g' },
		{ "reap-ms", required_argument, NULL, 'r' },
		{ "keep", no_argument, NULL, 'k' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "log", required_argument, NULL, 'l' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "ssd-dir", required_argument, NULL, 'S' },
		{ "ssd-size", required_argument, NULL, 'Z' },
		{ "ssd-segment", required_argument, NULL, 'G' },
		{ "ssd-reinsert", required_argument, NULL, 'R' },
		{ "staging", required_argument, NULL, 'T' },
		{ "staging-slot", required_argument, NULL, 'U' },
		{ "durability", required_argument, NULL, 'D' },
		{ "no-promote", no_argument, NULL, 'P' },
		{ "max-pinned-per-client", required_argument, NULL, 'X' },
		{ "metrics-addr", required_argument, NULL, 'A' },
		{ "stop-flush-secs", required_argument, NULL, 'F' },
		{ "hugepages", required_argument, NULL, 1001 },
		{ "hugetlbfs", required_argument, NULL, 1002 },
		{ "numa", required_argument, NULL, 1003 },
		{ "populate-threads", required_argument, NULL, 1004 },
		{ "populate-rate", required_argument, NULL, 1005 },
		{ "hbm-gpu", required_argument, NULL, 1006 },
		{ "hbm-size", required_argument, NULL, 1007 },
		{ "cluster", required_argument, NULL, 1010 },
		{ "cluster-password-file", required_argument, NULL, 1011 },
		{ "node", required_argument, NULL, 1012 },
		{ "cluster-ttl-ms", required_argument, NULL, 1013 },
		{ "cluster-publish-ms", required_argument, NULL, 1014 },
		{ "remote-lease-ms", required_argument, NULL, 1015 },
		{ "remote-timeout-ms", required_argument, NULL, 1016 },
		{ "remote-buffer", required_argument, NULL, 1017 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct kvp_agent agent;
	struct kvp_agent *a = &agent;
	struct kvp_agent_cfg *cfg = &a->cfg;
	const char *logfile = NULL;
	char logpath[1024], shmname[KVP_POOL_NAME_MAX + 16];
	pthread_t evictor, reaper;
	struct sigaction sa;
	sigset_t stopset, waitset;
	int opt, optidx = 0, rc, logfd = -1, ready[2] = { -1, -1 };
	unsigned k;
	uint64_t v;

	/* the agent's own probe of a peer's worker address (cluster.c): a
	 * process of its own, so a UCX abort on the address ends only it;
	 * _exit: nothing of it is left to flush or check */
	if (argc == 3 && !strcmp(argv[1], "--ucx-probe"))
		_exit(kvp_cluster_probe(argv[2]));
	snprintf(cfg->pool, sizeof(cfg->pool), "default");
	cfg->numa = KVP_NUMA_DEFAULT;
	cfg->dram_unit = 16u << 10;
	cfg->max_value = 64ull << 20;
	cfg->max_clients = 128;
	cfg->holds_per_client = 65536;
	cfg->dram_high_pct = 98;
	cfg->dram_low_pct = 96;
	cfg->reap_ms = 100;
	cfg->stop_flush_ms = 600 * 1000;
	cfg->hbm_bytes = 1ull << 30;
	cfg->ssd_reinsert_pct = 25;
	cfg->cluster_ttl_ms = 3000;
	cfg->cluster_publish_ms = 20;
	cfg->remote_lease_ms = 5000;
	cfg->remote_timeout_ms = 2000;
	cfg->remote_buffer = 64ull << 20;
	snprintf(cfg->metrics_addr, sizeof(cfg->metrics_addr),
		 "127.0.0.1:9464");
	while ((opt = getopt_long(argc, argv, "h", opts, &optidx)) != -1) {
		bool bad = false;

		switch (opt) {
		case 'p':
			/* validated before any path is built from it (the
			 * segment's, the log's) */
			bad = kvp_shm_name(optarg, shmname, sizeof(shmname)) !=
			      0;
			snprintf(cfg->pool, sizeof(cfg->pool), "%s", optarg);
			break;
		case 'd':
			bad = kvp_parse_size(optarg, &cfg->dram_bytes) != 0;
			break;
		case 'i':
			bad = kvp_parse_size(optarg, &cfg->index_entries) != 0;
			break;
		case 'm':
			bad = kvp_parse_size(optarg, &cfg->max_value) != 0;
			break;
		case 'u':
			bad = kvp_parse_size(optarg, &cfg->dram_unit) != 0 ||
			      cfg->dram_unit < 4096 ||
			      cfg->dram_unit > (4u << 20) ||
			      (cfg->dram_unit & (cfg->dram_unit - 1));
			break;
		case 'H':
			bad = kvp_parse_size(optarg, &v) || v > 100;
			cfg->dram_high_pct = (uint32_t)v;
			break;
		case 'L':
			bad = kvp_parse_size(optarg, &v) || v > 99;
			cfg->dram_low_pct = (uint32_t)v;
			break;
		case 'c':
			bad = kvp_parse_size(optarg, &v) || v < 1 || v > 65534;
			cfg->max_clients = (uint32_t)v;
			break;
		case 'o':
			bad = kvp_parse_size(optarg, &v) || v < 16 ||
			      v > (1u << 20);
			cfg->holds_per_client = (uint32_t)v;
			break;
		case 'g':
			snprintf(cfg->group, sizeof(cfg->group), "%s", optarg);
			break;
		case 'r':
			bad = kvp_parse_size(optarg, &v) || v < 1 || v > 1000;
			cfg->reap_ms = (uint32_t)v;
			break;
		case 'S':
			bad = strlen(optarg) >= sizeof(cfg->ssd_dir) ||
			      !*optarg || cfg->nssd_dirs >= 16;
			for (k = 0; !bad && k < cfg->nssd_dirs; k++)
				bad = strcmp(cfg->ssd_dirs[k], optarg) == 0;
			if (bad)
				break;
			snprintf(cfg->ssd_dirs[cfg->nssd_dirs++],
				 sizeof(cfg->ssd_dirs[0]), "%s", optarg);
			if (!cfg->ssd_dir[0])
				snprintf(cfg->ssd_dir, sizeof(cfg->ssd_dir),
					 "%s", optarg);
			break;
		case 'Z':
			bad = kvp_parse_size(optarg, &cfg->ssd_size) != 0;
			break;
		case 'G':
			bad = kvp_parse_size(optarg, &cfg->ssd_segment) != 0;
			break;
		case 'R':
			bad = kvp_parse_size(optarg, &v) || v > 90;
			cfg->ssd_reinsert_pct = (uint32_t)v;
			break;
		case 'T':
			bad = kvp_parse_size(optarg, &cfg->staging_bytes) != 0;
			break;
		case 'U':
			bad = kvp_parse_size(optarg, &cfg->staging_slot) != 0 ||
			      cfg->staging_slot < 4096 ||
			      cfg->staging_slot % 4096;
			break;
		case 'D':
			bad = strcmp(optarg, "relaxed") &&
			      strcmp(optarg, "strict");
			cfg->durability_strict = !strcmp(optarg, "strict");
			break;
		case 'P':
			cfg->no_promote = true;
			break;
		case 'X':
			bad = kvp_parse_size(optarg, &cfg->max_pinned) != 0;
			break;
		case 'A':
			bad = strlen(optarg) >= sizeof(cfg->metrics_addr) ||
			      !*optarg;
			snprintf(cfg->metrics_addr, sizeof(cfg->metrics_addr),
				 "%s", optarg);
			cfg->metrics_addr_given = true;
			break;
		case 'F':
			bad = kvp_parse_size(optarg, &v) || v > 86400;
			cfg->stop_flush_ms = v * 1000;
			break;
		case 1001:
			cfg->hugepages = !strcmp(optarg, "on")  ? KVP_HUGE_ON :
					 !strcmp(optarg, "off") ? KVP_HUGE_OFF :
								  KVP_HUGE_AUTO;
			bad = strcmp(optarg, "on") && strcmp(optarg, "off") &&
			      strcmp(optarg, "auto");
			break;
		case 1002:
			bad = strlen(optarg) >= sizeof(cfg->hugetlbfs) ||
			      optarg[0] != '/';
			snprintf(cfg->hugetlbfs, sizeof(cfg->hugetlbfs), "%s",
				 optarg);
			break;
		case 1003:
			if (!strcmp(optarg, "interleave"))
				cfg->numa = KVP_NUMA_INTERLEAVE;
			else if (!strcmp(optarg, "off"))
				cfg->numa = KVP_NUMA_OFF;
			else {
				bad = kvp_parse_size(optarg, &v) || v > 1023;
				cfg->numa = (int)v;
			}
			break;
		case 1004:
			bad = kvp_parse_size(optarg, &v) || v < 1 || v > 16;
			cfg->populate_threads = (uint32_t)v;
			break;
		case 1005:
			bad = kvp_parse_size(optarg, &cfg->populate_rate) != 0;
			break;
		case 1006: {
			char *end = NULL;
			long d = strtol(optarg, &end, 10);

			bad = !end || *end || d < 0 || d > 1023 ||
			      cfg->nhbm >= KVP_GPU_MAX;
			if (!bad)
				cfg->hbm_gpu[cfg->nhbm++] = (int)d;
			break;
		}
		case 1007:
			bad = kvp_parse_size(optarg, &cfg->hbm_bytes) != 0 ||
			      cfg->hbm_bytes < (1u << 20);
			break;
		case 1010:
			bad = strlen(optarg) >= sizeof(cfg->cluster_url) ||
			      strncmp(optarg, "redis://", 8) != 0;
			if (!bad)
				snprintf(cfg->cluster_url,
					 sizeof(cfg->cluster_url), "%s",
					 optarg);
			break;
		case 1011:
			bad = strlen(optarg) >= sizeof(cfg->cluster_pwfile);
			if (!bad)
				snprintf(cfg->cluster_pwfile,
					 sizeof(cfg->cluster_pwfile), "%s",
					 optarg);
			break;
		case 1012: {
			size_t i, n = strlen(optarg);

			bad = n == 0 || n >= sizeof(cfg->node);
			for (i = 0; i < n && !bad; i++)
				bad = !(isalnum((unsigned char)optarg[i]) ||
					strchr("_.-", optarg[i]));
			if (!bad)
				snprintf(cfg->node, sizeof(cfg->node), "%s",
					 optarg);
			break;
		}
		case 1013:
		case 1014:
		case 1015:
		case 1016: {
			uint32_t *f = opt == 1013 ? &cfg->cluster_ttl_ms :
				      opt == 1014 ? &cfg->cluster_publish_ms :
				      opt == 1015 ? &cfg->remote_lease_ms :
						    &cfg->remote_timeout_ms;

			bad = kvp_parse_size(optarg, &v) || v < 1 ||
			      v > 3600 * 1000;
			*f = (uint32_t)v;
			break;
		}
		case 1017:
			bad = kvp_parse_size(optarg, &cfg->remote_buffer) ||
			      cfg->remote_buffer < (1u << 20) ||
			      cfg->remote_buffer > (64ull << 30);
			break;
		case 'k':
			cfg->keep_on_exit = true;
			break;
		case 'f':
			cfg->foreground = true;
			break;
		case 'l':
			logfile = optarg;
			break;
		case 'v':
			kvp_log_set_level(KVP_LOG_DEBUG);
			break;
		case 'h':
			kvp_usage(stdout);
			return 0;
		default:
			kvp_usage(stderr);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "kvpoold: bad value '%s' for --%s\n",
				optarg, opts[optidx].name);
			return 2;
		}
	}
	if (optind < argc) {
		kvp_usage(stderr);
		return 2;
	}
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
			cfg->staging_bytes = 64ull << 20;
		if (!cfg->staging_slot)
			cfg->staging_slot =
				cfg->staging_bytes / 8 < (1u << 20) ?
					(cfg->staging_bytes / 8) & ~4095ull :
					1u << 20;
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

		logfd = kvp_log_open(cfg->pool, logfile, logpath,
				     sizeof(logpath));
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
		kvp_fetch_add(&a->seg.hdr->h_actr[KVP_ACTR_ORPHAN_PAGES],
			      orphans);
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
	/* policy the clients read as hints (the agent itself uses cfg), and
	 * for humans and tools: the agent is serving (recovery is done) */
	a->start_ns = kvp_now_ns(CLOCK_REALTIME);
	kvp_shm_publish_agent(a);
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
	/* full: wake the evictor */
	kvp_ifetch_add(&a->seg.hdr->h_evict_wake, 1);
	kvp_futex_wake(&a->seg.hdr->h_evict_wake);
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
