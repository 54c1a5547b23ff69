/* SPDX-License-Identifier: MIT */
/*
 * metrics_table.c - every metric of a snapshot, declared once: the table
 * kvp_mtab[] and what it makes.
 *
 * A FAMILY row opens a Prometheus family (name, TYPE, HELP, the section
 * and the meaning docs/observability.md gives it); the VALUE rows below
 * it are its series: their fixed labels, where the value lies in struct
 * kvp_metrics (a field, a client or agent counter, a function), and the
 * key `kvpool stat --json` gives it (NULL: none).  A JSON row is a key
 * of `stat --json` that no series has.  A family's rows may repeat over
 * the drives, GPUs, remote events, namespaces or histograms of the
 * snapshot (.over): those add their labels in front of the fixed ones and
 * put their JSON keys in the nested array or object of their kind.
 *
 * From the table come the exposition (kvp_metrics_prom: the families in
 * table order, each element of its .over in turn with every row of the
 * family), `kvpool stat --json` (kvp_metrics_json), the names of the
 * counters (kvp_metrics_ctr_name, the human table's) and the tables of
 * docs/observability.md (kvp_metrics_markdown, `kvpool stat
 * --metrics-markdown`; tests/obs/test_metrics_doc.sh checks the doc is
 * its output).  kvp_metrics_markdown checks the table first: every client
 * and agent counter has exactly one JSON key, keys and families are
 * unique, a family's rows repeat over one thing.  A new metric is one row
 * here (and, for a new counter, its enum entry in shm/kvp_shm.h).
 */
#include <math.h>
#include <stddef.h>

#include "agent/agent_int.h"

const char *const kvp_tier_names[KVP_MTIERS] = { "DRAM", "SSD", "HBM" };

const char *const kvp_io_stage_names[KVP_IOS__N + 1] = {
	[KVP_IOS_QUEUE] = "queue",   [KVP_IOS_SUBMIT] = "submit",
	[KVP_IOS_DEVICE] = "device", [KVP_IOS_ANSWER] = "answer",
	[KVP_IOS__N] = "copy",
};

/* The snapshot's histograms (the renderers here and metrics.c's table). */
uint64_t
kvp_hist_words_count(const uint64_t *w)
{
	uint64_t n = 0;
	unsigned b;

	for (b = 0; b < KVP_HIST_BUCKETS; b++)
		n += w[b];
	return n;
}

/* Latency at quantile q (0..1) of a histogram, in ns: the upper bound of
 * the bucket it falls in (0 when empty; the last bound for +Inf). */
uint64_t
kvp_hist_words_quantile(const uint64_t *w, double q)
{
	uint64_t n = kvp_hist_words_count(w), seen = 0, want;
	unsigned b;

	if (!n)
		return 0;
	want = (uint64_t)ceil(q * (double)n);
	if (want == 0)
		want = 1;
	for (b = 0; b < KVP_HIST_BUCKETS - 1; b++) {
		seen += w[b];
		if (seen >= want)
			break;
	}
	if (b == KVP_HIST_BUCKETS - 1)
		b--;
	return 1ull << (b + KVP_HIST_SHIFT);
}

uint64_t
kvp_metrics_hist_count(const struct kvp_metrics *m, unsigned h)
{
	return kvp_hist_words_count(m->hist[h]);
}

uint64_t
kvp_metrics_hist_quantile(const struct kvp_metrics *m, unsigned h, double q)
{
	return kvp_hist_words_quantile(m->hist[h], q);
}

/* enum kvp_drive_state as text (drives.c's log lines, the metrics): here,
 * below metrics.c, which the CLI links too */
static const char *const kvp_drive_state_names[] = {
	"none", "ok", "full", "failed", "missing", "gone",
};

const char *
kvp_drive_state_name(unsigned st)
{
	return st < sizeof(kvp_drive_state_names) /
				       sizeof(kvp_drive_state_names[0]) ?
		       kvp_drive_state_names[st] :
		       "unknown";
}

/* enum kvp_cl_ctr: the remote tier's events (JSON keys, metric labels) */
static const char *const kvp_cl_ctr_names[KVP_CLC__N] = {
	"lookups", "lookup_keys",    "found",      "fetched",   "fetched_bytes",
	"failed",  "dir_roundtrips", "dir_errors", "published", "unpublished",
	"served",  "served_bytes",   "refused",    "stale",     "bad_mailbox",
	"corrupt", "stalled_peers",  "name_clash",
};

/* enum kvp_ns_event's names (kvpool.h declares the list) */
static const char *const kvp_nse_names[KVP_NSE__N] = {
#define KVP__NSE_NAME(e, name) name,
	KVP_NS_EVENTS(KVP__NSE_NAME)
#undef KVP__NSE_NAME
};

/* enum kvp_hist: operation and tier of each histogram */
static const struct {
	const char *op;
	unsigned tier;
} kvp_hist_id[KVP_HIST__N] = {
	[KVP_HIST_PUT_DRAM] = { "put", KVP_MTIER_DRAM },
	[KVP_HIST_GET_DRAM] = { "get", KVP_MTIER_DRAM },
	[KVP_HIST_GET_SSD] = { "get", KVP_MTIER_SSD },
	[KVP_HIST_EXISTS_DRAM] = { "exists", KVP_MTIER_DRAM },
	[KVP_HIST_EXISTS_SSD] = { "exists", KVP_MTIER_SSD },
};

enum kvp_mkind {
	KVP_MK_FAMILY, /* a Prometheus family; its series follow */
	KVP_MK_VALUE,  /* a series of the family above (and a JSON key) */
	KVP_MK_JSON,   /* a `stat --json` key only */
};

enum kvp_msrc {
	KVP_MS_FIELD, /* uint64_t at .arg in struct kvp_metrics (+ .over's) */
	KVP_MS_CTR,   /* m->ctr[.arg] (enum kvp_ctr) */
	KVP_MS_ACTR,  /* m->actr[.arg] (enum kvp_actr) */
	KVP_MS_ZERO,  /* 0: a series kept for its label set */
	KVP_MS_ONE,   /* 1 */
	KVP_MS_FN,    /* .fn(m, i) */
};

/* What a family's rows repeat over, and the labels each element adds. */
enum kvp_mover {
	KVP_MO_ONE,
	KVP_MO_DRIVE, /* drives in use: drive="K"; JSON: "ssd_drives" */
	KVP_MO_GPU,   /* GPU slots in use: gpu="DEVICE" */
	KVP_MO_CLC,   /* remote events: event="NAME"; JSON: remote.NAME */
	KVP_MO_NS,    /* namespace rows: namespace, ns_id; JSON: "namespaces" */
	KVP_MO_NSE,   /* namespace rows x their events: ..., event="NAME" */
	KVP_MO_HIST,  /* op histograms: op, tier; JSON: "latency" */
	KVP_MO_STAGE, /* SSD read stages: stage; JSON: "read_stages" */
};

/* When a family is in the exposition. */
enum kvp_mwhen {
	KVP_MW_ALWAYS,
	KVP_MW_REMOTE, /* the segment has a remote tier (JSON: "remote") */
	KVP_MW_NS,     /* a namespace has counted something */
};

/* docs/observability.md's sections, in order */
enum kvp_msec {
	KVP_SEC_TIERS,
	KVP_SEC_RW,
	KVP_SEC_GPU,
	KVP_SEC_REMOTE,
	KVP_SEC_INDEX,
	KVP_SEC_NS,
	KVP_SEC_AGENT,
	KVP_SEC__N
};
static const char *const kvp_msec_titles[KVP_SEC__N] = {
	"Tiers",
	"Reads and writes",
	"GPUs: device copies and the HBM tier",
	"The remote tier (`--cluster`)",
	"Index, clients, reaper",
	"Engines, per namespace",
	"The agent",
};

enum kvp_mjson {
	KVP_MJ_U64,
	KVP_MJ_BOOL,
	KVP_MJ_F4, /* %.4f of .dfn */
};

struct kvp_mrow {
	uint8_t kind;       /* enum kvp_mkind */
	uint8_t src;        /* enum kvp_msrc */
	uint8_t over;       /* enum kvp_mover (a family's) */
	uint8_t when;       /* enum kvp_mwhen (a family's) */
	uint8_t sec;        /* enum kvp_msec (a family's) */
	uint8_t jfmt;       /* enum kvp_mjson */
	bool hist;          /* a histogram: buckets at .arg (+ .over's) */
	const char *name;   /* FAMILY: its name; VALUE: fixed labels or NULL */
	const char *type;   /* FAMILY: gauge, counter, histogram */
	const char *help;   /* FAMILY: HELP */
	const char *doc;    /* FAMILY: meaning in the docs (NULL: .help) */
	const char *labdoc; /* FAMILY: labels .lab adds, for the docs */
	const char *json;   /* VALUE, JSON: the `stat --json` key */
	size_t arg;
	uint64_t (*fn)(const struct kvp_metrics *m, unsigned i);
	/* a value printed as a double: .dfn's, or the field's over .div */
	double (*dfn)(const struct kvp_metrics *m);
	int prec; /* a double: digits after the point in the exposition */
	double div;
	/* labels after the fixed ones (drive state, kvpool_info's) */
	void (*lab)(const struct kvp_metrics *m, unsigned i, char *out,
		    size_t cap);
};

/* ---- values that are not a field ---- */

static uint64_t
kvp_mv_alive(const struct kvp_metrics *m, unsigned i)
{
	(void)i;
	return m->agent_alive;
}

static uint64_t
kvp_mv_value_bytes(const struct kvp_metrics *m, unsigned i)
{
	(void)i;
	return m->value_bytes[KVP_MTIER_DRAM] + m->value_bytes[KVP_MTIER_SSD] +
	       m->value_bytes[KVP_MTIER_HBM];
}

static uint64_t
kvp_mv_drive_errors(const struct kvp_metrics *m, unsigned i)
{
	return KVP_DRIVE_ERRORS(m->drive_state[i]);
}

static uint64_t
kvp_mv_gpu_up(const struct kvp_metrics *m, unsigned i)
{
	return KVP_GS_STATE(m->gpu_state[i]) == KVP_GPU_UP;
}

static uint64_t
kvp_mv_remote_up(const struct kvp_metrics *m, unsigned i)
{
	(void)i;
	return KVP_CL_STATE(m->remote_state) == KVP_CL_UP;
}

static uint64_t
kvp_mv_peers(const struct kvp_metrics *m, unsigned i)
{
	(void)i;
	return KVP_CL_PEERS(m->remote_state);
}

static uint64_t
kvp_mv_bad_peers(const struct kvp_metrics *m, unsigned i)
{
	(void)i;
	return KVP_CL_BAD(m->remote_state);
}

