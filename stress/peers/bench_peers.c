/* SPDX-License-Identifier: MIT */
/*
 * bench_peers.c - kvpool against the physical limits and against the
 * systems a user would otherwise pick, on the same machine, with the same
 * keys and values, in the same rounds.
 *
 * A benchmark, not a test: it asserts nothing about the numbers.  It
 * prints one JSON object per measurement on stdout (stress/bench turns
 * them into medians, ratios, tables and plots) and its progress on
 * stderr.
 *
 * Systems, each behind the same small driver (get a batch, put a batch,
 * probe a 2,000-key prefix; peers_int.h), one file each:
 *   memcpy   the limit: a copy out of tmpfs, as kvpool's arena (drv_memcpy.c)
 *   kvpool   kvp_get / kvp_batch_get / kvp_put / kvp_batch_exists_prefix
 *            (drv_kvpool.c)
 *   lmdb     one environment on /dev/shm (drv_lmdb.c)
 *   redis    a private redis-server on a Unix socket (drv_redis.c)
 *   rpc      the shape of the existing KV-cache pools: a server process
 *            owns the DRAM tier, one request per batch (drv_rpc.c, the
 *            server rpc_server.c)
 *   rpc1     the same, one request per key (drv_rpc.c)
 *
 * Workloads (sizes and process counts from the command line):
 *   get      pure hits over a working set larger than the L3 cache, in
 *            batches (auto: 1 MiB per batch, at most 16 keys);
 *   mixed    50/50: a batch of gets of present keys, then a batch of puts
 *            of new keys (deleted again after the measurement, untimed);
 *   prefix   2,000-key kvp_batch_exists_prefix (and the equivalent for
 *            each peer: one LMDB read txn, 2,000 pipelined EXISTS, one
 *            RPC) on a full index (kvpool's at its --index-entries limit); plus
 *            kvpool's single kvp_exists rate;
 *   ssd      fio --direct=1 --ioengine=io_uring sequential write and read
 *            of the same block size on the same file system as
 *            --ssd-dir, against kvpool's demotion rate and its cold
 *            (O_DIRECT, through the staging arena) batch gets; and a
 *            2,000-key batch of 64 KiB SSD values through an 8-slot
 *            staging arena against bytes / fio's 64 KiB read bandwidth;
 *   rtt      the latency of a 1-key get of a 4 KiB value (one worker,
 *            each call timed alone, the median and the 99th percentile
 *            over many calls, keys cycled over a 16 MiB set): kvp_get
 *            (the copy is small, so this is kvpool's own overhead), one
 *            rpc1 round trip, and memcpy of the same 4 KiB (the copy).
 *
 * Method.  Worker processes are forked once, at start, each pinned to
 * one CPU (worker w on CPU w mod nproc, like taskset -c); they open every
 * system's client once and stay, like an engine's workers.  Servers
 * (kvpoold, redis-server, the RPC server) are not pinned: they run where
 * the scheduler puts them, which with one worker gives them a core of
 * their own.  Every round measures every system, rotating the order;
 * round 0 is a warm-up (first touches, lazily mapped pages) and is not
 * printed.  Each measurement starts all its workers together (they spin
 * on a shared word) and takes the wall time from the first start to the
 * last finish.  GB/s are 10^9 bytes/s.
 *
 * usage: bench_peers [--quick] [--rounds N] [--sizes 64K,1M,4M]
 *        [--procs 1,2] [--systems memcpy,kvpool,lmdb,redis,rpc,rpc1]
 *        [--sections get,mixed,prefix,ssd,rtt] [--ws SIZE] [--batch N]
 *        [--ssd-dir DIR] [--no-pin]
 */
#include <getopt.h>

#include "stress/peers/peers_int.h"

static int
kvpb_parse_list(const char *arg, const char *const *names, unsigned n,
		unsigned *mask)
{
	char buf[256], *tok, *save = NULL;
	unsigned k;

	snprintf(buf, sizeof(buf), "%s", arg);
	*mask = 0;
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		for (k = 0; k < n && strcmp(tok, names[k]); k++)
			;
		if (k == n) {
			kvpb_log("bench_peers: unknown name '%s'\n", tok);
			return -EINVAL;
		}
		*mask |= 1u << k;
	}
	return *mask ? 0 : -EINVAL;
}

