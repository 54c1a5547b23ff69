/* SPDX-License-Identifier: MIT */
/*
 * options.c - kvpoold's flags: one table, and everything made from it.
 *
 * A row of kvp_opts[] is one flag: its long name, the kind of its value
 * (size, count, percentage, string, flag, choice, or a list given once per
 * item), the field of struct kvp_agent_cfg it sets, its default, its
 * bounds and its help.  From the table come getopt_long's array and the
 * parse (kvp_opts_parse), each value's checks and the error that says
 * what a flag takes, the defaults, --help, --print-config (the commented
 * config 'ninja install' writes as kvpoold.conf.example) and --synopsis
 * (the README's "Agent flags" block; tests/agent/test_options_doc.sh
 * checks the README against it).  A new flag is one row here (and the
 * field it sets).
 *
 * In a help text %D stands for the default and %R for the bounds
 * ("4K..4M"), both written from the row.  A default the agent computes
 * at start (--dram from RAM, --index-entries, --numa, --staging-slot,
 * --populate-threads) is flagged KVP_OPTF_COMPUTED: the field stays 0
 * (or the row's sentinel) and main computes it; the help says how.
 */
#include <ctype.h>
#include <getopt.h>
#include <stddef.h>

#include "agent/options.h"
#include "tiers/kvp_ssd.h"

enum kvp_opt_kind {
	KVP_OPT_SIZE,   /* bytes: K, M, G, T suffixes (binary) */
	KVP_OPT_UINT,   /* a count (suffixes taken too) */
	KVP_OPT_PCT,    /* a percentage */
	KVP_OPT_STR,    /* a string, into a char array */
	KVP_OPT_FLAG,   /* no argument: sets a bool */
	KVP_OPT_CHOICE, /* one of .choices, stored as its index */
	KVP_OPT_LIST,   /* given once per item (.parse appends it) */
};

enum {
	KVP_OPTF_POW2 = 1 << 0,     /* a power of two */
	KVP_OPTF_NONEMPTY = 1 << 1, /* a string that may not be "" */
	KVP_OPTF_ABSPATH = 1 << 2,  /* a string that starts with '/' */
	KVP_OPTF_NAME = 1 << 3,     /* 1 or more of [A-Za-z0-9_.-] */
	KVP_OPTF_COMPUTED = 1 << 4, /* the default is computed at start */
	KVP_OPTF_UNIT = 1 << 5,     /* the systemd unit gives it itself */
	KVP_OPTF_DEFVAL = 1 << 6,   /* .defs is a value the flag takes */
};

struct kvp_opt {
	const char *name; /* --name */
	enum kvp_opt_kind kind;
	const char *arg;  /* its argument in --help (NULL: a FLAG) */
	const char *syn;  /* ... in the synopsis (NULL: .arg, or the choices) */
	size_t off, size; /* the field of struct kvp_agent_cfg (size 0: none) */
	uint64_t def;     /* default of a number, choice or flag, as given */
	const char *defs; /* default of a string, or the default in words */
	uint64_t min, max; /* bounds of a number (max 0: none) */
	uint64_t mult;     /* a number must be a multiple of it (0: any) */
	uint64_t scale;    /* stored as the value times this (0: 1) */
	unsigned flags;    /* KVP_OPTF_* */
	const char *const *choices; /* KVP_OPT_CHOICE, NULL-terminated */
	/* parse a value instead of the kind's parse; 0 or -1 (bad value) */
	int (*parse)(struct kvp_agent_cfg *cfg, const char *v);
	const char *want; /* what .parse takes, for the error message */
	const char *help; /* %D: the default, %R: the bounds */
};

#define KVP_CFG(f)                                \
	.off = offsetof(struct kvp_agent_cfg, f), \
	.size = sizeof(((struct kvp_agent_cfg *)0)->f)

static int kvp_opt_ssd_dir(struct kvp_agent_cfg *cfg, const char *v);
static int kvp_opt_metrics_addr(struct kvp_agent_cfg *cfg, const char *v);
static int kvp_opt_numa(struct kvp_agent_cfg *cfg, const char *v);
static int kvp_opt_hbm_gpu(struct kvp_agent_cfg *cfg, const char *v);
static int kvp_opt_cluster(struct kvp_agent_cfg *cfg, const char *v);
static int kvp_opt_evict_ghost(struct kvp_agent_cfg *cfg, const char *v);

static const char *const kvp_durability_names[] = { "relaxed", "strict", NULL };
/* in the order of KVP_HUGE_* */
static const char *const kvp_huge_names[] = { "auto", "on", "off", NULL };

