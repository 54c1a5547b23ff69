/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ring.c - a buggy or hostile worker against the agent.
 *
 * Everything a worker can write in the segment is untrusted by the agent:
 * its request ring (slot, generation, offset, length, call flags, state
 * words), its hold slots and hold high-water mark, lease records, and the
 * staging spans it shares.  Each fuzz input is a script of such writes;
 * the harness then runs the agent's tier thread (requests, completions,
 * eviction, demotion), its reaper round and its evictor's hold scan in
 * this process, against a real segment and a real SSD store, and lets the
 * sanitizers judge: the agent must neither crash nor read or write
 * outside the segment.  A worker may ruin its own answers, nothing else.
 *
 * Two builds of one file:
 *   - libFuzzer (clang -fsanitize=fuzzer,address,undefined
 *     -DKVP_LIBFUZZER): coverage-guided; tests/run.sh runs it for a
 *     while when clang is installed;
 *   - the default build (gcc, any variant): a driver that replays the
 *     files named on its command line, then runs random structured
 *     scripts for --seconds S (default 10) from --seed X.
 */
#include <ftw.h>
#include <getopt.h>

#include "agent/agent_int.h"
#include "tests/agent/harness.h"

#define FZ_KEYS 12
#define FZ_VMAX (200u << 10)

static struct kvp_agent fz_agent;
static struct kvp_client *fz_c;
static uint64_t fz_slot[FZ_KEYS], fz_gen[FZ_KEYS], fz_len[FZ_KEYS];
static char fz_dir[128];

