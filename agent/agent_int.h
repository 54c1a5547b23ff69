/* SPDX-License-Identifier: MIT */
/*
 * agent_int.h - internals of kvpoold shared by its files (never included
 * by a public header).
 */
#ifndef KVP_AGENT_INT_H
#define KVP_AGENT_INT_H

#include <stdarg.h>
#include <sys/types.h>

#include "kvpool.h"
#include "shm/kvp_assert.h"

struct kvp_agent_cfg {
	char pool[KVP_POOL_NAME_MAX];
	uint64_t dram_bytes;
	uint64_t index_entries;
	uint64_t max_value;
	uint64_t dram_unit;
	uint32_t max_clients;
	uint32_t holds_per_client;
	uint32_t dram_high_pct;
	uint32_t dram_low_pct;
	/* the eviction policy (evict.c, ghost.c): a never-used value's age
	 * counts this many times (--evict-probation), the ghost set holds
	 * this % of the DRAM tier's units in keys (--evict-ghost), and
	 * ARC's rule moves the weights by this step (--evict-adapt) */
	uint32_t evict_probation;
	uint32_t evict_ghost_pct;
	uint32_t evict_adapt;
	uint32_t ceiling_window_s; /* --ceiling-window (distinct.c; 0: off) */
	char group[64];            /* "" = mode 0600 */
	bool foreground;
	bool verbose;           /* --verbose: debug log lines */
	char log_file[4096];    /* --log FILE ("": the default place) */
	bool keep_on_exit;      /* never unlink the segment on SIGTERM */
	uint32_t reap_ms;       /* reaper period */
	uint64_t stop_flush_ms; /* SIGTERM: write DRAM-only values to SSD for at
				 * most this long (--stop-flush-secs; 0: no) */
	/* SSD tier: ssd_dir[0] == 0 means DRAM only; ssd_dirs: every
	 * --ssd-dir (one per drive; ssd_dir is the first) */
	char ssd_dir[1024];
	char ssd_dirs[16][1024];
	unsigned nssd_dirs;
	uint64_t ssd_size;
	uint64_t ssd_segment;
	uint64_t staging_bytes;
	uint64_t staging_slot;
	bool durability_strict;
	bool no_promote;     /* SSD reads never land in DRAM (staging only) */
	uint64_t max_pinned; /* --max-pinned-per-client; 0 = no cap */
	char metrics_addr[128]; /* --metrics-addr HOST:PORT, or "off" */
	/* the HBM tier (agent/hbm.c): --hbm-gpu (CUDA ordinals, one helper
	 * each, GPU slot k = the k-th given) and --hbm-size (each) */
	int hbm_gpu[KVP_GPU_MAX];
	unsigned nhbm;
	uint64_t hbm_bytes;
	/* given on the command line (a bind failure is fatal) */
	bool metrics_addr_given;
	/* --index-entries by default (kvpoold.c): DRAM's share and the SSD
	 * tier's, and what the SSD's would be uncapped (all 0: given) */
	uint64_t index_dram_share, index_ssd_share, index_ssd_want;
	/* --ssd-reinsert PCT: at most this share of a reclaimed segment is
	 * rewritten at the head of the log (values read since written) */
	uint32_t ssd_reinsert_pct;
	/* --ssd-header-cache SIZE: batch header blocks kept per drive */
	uint64_t ssd_header_cache;
	uint64_t ssd_write_depth; /* --ssd-write-depth (tiers/kvp_ssd.h) */
	/* the segment's backing (segment.c): --hugepages auto|on|off, the
	 * hugetlbfs mount to use (--hugetlbfs; "" = the first 2 MiB one) */
	int hugepages; /* KVP_HUGE_* */
	char hugetlbfs[200];
	/* --numa: KVP_NUMA_DEFAULT (interleave on a multi-node host),
	 * KVP_NUMA_INTERLEAVE, KVP_NUMA_OFF, or a node number >= 0 */
	int numa;
	/* populate.c: --populate-threads (0: online CPUs, at most 8) and
	 * --populate-rate bytes/s (0: as fast as it goes) */
	uint32_t populate_threads;
	uint64_t populate_rate;
	/* the remote tier (agent/cluster.c): --cluster redis://[:PW@]HOST:PORT
	 * ("" = none), --cluster-password-file, --node NAME, --cluster-ttl-ms,
	 * --cluster-publish-ms, --remote-lease-ms, --remote-timeout-ms,
	 * --remote-buffer SIZE */
	char cluster_url[512];
	char cluster_pwfile[512];
	char node[64];
	uint32_t cluster_ttl_ms;
	uint32_t cluster_publish_ms;
	uint32_t remote_lease_ms;
	uint32_t remote_timeout_ms;
	uint64_t remote_buffer;
};