static uint64_t
kvp_mv_name_clash(const struct kvp_metrics *m, unsigned i)
{
	(void)i;
	return KVP_CL_STATE(m->remote_state) == KVP_CL_CLASH;
}

static double
kvp_mv_occupancy(const struct kvp_metrics *m)
{
	return m->index_limit ? (double)m->ix_ready / (double)m->index_limit :
				0.0;
}

static double
kvp_mv_probe_mean(const struct kvp_metrics *m)
{
	return m->ix_ready ? (double)m->probe_sum / (double)m->ix_ready : 0.0;
}

/* 1 - distinct keys / lookups of the last --ceiling-window (distinct.c),
 * 0 before the first window or without lookups */
static double
kvp_mv_hit_ceiling(const struct kvp_metrics *m)
{
	uint64_t keys = m->actr[KVP_ACTR_WINDOW_KEYS],
		 look = m->actr[KVP_ACTR_WINDOW_LOOKUPS];

	return look > keys ? 1.0 - (double)keys / (double)look : 0.0;
}

static const char *kvp_prom_label(const char *in, char *out, size_t cap);

static void
kvp_ml_info(const struct kvp_metrics *m, unsigned i, char *out, size_t cap)
{
	char pool[4 * KVP_POOL_NAME_MAX];

	(void)i;
	snprintf(out, cap, "pool=\"%s\",abi=\"%u.%u\"",
		 kvp_prom_label(m->pool, pool, sizeof(pool)), m->abi_major,
		 m->abi_minor);
}

static void
kvp_ml_drive_state(const struct kvp_metrics *m, unsigned i, char *out,
		   size_t cap)
{
	snprintf(out, cap, "state=\"%s\"",
		 kvp_drive_state_name(KVP_DRIVE_STATE(m->drive_state[i])));
}

/* ---- the table ---- */

#define KVP_M(f) .src = KVP_MS_FIELD, .arg = offsetof(struct kvp_metrics, f)
#define KVP_C(c) .src = KVP_MS_CTR, .arg = KVP_CTR_##c
#define KVP_A(c) .src = KVP_MS_ACTR, .arg = KVP_ACTR_##c
#define KVP_F(f) .src = KVP_MS_FN, .fn = f
#define KVP_FAM(n, t, s) .kind = KVP_MK_FAMILY, .name = n, .type = t, .sec = s
#define KVP_VAL(labels, key) .kind = KVP_MK_VALUE, .name = labels, .json = key
#define KVP_JSON(key) .kind = KVP_MK_JSON, .json = key
#define KVP_SECONDS(f, digits) KVP_M(f), .prec = digits, .div = 1e9