static int
kvpb_parse_u64s(const char *arg, uint64_t *out, unsigned cap, unsigned *n,
		bool sizes)
{
	char buf[256], *tok, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", arg);
	*n = 0;
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		uint64_t v = sizes ? kvpb_parse_size(tok) :
				     strtoull(tok, NULL, 10);

		if (!v || *n == cap)
			return -EINVAL;
		if (*n && v <= out[*n - 1])
			return -EINVAL; /* ascending */
		out[(*n)++] = v;
	}
	return *n ? 0 : -EINVAL;
}

static void
kvpb_usage(FILE *f)
{
	fprintf(f,
		"usage: bench_peers [--quick] [--rounds N] [--sizes 64K,1M,4M] [--procs 1,2]\n"
		"         [--systems memcpy,kvpool,lmdb,redis,rpc,rpc1]\n"
		"         [--sections get,mixed,prefix,ssd,rtt] [--ws SIZE] [--batch N]\n"
		"         [--ssd-dir DIR] [--ssd-sizes 1M,...] [--no-pin]\n"
		"Prints one JSON object per measurement on stdout (stress/bench\n"
		"aggregates them); progress on stderr.\n");
}

/* The keys of the value sets (one per size, and the rtt set) and the
 * room for the index sets' keys (shared: the parent fills them after
 * the fork).  0 or -ENOMEM. */