enum {
	KVP_HUGE_AUTO = 0,
	KVP_HUGE_ON,
	KVP_HUGE_OFF
};
enum {
	KVP_NUMA_DEFAULT = -1,
	KVP_NUMA_INTERLEAVE = -2,
	KVP_NUMA_OFF = -3,
};

struct kvp_agent {
	struct kvp_agent_cfg cfg;
	struct kvp_seg seg;
	/* this agent created the segment (not re-attached): a start that fails
	 * removes it again */
	bool seg_created;
	/* what the agent publishes in the header, kept here to write it
	 * again after a client's ftruncate took the header (segment.c) */
	uint64_t incarnation, start_ns;
	/* a cut of the segment file: its offset + 1 (0: none), set by the
	 * reaper, cleared by the tier thread once no value's DRAM bytes lie
	 * past it (segment.c, evict.c) */
	kvp_aword_t cut_due;
	kvp_aword_t stop;     /* set by main on SIGTERM; read by the threads */
	struct kvp_evict *ev; /* the eviction pass's scratch (evict.c) */
	struct kvp_ghost *ghost;       /* keys evicted lately (ghost.c) */
	bool ghost_failed;             /* ... out of memory: off */
	struct kvp_distinct *distinct; /* keys of a window (distinct.c) */
	bool distinct_failed;          /* ... out of memory: off */
	/* slots scanned since room was last made */
	uint64_t noprogress_scanned;
	bool evict_urgent; /* this round: a putter is waiting for room */
	/* ARC's rule (evict.c): how far the weights of never-used values
	 * have moved toward plain recency (0: --evict-probation as given,
	 * 1: x1), the weights it gives (x256: a never-used value's, a
	 * continuation's), and the evictions at a weight above 1 and at 1
	 * lately (decayed over the ghost set's length) */
	double evict_relax, evict_ev_w, evict_ev_1;
	uint32_t evict_wq[2];
	uint64_t idle_used; /* DRAM use when a pass last found nothing (+1) */
	uint64_t delete_seq_seen, last_reclaim_ns; /* reclaim-only passes */
	int *pidfd; /* per client slot, -1 = none (reaper thread) */
	uint64_t *pidfd_pid;
	/* SSD tier state (agent/tier.c); NULL: DRAM only */
	struct kvp_tier *tier;
	kvp_aword_t gc_request; /* reaper -> tier thread: sweep orphan runs */
	/* the index limit (agent/evict.c; tier thread but the flag) */
	/* start, or a reap that may have left the count high */
	kvp_aword_t ix_recount_due;
	uint64_t ix_recount_ns; /* last recount attempt (CLOCK_MONOTONIC) */
	uint64_t *ix_seen;  /* recount scratch: per client, its cs_ix_resv */
	uint64_t *ix_named; /* recount scratch: slots named by HAVE_SLOT */
	/* the /metrics endpoint (agent/metrics_http.c) */
	struct kvp_http *http;
	/* the allocator lock, seen from the agent (tier thread): it never
	 * waits for it (a client holding it may be stopped); frees that
	 * need it wait here, in private memory, and are retried each round */
	struct kvp_dfree *dfree;
	size_t ndfree, capdfree;
	uint64_t lock_busy_since; /* held by someone else since (0: not) */
	uint64_t lock_checked_ns; /* its holder last checked with the kernel */
	bool lock_warned;         /* said once that a live holder keeps it */
	uint64_t last_repair_ns;  /* the last repair of the page map */
	bool dram_damaged;        /* an agent operation found damage */
	/* the segment's page size: 0 (tmpfs, 4 KiB) or 2 MiB (hugetlbfs;
	 * the file is a->seg.path) */
	uint64_t seg_page_bytes;
	/* the background populate (populate.c): the head of the arena's
	 * unpopulated tail (g_dram_pages: none; tier thread), its state */
	uint64_t pop_frontier;
	struct kvp_pop *pop;
	struct kvp_hbm *hbm; /* the HBM tier (hbm.c); NULL: none */
	struct kvp_cl *cl;   /* the remote tier (cluster.c); NULL: none */
};