static const struct kvp_opt kvp_opts[] = {
	{ .name = "pool",
	  .kind = KVP_OPT_STR,
	  .arg = "NAME",
	  KVP_CFG(pool),
	  .defs = "default",
	  .flags = KVP_OPTF_NAME | KVP_OPTF_UNIT,
	  .help = "pool name, 1-63 of [A-Za-z0-9_.-] (default: %D); segment "
		  "/dev/shm/kvpool.NAME (or kvpool.NAME on the hugetlbfs "
		  "mount, --hugepages)" },
	{ .name = "dram",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(dram_bytes),
	  .flags = KVP_OPTF_COMPUTED,
	  .help = "DRAM tier size (default: 1/8 of RAM, at most half of "
		  "/dev/shm's free space, at least 64M)" },
	{ .name = "index-entries",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(index_entries),
	  .flags = KVP_OPTF_COMPUTED,
	  .help = "most keys the index holds; cold ones leave it to make "
		  "room (default: one per --dram-unit of DRAM, >= 65536, plus "
		  "what --ssd-size (per drive) holds of one-unit values; the "
		  "index within 1/8 of RAM)" },
	{ .name = "max-value",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(max_value),
	  .def = 64ull << 20,
	  .help = "largest value (default %D, at most the DRAM tier)" },
	{ .name = "dram-unit",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(dram_unit),
	  .def = 16u << 10,
	  .min = 4096,
	  .max = 4u << 20,
	  .flags = KVP_OPTF_POW2,
	  .help = "allocation unit, power of two %R (default %D)" },
	{ .name = "dram-high",
	  .kind = KVP_OPT_PCT,
	  .arg = "PCT",
	  KVP_CFG(dram_high_pct),
	  .def = 98,
	  .max = 100,
	  .help = "evict (demote) above this DRAM use (default %D; 0 with "
		  "--dram-low 0: demote every value at once)" },
	{ .name = "dram-low",
	  .kind = KVP_OPT_PCT,
	  .arg = "PCT",
	  KVP_CFG(dram_low_pct),
	  .def = 96,
	  .max = 99,
	  .help = "... down to this (default %D)" },
	{ .name = "evict-probation",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(evict_probation),
	  .def = 8,
	  .min = 1,
	  .max = 64,
	  .help = "a value never used since its put, not put as a "
		  "continuation of a hit prefix and not put again soon after "
		  "its eviction, counts its age N times (default %D, %R; 1: "
		  "plain recency)" },
	{ .name = "evict-ghost",
	  .kind = KVP_OPT_UINT,
	  .arg = "F",
	  KVP_CFG(evict_ghost_pct),
	  .def = 200,
	  .defs = "2.0",
	  .flags = KVP_OPTF_DEFVAL,
	  .parse = kvp_opt_evict_ghost,
	  .want = "a factor 0..16, e.g. 2 or 1.5",
	  .help = "remember the keys of the last F x (the DRAM tier's units: "
		  "the most values it holds) evictions (40 B each): one put "
		  "again while remembered is spared probation (default %D; 0: "
		  "off)" },
	{ .name = "evict-adapt",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(evict_adapt),
	  .def = 8,
	  .max = 4096,
	  .help = "ARC's rule on the weights of never-used values "
		  "(--evict-probation, x2 for a continuation): a value put "
		  "again within a tenth of the DRAM tier's units of evictions "
		  "after its eviction moves them N / units toward plain "
		  "recency when it left under a weight, back when it left "
		  "after a use (more when its kind of eviction is the rarer; "
		  "default %D, %R; 0: fixed weights)" },
	{ .name = "ceiling-window",
	  .kind = KVP_OPT_UINT,
	  .arg = "SECONDS",
	  KVP_CFG(ceiling_window_s),
	  .def = 60,
	  .max = 86400,
	  .help = "count the distinct keys used or stored, the lookups and "
		  "the stores of each window of SECONDS (kvpool stat: the "
		  "hit-rate ceiling; 16 KiB; default %D, %R; 0: off)" },
	{ .name = "max-clients",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(max_clients),
	  .def = 128,
	  .min = 1,
	  .max = 65534,
	  .help = "client slots (default %D)" },
	{ .name = "holds-per-client",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(holds_per_client),
	  .def = 65536,
	  .min = 16,
	  .max = 1u << 20,
	  .help = "concurrent holds per client (default %D: 16,384 pages of 4 "
		  "objects pinned; 8 B each)" },
	{ .name = "group",
	  .kind = KVP_OPT_STR,
	  .arg = "G",
	  KVP_CFG(group),
	  .help = "share the segment with group G (mode 0660; default 0600)" },
	{ .name = "reap-ms",
	  .kind = KVP_OPT_UINT,
	  .arg = "MS",
	  KVP_CFG(reap_ms),
	  .def = 100,
	  .min = 1,
	  .max = 1000,
	  .help = "reaper period (default %D)" },
	{ .name = "ssd-dir",
	  .kind = KVP_OPT_LIST,
	  .arg = "DIR",
	  .parse = kvp_opt_ssd_dir,
	  .want = "a directory, each given once, at most 16",
	  .help = "SSD tier in DIR (default: none, DRAM only); repeat it, one "
		  "per drive (up to 16): values are spread over them by key; "
		  "with several, each DIR must exist (a missing or failing one "
		  "is reported, the others serve)" },
	{ .name = "ssd-size",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(ssd_size),
	  .defs = "no limit",
	  .help = "SSD capacity in on-disk bytes, per --ssd-dir (default: "
		  "%D)" },
	{ .name = "ssd-segment",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(ssd_segment),
	  .def = KVP_SSD_SEGMENT_DEFAULT,
	  .help = "SSD segment file size (default %D)" },
	{ .name = "ssd-reinsert",
	  .kind = KVP_OPT_PCT,
	  .arg = "PCT",
	  KVP_CFG(ssd_reinsert_pct),
	  .def = 25,
	  .max = 90,
	  .help = "when a segment is given back, rewrite the values read "
		  "since they were written at the head of the log, up to PCT% "
		  "of a segment (default %D, %R; 0: drop)" },
	{ .name = "ssd-header-cache",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(ssd_header_cache),
	  .def = 16ull << 20,
	  .help = "batch header blocks kept in memory, per --ssd-dir, so that "
		  "an SSD read is one device operation (default %D; 0: every "
		  "read also reads its header block)" },
	{ .name = "ssd-write-depth",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(ssd_write_depth),
	  .def = KVP_SSD_WRITE_DEPTH_DEFAULT,
	  .min = 4096,
	  .help = "write bytes on each --ssd-dir's device at once, sent in "
		  "parts of a quarter of it (one part while reads are "
		  "there): a read waits behind no more (default %D)" },
	{ .name = "staging",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(staging_bytes),
	  .def = 64ull << 20,
	  .help = "staging arena for SSD reads (default %D)" },
	{ .name = "staging-slot",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(staging_slot),
	  .min = 4096,
	  .mult = 4096,
	  .flags = KVP_OPTF_COMPUTED,
	  .help = "staging slot, the unit a span of the arena is made of "
		  "(default 64K, at most staging/8, at least staging/65535)" },
	{ .name = "durability",
	  .kind = KVP_OPT_CHOICE,
	  .arg = "MODE",
	  KVP_CFG(durability_strict),
	  .choices = kvp_durability_names,
	  .help = "relaxed (default) or strict (batch fdatasync; a delete "
		  "returns once its tombstone is durable)" },
	{ .name = "stop-flush-secs",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(stop_flush_ms),
	  .def = 600,
	  .max = 86400,
	  .scale = 1000,
	  .help = "on SIGTERM, write values only in DRAM to SSD for at most N "
		  "seconds (default %D; 0: drop them)" },
	{ .name = "no-promote",
	  .kind = KVP_OPT_FLAG,
	  KVP_CFG(no_promote),
	  .help = "SSD reads go through staging only, never into DRAM" },
	{ .name = "max-pinned-per-client",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(max_pinned),
	  .defs = "none",
	  .help = "cap on the bytes one client pins, in pinsets and live "
		  "leases together (default: %D)" },
	{ .name = "metrics-addr",
	  .kind = KVP_OPT_STR,
	  .arg = "HOST:PORT",
	  .syn = "HOST:PORT|off",
	  KVP_CFG(metrics_addr),
	  .defs = "127.0.0.1:9464",
	  .flags = KVP_OPTF_NONEMPTY,
	  .parse = kvp_opt_metrics_addr,
	  .want = "HOST:PORT, [::1]:PORT or off",
	  .help = "Prometheus /metrics endpoint (default %D; [::1]:PORT for "
		  "IPv6, port 0 picks one, off disables)" },
	{ .name = "hugepages",
	  .kind = KVP_OPT_CHOICE,
	  .arg = "MODE",
	  KVP_CFG(hugepages),
	  .def = KVP_HUGE_AUTO,
	  .choices = kvp_huge_names,
	  .help = "auto (default): 2 MiB pages from a hugetlbfs mount when its "
		  "pool has room, else 4 KiB with a log line saying how to "
		  "enable them; on: 2 MiB or fail; off" },
	{ .name = "hugetlbfs",
	  .kind = KVP_OPT_STR,
	  .arg = "DIR",
	  KVP_CFG(hugetlbfs),
	  .flags = KVP_OPTF_ABSPATH,
	  .help = "the hugetlbfs mount to use (default: the first 2 MiB one in "
		  "/proc/self/mountinfo)" },
	{ .name = "numa",
	  .kind = KVP_OPT_UINT,
	  .arg = "MODE",
	  .syn = "interleave|N|off",
	  KVP_CFG(numa),
	  .def = (uint64_t)(int64_t)KVP_NUMA_DEFAULT,
	  .flags = KVP_OPTF_COMPUTED,
	  .parse = kvp_opt_numa,
	  .want = "interleave, off, or a node number 0..1023",
	  .help = "interleave (the default on a multi-node host), a node "
		  "number (bind the segment there), or off" },
	{ .name = "populate-threads",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(populate_threads),
	  .min = 1,
	  .max = 16,
	  .flags = KVP_OPTF_COMPUTED,
	  .help = "threads populating the segment behind the ready agent "
		  "(default: online CPUs, at most 8)" },
	{ .name = "populate-rate",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(populate_rate),
	  .defs = "no limit",
	  .help = "populate at most SIZE bytes/s (default: %D)" },
	{ .name = "hbm-gpu",
	  .kind = KVP_OPT_LIST,
	  .arg = "N",
	  .parse = kvp_opt_hbm_gpu,
	  .want = "a CUDA device number 0..1023, at most 8 of them",
	  .help = "an HBM tier on CUDA device N (repeat: up to 8 GPUs; a "
		  "helper per GPU, kvpool-gpud, owns its pool)" },
	{ .name = "hbm-size",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(hbm_bytes),
	  .def = 1ull << 30,
	  .min = 1u << 20,
	  .help = "the HBM pool of each GPU (default %D)" },
	{ .name = "cluster",
	  .kind = KVP_OPT_STR,
	  .arg = "URL",
	  KVP_CFG(cluster_url),
	  .parse = kvp_opt_cluster,
	  .want = "redis://[:PASSWORD@]HOST:PORT",
	  .help = "share pages with other nodes: the directory, "
		  "redis://[:PASSWORD@]HOST:PORT (transfers: UCX)" },
	{ .name = "cluster-password-file",
	  .kind = KVP_OPT_STR,
	  .arg = "FILE",
	  KVP_CFG(cluster_pwfile),
	  .help = "the directory's password (first line)" },
	{ .name = "node",
	  .kind = KVP_OPT_STR,
	  .arg = "NAME",
	  KVP_CFG(node),
	  .defs = "the hostname",
	  .flags = KVP_OPTF_NAME | KVP_OPTF_COMPUTED,
	  .help = "this node in the cluster (default: the hostname)" },
	{ .name = "cluster-ttl-ms",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(cluster_ttl_ms),
	  .def = 3000,
	  .min = 1,
	  .max = 3600 * 1000,
	  .help = "membership and directory TTL (default %D)" },
	{ .name = "cluster-publish-ms",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(cluster_publish_ms),
	  .def = 20,
	  .min = 1,
	  .max = 3600 * 1000,
	  .help = "publish changes of the index every N ms (default %D)" },
	{ .name = "remote-lease-ms",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(remote_lease_ms),
	  .def = 5000,
	  .min = 1,
	  .max = 3600 * 1000,
	  .help = "a peer's lease on a page it fetches (default %D)" },
	{ .name = "remote-timeout-ms",
	  .kind = KVP_OPT_UINT,
	  .arg = "N",
	  KVP_CFG(remote_timeout_ms),
	  .def = 2000,
	  .min = 1,
	  .max = 3600 * 1000,
	  .help = "a fetch gives up after N ms without progress (default "
		  "%D)" },
	{ .name = "remote-buffer",
	  .kind = KVP_OPT_SIZE,
	  .arg = "SIZE",
	  KVP_CFG(remote_buffer),
	  .def = 64ull << 20,
	  .min = 1u << 20,
	  .max = 64ull << 30,
	  .help = "receive buffer of remote fetches (default %D)" },
	{ .name = "keep",
	  .kind = KVP_OPT_FLAG,
	  KVP_CFG(keep_on_exit),
	  .help = "never remove the segment on SIGTERM" },
	{ .name = "foreground",
	  .kind = KVP_OPT_FLAG,
	  KVP_CFG(foreground),
	  .flags = KVP_OPTF_UNIT,
	  .help = "do not daemonize; log to stderr" },
	{ .name = "log",
	  .kind = KVP_OPT_STR,
	  .arg = "FILE",
	  KVP_CFG(log_file),
	  .flags = KVP_OPTF_NONEMPTY,
	  .help = "log file when daemonized (default "
		  "/run/kvpool/kvpoold.NAME.log for root, "
		  "$XDG_RUNTIME_DIR/kvpool/kvpoold.NAME.log otherwise)" },
	{ .name = "verbose",
	  .kind = KVP_OPT_FLAG,
	  KVP_CFG(verbose),
	  .help = "debug log lines" },
};