static const struct kvp_mrow kvp_mtab[] = {
	/* the agent */
	{ KVP_FAM("kvpool_info", "gauge", KVP_SEC_AGENT),
	  .help = "Pool served by this agent and its segment ABI (always 1).",
	  .doc = "1; `pool`: the name the agent (or the tool) was given and "
		 "validated, `abi`: the segment's ABI major.minor",
	  .labdoc = "`pool`, `abi`" },
	{ KVP_VAL(NULL, NULL), .src = KVP_MS_ONE, .lab = kvp_ml_info },
	{ KVP_FAM("kvpool_agent_up", "gauge", KVP_SEC_AGENT),
	  .help = "1 while the agent holds the pool's segment lock." },
	{ KVP_VAL(NULL, "agent_alive"), KVP_F(kvp_mv_alive),
	  .jfmt = KVP_MJ_BOOL },
	{ KVP_JSON("agent_pid"), KVP_M(agent_pid) },
	{ KVP_FAM("kvpool_agent_incarnation", "gauge", KVP_SEC_AGENT),
	  .help = "Agents that attached to this segment (bumped by every "
		  "start)." },
	{ KVP_VAL(NULL, "incarnation"), KVP_M(incarnation) },
	{ KVP_JSON("metrics_port"), KVP_M(metrics_port) },
	{ KVP_FAM("kvpool_agent_start_time_seconds", "gauge", KVP_SEC_AGENT),
	  .help = "Unix time the agent began serving." },
	{ KVP_VAL(NULL, NULL), KVP_SECONDS(agent_start_ns, 3) },

	/* tiers */
	{ KVP_FAM("kvpool_medium_state", "gauge", KVP_SEC_TIERS),
	  .help = "Tier occupancy: bytes used and total, entries resident, "
		  "staging arena pages (slots) in use now, at their peak since "
		  "creation, and in all.",
	  .doc = "DRAM: arena bytes in use / in all / populated so far, ready "
		 "entries resident in DRAM. SSD: on-disk bytes of the segment "
		 "files, `--ssd-size` (or the file system's size), bytes of "
		 "live records, entries whose value is only on SSD; staging "
		 "arena pages (one page = one `--staging-slot`) in use now "
		 "(read at scrape time), at the highest since the segment was "
		 "created (exact), and in all. HBM: entries (bytes: 0, see "
		 "`kvpool_hbm_bytes`)" },
	{ KVP_VAL("tier=\"DRAM\",state=\"bytes_used\"", "dram_bytes_used"),
	  KVP_M(dram_used) },
	{ KVP_VAL("tier=\"DRAM\",state=\"bytes_total\"", "dram_bytes_total"),
	  KVP_M(dram_total) },
	{ KVP_VAL("tier=\"DRAM\",state=\"entries\"", "dram_entries"),
	  KVP_M(entries[KVP_MTIER_DRAM]) },
	{ KVP_VAL("tier=\"DRAM\",state=\"bytes_populated\"",
		  "dram_bytes_populated"),
	  KVP_M(dram_populated) },
	{ KVP_JSON("dram_page_bytes"), KVP_M(dram_page_bytes) },
	{ KVP_JSON("dram_unit_bytes"), KVP_M(dram_unit) },
	{ KVP_JSON("dram_values_wasting_half_a_unit"), KVP_M(dram_wasteful) },
	{ KVP_JSON("value_bytes"), KVP_F(kvp_mv_value_bytes) },
	{ KVP_JSON("ssd_enabled"), KVP_M(ssd_enabled), .jfmt = KVP_MJ_BOOL },
	{ KVP_VAL("tier=\"SSD\",state=\"bytes_used\"", "ssd_bytes_used"),
	  KVP_M(ssd_used) },
	{ KVP_VAL("tier=\"SSD\",state=\"bytes_total\"", "ssd_bytes_total"),
	  KVP_M(ssd_total) },
	{ KVP_VAL("tier=\"SSD\",state=\"bytes_live\"", "ssd_bytes_live"),
	  KVP_M(ssd_live) },
	{ KVP_VAL("tier=\"SSD\",state=\"entries\"", "ssd_entries"),
	  KVP_M(entries[KVP_MTIER_SSD]) },
	{ KVP_VAL("tier=\"SSD\",state=\"staging_pages_in_use\"",
		  "staging_pages_in_use"),
	  KVP_M(staging_in_use) },
	{ KVP_VAL("tier=\"SSD\",state=\"staging_pages_peak\"",
		  "staging_pages_peak"),
	  KVP_M(staging_peak) },
	{ KVP_VAL("tier=\"SSD\",state=\"staging_pages_total\"",
		  "staging_pages_total"),
	  KVP_M(staging_total) },
	{ KVP_VAL("tier=\"HBM\",state=\"bytes_used\"", NULL),
	  .src = KVP_MS_ZERO },
	{ KVP_VAL("tier=\"HBM\",state=\"bytes_total\"", NULL),
	  .src = KVP_MS_ZERO },
	{ KVP_VAL("tier=\"HBM\",state=\"entries\"", NULL),
	  KVP_M(entries[KVP_MTIER_HBM]) },
	{ KVP_FAM("kvpool_ssd_drive_state", "gauge", KVP_SEC_RW),
	  .over = KVP_MO_DRIVE,
	  .help = "1 for each SSD drive (--ssd-dir, by drive id) in its state: "
		  "ok, full, failed (I/O errors), missing (not opened at "
		  "start), gone (its directory disappeared).",
	  .doc = "1 for each drive (`--ssd-dir`; `drive`: its id, the top "
		 "bits of its locations) in its current state: `failed` after "
		 "I/O errors (no writes for 30 s), `full` a write was refused "
		 "for room (1 s), `missing` could not be opened at start, "
		 "`gone` its directory disappeared while the agent ran (no "
		 "writes until a restart). Alert on "
		 "`kvpool_ssd_drive_state{state!=\"ok\"}`",
	  .labdoc = "`state` = `ok`, `full`, `failed`, `missing`, `gone`" },
	{ KVP_VAL(NULL, NULL), .src = KVP_MS_ONE, .lab = kvp_ml_drive_state },
	{ KVP_FAM("kvpool_ssd_drive_bytes", "gauge", KVP_SEC_RW),
	  .over = KVP_MO_DRIVE,
	  .help = "SSD drive occupancy: on-disk bytes used, and its capacity.",
	  .doc = "one drive's on-disk bytes and its capacity (`--ssd-size` per "
		 "drive, or its file system's size)" },
	{ KVP_VAL("state=\"bytes_used\"", "bytes_used"), KVP_M(drive_used) },
	{ KVP_VAL("state=\"bytes_total\"", "bytes_total"), KVP_M(drive_total) },
	{ KVP_FAM("kvpool_ssd_drive_errors_total", "counter", KVP_SEC_RW),
	  .over = KVP_MO_DRIVE, .help = "I/O errors seen on each SSD drive.",
	  .doc = "I/O errors seen on that drive since the agent started" },
	{ KVP_VAL(NULL, "io_errors"), KVP_F(kvp_mv_drive_errors) },
	{ KVP_FAM("kvpool_staging_page_bytes", "gauge", KVP_SEC_TIERS),
	  .help = "Bytes of one staging arena page (slot)." },
	{ KVP_VAL(NULL, NULL), KVP_M(staging_slot_bytes) },
	{ KVP_FAM("kvpool_medium_events_total", "counter", KVP_SEC_TIERS),
	  .help = "Tier events: values demoted out of DRAM, promoted out of "
		  "SSD, evicted (their last copy dropped), SSD segments given "
		  "back, SSD records a reclaim rewrote at the head of the log "
		  "(read since written), staging spans freed by a sweep after "
		  "their holders were gone, requests refused BUSY.",
	  .doc = "DRAM: values written to SSD and leaving DRAM; values dropped "
		 "from DRAM with no copy left; puts refused BUSY (DRAM full, or "
		 "the index at `--index-entries`, the evictor behind). SSD: "
		 "reads that landed in DRAM; SSD-only values dropped with their "
		 "segment; segments given back (`--ssd-size`); records of those "
		 "segments rewritten at the head of the log because they were "
		 "read since written (`--ssd-reinsert`); staging spans freed by "
		 "a sweep after their lease and holds were gone (dead holders), "
		 "not by a holder; SSD read requests refused BUSY (a call past "
		 "half the staging arena, or the arena full)" },
	{ KVP_VAL("tier=\"DRAM\",event=\"demotion\"", "demotions"),
	  KVP_A(DEMOTE) },
	{ KVP_VAL("tier=\"DRAM\",event=\"eviction\"", "evictions"),
	  KVP_A(EVICT) },
	{ KVP_VAL("tier=\"DRAM\",event=\"busy_reject\"", NULL),
	  KVP_C(PUT_BUSY) },
	{ KVP_VAL("tier=\"SSD\",event=\"promotion\"", "promotions"),
	  KVP_A(PROMOTE) },
	{ KVP_VAL("tier=\"SSD\",event=\"eviction\"", "evictions_ssd"),
	  KVP_A(EVICT_SSD) },
	{ KVP_VAL("tier=\"SSD\",event=\"segment_reclaim\"", "segment_reclaims"),
	  KVP_A(SEGMENT_RECLAIM) },
	{ KVP_VAL("tier=\"SSD\",event=\"reinsertion\"", "ssd_reinsertions"),
	  KVP_A(SSD_REINSERT) },
	{ KVP_VAL("tier=\"SSD\",event=\"staging_expired_reclaim\"",
		  "staging_expired_reclaim"),
	  KVP_A(STAGING_EXPIRED) },
	{ KVP_VAL("tier=\"SSD\",event=\"busy_reject\"", "busy_rejects"),
	  KVP_A(BUSY_REJECT) },

	/* reads and writes */
	{ KVP_FAM("kvpool_resolve_total", "counter", KVP_SEC_RW),
	  .help = "Final answers for keys read: DRAM ok = copied from DRAM, "
		  "DRAM miss = not in the index; SSD = reads through the agent "
		  "(a held key that cannot be read is failed, never a miss; "
		  "BUSY parts are not answers).",
	  .doc = "final answers only. DRAM: `ok` = copied from DRAM, `miss` = "
		 "not in the index (a miss is decided by the index, in DRAM), "
		 "`failed` = 0. SSD: reads through the agent. A key answered "
		 "BUSY is asked again and is not an outcome; a held key that "
		 "cannot be read (I/O error, bad checksum, an agent that cannot "
		 "find it) is `failed`, never a miss" },
	{ KVP_VAL("tier=\"DRAM\",status=\"ok\"", "get_hit"), KVP_C(GET_HIT) },
	{ KVP_VAL("tier=\"DRAM\",status=\"miss\"", "get_miss"),
	  KVP_C(GET_MISS) },
	{ KVP_VAL("tier=\"DRAM\",status=\"failed\"", NULL),
	  .src = KVP_MS_ZERO },
	{ KVP_VAL("tier=\"SSD\",status=\"ok\"", "resolve_ok"),
	  KVP_C(RESOLVE_OK) },
	{ KVP_VAL("tier=\"SSD\",status=\"miss\"", "resolve_miss"),
	  KVP_C(RESOLVE_MISS) },
	{ KVP_VAL("tier=\"SSD\",status=\"failed\"", "resolve_failed"),
	  KVP_C(RESOLVE_FAILED) },
	{ KVP_FAM("kvpool_resolve_busy_total", "counter", KVP_SEC_RW),
	  .help = "SSD read requests answered BUSY (asked again; not "
		  "outcomes).",
	  .doc = "SSD read requests answered BUSY (parts of a batch; not "
		 "outcomes)" },
	{ KVP_VAL(NULL, "resolve_busy_parts"), KVP_C(RESOLVE_BUSY) },
	{ KVP_FAM("kvpool_ops_total", "counter", KVP_SEC_RW),
	  .help = "Keys asked of each operation (a batch counts its keys)." },
	{ KVP_VAL("op=\"put\"", "put"), KVP_C(PUT) },
	{ KVP_VAL("op=\"get\"", "get"), KVP_C(GET) },
	{ KVP_VAL("op=\"exists\"", "exists"), KVP_C(EXISTS) },
	{ KVP_VAL("op=\"delete\"", "delete"), KVP_C(DELETE) },
	{ KVP_JSON("exists_hit"), KVP_C(EXISTS_HIT) },
	{ KVP_FAM("kvpool_op_hits_total", "counter", KVP_SEC_RW),
	  .help = "Keys found, by the tier their value was in (get: copied; "
		  "exists: present)." },
	{ KVP_VAL("op=\"get\",tier=\"DRAM\"", NULL), KVP_C(GET_HIT) },
	{ KVP_VAL("op=\"get\",tier=\"SSD\"", NULL), KVP_C(RESOLVE_OK) },
	{ KVP_VAL("op=\"exists\",tier=\"DRAM\"", "exists_hit_dram"),
	  KVP_C(EXISTS_HIT_DRAM) },
	{ KVP_VAL("op=\"exists\",tier=\"SSD\"", "exists_hit_ssd"),
	  KVP_C(EXISTS_HIT_SSD) },
	{ KVP_FAM("kvpool_op_bytes_total", "counter", KVP_SEC_RW),
	  .help = "Value bytes stored (put) and copied out (get) by tier.",
	  .doc = "value bytes stored; value bytes copied out (DRAM hits, SSD "
		 "reads)" },
	{ KVP_VAL("op=\"put\",tier=\"DRAM\"", "put_bytes"), KVP_C(PUT_BYTES) },
	{ KVP_VAL("op=\"get\",tier=\"DRAM\"", "get_bytes"), KVP_C(GET_BYTES) },
	{ KVP_VAL("op=\"get\",tier=\"SSD\"", "get_ssd_bytes"),
	  KVP_C(GET_SSD_BYTES) },

	/* GPUs */
	{ KVP_FAM("kvpool_gpu_copy_bytes_total", "counter", KVP_SEC_GPU),
	  .help = "Value bytes copied between the pool and GPU memory by the "
		  "device calls (kvp_batch_get_dev: h2d, kvp_batch_put_dev: "
		  "d2h), and of those the bytes that went through a pinned "
		  "bounce buffer (DRAM not registered yet, SSD-resident "
		  "values).",
	  .doc = "value bytes the device calls copied to GPUs "
		 "(`kvp_batch_get_dev`, from DRAM, SSD or an HBM copy) and from "
		 "GPUs (`kvp_batch_put_dev`); `bounce`: of those, the bytes "
		 "that went through a pinned bounce buffer (DRAM not registered "
		 "yet, SSD values)" },
	{ KVP_VAL("direction=\"h2d\"", "dev_h2d_bytes"), KVP_C(DEV_H2D_BYTES) },
	{ KVP_VAL("direction=\"d2h\"", "dev_d2h_bytes"), KVP_C(DEV_D2H_BYTES) },
	{ KVP_VAL("direction=\"bounce\"", "dev_bounce_bytes"),
	  KVP_C(DEV_BOUNCE_BYTES) },
	{ KVP_FAM("kvpool_gpu_copy_keys_total", "counter", KVP_SEC_GPU),
	  .help = "Keys copied to or from GPU memory by the device calls." },
	{ KVP_VAL(NULL, "dev_keys"), KVP_C(DEV_KEYS) },
	{ KVP_FAM("kvpool_gpu_registered_bytes", "gauge", KVP_SEC_GPU),
	  .help = "DRAM tier bytes registered with the CUDA runtime (pinned "
		  "for DMA), summed over the processes that copy to GPUs (each "
		  "counted once; it lags their registration by at most one "
		  "device call).",
	  .doc = "DRAM registered for DMA (`cudaHostRegister`), summed over "
		 "the processes that copy to GPUs, each once; lags by at most "
		 "one device call, never more than registered" },
	{ KVP_VAL(NULL, "dev_registered_bytes"), KVP_C(DEV_REG_BYTES) },
	{ KVP_FAM("kvpool_hbm_up", "gauge", KVP_SEC_GPU), .over = KVP_MO_GPU,
	  .help = "1 while the HBM pool of a GPU slot serves (its helper is "
		  "up), by CUDA device." },
	{ KVP_VAL(NULL, NULL), KVP_F(kvp_mv_gpu_up) },
	{ KVP_FAM("kvpool_hbm_bytes", "gauge", KVP_SEC_GPU), .over = KVP_MO_GPU,
	  .help = "The HBM pool of a GPU: its size, and the bytes holding "
		  "copies of values (state=used)." },
	{ KVP_VAL("state=\"total\"", NULL), KVP_M(gpu_bytes) },
	{ KVP_VAL("state=\"used\"", NULL), KVP_M(gpu_used) },
	{ KVP_FAM("kvpool_hbm_events_total", "counter", KVP_SEC_GPU),
	  .help = "The HBM tier: values copied into GPU pools, copies dropped "
		  "for room, helpers that died or failed; device gets served "
		  "from a copy (device to device)." },
	{ KVP_VAL("event=\"copy\"", "hbm_copies"), KVP_A(HBM_COPIES) },
	{ KVP_VAL("event=\"eviction\"", "hbm_evictions"),
	  KVP_A(HBM_EVICTIONS) },
	{ KVP_VAL("event=\"helper_death\"", "hbm_helper_deaths"),
	  KVP_A(HBM_HELPER_DEATHS) },
	{ KVP_VAL("event=\"hit\"", "dev_hbm_hits"), KVP_C(DEV_HBM_HITS) },
	{ KVP_JSON("dev_hbm_bytes"), KVP_C(DEV_HBM_BYTES) },

	/* the remote tier: only in a pool made with --cluster */
	{ KVP_FAM("kvpool_remote_up", "gauge", KVP_SEC_REMOTE),
	  .when = KVP_MW_REMOTE,
	  .help = "1 while this node's agent runs the remote tier with its "
		  "directory reachable (kvpoold --cluster); peers: live peers "
		  "it can reach.",
	  .doc = "1 while the agent runs the remote tier (`--cluster`) with "
		 "its directory reachable" },
	{ KVP_VAL(NULL, NULL), KVP_F(kvp_mv_remote_up) },
	{ KVP_FAM("kvpool_remote_peers", "gauge", KVP_SEC_REMOTE),
	  .when = KVP_MW_REMOTE,
	  .help = "Other nodes of the cluster this agent reaches now.",
	  .doc = "other nodes this agent reaches now (live in the directory, "
		 "endpoint up)" },
	{ KVP_VAL(NULL, "peers"), KVP_F(kvp_mv_peers) },
	{ KVP_FAM("kvpool_remote_bad_peers", "gauge", KVP_SEC_REMOTE),
	  .when = KVP_MW_REMOTE,
	  .help = "Members of the directory whose node entry this agent "
		  "refused (malformed, or its worker address failed a probe), "
		  "at its last look (at most 255).",
	  .doc = "members of the directory whose node entry this agent "
		 "refused at its last look (a malformed field or name, or a "
		 "worker address its probe process died on or UCX refused; "
		 "each logged once); at most 255" },
	{ KVP_VAL(NULL, "bad_peers"), KVP_F(kvp_mv_bad_peers) },
	{ KVP_FAM("kvpool_remote_name_clash", "gauge", KVP_SEC_REMOTE),
	  .when = KVP_MW_REMOTE,
	  .help = "1 while another agent holds this node's name in the "
		  "directory (this one publishes and serves nothing).",
	  .doc = "1 while another agent holds this node's name "
		 "(`kvpool:claim:NODE`): this agent publishes and serves "
		 "nothing, and tries again every TTL/3" },
	{ KVP_VAL(NULL, NULL), KVP_F(kvp_mv_name_clash) },
	{ KVP_FAM("kvpool_remote_events_total", "counter", KVP_SEC_REMOTE),
	  .when = KVP_MW_REMOTE, .over = KVP_MO_CLC,
	  .help = "The remote tier: lookups (mailbox calls) and their keys, "
		  "keys the directory named a node for, keys fetched into this "
		  "pool and their bytes, keys whose fetch failed, directory "
		  "round trips and errors, keys published/unpublished, keys and "
		  "bytes served to peers, peer requests refused, stale "
		  "directory entries, bad mailboxes, claims of the node name "
		  "that found another agent's.",
	  .doc = "mailbox calls and the keys they asked about; keys the "
		 "directory named a node for; keys fetched into this pool and "
		 "their bytes; keys whose fetch failed (FAILED or BUSY); "
		 "directory round trips (one per lookup) and failed directory "
		 "commands (I/O, and every error reply: `OOM`, `WRONGTYPE`, "
		 "...; each kind is logged once, then once a minute); keys "
		 "published to / removed from the directory; keys and bytes "
		 "this node served to peers; peer messages refused (not a "
		 "member, wrong secret or incarnation, a DATA for no LEASE of "
		 "ours, malformed); directory entries the owner no longer had; "
		 "client mailboxes refused as malformed (or naming another "
		 "namespace than the client's); fetched pages whose bytes "
		 "failed the owner's CRC (never stored); peers dropped because "
		 "they stopped taking the pages they asked for; claims of this "
		 "node's name that found another agent's" },
	{ KVP_VAL(NULL, ""), KVP_M(remote_ctr) },
	{ KVP_FAM("kvpool_remote_publish_lag_seconds", "gauge", KVP_SEC_REMOTE),
	  .when = KVP_MW_REMOTE,
	  .help = "Bound on the age of a change when the directory got it (the "
		  "last publish pass that had changes; max: since the agent "
		  "started).",
	  .doc = "a bound on how old a change was when the directory got it: "
		 "the last publish pass that had changes, and the largest since "
		 "the agent started" },
	{ KVP_VAL("which=\"last\"", "publish_lag_ns"),
	  KVP_SECONDS(remote_pub_lag_ns, 9) },
	{ KVP_VAL("which=\"max\"", "publish_lag_max_ns"),
	  KVP_SECONDS(remote_pub_max_ns, 9) },
	{ KVP_FAM("kvpool_remote_dir_rtt_seconds", "gauge", KVP_SEC_REMOTE),
	  .when = KVP_MW_REMOTE,
	  .help = "The last directory lookup's round trip." },
	{ KVP_VAL(NULL, "dir_rtt_ns"), KVP_SECONDS(remote_dir_rtt_ns, 9) },
	{ KVP_FAM("kvpool_remote_fetch_duration_seconds", "histogram",
		  KVP_SEC_REMOTE),
	  .when = KVP_MW_REMOTE,
	  .help = "Remote FETCH calls, taken to answered (directory, leases, "
		  "transfers, puts).",
	  .doc = "FETCH calls from taken to answered (directory, leases, "
		 "transfers, the puts here)" },
	{ KVP_VAL(NULL, NULL), KVP_M(remote_lat), .hist = true },

	{ KVP_FAM("kvpool_put_rejects_total", "counter", KVP_SEC_RW),
	  .help = "Puts refused: key exists (or being put), BUSY (DRAM or index "
		  "full, evictor behind), no space (everything held).",
	  .doc = "puts refused: the key exists (or is being put); BUSY (DRAM "
		 "full, or the index at `--index-entries`, the evictor behind); "
		 "no space (everything held)" },
	{ KVP_VAL("reason=\"exists\"", "put_exists"), KVP_C(PUT_EXISTS) },
	{ KVP_VAL("reason=\"busy\"", "put_busy"), KVP_C(PUT_BUSY) },
	{ KVP_VAL("reason=\"nospc\"", "put_nospc"), KVP_C(PUT_NOSPC) },
	{ KVP_FAM("kvpool_op_duration_seconds", "histogram", KVP_SEC_RW),
	  .over = KVP_MO_HIST,
	  .help = "Client call latency (one observation per call; a batch is "
		  "one call), by the slowest tier the call touched.",
	  .doc = "client call latency, one observation per call (see above)" },
	{ KVP_VAL(NULL, "latency"), KVP_M(hist), .hist = true },

	/* index, clients, reaper */
	{ KVP_FAM("kvpool_index_slots", "gauge", KVP_SEC_INDEX),
	  .help = "Slots in the index (two buckets of 8 per key)." },
	{ KVP_VAL(NULL, "index_slots"), KVP_M(index_slots) },
	{ KVP_FAM("kvpool_index_capacity", "gauge", KVP_SEC_INDEX),
	  .help = "Live entries the index allows (--index-entries)." },
	{ KVP_VAL(NULL, "index_capacity"), KVP_M(index_limit) },
	{ KVP_FAM("kvpool_index_entries", "gauge", KVP_SEC_INDEX),
	  .help = "Index slots by state." },
	{ KVP_VAL("state=\"ready\"", "entries"), KVP_M(ix_ready) },
	{ KVP_VAL("state=\"pending\"", "pending"), KVP_M(ix_pending) },
	{ KVP_VAL("state=\"deleted\"", "deleted"), KVP_M(ix_deleted) },
	{ KVP_VAL("state=\"claiming\"", "claiming"), KVP_M(ix_claiming) },
	{ KVP_FAM("kvpool_index_occupancy_ratio", "gauge", KVP_SEC_INDEX),
	  .help = "Ready entries over the index capacity." },
	{ KVP_VAL(NULL, NULL), .dfn = kvp_mv_occupancy, .prec = 6 },
	{ KVP_FAM("kvpool_index_probe_length_mean", "gauge", KVP_SEC_INDEX),
	  .help = "Mean probe length of stored keys (candidate slots examined: "
		  "1..16).",
	  .doc = "probe length of stored keys: the slot's place among the "
		 "key's 16 candidates plus one (1..8 first bucket, 9..16 "
		 "second)" },
	{ KVP_VAL(NULL, "probe_length_mean"), .dfn = kvp_mv_probe_mean,
	  .prec = 4, .jfmt = KVP_MJ_F4 },
	{ KVP_FAM("kvpool_index_probe_length_max", "gauge", KVP_SEC_INDEX),
	  .help = "Longest probe length of a stored key." },
	{ KVP_VAL(NULL, "probe_length_max"), KVP_M(probe_max) },
	{ KVP_FAM("kvpool_index_evictions_total", "counter", KVP_SEC_INDEX),
	  .help = "Entries removed from the index to make room: in a full "
		  "bucket pair, or under --index-entries." },
	{ KVP_VAL(NULL, "evictions_index_full"), KVP_A(EVICT_INDEX) },
	{ KVP_FAM("kvpool_index_evictions_ssd_total", "counter", KVP_SEC_INDEX),
	  .help = "Index evictions of values that had a copy on SSD: the SSD "
		  "tier could have kept them, the index could not (raise "
		  "--index-entries).",
	  .doc = "those of the index evictions whose value had a copy on SSD: "
		 "the SSD tier had room for it, the index did not. Not zero: "
		 "`kvpool stat` prints a `WARN` line (index pressure is "
		 "dropping SSD-resident values; raise `--index-entries`)" },
	{ KVP_VAL(NULL, "evictions_index_ssd"), KVP_A(EVICT_INDEX_SSD) },
	{ KVP_FAM("kvpool_clients", "gauge", KVP_SEC_INDEX),
	  .help = "Client slots in use: alive, or dead and not yet reaped." },
	{ KVP_VAL("state=\"alive\"", "clients"), KVP_M(clients_live) },
	{ KVP_VAL("state=\"dead\"", "clients_dead"), KVP_M(clients_dead) },
	{ KVP_FAM("kvpool_client_slots", "gauge", KVP_SEC_INDEX),
	  .help = "Client slots in the segment (--max-clients)." },
	{ KVP_VAL(NULL, "client_slots"), KVP_M(max_clients) },
	{ KVP_FAM("kvpool_holds", "gauge", KVP_SEC_INDEX),
	  .help = "Holds in place now (readers copying, pinned keys)." },
	{ KVP_VAL(NULL, "holds"), KVP_M(holds) },
	{ KVP_FAM("kvpool_leases", "gauge", KVP_SEC_INDEX),
	  .help = "Live timed leases." },
	{ KVP_VAL(NULL, "leases"), KVP_M(leases) },
	{ KVP_FAM("kvpool_pinned_bytes", "gauge", KVP_SEC_INDEX),
	  .help = "Bytes pinned by lookup-and-pin, by tier at pin time." },
	{ KVP_VAL("tier=\"DRAM\"", "pinned_bytes_dram"), KVP_C(PINNED_DRAM) },
	{ KVP_VAL("tier=\"SSD\"", "pinned_bytes_ssd"), KVP_C(PINNED_SSD) },
	{ KVP_FAM("kvpool_pins_total", "counter", KVP_SEC_INDEX),
	  .help = "Keys pinned by lookup-and-pin." },
	{ KVP_VAL(NULL, "pins"), KVP_C(PIN) },
	{ KVP_FAM("kvpool_pins_capped_total", "counter", KVP_SEC_INDEX),
	  .help = "Lookup-and-pin calls cut short, and leases refused, by "
		  "--max-pinned-per-client." },
	{ KVP_VAL(NULL, "pins_capped"), KVP_C(PIN_CAPPED) },
	{ KVP_FAM("kvpool_hold_retries_total", "counter", KVP_SEC_INDEX),
	  .help = "Times a reader waited for the agent's verdict on a value "
		  "(CHECK)." },
	{ KVP_VAL(NULL, "hold_retry"), KVP_C(HOLD_RETRY) },
	{ KVP_FAM("kvpool_reaper_clients_total", "counter", KVP_SEC_INDEX),
	  .help = "Dead clients reaped." },
	{ KVP_VAL(NULL, "reaped_clients"), KVP_A(REAP_CLIENTS) },
	{ KVP_FAM("kvpool_reaper_released_total", "counter", KVP_SEC_INDEX),
	  .help = "What the reaper released: holds and pins of dead clients, "
		  "expired leases, unfinished puts and their DRAM units." },
	{ KVP_VAL("what=\"holds\"", "reaped_holds"), KVP_A(REAP_HOLDS) },
	{ KVP_VAL("what=\"pins\"", "pins_reaped"), KVP_A(REAP_PINS) },
	{ KVP_VAL("what=\"leases\"", "leases_expired"), KVP_A(LEASE_EXPIRED) },
	{ KVP_VAL("what=\"pending_puts\"", "reaped_pending_puts"),
	  KVP_A(REAP_PENDING) },
	{ KVP_VAL("what=\"units\"", "reaped_units"), KVP_A(REAP_PAGES) },

	{ KVP_FAM("kvpool_ssd_bytes_total", "counter", KVP_SEC_RW),
	  .help = "Value bytes read from and written to SSD." },
	{ KVP_VAL("direction=\"read\"", "ssd_read_bytes"),
	  KVP_A(SSD_READ_BYTES) },
	{ KVP_VAL("direction=\"write\"", "ssd_write_bytes"),
	  KVP_A(SSD_WRITE_BYTES) },
	{ KVP_FAM("kvpool_ssd_reinserted_bytes_total", "counter", KVP_SEC_RW),
	  .help = "Value bytes of SSD records a segment reclaim rewrote at the "
		  "head of the log (not in kvpool_ssd_bytes_total)." },
	{ KVP_VAL(NULL, "ssd_reinserted_bytes"), KVP_A(SSD_REINSERT_BYTES) },
	{ KVP_FAM("kvpool_ssd_errors_total", "counter", KVP_SEC_RW),
	  .help = "SSD reads and writes that failed (I/O error, bad "
		  "checksum)." },
	{ KVP_VAL(NULL, "ssd_errors"), KVP_A(SSD_ERRORS) },
	{ KVP_FAM("kvpool_single_flight_merges_total", "counter", KVP_SEC_RW),
	  .help = "SSD read requests that joined a read already in flight." },
	{ KVP_VAL(NULL, "single_flight_merges"), KVP_A(SINGLE_FLIGHT) },
	{ KVP_FAM("kvpool_staged_reads_total", "counter", KVP_SEC_RW),
	  .help = "SSD reads served through the staging arena." },
	{ KVP_VAL(NULL, "staged_reads"), KVP_A(STAGED) },
	{ KVP_FAM("kvpool_ssd_read_stage_seconds", "histogram", KVP_SEC_RW),
	  .over = KVP_MO_STAGE,
	  .help = "Stages of SSD reads: queue (posted to taken by the agent), "
		  "submit (taken to sent to the device), device (sent to "
		  "completed), answer (completed to the client woken), copy "
		  "(the client's copy-out of one value).",
	  .doc = "the stages of an SSD read: `queue` (the client posted it, "
		 "the agent took it), `submit` (taken, sent to the device), "
		 "`device` (sent, completion reaped), `answer` (reaped, the "
		 "client woken), one observation per device read; `copy` (the "
		 "client's copy-out), one per value" },
	{ KVP_VAL(NULL, NULL), KVP_M(io_hist), .hist = true },
	{ KVP_FAM("kvpool_ssd_queue_depth", "gauge", KVP_SEC_RW),
	  .help = "I/O on the SSD devices now: reads, demotion writes." },
	{ KVP_VAL("op=\"read\"", "ssd_reads_in_flight"), KVP_M(io_reads) },
	{ KVP_VAL("op=\"write\"", "ssd_writes_in_flight"), KVP_M(io_writes) },
	{ KVP_FAM("kvpool_ssd_write_queue_bytes", "gauge", KVP_SEC_RW),
	  .help = "Value bytes of demotion writes on the SSD devices now." },
	{ KVP_VAL(NULL, "ssd_write_bytes_in_flight"), KVP_M(io_write_bytes) },
	{ KVP_FAM("kvpool_ssd_reads_behind_writes_total", "counter",
		  KVP_SEC_RW),
	  .help = "SSD reads sent to a device while demotion writes were in "
		  "flight on it (each waits behind them)." },
	{ KVP_VAL(NULL, "ssd_reads_behind_writes"), KVP_A(READ_BEHIND_WRITES) },
	{ KVP_FAM("kvpool_ssd_write_ops_total", "counter", KVP_SEC_RW),
	  .help = "Demotion write operations sent to the SSD devices by the "
		  "write pacer: parts of a quarter of --ssd-write-depth, or "
		  "pieces of a sixteenth of a part while reads are about "
		  "(without io_uring: the parts the worker threads wrote)." },
	{ KVP_VAL(NULL, "ssd_write_ops"), KVP_A(SSD_WRITE_OPS) },
	{ KVP_FAM("kvpool_ssd_write_pieces_total", "counter", KVP_SEC_RW),
	  .help = "Write pieces the pacer cut from parts because one or two "
		  "reads were on the device or had just been." },
	{ KVP_VAL(NULL, "ssd_write_pieces"), KVP_A(SSD_WRITE_PIECES) },
	{ KVP_FAM("kvpool_ssd_writes_held_for_reads_total", "counter",
		  KVP_SEC_RW),
	  .help = "Times the pacer held a write back because a read was on "
		  "the device (reads first; at most 2 ms since the last "
		  "write)." },
	{ KVP_VAL(NULL, "ssd_writes_held_for_reads"),
	  KVP_A(SSD_WRITE_HELD_READ) },
	{ KVP_FAM("kvpool_ssd_read_header_total", "counter", KVP_SEC_RW),
	  .help = "SSD reads by where their batch header came from: the "
		  "agent's header cache (one device operation) or the device "
		  "(read beside the value)." },
	{ KVP_VAL("from=\"cache\"", "ssd_header_cached"),
	  KVP_A(SSD_HDR_CACHED) },
	{ KVP_VAL("from=\"device\"", "ssd_header_read"), KVP_A(SSD_HDR_READ) },
	{ KVP_FAM("kvpool_demotion_yields_total", "counter", KVP_SEC_TIERS),
	  .help = "Rounds in which demotion held back because SSD reads were "
		  "waiting (reads first)." },
	{ KVP_VAL(NULL, "demotion_yields"), KVP_A(DEMOTE_YIELDS) },
	{ KVP_FAM("kvpool_demoted_bytes_total", "counter", KVP_SEC_TIERS),
	  .help = "Value bytes demoted from DRAM to SSD." },
	{ KVP_VAL(NULL, "demoted_bytes"), KVP_A(DEMOTE_BYTES) },
	{ KVP_FAM("kvpool_evicted_bytes_total", "counter", KVP_SEC_TIERS),
	  .help = "Value bytes of values evicted from DRAM or the index." },
	{ KVP_VAL(NULL, "evicted_bytes"), KVP_A(EVICT_BYTES) },
	{ KVP_FAM("kvpool_evict_backoff_total", "counter", KVP_SEC_TIERS),
	  .help = "Eviction victims left alone because they were held." },
	{ KVP_VAL(NULL, "evict_backoff_held"), KVP_A(EVICT_BACKOFF) },
	{ KVP_FAM("kvpool_evict_probation_total", "counter", KVP_SEC_TIERS),
	  .help = "Eviction victims that were on probation: never used since "
		  "their put, not a continuation of a hit prefix, not "
		  "readmitted (--evict-probation).",
	  .doc = "eviction victims (DRAM or the index) on probation when they "
		 "left: never used since their put, not put as a continuation "
		 "of a hit prefix (`kvp_batch_put_chain`), not readmitted from "
		 "the ghost set. Their share of `evictions` is the single-use "
		 "traffic the policy turned away first" },
	{ KVP_VAL(NULL, "evict_probation"), KVP_A(EVICT_PROBATION) },
	{ KVP_FAM("kvpool_evict_weight_percent", "gauge", KVP_SEC_TIERS),
	  .help = "How many times a never-used value's age counts now, in % "
		  "(--evict-probation as ARC's rule has left it; 100: plain "
		  "recency).",
	  .doc = "the weight a never-used value's age counts in the eviction "
		 "order now, in % (800: --evict-probation 8 as given; 100: "
		 "plain recency). ARC's rule (`--evict-adapt`) lowers it while "
		 "values evicted unused come back soon (reused traffic: chat "
		 "turns, documents) and raises it while used ones do "
		 "(single-use traffic pushing out reused values)" },
	{ KVP_VAL(NULL, "evict_weight_pct"), KVP_A(EVICT_WEIGHT) },
	{ KVP_FAM("kvpool_hit_ceiling_ratio", "gauge", KVP_SEC_TIERS),
	  .help = "1 - distinct keys / lookups of the last --ceiling-window: "
		  "the hit ratio of a cache that held every key of the "
		  "window from its first use (0: no window yet).",
	  .doc = "the hit-rate ceiling of the last `--ceiling-window` "
		 "(default 60 s): 1 - `window_keys` / `window_lookups`, what "
		 "a cache that held every key of the window from its first "
		 "use would hit on those lookups (an upper bound: keys looked "
		 "up and never stored are not counted). A hit ratio far below "
		 "it with `window_keys` above the values DRAM holds: capacity; "
		 "with `window_keys` well within it: the eviction order" },
	{ KVP_VAL(NULL, "hit_ceiling"), .dfn = kvp_mv_hit_ceiling, .prec = 4,
	  .jfmt = KVP_MJ_F4 },
	{ KVP_FAM("kvpool_window_keys", "gauge", KVP_SEC_TIERS),
	  .help = "Distinct keys used or stored in the last --ceiling-window "
		  "(a HyperLogLog estimate, 0.8% standard error).",
	  .doc = "distinct keys used (a hit, a probe, a pin or a lease) or "
		 "stored in the last `--ceiling-window`, as the agent's scans "
		 "of the index saw them: a HyperLogLog of 2^14 registers "
		 "(standard error 0.8%); `window_seconds` is the window" },
	{ KVP_VAL(NULL, "window_keys"), KVP_A(WINDOW_KEYS) },
	{ KVP_JSON("window_seconds"), KVP_A(WINDOW_SECONDS) },
	{ KVP_FAM("kvpool_window_lookups", "gauge", KVP_SEC_TIERS),
	  .help = "Keys looked up in the last --ceiling-window (gets and "
		  "probes; a key probed and then read counts once)." },
	{ KVP_VAL(NULL, "window_lookups"), KVP_A(WINDOW_LOOKUPS) },
	{ KVP_FAM("kvpool_window_stores", "gauge", KVP_SEC_TIERS),
	  .help = "Values stored in the last --ceiling-window: more than "
		  "window_keys means keys stored again within it (evicted "
		  "too early or too small a pool)." },
	{ KVP_VAL(NULL, "window_stores"), KVP_A(WINDOW_STORES) },
	{ KVP_FAM("kvpool_ghost_hits_total", "counter", KVP_SEC_TIERS),
	  .help = "Values put again while their key was in the ghost set "
		  "(evicted lately: evicted too early); spared probation.",
	  .doc = "values put again while their key was in the ghost set (the "
		 "last `--evict-ghost` x capacity evicted keys): each was "
		 "evicted too early, and is spared probation this time. High "
		 "next to `evictions`: the DRAM tier is too small for the "
		 "reuse distance of the traffic" },
	{ KVP_VAL(NULL, "ghost_hits"), KVP_A(GHOST_HITS) },
	{ KVP_FAM("kvpool_ghost_keys", "gauge", KVP_SEC_TIERS),
	  .help = "Keys in the ghost set now (evicted lately, not put again)." },
	{ KVP_VAL(NULL, "ghost_keys"), KVP_A(GHOST_KEYS) },
	{ KVP_FAM("kvpool_deletes_reclaimed_total", "counter", KVP_SEC_TIERS),
	  .help = "Deleted values whose memory was freed." },
	{ KVP_VAL(NULL, "deletes_reclaimed"), KVP_A(DELETE_RECLAIM) },
	{ KVP_FAM("kvpool_orphan_units_freed_total", "counter", KVP_SEC_INDEX),
	  .help = "DRAM units freed by the restart sweep (no entry owned "
		  "them)." },
	{ KVP_VAL(NULL, "orphan_units_freed"), KVP_A(ORPHAN_PAGES) },
	{ KVP_FAM("kvpool_allocator_recoveries_total", "counter",
		  KVP_SEC_INDEX),
	  .help = "DRAM allocator rebuilds after a process died holding its "
		  "lock." },
	{ KVP_VAL(NULL, "allocator_recoveries"), KVP_A(ALLOC_RECOVER) },
	{ KVP_JSON("remote_hits"), KVP_C(REMOTE_HIT) },
	{ KVP_JSON("remote_probed"), KVP_C(REMOTE_PROBED) },

	/* engines, per namespace: once a namespace counted something */
	{ KVP_FAM("kvpool_namespace_events_total", "counter", KVP_SEC_NS),
	  .when = KVP_MW_NS, .over = KVP_MO_NSE,
	  .help = "What an engine adapter (kvpool.sglang, kvpool.vllm) counted "
		  "for its namespace (kvp_ns_count).",
	  .doc = "keys (pages) the engine asked about and those answered "
		 "present; pages loaded into the engine and their bytes; pages "
		 "a load could not deliver; pages stored (or already there) and "
		 "their bytes; pages a store could not keep; pool kinds or "
		 "requests the adapter refused (a sidecar pool it cannot "
		 "serve); calls that failed on an error" },
	{ KVP_VAL(NULL, ""), KVP_M(ns[0].ctr) },
	{ KVP_FAM("kvpool_namespace_pinned", "gauge", KVP_SEC_NS),
	  .when = KVP_MW_NS, .over = KVP_MO_NS,
	  .help = "Values the namespace's live clients hold pinned now "
		  "(lookup-and-pin).",
	  .doc = "values the namespace's live clients hold pinned now "
		 "(lookup-and-pin: a probe's pages waiting for their load), "
		 "counted by the agent from the hold slots" },
	{ KVP_VAL(NULL, "pinned"), KVP_M(ns[0].pinned) },
	{ KVP_FAM("kvpool_namespace_clients", "gauge", KVP_SEC_NS),
	  .when = KVP_MW_NS, .over = KVP_MO_NS,
	  .help = "The namespace's live client handles." },
	{ KVP_VAL(NULL, "clients"), KVP_M(ns[0].clients) },

	{ KVP_FAM("kvpool_scrape_collect_seconds", "gauge", KVP_SEC_AGENT),
	  .help = "Time this snapshot took to read." },
	{ KVP_VAL(NULL, NULL), KVP_SECONDS(collect_ns, 6) },
};

