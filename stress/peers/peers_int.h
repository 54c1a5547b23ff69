/* SPDX-License-Identifier: MIT */
/*
 * peers_int.h - what the files of bench_peers share: the configuration,
 * the value and index sets, the page shared with the workers, the
 * driver interface every system implements, and the core's helpers.
 *
 * Files (stress/peers/):
 *   bench_peers.c   options, set-up, the rounds, clean-up (main)
 *   core.c          the workers, the start barrier, timing, JSON output
 *   rounds.c        the fill and the sections run every round: get,
 *                   mixed, prefix and exists, rtt
 *   ssd.c           the ssd section (kvpool's SSD tier against fio)
 *   drv_<system>.c  one system each: memcpy, kvpool, lmdb, redis, rpc
 *                   (rpc and rpc1, the client side of the RPC shape)
 *   rpc_server.c    the RPC shape's server
 *   rpc_proto.h     the RPC shape's wire protocol (both ends)
 */
#ifndef KVPB_PEERS_INT_H
#define KVPB_PEERS_INT_H

#include "stress/bench_util.h"

#define KVPB_MAX_SIZES 4u
#define KVPB_MAX_PROCS 64u
#define KVPB_MAX_IX 2u
#define KVPB_MAX_CALL 4096u /* keys in one driver call at the most */
#define KVPB_PREFIX 2000u
#define KVPB_RTT KVPB_MAX_SIZES /* the rtt value set's index in kvpb_vs */
#define KVPB_RTT_SIZE 4096u
#define KVPB_RTT_KEYS 4096u /* 16 MiB of values */
#define KVPB_NSETS (KVPB_MAX_SIZES + 1)

#define KVPB_TAG_GET 0x676574ull /* key families: never collide */
#define KVPB_TAG_IX 0x6978ull
#define KVPB_TAG_MIX (0x6d6978ull << 32)

/* The systems, in the order each round starts from (it rotates). */
enum {
	SYS_MEMCPY,
	SYS_KVPOOL,
	SYS_LMDB,
	SYS_REDIS,
	SYS_RPC,
	SYS_RPC1,
	KVPB_NSYS
};

enum {
	SEC_GET,
	SEC_MIXED,
	SEC_PREFIX,
	SEC_EXISTS,
	SEC_SSD,
	SEC_RTT,
	KVPB_NSEC
};

struct kvpb_cfg {
	bool quick, pin;
	unsigned rounds;
	unsigned nsizes;
	uint64_t sizes[KVPB_MAX_SIZES];
	unsigned nprocs;
	unsigned procs[8];
	unsigned sys_mask, sec_mask;
	uint64_t ws;     /* bytes of values per size */
	unsigned passes; /* passes over the working set per get */
	unsigned batch;  /* keys per batch; 0 = auto */
	unsigned nix;
	uint64_t ix_entries[KVPB_MAX_IX];
	unsigned prefix_batches; /* 2,000-key batches per system and round */
	uint64_t exists_ops;
	uint64_t rtt_ops; /* timed 1-key gets per system and round */
	char ssd_dir[512];
	unsigned nssd;
	uint64_t ssd_sizes[KVPB_MAX_SIZES];
	uint64_t ssd_bytes; /* per SSD size and round */
	unsigned nproc;     /* online CPUs */
	unsigned nworkers;
};

extern struct kvpb_cfg kvpb_cfg;

/* One value set per size: the same keys and values in every system.
 * A value is kvpt_fill(key, version 1): any copy of it can be checked. */
struct kvpb_vset {
	uint64_t size, n;
	unsigned batch;
	unsigned char *keys; /* n keys of KVPB_KLEN bytes; NULL: no such set */
};

extern struct kvpb_vset kvpb_vs[KVPB_NSETS]; /* the sizes, then the rtt set */

/*
 * Shared with the workers (MAP_SHARED | MAP_ANONYMOUS, made before the
 * fork).  Commands and acknowledgements go through pipes; their write
 * and read order every plain field below (a pipe write happens before
 * the read that returns its bytes).
 */
struct kvpb_wres {
	uint64_t t0, t1, ops, bytes, bad, busy_ns, sum_ns, worst_ns;
	uint64_t p50_ns, p99_ns; /* rtt: of the single calls */
};

struct kvpb_ctl {
	kvp_aword_t go; /* the seq of the command whose workers may start */
	uint64_t pad[7];
	struct kvpb_wres res[KVPB_MAX_PROCS];
	/* where each system is, written by its driver's start hook (after
	 * the fork, before the first command), read by the workers' open */
	char pool[1 + KVPB_MAX_IX][64]; /* kvpool pools: values, index sets */
	char lmdb_dir[256];
	char redis_sock[108];
	char rpc_sock[108];
	uint64_t lmdb_mapsize;
	uint64_t ix_n[KVPB_MAX_IX]; /* present keys of each index set */
	uint64_t ix_slots[KVPB_MAX_IX];
};

extern struct kvpb_ctl *kvpb_ctl;
extern unsigned char *kvpb_ixkeys[KVPB_MAX_IX]; /* shared: filled after fork */
extern uint64_t kvpb_ixcap[KVPB_MAX_IX];

/* A measurement, as the parent sends it to each of its workers. */
struct kvpb_cmd {
	uint32_t op;                        /* CMD_* */
	uint32_t sec, sys, s, procs, round; /* s: the value or index set */
	uint64_t seq, iters;
};

enum {
	CMD_RUN = 1,
	CMD_EXIT
};

/* A worker: a process of its own, pinned, forked once at start. */
struct kvpb_worker {
	unsigned w;
	unsigned char *dst; /* private destination of gets */
	unsigned char *src; /* put source, cache-hot */
	uint64_t maxbb;     /* the largest batch in bytes */
	/* the core's own */
	unsigned char *pkeys; /* this measurement's new keys */
	uint64_t pkeys_cap;
	uint64_t *lat; /* rtt: one time per call */
	uint64_t lat_cap;
};