#define KVP_NOPTS (sizeof(kvp_opts) / sizeof(kvp_opts[0]))

/* ---- values ---- */

static void
kvp_opt_store(struct kvp_agent_cfg *cfg, const struct kvp_opt *o, uint64_t v)
{
	char *p = (char *)cfg + o->off;
	uint32_t v32 = (uint32_t)v;
	bool b = v != 0;

	switch (o->size) {
	case sizeof(bool):
		memcpy(p, &b, sizeof(b));
		break;
	case sizeof(uint32_t):
		memcpy(p, &v32, sizeof(v32));
		break;
	case sizeof(uint64_t):
		memcpy(p, &v, sizeof(v));
		break;
	default:
		KVP_ASSERT(false, "options: a number field of 1, 4 or 8 bytes");
	}
}

/* A string into its field; -1 if it does not fit. */
static int
kvp_opt_str(struct kvp_agent_cfg *cfg, const struct kvp_opt *o, const char *v)
{
	if (strlen(v) >= o->size)
		return -1;
	memcpy((char *)cfg + o->off, v, strlen(v) + 1);
	return 0;
}

static const struct kvp_opt *
kvp_opt_find(const char *name)
{
	size_t i;

	for (i = 0; i < KVP_NOPTS; i++)
		if (!strcmp(kvp_opts[i].name, name))
			return &kvp_opts[i];
	return NULL;
}