#define KVP_MROWS (sizeof(kvp_mtab) / sizeof(kvp_mtab[0]))

/* ---- escaping what came from the segment ---- */

/*
 * Prometheus label value (text format 0.0.4): backslash, double quote and
 * line feed are escaped; other control bytes and bytes above 0x7e (which
 * could make the exposition invalid UTF-8) become '?'.
 */
static const char *
kvp_prom_label(const char *in, char *out, size_t cap)
{
	size_t o = 0;

	for (; *in && o + 3 < cap; in++) {
		unsigned char ch = (unsigned char)*in;

		if (ch == '\\' || ch == '"') {
			out[o++] = '\\';
			out[o++] = (char)ch;
		} else if (ch == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = ch < 0x20 || ch > 0x7e ? '?' : (char)ch;
		}
	}
	out[o] = '\0';
	return out;
}

/* A JSON string's contents: '"', '\\' and every byte outside printable
 * ASCII as \u00XX (a byte is never left to make the document invalid
 * UTF-8). */
static const char *
kvp_json_str(const char *in, char *out, size_t cap)
{
	size_t o = 0;

	for (; *in && o + 7 < cap; in++) {
		unsigned char ch = (unsigned char)*in;

		if (ch == '"' || ch == '\\') {
			out[o++] = '\\';
			out[o++] = (char)ch;
		} else if (ch < 0x20 || ch > 0x7e) {
			o += (size_t)snprintf(out + o, cap - o, "\\u%04x", ch);
		} else {
			out[o++] = (char)ch;
		}
	}
	out[o] = '\0';
	return out;
}