struct kvp_dfree { /* a run chain to free once the lock is ours */
	uint64_t slot;
	uint32_t first, gen;
};

/* hbm.c: the HBM tier's helpers (start: main; round: tier thread; stop:
 * main, after the threads) */
int kvp_hbm_start_agent(struct kvp_agent *a);
void kvp_hbm_round_agent(struct kvp_agent *a);
void kvp_hbm_stop_agent(struct kvp_agent *a);

/* cluster.c: the remote tier (its own thread; start after the segment is
 * served, stop before the client count at exit) */
int kvp_cluster_start_agent(struct kvp_agent *a);
void kvp_cluster_stop_agent(struct kvp_agent *a);
/* kvpoold --ucx-probe HEX (the agent runs it, never a user): 0 if UCX
 * takes HEX as a worker address (cluster_dir.c, "node entries") */
int kvp_cluster_probe(const char *hex);

/* log.c */
int kvp_parse_size(const char *s, uint64_t *out);

/* agent/metrics.c: a snapshot of a pool read from its segment (read only) */
enum {
	KVP_MTIER_DRAM,
	KVP_MTIER_SSD,
	KVP_MTIER_HBM,
	KVP_MTIERS
};
struct kvp_metrics {
	char pool[KVP_POOL_NAME_MAX];
	uint32_t abi_major, abi_minor;
	bool agent_alive;
	uint64_t agent_pid, incarnation, agent_start_ns, create_ns,
		metrics_port;
	uint64_t index_slots, index_limit;
	uint64_t ix_ready, ix_pending, ix_deleted, ix_claiming, ix_checking;
	uint64_t probe_sum, probe_max; /* over ready entries, 1..16 */
	uint64_t entries[KVP_MTIERS];  /* ready entries by resident tier */
	uint64_t value_bytes[KVP_MTIERS];
	uint64_t dram_used, dram_total;
	/* populated (populate.c), the backing's page size */
	uint64_t dram_populated, dram_page_bytes;
	/* values in DRAM, and those whose last unit is more than half empty
	 * (--dram-unit too large for them), their sizes (log2 histogram) */
	uint64_t dram_unit, dram_values, dram_wasteful;
	uint64_t dram_size_log2[40];
	uint64_t ssd_enabled, ssd_used, ssd_live, ssd_total;
	/* per drive id: state word (KVP_DRIVE_WORD), bytes used, capacity */
	uint64_t drive_state[16], drive_used[16], drive_total[16];
	uint64_t staging_in_use, staging_peak, staging_total,
		staging_slot_bytes;
	uint64_t clients_live, clients_dead, max_clients, holds, leases;
	/* the HBM tier, per GPU slot: state word, device, pool bytes,
	 * bytes in copies, copies placed (since the helper came up) */
	uint64_t gpu_state[KVP_GPU_MAX], gpu_device[KVP_GPU_MAX],
		gpu_bytes[KVP_GPU_MAX], gpu_used[KVP_GPU_MAX],
		gpu_copies[KVP_GPU_MAX];
	/* the remote tier (struct kvp_cluster's cl_* words); remote_present:
	 * the segment has one (state KVP_CL_OFF: no agent runs it now) */
	bool remote_present;
	uint64_t remote_state, remote_pub_lag_ns, remote_pub_max_ns,
		remote_dir_rtt_ns;
	uint64_t remote_ctr[KVP_CL_CTRS];
	uint64_t remote_lat[KVP_HIST_WORDS];
	char remote_node[64];
	uint64_t ctr[KVP_CTR_SLOTS]; /* every shard + retired */
	uint64_t actr[KVP_ACTR_RETIRED0];
	uint64_t hist[KVP_HIST_SLOTS][KVP_HIST_WORDS];
	/* the SSD read stages: the agent's (enum kvp_io_stage), then the
	 * clients' copy-out (KVP_HIST_SSD_COPY); the devices' queues */
	uint64_t io_hist[KVP_IOS__N + 1][KVP_HIST_WORDS];
	uint64_t io_reads, io_writes, io_write_bytes;
	/* namespaces with a counter row (kvp_ns_count): the name as written
	 * (NUL-terminated here), the id, the events, and what their live
	 * clients hold now (pins: holds tagged KVP_HOLD_PIN) */
	uint32_t nns;
	struct kvp_metrics_ns {
		char name[48];
		uint64_t id;
		uint64_t ctr[KVP_NSE__N];
		uint64_t clients, pinned;
	} ns[KVP_NS_STAT_ROWS];
	uint64_t collect_ns; /* how long the snapshot took */
};
extern const char *const kvp_tier_names[KVP_MTIERS];
/* pool: the caller's validated name (NULL: the header's copy, escaped
 * by every rendering anyway) */