uint64_t
kvp_opts_default(const char *name)
{
	const struct kvp_opt *o = kvp_opt_find(name);

	return o ? o->def : 0;
}

static bool
kvp_opt_is_name(const char *v)
{
	if (!*v)
		return false;
	for (; *v; v++)
		if (!isalnum((unsigned char)*v) && !strchr("_.-", *v))
			return false;
	return true;
}

/* Parse v for o into cfg: 0, or -1 (a bad value). */
static int
kvp_opt_parse_one(struct kvp_agent_cfg *cfg, const struct kvp_opt *o,
		  const char *v)
{
	uint64_t n;
	unsigned k;

	if (o->parse)
		return o->parse(cfg, v);
	switch (o->kind) {
	case KVP_OPT_SIZE:
	case KVP_OPT_UINT:
	case KVP_OPT_PCT:
		if (kvp_parse_size(v, &n) || n < o->min ||
		    (o->max && n > o->max) || (o->mult && n % o->mult) ||
		    ((o->flags & KVP_OPTF_POW2) && (n & (n - 1))))
			return -1;
		kvp_opt_store(cfg, o, n * (o->scale ? o->scale : 1));
		return 0;
	case KVP_OPT_STR:
		if (((o->flags & KVP_OPTF_NONEMPTY) && !*v) ||
		    ((o->flags & KVP_OPTF_ABSPATH) && v[0] != '/') ||
		    ((o->flags & KVP_OPTF_NAME) && !kvp_opt_is_name(v)))
			return -1;
		return kvp_opt_str(cfg, o, v);
	case KVP_OPT_CHOICE:
		for (k = 0; o->choices[k]; k++)
			if (!strcmp(v, o->choices[k])) {
				kvp_opt_store(cfg, o, k);
				return 0;
			}
		return -1;
	case KVP_OPT_FLAG:
		kvp_opt_store(cfg, o, 1);
		return 0;
	case KVP_OPT_LIST:
		break;
	}
	return -1;
}