/* ---- walking the table ---- */

/* Elements of what a family repeats over: how many (0: none now) and
 * whether element i is in the snapshot. */
static unsigned
kvp_mover_count(const struct kvp_metrics *m, unsigned over)
{
	switch (over) {
	case KVP_MO_DRIVE:
		return KVP_SSD_DRIVES;
	case KVP_MO_GPU:
		return KVP_GPU_MAX;
	case KVP_MO_CLC:
		return KVP_CLC__N;
	case KVP_MO_NS:
		return m->nns;
	case KVP_MO_NSE:
		return m->nns * KVP_NSE__N;
	case KVP_MO_HIST:
		return KVP_HIST__N;
	case KVP_MO_STAGE:
		return KVP_IOS__N + 1;
	default:
		return 1;
	}
}

static bool
kvp_mover_has(const struct kvp_metrics *m, unsigned over, unsigned i)
{
	switch (over) {
	case KVP_MO_DRIVE:
		return KVP_DRIVE_STATE(m->drive_state[i]) != 0;
	case KVP_MO_GPU:
		return KVP_GS_STATE(m->gpu_state[i]) != KVP_GPU_OFF ||
		       m->gpu_bytes[i];
	default:
		return true;
	}
}

/* The byte offset element i adds to a field (an array of the snapshot). */
static size_t
kvp_mover_off(unsigned over, unsigned i)
{
	switch (over) {
	case KVP_MO_DRIVE:
	case KVP_MO_GPU:
	case KVP_MO_CLC:
		return i * sizeof(uint64_t);
	case KVP_MO_NS:
		return i * sizeof(struct kvp_metrics_ns);
	case KVP_MO_NSE:
		return i / KVP_NSE__N * sizeof(struct kvp_metrics_ns) +
		       i % KVP_NSE__N * sizeof(uint64_t);
	case KVP_MO_HIST:
	case KVP_MO_STAGE:
		return i * KVP_HIST_WORDS * sizeof(uint64_t);
	default:
		return 0;
	}
}