void kvp_metrics_collect(const struct kvp_seg *s, const char *pool,
			 struct kvp_metrics *m);
/* m->pool for a terminal (control bytes escaped) */
const char *kvp_metrics_pool_tty(const struct kvp_metrics *m, char *out,
				 size_t cap);
uint64_t kvp_metrics_hist_count(const struct kvp_metrics *m, unsigned h);
uint64_t kvp_metrics_hist_quantile(const struct kvp_metrics *m, unsigned h,
				   double q);
/* the same of one histogram's words (buckets, then KVP_HIST_SUM) */
uint64_t kvp_hist_words_count(const uint64_t *w);
uint64_t kvp_hist_words_quantile(const uint64_t *w, double q);
/* the SSD read stages' names: queue, submit, device, answer, copy */
extern const char *const kvp_io_stage_names[KVP_IOS__N + 1];
/* agent/metrics_table.c: the table of metrics and what it makes */
int kvp_metrics_prom(const struct kvp_metrics *m, FILE *f);
void kvp_metrics_json(const struct kvp_metrics *m, FILE *f);
/* the JSON name of client counter k (enum kvp_ctr), or of agent counter
 * k (agent: enum kvp_actr) */
const char *kvp_metrics_ctr_name(bool agent, unsigned k);
/* docs/observability.md's tables of metrics and JSON names (kvpool stat
 * --metrics-markdown); -EINVAL after saying on stderr what is wrong with
 * the table */
int kvp_metrics_markdown(FILE *f);
/* enum kvp_drive_state as text (metrics.c) */
const char *kvp_drive_state_name(unsigned st);
void kvp_metrics_table(const struct kvp_metrics *m, FILE *f);
void kvp_metrics_clients(const struct kvp_seg *s, FILE *f);

/* agent/metrics_http.c: the Prometheus endpoint (libmicrohttpd thread) */
int kvp_metrics_http_start_agent(struct kvp_agent *a);
void kvp_metrics_http_stop_agent(struct kvp_agent *a);

/* agent/segment.c: the segment's lifecycle */
int kvp_shm_create_or_attach_agent(struct kvp_agent *a);
int kvp_shm_remove_agent(struct kvp_agent *a);
unsigned kvp_shm_repair_header_agent(struct kvp_agent *a);
int kvp_shm_check_size_agent(struct kvp_agent *a);
void kvp_shm_publish_agent(struct kvp_agent *a);
int kvp_shm_geometry(const struct kvp_agent_cfg *cfg, struct kvp_geom *g,
		     struct kvp_layout *L);

