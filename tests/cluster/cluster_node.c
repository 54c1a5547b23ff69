/* SPDX-License-Identifier: MIT */
/*
 * cluster_node.c - a worker of one node of the cluster tests
 * (tests/cluster/test_cluster.sh) and of the remote benchmark
 * (stress/bench_remote.sh): puts, gets, probes of keys whose bytes are a
 * function of (key, size), so any node can check what it read.
 *
 *   cluster_node put    POOL NS PREFIX FROM N SIZE
 *   cluster_node get    POOL NS PREFIX FROM N SIZE [BATCH]
 *   cluster_node probe  POOL NS PREFIX FROM N        (exists_prefix, locate)
 *   cluster_node pin    POOL NS PREFIX FROM N        (lookup_pin, remote)
 *   cluster_node wait   POOL NS PREFIX FROM N MS     (until a probe sees
 *                                                     all N remote/local)
 *   cluster_node bench  POOL NS PREFIX FROM N SIZE BATCH [ROUNDS]
 *                                                    (remote gets: GB/s per
 *                                                     round, keys deleted
 *                                                     here after each batch;
 *                                                     one process, so round
 *                                                     0 is the warm-up)
 *   cluster_node hits   POOL NS PREFIX FROM N SIZE ROUNDS  (local hits:
 *                                                     ROUNDS batch gets of
 *                                                     the N keys, GB/s)
 *   cluster_node exists POOL NS PREFIX FROM N        (exists_prefix with the
 *                                                     default flags)
 *   cluster_node reput  POOL NS PREFIX FROM N SIZE [ROUNDS]
 *                                                    (each key deleted and
 *                                                     put again at once,
 *                                                     ROUNDS times: within
 *                                                     one publish interval)
 *   cluster_node hostile POOL NS X SEED N            (N garbage mailbox
 *                                                     calls: each must be
 *                                                     answered, the agent
 *                                                     must live)
 *
 * Prints one line "op=... ok=.. miss=.. failed=.. busy=.. other=..
 * wrong=.. ..." (wrong: bytes that differ from what the key's put wrote);
 * exit status 0 unless the call itself failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpool.h"

static void
fill(unsigned char *b, uint64_t n, const char *key)
{
	uint64_t h = 1469598103934665603ull, i;
	const char *p;

	for (p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	for (i = 0; i < n; i += 8) {
		uint64_t v = h ^ (i * 0x9e3779b97f4a7c15ull);

		memcpy(b + i, &v, n - i < 8 ? n - i : 8);
	}
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
	struct kvp_client *c = NULL;
	const char *op, *pool, *ns, *prefix;
	uint64_t from, n, size = 0, batch, k, b;
	struct kvp_op *ops;
	char(*keys)[96];
	unsigned char *buf = NULL, *want = NULL;
	unsigned ok = 0, miss = 0, failed = 0, busy = 0, other = 0, wrong = 0;
	int rc;

	if (argc < 7) {
		fprintf(stderr, "usage: see tests/cluster/cluster_node.c\n");
		return 2;
	}
	op = argv[1];
	pool = argv[2];
	ns = argv[3];
	prefix = argv[4];
	from = strtoull(argv[5], NULL, 10);
	n = strtoull(argv[6], NULL, 10);
	if (argc > 7)
		size = strtoull(argv[7], NULL, 10);
	batch = argc > 8 ? strtoull(argv[8], NULL, 10) : n;
	if (!batch)
		batch = n ? n : 1;
	rc = kvp_open(pool, ns, &c);
	if (rc) {
		fprintf(stderr, "kvp_open: %s\n", kvp_strerror(rc));
		return 1;
	}
	ops = calloc(n ? n : 1, sizeof(*ops));
	keys = calloc(n ? n : 1, sizeof(*keys));
	if (!ops || !keys)
		return 1;
	for (k = 0; k < n; k++) {
		snprintf(
			keys[k], sizeof(keys[0]),
			"%s-%08llu-0123456789abcdef0123456789abcdef0123456789abcdef",
			prefix, (unsigned long long)(from + k));
		ops[k].key = keys[k];
		ops[k].klen = (uint32_t)strlen(keys[k]);
	}
	if (!strcmp(op, "put")) {
		buf = malloc(size ? size : 1);
		for (k = 0; k < n; k++) {
			unsigned tries = 0;

			fill(buf, size, keys[k]);
			/* BUSY is backpressure (rule 3): a writer asks again
			 * (each put already waits up to 50 ms for the
			 * evictor); only one still BUSY after 200 tries, or
			 * NOSPC, counts as not taken */
			while ((rc = kvp_put(c, keys[k], ops[k].klen, buf,
					     size)) == -EBUSY &&
			       ++tries < 200)
				;
			if (rc == 0 || rc == -EEXIST)
				ok++;
			else if (rc == -EBUSY || rc == -ENOSPC)
				busy++;
			else
				other++;
		}
		printf("op=put ok=%u busy=%u other=%u\n", ok, busy, other);
	} else if (!strcmp(op, "reput")) {
		uint64_t rounds = argc > 8 ? strtoull(argv[8], NULL, 10) : 1, r;

		buf = malloc(size ? size : 1);
		if (!buf)
			return 1;
		for (r = 0; r < rounds; r++) {
			for (k = 0; k < n; k++) {
				fill(buf, size, keys[k]);
				kvp_delete(c, keys[k], ops[k].klen);
				rc = kvp_put(c, keys[k], ops[k].klen, buf,
					     size);
				if (rc == 0)
					ok++;
				else if (rc == -EBUSY || rc == -ENOSPC)
					busy++;
				else
					other++;
			}
		}
		printf("op=reput ok=%u busy=%u other=%u\n", ok, busy, other);
	} else if (!strcmp(op, "get") || !strcmp(op, "bench")) {
		bool bench = !strcmp(op, "bench");
		double secs = 0, tg;
		uint64_t bytes = 0, round = 0,
			 rounds = bench && argc > 9 ?
					  strtoull(argv[9], NULL, 10) :
					  1;

		buf = malloc(batch * size);
		want = malloc(size ? size : 1);
		if (!buf || !want)
			return 1;
again:
		for (b = 0; b < n; b += batch) {
			uint64_t m = n - b < batch ? n - b : batch;

			for (k = 0; k < m; k++) {
				ops[b + k].buf = buf + k * size;
				ops[b + k].off = 0;
				ops[b + k].len = size;
			}
			/* the gets alone are timed (not the checks, nor the
			 * bench's deletes) */
			tg = now_s();
			kvp_batch_get(c, ops + b, m);
			secs += now_s() - tg;
			for (k = 0; k < m; k++) {
				int st = ops[b + k].status;

				if (st == 0) {
					ok++;
					bytes += ops[b + k].len;
					if (!bench) {
						fill(want, size, keys[b + k]);
						if (ops[b + k].len != size ||
						    memcmp(want, buf + k * size,
							   size))
							wrong++;
					}
				} else if (st == -ENOENT) {
					miss++;
				} else if (st == -EIO || st == -EBADMSG) {
					failed++;
				} else if (st == -EBUSY) {
					busy++;
				} else {
					other++;
				}
			}
			if (bench)
				for (k = 0; k < m; k++)
					kvp_delete(c, keys[b + k],
						   ops[b + k].klen);
		}

		printf("op=%s round=%llu ok=%u miss=%u failed=%u busy=%u "
		       "other=%u wrong=%u bytes=%llu secs=%.4f gbps=%.3f\n",
		       op, (unsigned long long)round, ok, miss, failed, busy,
		       other, wrong, (unsigned long long)bytes, secs,
		       secs > 0 ? bytes / secs / 1e9 : 0.0);
		if (++round < rounds) {
			ok = miss = failed = busy = other = wrong = 0;
			bytes = 0;
			secs = 0;
			goto again;
		}
	} else if (!strcmp(op, "probe") || !strcmp(op, "wait")) {
		int *tier = calloc(n ? n : 1, sizeof(int));
		unsigned t[5] = { 0 };
		ssize_t pre;
		double deadline = now_s() + (size ? size : 1) / 1000.0;

		kvp_remote(c, KVP_REMOTE_GET | KVP_REMOTE_PROBE);
		for (;;) {
			pre = kvp_batch_exists_prefix(c, ops, n);
			if (strcmp(op, "wait") || (uint64_t)pre == n ||
			    now_s() > deadline)
				break;
			nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 },
				  NULL);
		}
		kvp_batch_locate(c, ops, n, tier);
		for (k = 0; k < n; k++)
			t[tier[k] >= 0 && tier[k] < 5 ? tier[k] : 0]++;
		printf("op=%s prefix=%zd absent=%u dram=%u ssd=%u remote=%u\n",
		       op, pre, t[0], t[1], t[2], t[4]);
		free(tier);
	} else if (!strcmp(op, "hits")) {
		uint64_t rounds = batch, r2, bytes = 0;
		double t0, secs;

		buf = malloc(n * size);
		if (!buf)
			return 1;
		for (k = 0; k < n; k++) {
			ops[k].buf = buf + k * size;
			ops[k].off = 0;
			ops[k].len = size;
		}
		kvp_batch_get(c, ops, n); /* warm */
		t0 = now_s();
		for (r2 = 0; r2 < rounds; r2++) {
			for (k = 0; k < n; k++)
				ops[k].len = size;
			kvp_batch_get(c, ops, n);
			for (k = 0; k < n; k++) {
				ok += ops[k].status == 0;
				bytes += ops[k].status == 0 ? ops[k].len : 0;
			}
		}
		secs = now_s() - t0;
		printf("op=hits ok=%u bytes=%llu secs=%.4f gbps=%.3f\n", ok,
		       (unsigned long long)bytes, secs, bytes / secs / 1e9);
	} else if (!strcmp(op, "exists")) {
		printf("op=exists prefix=%zd\n",
		       kvp_batch_exists_prefix(c, ops, n));
	} else if (!strcmp(op, "hostile")) {
		struct kvp_rbox *rb;
		unsigned char *d;
		uint64_t cap, it, j, answered = 0;

		if (!c->seg.cluster) {
			fprintf(stderr, "no remote mailboxes in this pool\n");
			return 1;
		}
		rb = kvp__rbox(&c->seg, c->slot);
		d = (unsigned char *)(rb + 1);
		cap = ((uint64_t)c->seg.g.g_rbox_kib << 10) - sizeof(*rb);
		srand((unsigned)from);
		for (it = 0; it < n; it++) {
			uint64_t w = kvp__rbox_reset(c), kind, nn, bytes;
			double end = now_s() + 5;

			for (j = 0; j < 4096; j++)
				d[j] = (unsigned char)rand();
			switch (it % 6) {
			case 0: /* anything */
				kind = (uint64_t)rand();
				nn = (uint64_t)(rand() % 100) + 1;
				bytes = (uint64_t)(rand() % 8192);
				break;
			case 1: /* a count past the mailbox */
				kind = KVP_RB_FETCH;
				nn = UINT64_MAX;
				bytes = 10;
				break;
			case 2: /* bytes past the mailbox */
				kind = KVP_RB_PROBE;
				nn = 3;
				bytes = cap;
				break;
			case 3: /* a key running past the bytes */
				kind = KVP_RB_FETCH;
				nn = 2;
				bytes = 8;
				d[32] = 3;
				d[36] = 200;
				break;
			case 4:
				kind = KVP_RB_PROBE;
				nn = cap;
				bytes = UINT64_MAX;
				break;
			default: /* random keys, a valid frame */
				kind = it & 1 ? KVP_RB_PROBE : KVP_RB_FETCH;
				nn = 1;
				d[16] = 1;
				d[17] = 'x';
				d[18] = (unsigned char)(d[18] | 1);
				bytes = 2 + 1 + d[18];
				break;
			}
			kvp_store_relaxed(&rb->rb_kind, kind);
			kvp_store_relaxed(&rb->rb_n, nn);
			kvp_store_relaxed(&rb->rb_bytes, bytes);
			kvp_store_release(&rb->rb_state,
					  (w & ~0xffull) | KVP_RB_POSTED);
			kvp_ifetch_add(&c->seg.cluster->cl_wake, 1);
			kvp_futex_wake(&c->seg.cluster->cl_wake);
			while (now_s() < end) {
				if (kvp_load_acquire(&rb->rb_state) ==
				    ((w & ~0xffull) | KVP_RB_DONE)) {
					answered++;
					break;
				}
				sched_yield();
			}
		}
		kvp__rbox_reset(c);
		printf("op=hostile answered=%llu of %llu\n",
		       (unsigned long long)answered, (unsigned long long)n);
	} else if (!strcmp(op, "pin")) {
		struct kvp_pinset *ps = NULL;
		ssize_t got;

		kvp_remote(c, KVP_REMOTE_GET | KVP_REMOTE_PROBE);
		got = kvp_batch_lookup_pin(c, ops, n, &ps);
		printf("op=pin pinned=%zd\n", got);
		kvp_pinset_free(c, ps);
	} else {
		fprintf(stderr, "unknown op %s\n", op);
		return 2;
	}
	kvp_close(c);
	free(buf);
	free(want);
	free(ops);
	free(keys);
	return 0;
}