/* The element's labels (none: ""), and its name in JSON (NULL: none). */
static const char *
kvp_mover_labels(const struct kvp_metrics *m, unsigned over, unsigned i,
		 char *out, size_t cap)
{
	char ns[8 * sizeof(m->ns[0].name)];
	const struct kvp_metrics_ns *x;

	out[0] = '\0';
	switch (over) {
	case KVP_MO_DRIVE:
		snprintf(out, cap, "drive=\"%u\"", i);
		break;
	case KVP_MO_GPU:
		snprintf(out, cap, "gpu=\"%llu\"",
			 (unsigned long long)m->gpu_device[i]);
		break;
	case KVP_MO_CLC:
		snprintf(out, cap, "event=\"%s\"", kvp_cl_ctr_names[i]);
		return kvp_cl_ctr_names[i];
	case KVP_MO_NS:
	case KVP_MO_NSE:
		x = &m->ns[over == KVP_MO_NS ? i : i / KVP_NSE__N];
		snprintf(out, cap, "namespace=\"%s\",ns_id=\"%016llx\"%s%s%s",
			 kvp_prom_label(x->name, ns, sizeof(ns)),
			 (unsigned long long)x->id,
			 over == KVP_MO_NSE ? ",event=\"" : "",
			 over == KVP_MO_NSE ? kvp_nse_names[i % KVP_NSE__N] :
					      "",
			 over == KVP_MO_NSE ? "\"" : "");
		return over == KVP_MO_NSE ? kvp_nse_names[i % KVP_NSE__N] :
					    NULL;
	case KVP_MO_HIST:
		snprintf(out, cap, "op=\"%s\",tier=\"%s\"", kvp_hist_id[i].op,
			 kvp_tier_names[kvp_hist_id[i].tier]);
		break;
	case KVP_MO_STAGE:
		snprintf(out, cap, "stage=\"%s\"", kvp_io_stage_names[i]);
		break;
	}
	return NULL;
}

static uint64_t
kvp_mval(const struct kvp_mrow *r, const struct kvp_metrics *m, unsigned over,
	 unsigned i)
{
	uint64_t v;

	switch (r->src) {
	case KVP_MS_FIELD:
		memcpy(&v, (const char *)m + r->arg + kvp_mover_off(over, i),
		       sizeof(v));
		return v;
	case KVP_MS_CTR:
		return m->ctr[r->arg];
	case KVP_MS_ACTR:
		return m->actr[r->arg];
	case KVP_MS_ONE:
		return 1;
	case KVP_MS_FN:
		return r->fn(m, i);
	default:
		return 0;
	}
}