/*
 * A system behind the benchmark.  The parent's hooks act on the
 * system's store (its server, its files, its data, the parent's own
 * client of it); the workers' hooks on one worker's client.  A NULL
 * hook: nothing to do there; for prefix and exists: not measured.
 *
 * A worker is a process, so a driver keeps a worker's client in file
 * statics, apart from the parent's handles.  The workers are forked
 * after setup and before start: they inherit what setup made and none
 * of the parent's handles.
 */
struct kvpb_driver {
	const char *name; /* in --systems and in the JSON */
	/* the store and client it uses, if another's (its parent hooks: NULL)
	 */
	const struct kvpb_driver *shares;
	bool limit;   /* a physical limit: also run on every CPU (get) */
	bool per_key; /* one request per key: its batch is reported as 1 */
	bool rtt;     /* in the rtt section */

	/* parent, before the fork: what the workers inherit */
	int (*setup)(void);
	/* parent, after the fork: the store and the parent's client */
	int (*start)(void);
	/* parent: store value i of set v, its bytes at val; failures */
	uint64_t (*fill_value)(const struct kvpb_vset *v, uint64_t i,
			       const void *val);
	/* parent: store the n keys of an index set, 1-byte values; failures */
	uint64_t (*fill_index)(const unsigned char *keys, uint64_t n);
	/* parent, around a mixed measurement (untimed): note the state
	 * before it; afterwards remove the keys its procs workers put,
	 * worker w's nput keys from keys + w * nput * KVPB_KLEN */
	void (*mixed_mark)(void);
	void (*mixed_undo)(const unsigned char *keys, uint64_t nput,
			   unsigned procs);
	/* parent, at the end, whether started or not */
	void (*stop)(void);

	/* worker: open the client of pool (kvpool: 0 values, 1 + ix an
	 * index set) unless open; 0 or -errno */
	int (*open)(struct kvpb_worker *W, unsigned pool);
	/* worker, before the start barrier: what this command needs */
	int (*prepare)(struct kvpb_worker *W, const struct kvpb_cmd *cmd);
	/* worker: get the m values v->keys[idx[k]] into W->dst (or where
	 * *first then says the first one landed); failures */
	uint64_t (*get)(struct kvpb_worker *W, const struct kvpb_vset *v,
			const uint64_t *idx, unsigned m,
			const unsigned char **first);
	/* worker: put the m new keys keys[0..m) with sz bytes of W->src;
	 * slot: the put's number in this measurement; failures */
	uint64_t (*put)(struct kvpb_worker *W, const unsigned char *keys,
			unsigned m, uint64_t sz, uint64_t slot);
	/* worker: the length of the present prefix of the 2,000 keys at
	 * keys, keys number first.. of index set ix */
	uint64_t (*prefix)(struct kvpb_worker *W, unsigned ix,
			   const unsigned char *keys, uint64_t first);
	/* worker: is key in index set ix? */
	bool (*exists)(unsigned ix, const unsigned char *key);
	/* worker, at exit */
	void (*close)(void);
};

extern const struct kvpb_driver kvpb_drv_memcpy, kvpb_drv_kvpool, kvpb_drv_lmdb,
	kvpb_drv_redis, kvpb_drv_rpc, kvpb_drv_rpc1;
extern const struct kvpb_driver *const kvpb_drv[KVPB_NSYS];

/* ---- core.c: helpers ---- */

void kvpb_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool kvpb_sys_on(unsigned sys);
bool kvpb_store_on(const struct kvpb_driver *d);
bool kvpb_limit_on(void);
bool kvpb_sec_on(unsigned sec);
uint64_t kvpb_max_value(void);
int kvpb_read_full(int fd, void *buf, size_t n);
int kvpb_write_full(int fd, const void *buf, size_t n);
void kvpb_close_fds_but(int keep);
const char *kvpb_size_name(uint64_t size, char *buf, size_t cap);

/* ---- core.c: the JSON lines on stdout ---- */

void kvpb_emit_config(void);
void kvpb_emit(unsigned round, const char *sec, const char *sys, uint64_t size,
	       unsigned procs, unsigned batch, uint64_t bad, ...);
void kvpb_info(const char *name, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- core.c: the workload, the workers, a measurement ---- */

uint64_t kvpb_mixed_puts(const struct kvpb_vset *v, uint64_t iters);
void kvpb_mixed_key(unsigned char *key, const struct kvpb_cmd *cmd, unsigned w,
		    uint64_t k);
int kvpb_workers_start(void);
void kvpb_workers_stop(void);

/* The aggregate of one measurement: wall time (first start to last
 * finish), busy time summed over the workers, operations, bytes,
 * failures, and the per-call times (prefix, rtt). */
struct kvpb_agg {
	double wall_s, busy_s, sum_ns, worst_ns, p50_ns, p99_ns;
	uint64_t ops, bytes, bad;
};

int kvpb_measure(struct kvpb_cmd *cmd, struct kvpb_agg *a);

/* ---- rounds.c, ssd.c: the sections ---- */

int kvpb_fill_values(void);
int kvpb_fill_index(unsigned ix);
int kvpb_run_values(unsigned r);
int kvpb_run_index(unsigned r);
int kvpb_run_rtt(unsigned r);
void kvpb_run_ssd(unsigned r);

/* ---- drv_kvpool.c: an index set is what kvpool's index holds ---- */

int kvpb_kvpool_make_index(unsigned ix);

/* kvpb_pow2_at_least (stress/bench_util.h): kvpoold's index slots for e
 * entries are kvpb_pow2_at_least(e + e / 4). */

#endif