static int
fz_rm(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void
fz_cleanup(void)
{
	if (fz_c)
		kvp_close(fz_c);
	fz_c = NULL;
	if (fz_agent.seg.base) {
		kvp_tier_close_agent(&fz_agent);
		kvp_shm_remove_agent(&fz_agent);
		kvp__seg_unmap(&fz_agent.seg);
	}
	if (fz_dir[0])
		nftw(fz_dir, fz_rm, 8, FTW_DEPTH | FTW_PHYS);
}

/* Run the agent until its I/O has drained (bounded). */
static void
fz_agent_settle(void)
{
	int k;

	for (k = 0; k < 200; k++)
		if (!kvp_tier_step_agent(&fz_agent, 5))
			break;
}

static void
fz_refresh_keys(void)
{
	unsigned k;

	for (k = 0; k < FZ_KEYS; k++) {
		char key[64];
		uint32_t kl = (uint32_t)snprintf(key, sizeof(key), "fuzz-key-%u", k);
		uint64_t w;
		int64_t i = kvp_ix_find(&fz_c->seg, fz_c->ns_id,
					kvp_key_hash(fz_c->ns_id, key, kl), key, kl,
					KVP_IX_M(KVP_IX_READY), &w);

		fz_slot[k] = i >= 0 ? (uint64_t)i : 0;
		fz_gen[k] = i >= 0 ? KVP_IX_GEN(w) : 0;
		fz_len[k] = i >= 0 ? kvp_load_relaxed(&fz_c->seg.entries[i].e_len) : 0;
	}
}

static int
fz_setup(void)
{
	struct kvp_agent_cfg *cfg = &fz_agent.cfg;
	unsigned char *v;
	unsigned k;

	kvp_log_set_level(KVP_LOG_ERROR);
	snprintf(fz_dir, sizeof(fz_dir), "/var/tmp/kvp-fuzz-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(fz_dir))
		return -1;
	atexit(fz_cleanup);
	memset(&fz_agent, 0, sizeof(fz_agent));
	fz_agent.seg.fd = -1;
	if (kvpt_pool_name(cfg->pool, sizeof(cfg->pool), "fz%d", (int)getpid()))
		return -1;
	cfg->dram_bytes = 4u << 20;
	cfg->dram_unit = 16u << 10;
	cfg->index_entries = 256;
	cfg->max_value = 1u << 20;
	cfg->max_clients = 8;
	cfg->holds_per_client = 64;
	cfg->dram_high_pct = 0; /* everything goes to SSD */
	cfg->dram_low_pct = 0;
	cfg->reap_ms = 100;
	snprintf(cfg->ssd_dir, sizeof(cfg->ssd_dir), "%s", fz_dir);
	cfg->ssd_size = 16u << 20;
	cfg->ssd_segment = 4u << 20;
	cfg->staging_bytes = 256u << 10;
	cfg->staging_slot = 64u << 10;
	if (kvp_shm_create_or_attach_agent(&fz_agent) || kvp_tier_open_agent(&fz_agent) ||
	    kvp_open(cfg->pool, "fuzz", &fz_c))
		return -1;
	v = malloc(FZ_VMAX);
	if (!v)
		return -1;
	for (k = 0; k < FZ_KEYS; k++) {
		char key[64];
		uint32_t kl = (uint32_t)snprintf(key, sizeof(key), "fuzz-key-%u", k);
		uint64_t len = 4096 + (uint64_t)k * 17000;

		memset(v, (int)k, len);
		kvp_put(fz_c, key, kl, v, len);
		fz_agent_settle();
	}
	free(v);
	fz_agent_settle();
	fz_refresh_keys();
	return 0;
}

/* The input, read as a little script. */
struct fz_in {
	const uint8_t *p;
	size_t n;
};

static uint64_t
fz_u64(struct fz_in *in, unsigned bytes)
{
	uint64_t v = 0;
	unsigned k;

	for (k = 0; k < bytes && in->n; k++, in->p++, in->n--)
		v |= (uint64_t)*in->p << (8 * k);
	return v;
}

/* A value a worker might write for a field: often valid, sometimes near
 * a boundary, sometimes raw garbage. */
static uint64_t
fz_field(struct fz_in *in, uint64_t valid, uint64_t bound)
{
	switch (fz_u64(in, 1) % 6) {
	case 0: return valid;
	case 1: return valid + fz_u64(in, 1);
	case 2: return bound + fz_u64(in, 1);
	case 3: return bound - 1 - (fz_u64(in, 1) % (bound ? bound : 1));
	case 4: return (uint64_t)0 - fz_u64(in, 1);
	default: return fz_u64(in, 8);
	}
}

static void
fz_one(const uint8_t *data, size_t size)
{
	struct fz_in in = { data, size };
	struct kvp_seg *s = &fz_c->seg;
	uint32_t me = fz_c->slot;
	struct kvp_req *ring = &s->rings[(uint64_t)me * s->g.g_ring_entries];
	kvp_aword_t *holds = &s->holds[(uint64_t)me * s->g.g_holds_per_client];
	unsigned steps = 0, r;
	uint64_t k;

	while (in.n && steps++ < 64) {
		unsigned op = (unsigned)fz_u64(&in, 1);
		unsigned key = (unsigned)fz_u64(&in, 1) % FZ_KEYS;

		switch (op % 8) {
		case 0:
		case 1:
		case 2: { /* a request (the common case) */
			struct kvp_req *q = &ring[fz_u64(&in, 1) % s->g.g_ring_entries];
			uint64_t w = kvp_load_relaxed(&q->rq_state); /* relaxed: ours */

			kvp_store_relaxed(&q->rq_slot, fz_field(&in, fz_slot[key], s->g.g_index_slots));
			kvp_store_relaxed(&q->rq_gen, fz_field(&in, fz_gen[key], 1u << 24));
			kvp_store_relaxed(&q->rq_off, fz_field(&in, 0, fz_len[key]));
			kvp_store_relaxed(&q->rq_len, fz_field(&in, fz_len[key], fz_len[key]));
			kvp_store_relaxed(&q->rq_call, fz_field(&in, KVP_RQ_FIRST | KVP_RQ_WHOLE | 1,
								 KVP_RQ_WHOLE));
			kvp_store_relaxed(&q->rq_result, fz_u64(&in, 8));
			kvp_store_relaxed(&q->rq_where, fz_u64(&in, 8));
			/* release: a POSTED word, or garbage */
			kvp_store_release(&q->rq_state, op % 8 == 2 ? fz_u64(&in, 8)
					  : (((w >> 8) + 1) << 8) | KVP_RQ_POSTED);
			break;
		}
		case 3: /* hold slots and the high-water mark */
			kvp_store_release(&holds[fz_u64(&in, 1) % s->g.g_holds_per_client],
					  fz_u64(&in, 1) & 1 ? KVP_HOLD_MAKE(fz_slot[key], fz_gen[key])
							     : fz_u64(&in, 8)); /* release */
			kvp_store_relaxed(&s->clients[me].cs_hold_hwm,
					  fz_field(&in, s->g.g_holds_per_client, s->g.g_holds_per_client));
			break;
		case 4: { /* a lease record */
			struct kvp_lease_slot *ls = &s->leases[fz_u64(&in, 2) % s->g.g_max_leases];

			kvp_store_relaxed(&ls->ls_slot, fz_field(&in, fz_slot[key], s->g.g_index_slots));
			kvp_store_relaxed(&ls->ls_expiry, kvp_now_ns(CLOCK_MONOTONIC) +
					  fz_u64(&in, 4) * 1000);
			kvp_store_relaxed(&ls->ls_owner, fz_u64(&in, 2));
			kvp_store_release(&ls->ls_state, fz_u64(&in, 1) & 1 /* release */
					  ? KVP_LS_WORD(fz_u64(&in, 4), fz_u64(&in, 2), fz_u64(&in, 1) % 4)
					  : fz_u64(&in, 8));
			break;
		}
		case 5: { /* a staging span word a worker damaged */
			struct kvp_span *sp = &s->spans[fz_u64(&in, 1) % s->g.g_staging_slots];

			if (fz_u64(&in, 1) & 1)
				kvp_store_release(&sp->sp_state, fz_u64(&in, 8)); /* release */
			else
				kvp_store_release(&sp->sp_holders[fz_u64(&in, 1) % KVP_SPAN_HOLDER_WORDS],
						  fz_u64(&in, 8)); /* release */
			break;
		}
		case 6: /* let the agent run in between */
			fz_agent_settle();
			break;
		default: /* the reaper's round and the evictor's scan */
			kvp_reaper_round_agent(&fz_agent);
			kvp_dram_round_agent(&fz_agent);
			break;
		}
	}
	fz_agent_settle();
	kvp_reaper_round_agent(&fz_agent);
	/* the worker reads its answers the way kvpool.h does, then cleans up
	 * for the next input: withdraw requests, drop holds, reset spans */
	for (r = 0; r < s->g.g_ring_entries; r++) {
		uint64_t w = kvp_load_acquire(&ring[r].rq_state); /* acquire */
		uint64_t where = kvp_load_relaxed(&ring[r].rq_where);

		if ((w & 0xff) == KVP_RQ_DONE && kvp_load_relaxed(&ring[r].rq_result) == 0 &&
		    !(where & KVP_WHERE_DRAM) && (where & 0xffffffffull) &&
		    (where & 0xffffffffull) - 1 < s->g.g_staging_slots)
			kvp__span_release(fz_c, (uint32_t)((where & 0xffffffffull) - 1));
		kvp_store_release(&ring[r].rq_state, (((w >> 8) + 1) << 8) | KVP_RQ_FREE);
	}
	for (k = 0; k < s->g.g_holds_per_client; k++)
		kvp_store_release(&holds[k], 0); /* release */
	kvp_store_relaxed(&s->clients[me].cs_hold_hwm, 0);
	fz_agent_settle();
	for (k = 0; k < s->g.g_staging_slots; k++) {
		unsigned b;

		for (b = 0; b < KVP_SPAN_HOLDER_WORDS; b++)
			kvp_store_relaxed(&s->spans[k].sp_holders[b], 0);
		kvp_store_release(&s->spans[k].sp_state, 0); /* release */
	}
	for (k = 0; k < s->g.g_max_leases; k++)
		kvp_store_release(&s->leases[k].ls_state, 0); /* release */
	fz_refresh_keys();
}

#ifdef KVP_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;

	if (!ready) {
		if (fz_setup())
			abort();
		ready = 1;
	}
	fz_one(data, size);
	return 0;
}
#else
int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "seconds", required_argument, NULL, 's' },
		{ "seed", required_argument, NULL, 'x' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned seconds = 10;
	uint64_t seed = (uint64_t)time(NULL), runs = 0, t_end;
	uint8_t buf[1024];
	int opt, k;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 's': seconds = (unsigned)atoi(optarg); break;
		case 'x': seed = strtoull(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: fuzz_ring [--seconds S] [--seed X] [FILE...]\n");
			return 2;
		}
	}
	printf("seed %llu\n", (unsigned long long)seed);
	if (fz_setup()) {
		printf("setup failed\n0 passed, 1 failed\n");
		return 1;
	}
	for (k = optind; k < argc; k++) { /* replay */
		FILE *f = fopen(argv[k], "rb");
		size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;

		if (f)
			fclose(f);
		fz_one(buf, n);
		runs++;
	}
	t_end = kvp_now_ns(CLOCK_MONOTONIC) + (uint64_t)seconds * 1000000000ull;
	while (kvp_now_ns(CLOCK_MONOTONIC) < t_end) {
		size_t n = 16 + (seed % (sizeof(buf) - 16)), j;

		for (j = 0; j < n; j++) {
			seed ^= seed << 13;
			seed ^= seed >> 7;
			seed ^= seed << 17;
			buf[j] = (uint8_t)seed;
		}
		fz_one(buf, n);
		runs++;
	}
	printf("fuzz_ring: %llu scripts, agent survived; %llu requests answered BUSY, "
	       "%llu staged, %llu promoted\n", (unsigned long long)runs,
	       (unsigned long long)fz_agent.seg.hdr->h_actr[KVP_ACTR_BUSY_REJECT],
	       (unsigned long long)fz_agent.seg.hdr->h_actr[KVP_ACTR_STAGED],
	       (unsigned long long)fz_agent.seg.hdr->h_actr[KVP_ACTR_PROMOTE]);
	printf("1 passed, 0 failed\n");
	return 0;
}
#endif