static bool
kvp_mfam_shown(const struct kvp_mrow *fam, const struct kvp_metrics *m)
{
	return (fam->when != KVP_MW_REMOTE || m->remote_present) &&
	       (fam->when != KVP_MW_NS || m->nns);
}

/* ---- Prometheus text exposition format 0.0.4 ---- */

/* name{a,b} with the labels that are not empty */
static void
kvp_prom_name(FILE *f, const char *name, const char *sfx, const char *a,
	      const char *b, const char *c)
{
	const char *l[3] = { a, b, c };
	unsigned k, n = 0;

	fprintf(f, "%s%s", name, sfx);
	for (k = 0; k < 3; k++)
		if (l[k] && l[k][0])
			fprintf(f, "%s%s", n++ ? "," : "{", l[k]);
	fprintf(f, "%s ", n ? "}" : "");
}

static void
kvp_prom_hist(FILE *f, const char *name, const char *lab, const uint64_t *b)
{
	char le[40];
	uint64_t cum = 0;
	unsigned k;

	for (k = 0; k < KVP_HIST_BUCKETS; k++) {
		cum += b[k];
		if (k == KVP_HIST_BUCKETS - 1)
			snprintf(le, sizeof(le), "le=\"+Inf\"");
		else
			snprintf(le, sizeof(le), "le=\"%.9g\"",
				 (double)(1ull << (k + KVP_HIST_SHIFT)) / 1e9);
		kvp_prom_name(f, name, "_bucket", lab, le, NULL);
		fprintf(f, "%llu\n", (unsigned long long)cum);
	}
	kvp_prom_name(f, name, "_sum", lab, NULL, NULL);
	fprintf(f, "%.9f\n", (double)b[KVP_HIST_SUM] / 1e9);
	kvp_prom_name(f, name, "_count", lab, NULL, NULL);
	fprintf(f, "%llu\n", (unsigned long long)cum);
}

int
kvp_metrics_prom(const struct kvp_metrics *m, FILE *f)
{
	char el[256], lab[256];
	size_t r = 0, v;
	unsigned i;

	while (r < KVP_MROWS) {
		const struct kvp_mrow *fam = &kvp_mtab[r++];
		size_t first = r, end;

		while (r < KVP_MROWS && kvp_mtab[r].kind != KVP_MK_FAMILY)
			r++;
		end = r;
		if (fam->kind != KVP_MK_FAMILY || !kvp_mfam_shown(fam, m))
			continue;
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fam->name, fam->help,
			fam->name, fam->type);
		for (i = 0; i < kvp_mover_count(m, fam->over); i++) {
			if (!kvp_mover_has(m, fam->over, i))
				continue;
			kvp_mover_labels(m, fam->over, i, el, sizeof(el));
			for (v = first; v < end; v++) {
				const struct kvp_mrow *x = &kvp_mtab[v];

				if (x->kind != KVP_MK_VALUE)
					continue;
				lab[0] = '\0';
				if (x->lab)
					x->lab(m, i, lab, sizeof(lab));
				if (x->hist) {
					kvp_prom_hist(
						f, fam->name, el,
						(const uint64_t
							 *)((const char *)m +
							    x->arg +
							    kvp_mover_off(
								    fam->over,
								    i)));
					continue;
				}
				kvp_prom_name(f, fam->name, "", el, x->name,
					      lab);
				if (x->dfn)
					fprintf(f, "%.*f", x->prec, x->dfn(m));
				else if (x->prec)
					fprintf(f, "%.*f", x->prec,
						(double)kvp_mval(x, m,
								 fam->over, i) /
							x->div);
				else
					fprintf(f, "%llu",
						(unsigned long long)kvp_mval(
							x, m, fam->over, i));
				fputc('\n', f);
			}
		}
	}
	return ferror(f) ? -EIO : 0;
}

/* ---- JSON (kvpool stat --json) ---- */

/* Each JSON key of the rows repeated over 'over' (ONE: the top level's;
 * when: only those of the families shown so), for element i. */
static void
kvp_json_keys(const struct kvp_metrics *m, FILE *f, unsigned over,
	      unsigned when, unsigned i)
{
	const struct kvp_mrow *fam = NULL;
	char el[256];
	size_t r;

	for (r = 0; r < KVP_MROWS; r++) {
		const struct kvp_mrow *x = &kvp_mtab[r];
		unsigned fo = fam ? fam->over : KVP_MO_ONE,
			 fw = fam ? fam->when : KVP_MW_ALWAYS;
		const char *key = x->json;

		if (x->kind == KVP_MK_FAMILY) {
			fam = x;
			continue;
		}
		if (x->kind == KVP_MK_JSON)
			fo = KVP_MO_ONE, fw = KVP_MW_ALWAYS;
		if (!key || x->hist || fw != when ||
		    (fo != over && !(over == KVP_MO_NS && fo == KVP_MO_NSE)))
			continue;
		if (fo == KVP_MO_CLC || fo == KVP_MO_NSE) {
			/* every event of the element, by its name */
			unsigned e,
				n = fo == KVP_MO_CLC ? KVP_CLC__N : KVP_NSE__N;

			for (e = 0; e < n; e++) {
				unsigned k = fo == KVP_MO_CLC ?
						     e :
						     i * KVP_NSE__N + e;

				key = kvp_mover_labels(m, fo, k, el,
						       sizeof(el));
				fprintf(f, ",\"%s\":%llu", key,
					(unsigned long long)kvp_mval(x, m, fo,
								     k));
			}
			continue;
		}
		if (x->jfmt == KVP_MJ_F4)
			fprintf(f, ",\"%s\":%.4f", key, x->dfn(m));
		else if (x->jfmt == KVP_MJ_BOOL)
			fprintf(f, ",\"%s\":%s", key,
				kvp_mval(x, m, fo, i) ? "true" : "false");
		else
			fprintf(f, ",\"%s\":%llu", key,
				(unsigned long long)kvp_mval(x, m, fo, i));
	}
}

void
kvp_metrics_json(const struct kvp_metrics *m, FILE *f)
{
	static const char *const clst[] = { "off", "down", "up", "clash" };
	char pool[8 * KVP_POOL_NAME_MAX], ns[8 * sizeof(m->ns[0].name)];
	unsigned k, n;

	fprintf(f, "{\"pool\":\"%s\"",
		kvp_json_str(m->pool, pool, sizeof(pool)));
	kvp_json_keys(m, f, KVP_MO_ONE, KVP_MW_ALWAYS, 0);
	fprintf(f, ",\"ssd_drives\":[");
	for (k = 0, n = 0; k < KVP_SSD_DRIVES; k++) {
		if (!kvp_mover_has(m, KVP_MO_DRIVE, k))
			continue;
		fprintf(f, "%s{\"drive\":%u,\"state\":\"%s\"", n++ ? "," : "",
			k,
			kvp_drive_state_name(
				KVP_DRIVE_STATE(m->drive_state[k])));
		kvp_json_keys(m, f, KVP_MO_DRIVE, KVP_MW_ALWAYS, k);
		fprintf(f, "}");
	}
	fprintf(f, "]");
	if (m->remote_present) {
		fprintf(f, ",\"remote\":{\"node\":\"%s\",\"state\":\"%s\"",
			m->remote_node,
			KVP_CL_STATE(m->remote_state) < 4 ?
				clst[KVP_CL_STATE(m->remote_state)] :
				"?");
		kvp_json_keys(m, f, KVP_MO_ONE, KVP_MW_REMOTE, 0);
		kvp_json_keys(m, f, KVP_MO_CLC, KVP_MW_REMOTE, 0);
		fprintf(f, "}");
	}
	fprintf(f, ",\"namespaces\":[");
	for (k = 0; k < m->nns; k++) {
		fprintf(f, "%s{\"ns\":\"%s\",\"ns_id\":\"%016llx\"",
			k ? "," : "",
			kvp_json_str(m->ns[k].name, ns, sizeof(ns)),
			(unsigned long long)m->ns[k].id);
		kvp_json_keys(m, f, KVP_MO_NS, KVP_MW_NS, k);
		fprintf(f, "}");
	}
	fprintf(f, "],\"latency\":{");
	for (k = 0; k < KVP_HIST__N; k++)
		fprintf(f,
			"%s\"%s_%s\":{\"count\":%llu,\"sum_ns\":%llu,\"p50_ns\":%llu,"
			"\"p99_ns\":%llu}",
			k ? "," : "", kvp_hist_id[k].op,
			kvp_tier_names[kvp_hist_id[k].tier],
			(unsigned long long)kvp_metrics_hist_count(m, k),
			(unsigned long long)m->hist[k][KVP_HIST_SUM],
			(unsigned long long)kvp_metrics_hist_quantile(m, k,
								      0.5),
			(unsigned long long)kvp_metrics_hist_quantile(m, k,
								      0.99));
	fprintf(f, "},\"read_stages\":{");
	for (k = 0; k <= KVP_IOS__N; k++)
		fprintf(f,
			"%s\"%s\":{\"count\":%llu,\"sum_ns\":%llu,\"p50_ns\":%llu,"
			"\"p99_ns\":%llu}",
			k ? "," : "", kvp_io_stage_names[k],
			(unsigned long long)kvp_hist_words_count(m->io_hist[k]),
			(unsigned long long)m->io_hist[k][KVP_HIST_SUM],
			(unsigned long long)kvp_hist_words_quantile(
				m->io_hist[k], 0.5),
			(unsigned long long)kvp_hist_words_quantile(
				m->io_hist[k], 0.99));
	fprintf(f, "}}\n");
}

/* ---- names ---- */

const char *
kvp_metrics_ctr_name(bool agent, unsigned k)
{
	size_t r;

	for (r = 0; r < KVP_MROWS; r++) {
		const struct kvp_mrow *x = &kvp_mtab[r];

		if (x->kind != KVP_MK_FAMILY && x->json && x->arg == k &&
		    x->src == (agent ? KVP_MS_ACTR : KVP_MS_CTR))
			return x->json;
	}
	return "?";
}

/* ---- the docs ---- */

/* The JSON object a row's key lies in (its family's .over and .when). */
static unsigned
kvp_mrow_scope(size_t r)
{
	const struct kvp_mrow *fam = NULL;
	size_t k;

	if (kvp_mtab[r].kind == KVP_MK_JSON)
		return KVP_MO_ONE;
	for (k = 0; k <= r; k++)
		if (kvp_mtab[k].kind == KVP_MK_FAMILY)
			fam = &kvp_mtab[k];
	if (fam->when == KVP_MW_REMOTE)
		return 100 + fam->over;
	return fam->over == KVP_MO_NSE ? KVP_MO_NS : fam->over;
}