/* agent/populate.c: the segment populated behind the ready agent */
int kvp_populate_start_agent(struct kvp_agent *a);
void kvp_populate_step_agent(struct kvp_agent *a);
void kvp_populate_meta_agent(struct kvp_agent *a);
void kvp_populate_hold_agent(struct kvp_agent *a, bool hold);
bool kvp_populate_pending_agent(const struct kvp_agent *a);
void kvp_populate_stop_agent(struct kvp_agent *a);
/* the units the DRAM watermarks are percentages of (the populated
 * capacity), and whether use is above --dram-high */
uint64_t kvp_dram_capacity_agent(const struct kvp_agent *a);
bool kvp_dram_above_high_agent(const struct kvp_agent *a);

/* agent/notify.c: sd_notify(3) messages ("READY=1", "STATUS=...",
 * "STOPPING=1") to NOTIFY_SOCKET when a service manager set it; a failure
 * is logged once, never fatal */
void kvp_notify_agent(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* agent/loop.c: the tier thread's round, its thread, the stop flush */
bool kvp_tier_step_agent(struct kvp_agent *a, int wait_ms);
void *kvp_tier_main_agent(void *arg);
uint64_t kvp_tier_flush_agent(struct kvp_agent *a, uint64_t deadline_ns);

/* agent/evict.c: eviction policy (oldest use first, deepest first within
 * a tick; DRAM watermarks, index-pressure hints, the index limit);
 * victims go through the CHECK verdict (victim.c) */
void kvp_dram_round_agent(struct kvp_agent *a);
bool kvp_evict_cut_agent(struct kvp_agent *a, uint64_t cut);
uint64_t kvp_dram_evict_pass_agent(struct kvp_agent *a,
				   uint64_t want_free_pages, bool *stuck);
bool kvp_ix_recount_agent(struct kvp_agent *a);
void kvp_evict_free_agent(struct kvp_agent *a);  /* the pass's scratch */
void kvp_evict_start_agent(struct kvp_agent *a); /* the policy's state */

/* agent/dram.c: the DRAM allocator from the agent's side */
uint64_t kvp_dram_gc_agent(struct kvp_agent *a);
int kvp_dram_lock_agent(struct kvp_agent *a);
uint64_t kvp_dram_free_agent(struct kvp_agent *a, uint32_t first, uint64_t slot,
			     uint32_t gen);
uint64_t kvp_dram_deferred_agent(struct kvp_agent *a);
int kvp_dram_repair_agent(struct kvp_agent *a);

/* agent/tier.c: the SSD tier's lifecycle */
int kvp_tier_open_agent(struct kvp_agent *a);
void kvp_tier_close_agent(struct kvp_agent *a);
/* h_ssd_enabled as the tier is now (segment.c: a header published again) */
void kvp_tier_publish_enabled_agent(struct kvp_agent *a);

/* agent/ops.c: operations in flight (busy slots) and the tier's state */
bool kvp_tier_busy_agent(struct kvp_agent *a, uint64_t slot);
bool kvp_tier_demoting_agent(struct kvp_agent *a);
bool kvp_tier_demote_full_agent(struct kvp_agent *a);
bool kvp_tier_write_failing_agent(struct kvp_agent *a);
bool kvp_tier_write_deferred_agent(struct kvp_agent *a);

/* agent/move.c: demotion, tombstones */
unsigned kvp_tier_demote_agent(struct kvp_agent *a, uint64_t slot,
			       uint64_t word);
void kvp_tier_forget_agent(struct kvp_agent *a, uint64_t slot, uint64_t ssd_loc,
			   uint64_t vlen);
bool kvp_tier_may_forget_agent(struct kvp_agent *a, uint64_t slot);

/* agent/staging.c: spans from the reaper's and the sweep's side */
void kvp_span_release_client_agent(struct kvp_seg *s, uint32_t client);
unsigned kvp_span_adopt_agent(struct kvp_seg *s, uint32_t head,
			      unsigned dead_freer);
unsigned kvp_staging_sweep_agent(struct kvp_seg *s);

/* agent/reaper.c */
int kvp_reap_client_agent(struct kvp_agent *a, uint32_t slot);
unsigned kvp_reaper_round_agent(struct kvp_agent *a);
bool kvp_reaper_watch_new_agent(struct kvp_agent *a);
void *kvp_reaper_main_agent(void *arg);

#endif