static int
kvp_opt_ssd_dir(struct kvp_agent_cfg *cfg, const char *v)
{
	unsigned k;

	if (strlen(v) >= sizeof(cfg->ssd_dir) || !*v || cfg->nssd_dirs >= 16)
		return -1;
	for (k = 0; k < cfg->nssd_dirs; k++)
		if (!strcmp(cfg->ssd_dirs[k], v))
			return -1;
	snprintf(cfg->ssd_dirs[cfg->nssd_dirs++], sizeof(cfg->ssd_dirs[0]),
		 "%s", v);
	if (!cfg->ssd_dir[0])
		snprintf(cfg->ssd_dir, sizeof(cfg->ssd_dir), "%s", v);
	return 0;
}

/* --evict-ghost F: a factor with up to two decimals, kept in hundredths */
static int
kvp_opt_evict_ghost(struct kvp_agent_cfg *cfg, const char *v)
{
	char *end;
	double f;

	errno = 0;
	f = strtod(v, &end);
	if (errno || end == v || *end || !(f >= 0 && f <= 16))
		return -1;
	cfg->evict_ghost_pct = (uint32_t)(f * 100 + 0.5);
	return 0;
}

static int
kvp_opt_metrics_addr(struct kvp_agent_cfg *cfg, const char *v)
{
	if (!*v || strlen(v) >= sizeof(cfg->metrics_addr))
		return -1;
	snprintf(cfg->metrics_addr, sizeof(cfg->metrics_addr), "%s", v);
	/* an address given that cannot be bound is fatal */
	cfg->metrics_addr_given = true;
	return 0;
}