/* Table defects (said on f): 0 if none. */
static int
kvp_mtab_check(FILE *f)
{
	unsigned k, seen, bad = 0;
	size_t r, s;

	for (k = 0; k < KVP_CTR__N + KVP_ACTR_RETIRED0; k++) {
		bool agent = k >= KVP_CTR__N;
		unsigned c = agent ? k - KVP_CTR__N : k;

		for (r = 0, seen = 0; r < KVP_MROWS; r++)
			seen += kvp_mtab[r].kind != KVP_MK_FAMILY &&
				kvp_mtab[r].json && kvp_mtab[r].arg == c &&
				kvp_mtab[r].src ==
					(agent ? KVP_MS_ACTR : KVP_MS_CTR);
		if (seen != 1) {
			fprintf(f, "%s counter %u has %u JSON keys, want 1\n",
				agent ? "agent" : "client", c, seen);
			bad++;
		}
	}
	for (r = 0; r < KVP_MROWS; r++) {
		const struct kvp_mrow *x = &kvp_mtab[r];

		if (x->kind == KVP_MK_FAMILY &&
		    (strncmp(x->name, "kvpool_", 7) || !x->help ||
		     (strcmp(x->type, "gauge") && strcmp(x->type, "counter") &&
		      strcmp(x->type, "histogram")) ||
		     r + 1 == KVP_MROWS ||
		     kvp_mtab[r + 1].kind != KVP_MK_VALUE)) {
			fprintf(f, "family %s: bad row\n", x->name);
			bad++;
		}
		if (r == 0 && x->kind != KVP_MK_FAMILY) {
			fprintf(f, "the table does not start with a family\n");
			return -1;
		}
		for (s = r + 1; s < KVP_MROWS; s++) {
			const struct kvp_mrow *y = &kvp_mtab[s];

			if (x->kind == KVP_MK_FAMILY &&
			    y->kind == KVP_MK_FAMILY &&
			    !strcmp(x->name, y->name)) {
				fprintf(f, "family %s twice\n", x->name);
				bad++;
			}
			if (x->kind != KVP_MK_FAMILY &&
			    y->kind != KVP_MK_FAMILY && x->json && y->json &&
			    x->json[0] && !strcmp(x->json, y->json) &&
			    kvp_mrow_scope(r) == kvp_mrow_scope(s)) {
				fprintf(f, "JSON key %s twice\n", x->json);
				bad++;
			}
		}
	}
	return bad ? -1 : 0;
}

/* The labels a family's series carry, for its docs row. */
static void
kvp_md_labels(size_t fr, FILE *f)
{
	const struct kvp_mrow *fam = &kvp_mtab[fr];
	char *keys[8], vals[8][512];
	unsigned nk = 0, k, n = 0;
	size_t r;

	switch (fam->over) {
	case KVP_MO_DRIVE:
		fprintf(f, "%s`drive`", n++ ? "; " : "");
		break;
	case KVP_MO_GPU:
		fprintf(f, "%s`gpu` (CUDA device)", n++ ? "; " : "");
		break;
	case KVP_MO_NS:
		fprintf(f, "%s`namespace`, `ns_id`", n++ ? "; " : "");
		break;
	case KVP_MO_CLC:
	case KVP_MO_NSE:
		fprintf(f, "%s%s`event` =", n++ ? "; " : "",
			fam->over == KVP_MO_NSE ? "`namespace`, `ns_id`, " :
						  "");
		for (k = 0;
		     k < (fam->over == KVP_MO_CLC ? KVP_CLC__N : KVP_NSE__N);
		     k++)
			fprintf(f, "%s `%s`", k ? "," : "",
				fam->over == KVP_MO_CLC ? kvp_cl_ctr_names[k] :
							  kvp_nse_names[k]);
		break;
	case KVP_MO_HIST:
		fprintf(f, "%s`op` =", n++ ? "; " : "");
		for (k = 0; k < KVP_HIST__N; k++)
			if (!k ||
			    strcmp(kvp_hist_id[k].op, kvp_hist_id[k - 1].op))
				fprintf(f, "%s `%s`", k ? "," : "",
					kvp_hist_id[k].op);
		fprintf(f, "; `tier` = `DRAM`, `SSD`");
		break;
	case KVP_MO_STAGE:
		fprintf(f, "%s`stage` =", n++ ? "; " : "");
		for (k = 0; k <= KVP_IOS__N; k++)
			fprintf(f, "%s `%s`", k ? "," : "",
				kvp_io_stage_names[k]);
		break;
	}
	/* the fixed labels: each key with its values, in order */
	for (r = fr + 1; r < KVP_MROWS && kvp_mtab[r].kind != KVP_MK_FAMILY;
	     r++) {
		const char *p = kvp_mtab[r].name;

		while (p && *p) {
			const char *eq = strchr(p, '='), *q, *e;
			char kv[64], vv[64];

			if (!eq)
				break;
			q = eq + 2;
			e = strchr(q, '"');
			snprintf(kv, sizeof(kv), "%.*s", (int)(eq - p), p);
			snprintf(vv, sizeof(vv), "`%.*s`", (int)(e - q), q);
			for (k = 0; k < nk && strcmp(keys[k], kv); k++)
				;
			if (k == nk && nk < 8) {
				keys[nk] = strdup(kv);
				vals[nk++][0] = '\0';
			}
			if (k < 8 && !strstr(vals[k], vv))
				snprintf(vals[k] + strlen(vals[k]),
					 sizeof(vals[k]) - strlen(vals[k]),
					 "%s%s", vals[k][0] ? ", " : "", vv);
			p = e[1] == ',' ? e + 2 : e + 1;
		}
	}
	for (k = 0; k < nk; k++) {
		fprintf(f, "%s`%s` = %s", n++ ? "; " : "", keys[k], vals[k]);
		free(keys[k]);
	}
	if (fam->labdoc)
		fprintf(f, "%s%s", n++ ? "; " : "", fam->labdoc);
}

/* Every key of `stat --json` under 'over' and 'when', for the docs. */
static void
kvp_md_json(FILE *f, unsigned over, unsigned when)
{
	const struct kvp_mrow *fam = NULL;
	unsigned n = 0, e;
	size_t r;

	for (r = 0; r < KVP_MROWS; r++) {
		const struct kvp_mrow *x = &kvp_mtab[r];
		unsigned fo = fam ? fam->over : KVP_MO_ONE,
			 fw = fam ? fam->when : KVP_MW_ALWAYS;

		if (x->kind == KVP_MK_FAMILY) {
			fam = x;
			continue;
		}
		if (x->kind == KVP_MK_JSON)
			fo = KVP_MO_ONE, fw = KVP_MW_ALWAYS;
		if (!x->json || x->hist || fw != when ||
		    (fo != over && !(over == KVP_MO_NS && fo == KVP_MO_NSE)))
			continue;
		if (fo == KVP_MO_CLC || fo == KVP_MO_NSE) {
			for (e = 0;
			     e < (fo == KVP_MO_CLC ? KVP_CLC__N : KVP_NSE__N);
			     e++)
				fprintf(f, "%s`%s`", n++ ? ", " : "",
					fo == KVP_MO_CLC ? kvp_cl_ctr_names[e] :
							   kvp_nse_names[e]);
			continue;
		}
		fprintf(f, "%s`%s`", n++ ? ", " : "", x->json);
	}
}

int
kvp_metrics_markdown(FILE *f)
{
	unsigned sec, k;
	const char *d;
	size_t r, n;

	if (kvp_mtab_check(stderr))
		return -EINVAL;
	fprintf(f, "<!-- generated by `kvpool stat --metrics-markdown` from "
		   "agent/metrics_table.c: edit the table, not this -->\n");
	for (sec = 0; sec < KVP_SEC__N; sec++) {
		fprintf(f,
			"\n### %s\n\n| metric | labels | meaning |\n"
			"|---|---|---|\n",
			kvp_msec_titles[sec]);
		for (r = 0; r < KVP_MROWS; r++) {
			const struct kvp_mrow *x = &kvp_mtab[r];

			if (x->kind != KVP_MK_FAMILY || x->sec != sec)
				continue;
			fprintf(f, "| `%s` (%s) | ", x->name, x->type);
			kvp_md_labels(r, f);
			d = x->doc ? x->doc : x->help;
			n = strlen(d) - (d[strlen(d) - 1] == '.');
			fprintf(f, " | %.*s%s |\n", (int)n, d,
				x->when == KVP_MW_REMOTE ?
					"; present only in a pool made with "
					"`--cluster`" :
				x->when == KVP_MW_NS ?
					"; present once a namespace counted "
					"something" :
					"");
		}
	}
	fprintf(f, "\n## JSON names (`kvpool stat --json`)\n\n"
		   "Top level: `pool`, ");
	kvp_md_json(f, KVP_MO_ONE, KVP_MW_ALWAYS);
	fprintf(f, ".\n\n`ssd_drives`: an array, one object per drive: "
		   "`drive`, `state`, ");
	kvp_md_json(f, KVP_MO_DRIVE, KVP_MW_ALWAYS);
	fprintf(f, ".\n\n`remote` (only in a pool made with `--cluster`): "
		   "`node`, `state` (`off`, `down`, `up`, or `clash`: another "
		   "agent holds this node's name), ");
	kvp_md_json(f, KVP_MO_ONE, KVP_MW_REMOTE);
	fprintf(f, ", ");
	kvp_md_json(f, KVP_MO_CLC, KVP_MW_REMOTE);
	fprintf(f, ".\n\n`namespaces`: an array, one object per namespace "
		   "row: `ns`, `ns_id`, ");
	kvp_md_json(f, KVP_MO_NS, KVP_MW_NS);
	fprintf(f, ".\n\n`latency`: per `op_TIER` (");
	for (k = 0; k < KVP_HIST__N; k++)
		fprintf(f, "%s`%s_%s`", k ? ", " : "", kvp_hist_id[k].op,
			kvp_tier_names[kvp_hist_id[k].tier]);
	fprintf(f, "): `count`, `sum_ns`, `p50_ns`, `p99_ns` (bucket upper "
		   "bounds).\n\n`read_stages`: the same per stage of an SSD "
		   "read (");
	for (k = 0; k <= KVP_IOS__N; k++)
		fprintf(f, "%s`%s`", k ? ", " : "", kvp_io_stage_names[k]);
	fprintf(f, ").\n<!-- end of kvpool stat --metrics-markdown -->\n");
	return ferror(f) ? -EIO : 0;
}