static int
kvpb_sets_make(void)
{
	struct kvpb_cfg *c = &kvpb_cfg;
	unsigned s, k;
	uint64_t i;

	for (s = 0; s < c->nsizes; s++) {
		struct kvpb_vset *v = &kvpb_vs[s];

		v->size = c->sizes[s];
		v->n = c->ws / v->size < 4 ? 4 : c->ws / v->size;
		v->batch = c->batch ? c->batch :
				      (unsigned)((1u << 20) / v->size);
		v->batch = v->batch > 16 ? 16 : v->batch < 1 ? 1 : v->batch;
		v->keys = malloc(v->n * KVPB_KLEN);
		if (!v->keys)
			return -ENOMEM;
		for (i = 0; i < v->n; i++)
			kvpb_key(v->keys + i * KVPB_KLEN, KVPB_TAG_GET + s, i);
	}
	if (kvpb_sec_on(SEC_RTT)) {
		struct kvpb_vset *v = &kvpb_vs[KVPB_RTT];

		v->size = KVPB_RTT_SIZE;
		v->n = KVPB_RTT_KEYS;
		v->batch = 1;
		v->keys = malloc(v->n * KVPB_KLEN);
		if (!v->keys)
			return -ENOMEM;
		for (i = 0; i < v->n; i++)
			kvpb_key(v->keys + i * KVPB_KLEN,
				 KVPB_TAG_GET + KVPB_RTT, i);
	}
	for (k = 0; k < c->nix; k++) {
		uint64_t e = c->ix_entries[k];

		kvpb_ixcap[k] = kvpb_pow2_at_least(e + e / 4) * 9 / 10;
		kvpb_ixkeys[k] = mmap(NULL, kvpb_ixcap[k] * KVPB_KLEN,
				      PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (kvpb_ixkeys[k] == MAP_FAILED)
			return -ENOMEM;
	}
	return 0;
}

/*
 * The stores, after the fork: servers first (rpc, redis, then lmdb's
 * environment), kvpool last, so that no server inherits anything of a
 * pool.  A store shared by two systems (rpc1 uses rpc's) starts once.
 */
static int
kvpb_stores_start(void)
{
	unsigned sys = KVPB_NSYS;

	while (sys--) {
		const struct kvpb_driver *d = kvpb_drv[sys];

		if (!d->shares && d->start && kvpb_store_on(d) && d->start())
			return -EIO;
	}
	return 0;
}

/* Every store, started or not (an index set's pool is kvpool's even when
 * kvpool is not measured). */
static void
kvpb_stores_stop(void)
{
	unsigned sys;

	for (sys = 0; sys < KVPB_NSYS; sys++)
		if (kvpb_drv[sys]->stop)
			kvpb_drv[sys]->stop();
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "sizes", required_argument, NULL, 's' },
		{ "procs", required_argument, NULL, 'p' },
		{ "systems", required_argument, NULL, 'y' },
		{ "sections", required_argument, NULL, 'e' },
		{ "ws", required_argument, NULL, 'w' },
		{ "batch", required_argument, NULL, 'b' },
		{ "ssd-dir", required_argument, NULL, 'd' },
		{ "ssd-sizes", required_argument, NULL, 'z' },
		{ "no-pin", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	/* the selectable sections ("exists" comes with "prefix") */
	static const char *const secs[] = { "get", "mixed", "prefix", "ssd",
					    "rtt" };
	static const unsigned sec_bit[] = { SEC_GET, SEC_MIXED, SEC_PREFIX,
					    SEC_SSD, SEC_RTT };
	struct kvpb_cfg *c = &kvpb_cfg;
	const char *a_sizes = NULL, *a_procs = NULL, *a_sys = NULL,
		   *a_sec = NULL;
	const char *a_ssd = NULL, *sys_names[KVPB_NSYS];
	uint64_t a_ws = 0, u64[8];
	unsigned rounds = 0, batch = 0, k, n, mask;
	double t0 = kvpb_now_s(), t;
	int opt, rc = 0;

	/* a server that dies is an error, not a kill */
	signal(SIGPIPE, SIG_IGN);
	c->pin = true;
	snprintf(c->ssd_dir, sizeof(c->ssd_dir), "/var/tmp");
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'q':
			c->quick = true;
			break;
		case 'r':
			rounds = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 's':
			a_sizes = optarg;
			break;
		case 'p':
			a_procs = optarg;
			break;
		case 'y':
			a_sys = optarg;
			break;
		case 'e':
			a_sec = optarg;
			break;
		case 'w':
			a_ws = kvpb_parse_size(optarg);
			break;
		case 'b':
			batch = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'd':
			snprintf(c->ssd_dir, sizeof(c->ssd_dir), "%s", optarg);
			break;
		case 'z':
			a_ssd = optarg;
			break;
		case 'n':
			c->pin = false;
			break;
		case 'h':
			kvpb_usage(stdout);
			return 0;
		default:
			kvpb_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		kvpb_usage(stderr);
		return 2;
	}
	/* defaults: full, then --quick */
	c->rounds = c->quick ? 5 : 7;
	c->ws = c->quick ? 64ull << 20 : 256ull << 20;
	c->passes = c->quick ? 1 : 2;
	c->nix = c->quick ? 1 : 2;
	c->ix_entries[0] = 50000;  /* 65,536 slots: ~21 MiB, about the L3 */
	c->ix_entries[1] = 200000; /* 262,144 slots: ~82 MiB, beyond it */
	c->prefix_batches = c->quick ? 40 : 200;
	c->exists_ops = c->quick ? 200000 : 1000000;
	c->rtt_ops = c->quick ? 10000 : 50000;
	c->nssd = 1;
	c->ssd_sizes[0] = 1u << 20;
	if (!c->quick) {
		c->nssd = 3;
		c->ssd_sizes[0] = 64u << 10;
		c->ssd_sizes[1] = 1u << 20;
		c->ssd_sizes[2] = 4u << 20;
	}
	c->ssd_bytes = c->quick ? 64ull << 20 : 256ull << 20;
	c->nsizes = 3;
	c->sizes[0] = 64u << 10;
	c->sizes[1] = 1u << 20;
	c->sizes[2] = 4u << 20;
	c->nprocs = 2;
	c->procs[0] = 1;
	c->procs[1] = 2;
	c->sys_mask = (1u << KVPB_NSYS) - 1;
	c->sec_mask = (1u << SEC_GET) | (1u << SEC_MIXED) | (1u << SEC_PREFIX) |
		      (1u << SEC_SSD) | (1u << SEC_RTT);
	if (rounds)
		c->rounds = rounds;
	if (a_ws)
		c->ws = a_ws;
	c->batch = batch;
	for (k = 0; k < KVPB_NSYS; k++)
		sys_names[k] = kvpb_drv[k]->name;
	if ((a_sizes && kvpb_parse_u64s(a_sizes, c->sizes, KVPB_MAX_SIZES,
					&c->nsizes, true)) ||
	    (a_ssd && kvpb_parse_u64s(a_ssd, c->ssd_sizes, KVPB_MAX_SIZES,
				      &c->nssd, true)) ||
	    (a_procs && kvpb_parse_u64s(a_procs, u64, 8, &n, false)) ||
	    (a_sys &&
	     kvpb_parse_list(a_sys, sys_names, KVPB_NSYS, &c->sys_mask)) ||
	    (a_sec && kvpb_parse_list(a_sec, secs, 5, &mask)) ||
	    c->rounds < 1 || c->rounds > 100 || batch > KVPB_MAX_CALL / 2) {
		kvpb_usage(stderr);
		return 2;
	}
	if (a_procs) {
		c->nprocs = n;
		for (k = 0; k < n; k++)
			c->procs[k] = u64[k] < KVPB_MAX_PROCS ?
					      (unsigned)u64[k] :
					      KVPB_MAX_PROCS;
	}
	if (a_sec) {
		c->sec_mask = 0;
		for (k = 0; k < 5; k++)
			if (mask & (1u << k))
				c->sec_mask |= 1u << sec_bit[k];
	}
	c->nproc = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	c->nworkers = c->procs[c->nprocs - 1];
	if (c->nworkers < c->nproc && kvpb_limit_on())
		c->nworkers = c->nproc < KVPB_MAX_PROCS ? c->nproc :
							  KVPB_MAX_PROCS;
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);

	kvpb_ctl = mmap(NULL, sizeof(*kvpb_ctl), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (kvpb_ctl == MAP_FAILED)
		return 1;
	memset(kvpb_ctl, 0, sizeof(*kvpb_ctl));
	kvpb_emit_config();
	kvpb_log(
		"bench_peers: %s mode, %u rounds + 1 warm-up, %llu MiB per value size, "
		"%u CPUs, workers %s\n",
		c->quick ? "quick" : "full", c->rounds,
		(unsigned long long)(c->ws >> 20), c->nproc,
		c->pin ? "pinned (worker w on CPU w mod nproc)" : "not pinned");

	/* the sets, and what each system's workers inherit, before the fork */
	if (kvpb_sets_make()) {
		kvpb_log("bench_peers: out of memory for the value sets\n");
		return 1;
	}
	for (k = 0; k < KVPB_NSYS; k++) {
		const struct kvpb_driver *d = kvpb_drv[k];

		if (!d->shares && d->setup && kvpb_store_on(d) && d->setup())
			return 1;
	}
	if (kvpb_workers_start()) {
		kvpb_log("bench_peers: cannot start the workers\n");
		return 1;
	}

	if (kvpb_stores_start()) {
		rc = 1;
		goto out;
	}
	if (c->sec_mask &
	    ((1u << SEC_GET) | (1u << SEC_MIXED) | (1u << SEC_RTT))) {
		t = kvpb_now_s();
		if (kvpb_fill_values()) {
			rc = 1;
			goto out;
		}
		kvpb_info("fill", "value sets put into every system in %.1f s",
			  kvpb_now_s() - t);
	}
	if (kvpb_sec_on(SEC_PREFIX)) {
		for (k = 0; k < c->nix; k++)
			if (kvpb_fill_index(k)) {
				rc = 1;
				goto out;
			}
	}
	for (k = 0; k <= c->rounds; k++) {
		double tr = kvpb_now_s();

		if (kvpb_run_values(k) ||
		    (kvpb_sec_on(SEC_RTT) && kvpb_run_rtt(k)) ||
		    (kvpb_sec_on(SEC_PREFIX) && kvpb_run_index(k))) {
			rc = 1;
			goto out;
		}
		if (k && kvpb_sec_on(SEC_SSD))
			kvpb_run_ssd(k);
		kvpb_log("bench_peers: round %u%s done in %.1f s\n", k,
			 k ? "" : " (warm-up)", kvpb_now_s() - tr);
	}
out:
	kvpb_workers_stop();
	kvpb_stores_stop();
	kvpb_info("elapsed", "%.1f s", kvpb_now_s() - t0);
	kvpb_log("bench_peers: %s\n", rc ? "failed" : "done");
	return rc;
}