static int
kvp_opt_numa(struct kvp_agent_cfg *cfg, const char *v)
{
	uint64_t n;

	if (!strcmp(v, "interleave"))
		cfg->numa = KVP_NUMA_INTERLEAVE;
	else if (!strcmp(v, "off"))
		cfg->numa = KVP_NUMA_OFF;
	else if (kvp_parse_size(v, &n) || n > 1023)
		return -1;
	else
		cfg->numa = (int)n;
	return 0;
}

static int
kvp_opt_hbm_gpu(struct kvp_agent_cfg *cfg, const char *v)
{
	char *end = NULL;
	long d = strtol(v, &end, 10);

	if (!end || end == v || *end || d < 0 || d > 1023 ||
	    cfg->nhbm >= KVP_GPU_MAX)
		return -1;
	cfg->hbm_gpu[cfg->nhbm++] = (int)d;
	return 0;
}

static int
kvp_opt_cluster(struct kvp_agent_cfg *cfg, const char *v)
{
	if (strlen(v) >= sizeof(cfg->cluster_url) ||
	    strncmp(v, "redis://", 8) != 0)
		return -1;
	snprintf(cfg->cluster_url, sizeof(cfg->cluster_url), "%s", v);
	return 0;
}

/* ---- words ---- */

/* A size as the user would write it: 16K, 64M, 1G (bytes if uneven). */
static void
kvp_opt_size_str(uint64_t v, char *out, size_t cap)
{
	static const char sfx[] = "KMGT";
	unsigned k = 0;

	if (!v || v % 1024) {
		snprintf(out, cap, "%llu", (unsigned long long)v);
		return;
	}
	v >>= 10;
	while (k < 3 && v % 1024 == 0) {
		v >>= 10;
		k++;
	}
	snprintf(out, cap, "%llu%c", (unsigned long long)v, sfx[k]);
}

static void
kvp_opt_num_str(const struct kvp_opt *o, uint64_t v, char *out, size_t cap)
{
	if (o->kind == KVP_OPT_SIZE)
		kvp_opt_size_str(v, out, cap);
	else
		snprintf(out, cap, "%llu", (unsigned long long)v);
}

/* The default in words ("" if it has none to say). */
static void
kvp_opt_default_str(const struct kvp_opt *o, char *out, size_t cap)
{
	out[0] = '\0';
	if (o->defs)
		snprintf(out, cap, "%s", o->defs);
	else if (o->kind == KVP_OPT_CHOICE)
		snprintf(out, cap, "%s", o->choices[o->def]);
	else if (o->kind != KVP_OPT_STR && o->kind != KVP_OPT_FLAG &&
		 o->kind != KVP_OPT_LIST && !(o->flags & KVP_OPTF_COMPUTED))
		kvp_opt_num_str(o, o->def, out, cap);
}

/* The default as a value to give the flag (false: it has none, or it is
 * said in words). */
static bool
kvp_opt_default_value(const struct kvp_opt *o, char *out, size_t cap)
{
	kvp_opt_default_str(o, out, cap);
	if (o->flags & KVP_OPTF_COMPUTED)
		return false;
	return out[0] && (!o->defs || o->kind == KVP_OPT_STR ||
			  (o->flags & KVP_OPTF_DEFVAL));
}

/* The help with %D and %R written out. */
static void
kvp_opt_help(const struct kvp_opt *o, char *out, size_t cap)
{
	const char *h = o->help;
	char w[128], lo[32], hi[32];
	size_t n = 0;

	for (; *h && n + 1 < cap; h++) {
		if (h[0] != '%' || (h[1] != 'D' && h[1] != 'R')) {
			out[n++] = *h;
			continue;
		}
		if (h[1] == 'D') {
			kvp_opt_default_str(o, w, sizeof(w));
		} else {
			kvp_opt_num_str(o, o->min, lo, sizeof(lo));
			kvp_opt_num_str(o, o->max, hi, sizeof(hi));
			snprintf(w, sizeof(w), "%s..%s", lo, hi);
		}
		n += (size_t)snprintf(out + n, cap - n, "%s", w);
		if (n >= cap)
			n = cap - 1;
		h++;
	}
	out[n] = '\0';
}

