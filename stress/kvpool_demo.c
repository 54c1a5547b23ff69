/* SPDX-License-Identifier: MIT */
/*
 * kvpool_demo - several worker processes share one pool the way engine
 * ranks do: each offloads KV pages (put), probes how many of a request's
 * pages are present (prefix exists), and loads them back (batch get).
 * Prints ops/s, GB/s and the hit ratio.
 *
 *   kvpool_demo [--pool NAME] [--procs N] [--seconds S] [--value SIZE]
 */
#include <getopt.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "kvpool.h"

struct totals {
	kvp_aword_t puts, gets, hits, probes, bytes_in, bytes_out, wrong;
};

static void
add(kvp_aword_t *w, uint64_t v)
{
	kvp_fetch_add(w, v); /* full: shared tallies of the demo workers */
}

static void
fill(unsigned char *b, uint64_t len, uint64_t tag)
{
	uint64_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		uint64_t v = tag ^ (i * 0x9e3779b97f4a7c15ull);
		memcpy(b + i, &v, 8);
	}
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pool", required_argument, NULL, 'p' },
		{ "procs", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 's' },
		{ "value", required_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	const char *pool = "default";
	unsigned procs = 4, seconds = 10, i;
	uint64_t vsize = 1 << 20;
	struct totals *t;
	int opt;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'p':
			pool = optarg;
			break;
		case 'n':
			procs = (unsigned)atoi(optarg);
			break;
		case 's':
			seconds = (unsigned)atoi(optarg);
			break;
		case 'v':
			vsize = strtoull(optarg, NULL, 0);
			break;
		default:
			return 2;
		}
	}
	t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (t == MAP_FAILED)
		return 1;
	printf("kvpool demo: %u worker processes, %u s, %llu KiB pages, pool '%s'\n",
	       procs, seconds, (unsigned long long)(vsize >> 10), pool);
	for (i = 0; i < procs; i++) {
		if (fork() == 0) {
			enum {
				PAGES = 32
			};
			struct kvp_client *c;
			struct kvp_op ops[PAGES];
			char keys[PAGES][96];
			unsigned char *buf = malloc(vsize * PAGES);
			uint64_t req = 0, end;
			int rc = kvp_open(pool, "demo-model|bf16|page16", &c),
			    k;

			if (rc || !buf) {
				fprintf(stderr, "worker %u: kvp_open: %s\n", i,
					kvp_strerror(rc));
				_exit(1);
			}
			end = kvp_now_ns(CLOCK_MONOTONIC) +
			      (uint64_t)seconds * 1000000000ull;
			while (kvp_now_ns(CLOCK_MONOTONIC) < end) {
				/* a request: 32 pages of a prompt prefix; a few
				 * hot prefixes (system prompts) and a long tail
				 */
				uint64_t r = (req++ + 1) *
					     0x9e3779b97f4a7c15ull * (i + 1);
				uint64_t prefix = (r >> 33) % 4 ?
							  (r >> 20) % 16 :
							  16 + (r >> 20) % 512;
				ssize_t have;

				for (k = 0; k < PAGES; k++) {
					ops[k].klen = (uint32_t)snprintf(
						keys[k], sizeof(keys[k]),
						"%064llx_p%d",
						(unsigned long long)prefix, k);
					ops[k].key = keys[k];
					ops[k].buf = buf + (uint64_t)k * vsize;
					ops[k].off = 0;
					ops[k].len = vsize;
				}
				have = kvp_batch_exists_prefix(c, ops, PAGES);
				add(&t->probes, 1);
				if (have > 0) {
					ssize_t ok = kvp_batch_get(
						c, ops, (size_t)have);
					add(&t->gets, (uint64_t)have);
					add(&t->hits,
					    ok > 0 ? (uint64_t)ok : 0);
					for (k = 0; k < have; k++)
						if (ops[k].status == 0)
							add(&t->bytes_out,
							    ops[k].len);
				}
				/* offload the pages that were missing */
				for (k = (int)(have > 0 ? have : 0); k < PAGES;
				     k++) {
					fill(ops[k].buf, vsize,
					     kvp_hash(3, keys[k], ops[k].klen));
					ops[k].len = vsize;
					if (kvp_put(c, keys[k], ops[k].klen,
						    ops[k].buf, vsize) == 0)
						add(&t->bytes_in, vsize);
					add(&t->puts, 1);
				}
			}
			kvp_close(c);
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;
	printf("  puts %llu, gets %llu (%.0f ops/s)\n",
	       (unsigned long long)t->puts, (unsigned long long)t->gets,
	       (double)(t->puts + t->gets) / seconds);
	printf("  get %.2f GB/s, put %.2f GB/s\n",
	       (double)t->bytes_out / seconds / 1e9,
	       (double)t->bytes_in / seconds / 1e9);
	printf("  hit ratio %.1f%% of requested pages were present and loaded\n",
	       t->gets + t->puts ?
		       100.0 * (double)t->hits / (double)(t->gets + t->puts) :
		       0.0);
	return 0;
}