/* What a flag takes, for its error message. */
static void
kvp_opt_want(const struct kvp_opt *o, char *out, size_t cap)
{
	char lo[32], hi[32], m[32];
	const char *what = o->kind == KVP_OPT_SIZE ?
				   "a size (K, M, G, T suffixes)" :
			   o->kind == KVP_OPT_PCT ? "a percentage" :
						    "a number";
	size_t n;
	unsigned k;

	if (o->want) {
		snprintf(out, cap, "%s", o->want);
		return;
	}
	switch (o->kind) {
	case KVP_OPT_SIZE:
	case KVP_OPT_UINT:
	case KVP_OPT_PCT:
		kvp_opt_num_str(o, o->min, lo, sizeof(lo));
		kvp_opt_num_str(o, o->max, hi, sizeof(hi));
		kvp_opt_num_str(o, o->mult, m, sizeof(m));
		snprintf(out, cap, "%s%s%s%s%s%s%s%s", what,
			 o->max ? ", " :
			 o->min ? ", at least " :
				  "",
			 o->max || o->min ? lo : "", o->max ? ".." : "",
			 o->max ? hi : "",
			 o->flags & KVP_OPTF_POW2 ? ", a power of two" : "",
			 o->mult ? ", a multiple of " : "", o->mult ? m : "");
		return;
	case KVP_OPT_STR:
		if (o->flags & KVP_OPTF_NAME)
			snprintf(out, cap, "1 to %zu of [A-Za-z0-9_.-]",
				 o->size - 1);
		else
			snprintf(out, cap, "%s of at most %zu bytes",
				 o->flags & KVP_OPTF_ABSPATH ?
					 "an absolute path" :
				 o->flags & KVP_OPTF_NONEMPTY ?
					 "a non-empty string" :
					 "a string",
				 o->size - 1);
		return;
	case KVP_OPT_CHOICE:
		n = (size_t)snprintf(out, cap, "one of");
		for (k = 0; o->choices[k] && n < cap; k++)
			n += (size_t)snprintf(out + n, cap - n, "%s %s",
					      k ? "," : "", o->choices[k]);
		return;
	default:
		snprintf(out, cap, "no value");
	}
}

/*
 * Print text from column col on, wrapped before column 80 at spaces; each
 * line after the first starts with indent (ind columns wide).
 */
static void
kvp_opt_wrap(FILE *f, const char *text, size_t col, const char *indent,
	     size_t ind)
{
	const char *p = text;

	while (*p) {
		const char *w = p, *e;

		while (*w == ' ')
			w++;
		e = w;
		while (*e && *e != ' ')
			e++;
		if (col > ind && col + (size_t)(e - p) > 79) {
			fprintf(f, "\n%s", indent);
			col = ind;
			p = w;
		}
		fwrite(p, 1, (size_t)(e - p), f);
		col += (size_t)(e - p);
		p = e;
	}
	fputc('\n', f);
}

/* ---- what the table makes ---- */

static void
kvp_opts_usage(FILE *f)
{
	char left[64], help[1024];
	size_t i;

	fprintf(f, "usage: kvpoold [options]\n");
	for (i = 0; i < KVP_NOPTS; i++) {
		const struct kvp_opt *o = &kvp_opts[i];
		int n = snprintf(left, sizeof(left), "--%s%s%s", o->name,
				 o->arg ? " " : "", o->arg ? o->arg : "");

		kvp_opt_help(o, help, sizeof(help));
		fprintf(f, "  %-*s", n < 24 ? 24 : n + 2, left);
		kvp_opt_wrap(f, help, 2 + (size_t)(n < 24 ? 24 : n + 2),
			     "                          ", 26);
	}
	fprintf(f, "sizes take K, M, G, T suffixes (binary).\n"
		   "--print-config: every flag with its default, as a "
		   "commented config file.\n");
}

/* The README's "Agent flags" block: every flag, wrapped. */
static void
kvp_opts_synopsis(FILE *f)
{
	char item[128], choices[96];
	size_t i, col = 7;

	fprintf(f, "kvpoold");
	for (i = 0; i < KVP_NOPTS; i++) {
		const struct kvp_opt *o = &kvp_opts[i];
		const char *a = o->syn ? o->syn : o->arg;
		size_t n, k;

		if (o->kind == KVP_OPT_CHOICE && !o->syn) {
			choices[0] = '\0';
			for (k = 0, n = 0; o->choices[k]; k++)
				n += (size_t)snprintf(choices + n,
						      sizeof(choices) - n,
						      "%s%s", k ? "|" : "",
						      o->choices[k]);
			a = choices;
		}
		n = (size_t)snprintf(item, sizeof(item), "[--%s%s%s%s]",
				     o->name, a ? " " : "", a ? a : "",
				     o->kind == KVP_OPT_LIST ? " ..." : "");
		if (col + 1 + n > 79) {
			fprintf(f, "\n       ");
			col = 7;
		}
		fprintf(f, " %s", item);
		col += 1 + n;
	}
	fprintf(f, "\n");
}

/* The commented config 'ninja install' writes (kvpoold.conf.example). */
static void
kvp_opts_config(FILE *f)
{
	char def[128], help[1024];
	size_t i;

	fprintf(f,
		"# kvpoold's flags for one pool, as its systemd unit reads them:\n"
		"# kvpoold@POOL.service reads SYSCONFDIR/kvpool/POOL.conf (/etc/kvpool/\n"
		"# with --prefix=/usr), one line in systemd's EnvironmentFile syntax:\n"
		"#\n"
		"#KVPOOLD_ARGS=\"--dram 64G --ssd-dir /srv/kvpool --group kvpool\"\n"
		"#\n"
		"# Copy this file to POOL.conf and set the flags that differ from\n"
		"# their defaults.  Every flag follows, with its default value where\n"
		"# it has one (written by kvpoold --print-config from its table of\n"
		"# flags; kvpoold --help says the same).\n");
	for (i = 0; i < KVP_NOPTS; i++) {
		const struct kvp_opt *o = &kvp_opts[i];

		bool value = kvp_opt_default_value(o, def, sizeof(def));

		kvp_opt_help(o, help, sizeof(help));
		fprintf(f, "\n# --%s", o->name);
		if (o->arg)
			fprintf(f, " %s", value ? def : o->arg);
		if (o->flags & KVP_OPTF_UNIT)
			fprintf(f, "   (the unit gives it: not here)");
		fprintf(f, "\n#     ");
		kvp_opt_wrap(f, help, 6, "#     ", 6);
	}
}

int
kvp_opts_parse(int argc, char **argv, struct kvp_agent_cfg *cfg)
{
	/* getopt_long's values: the table's rows from KVP_OPT_ROW0 on */
	enum {
		KVP_OPT_HELP = 256,
		KVP_OPT_CONFIG,
		KVP_OPT_SYNOPSIS,
		KVP_OPT_ROW0
	};
	struct option lo[KVP_NOPTS + 4];
	char want[256];
	size_t i;
	int opt, idx = 0;

	memset(lo, 0, sizeof(lo));
	for (i = 0; i < KVP_NOPTS; i++) {
		const struct kvp_opt *o = &kvp_opts[i];

		lo[i].name = o->name;
		lo[i].has_arg = o->kind == KVP_OPT_FLAG ? no_argument :
							  required_argument;
		lo[i].val = KVP_OPT_ROW0 + (int)i;
		/* the defaults */
		if (o->kind == KVP_OPT_STR && o->defs &&
		    !(o->flags & KVP_OPTF_COMPUTED))
			kvp_opt_str(cfg, o, o->defs);
		else if (o->size && o->kind != KVP_OPT_STR)
			kvp_opt_store(cfg, o,
				      o->def * (o->scale ? o->scale : 1));
	}
	lo[i++] = (struct option){ "help", no_argument, NULL, KVP_OPT_HELP };
	lo[i++] = (struct option){ "print-config", no_argument, NULL,
				   KVP_OPT_CONFIG };
	lo[i++] = (struct option){ "synopsis", no_argument, NULL,
				   KVP_OPT_SYNOPSIS };
	while ((opt = getopt_long(argc, argv, "h", lo, &idx)) != -1) {
		const struct kvp_opt *o;

		switch (opt) {
		case 'h':
		case KVP_OPT_HELP:
			kvp_opts_usage(stdout);
			return 0;
		case KVP_OPT_CONFIG:
			kvp_opts_config(stdout);
			return 0;
		case KVP_OPT_SYNOPSIS:
			kvp_opts_synopsis(stdout);
			return 0;
		default:
			/* '?': getopt_long said what was wrong */
			if (opt < KVP_OPT_ROW0 ||
			    (size_t)(opt - KVP_OPT_ROW0) >= KVP_NOPTS) {
				kvp_opts_usage(stderr);
				return 2;
			}
		}
		o = &kvp_opts[opt - KVP_OPT_ROW0];
		if (kvp_opt_parse_one(cfg, o, optarg ? optarg : "")) {
			kvp_opt_want(o, want, sizeof(want));
			fprintf(stderr,
				"kvpoold: bad value '%s' for --%s: want %s\n",
				optarg, o->name, want);
			return 2;
		}
	}
	if (optind < argc) {
		kvp_opts_usage(stderr);
		return 2;
	}
	return -1;
}
