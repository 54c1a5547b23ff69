/* SPDX-License-Identifier: MIT */
/*
 * stress_pool - N workers hammer one pool on a tiny DRAM tier so that
 * eviction never stops: batch puts, batch gets, prefix-exists, ranged
 * gets and deletes over a shared key space, every byte verified.  Workers
 * are processes (default; optionally SIGKILLed at random and respawned)
 * or threads of one process (--threads, for ThreadSanitizer).
 *
 *   stress_pool --procs N --seconds S --seed X [--threads] [--kill-every MS]
 *
 * Prints the seed first; ends with "N passed, N failed" (one check per
 * worker run plus the end-of-run pool checks).
 */
#include <getopt.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

#define KEYSPACE 4000
#define BATCH 64
#define MAXVAL (96u << 10)

struct shared {
	kvp_aword_t wrong;    /* wrong bytes seen (must stay 0) */
	kvp_aword_t verified; /* bytes verified */
	kvp_aword_t ops;
	kvp_aword_t errors;   /* unexpected statuses */
	kvp_aword_t killed;
};

static struct shared *sh;
static const char *pool;
static unsigned seconds;
static uint64_t t_end_all; /* CLOCK_MONOTONIC deadline of the whole run */
static volatile int stop_flag;

struct val_hdr {
	uint64_t magic, version, len, keyhash;
};

static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static uint32_t
mk(char *k, uint64_t i)
{
	return (uint32_t)snprintf(k, 100, "%064llx-stress-%llu", (unsigned long long)(i * 0x9e3779b97f4a7c15ull),
				  (unsigned long long)i);
}

static void
make_val(unsigned char *b, uint64_t len, const char *k, uint32_t kl, uint64_t version)
{
	struct val_hdr h = { 0x5354524553535631ull, version, len, kvp_hash(1, k, kl) };

	memcpy(b, &h, sizeof(h));
	kvpt_fill(b + sizeof(h), len - sizeof(h), k, kl, version);
}

/* 0 if b[0..len) is a whole, correct value of key k (any version). */
static int
check_val(const unsigned char *b, uint64_t len, const char *k, uint32_t kl)
{
	struct val_hdr h;

	if (len < sizeof(h))
		return -1;
	memcpy(&h, b, sizeof(h));
	if (h.magic != 0x5354524553535631ull || h.len != len || h.keyhash != kvp_hash(1, k, kl))
		return -1;
	return kvpt_check(b + sizeof(h), len - sizeof(h), k, kl, h.version) ? 0 : -1;
}

static void
add(kvp_aword_t *w, uint64_t d)
{
	kvp_fetch_add(w, d); /* full: statistics shared between workers */
}

static void *
worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
	uint64_t t_end = t_end_all;
	struct kvp_client *c;
	struct kvp_op ops[BATCH];
	char keys[BATCH][100];
	unsigned char *bufs = malloc((size_t)BATCH * MAXVAL);
	int k;

	if (!bufs || kvp_open(pool, "stress", &c)) {
		add(&sh->errors, 1);
		free(bufs);
		return NULL;
	}
	while (!stop_flag && kvp_now_ns(CLOCK_MONOTONIC) < t_end) {
		uint64_t op = rnd(&seed) % 100, base = rnd(&seed) % KEYSPACE;
		ssize_t n;

		for (k = 0; k < BATCH; k++) {
			ops[k].klen = mk(keys[k], (base + (uint64_t)k) % KEYSPACE);
			ops[k].key = keys[k];
			ops[k].buf = bufs + (size_t)k * MAXVAL;
			ops[k].off = 0;
			ops[k].len = MAXVAL;
		}
		add(&sh->ops, 1);
		if (op < 35) { /* batch put of fresh versions */
			for (k = 0; k < BATCH; k++) {
				ops[k].len = 64 + rnd(&seed) % (MAXVAL - 64);
				make_val(ops[k].buf, ops[k].len, keys[k], ops[k].klen, rnd(&seed));
			}
			kvp_batch_put(c, ops, BATCH);
			for (k = 0; k < BATCH; k++)
				if (ops[k].status && ops[k].status != -EEXIST &&
				    ops[k].status != -EBUSY && ops[k].status != -ENOSPC)
					add(&sh->errors, 1);
		} else if (op < 75) { /* batch get, verify whole values */
			kvp_batch_get(c, ops, BATCH);
			for (k = 0; k < BATCH; k++) {
				if (ops[k].status == 0) {
					if (check_val(ops[k].buf, ops[k].len, keys[k], ops[k].klen))
						add(&sh->wrong, 1);
					else
						add(&sh->verified, ops[k].len);
				} else if (ops[k].status != -ENOENT && ops[k].status != -EBUSY) {
					add(&sh->errors, 1);
				}
			}
		} else if (op < 85) { /* prefix probe, then ranged gets */
			n = kvp_batch_exists_prefix(c, ops, BATCH);
			if (n < 0)
				add(&sh->errors, 1);
			for (k = 0; k < n && k < 8; k++) {
				unsigned char whole[MAXVAL];
				ssize_t len = kvp_get(c, keys[k], ops[k].klen, whole, MAXVAL);
				if (len > 64) {
					unsigned char part[MAXVAL];
					uint64_t off = rnd(&seed) % (uint64_t)len;
					ssize_t m;
					if (check_val(whole, (uint64_t)len, keys[k], ops[k].klen)) {
						add(&sh->wrong, 1);
						continue;
					}
					/* ranged read must equal the slice, unless the key was
					 * replaced meanwhile (then it must be a valid value) */
					m = kvp_get_range(c, keys[k], ops[k].klen, off, part, 4096);
					if (m > 0 && memcmp(part, whole + off, (size_t)m)) {
						ssize_t l2 = kvp_get(c, keys[k], ops[k].klen, whole, MAXVAL);
						if (l2 >= 0 && check_val(whole, (uint64_t)l2, keys[k], ops[k].klen))
							add(&sh->wrong, 1);
					} else if (m > 0) {
						add(&sh->verified, (uint64_t)m);
					}
				}
			}
		} else { /* deletes */
			for (k = 0; k < 4; k++) {
				int rc = kvp_delete(c, keys[k], ops[k].klen);
				if (rc && rc != -ENOENT && rc != -EBUSY)
					add(&sh->errors, 1);
			}
		}
	}
	kvp_close(c);
	free(bufs);
	return NULL;
}

struct pool_cond {
	struct kvp_seg *s;
};

static bool
pool_quiet(void *p)
{
	struct kvp_seg *s = ((struct pool_cond *)p)->s;

	return kvpt_clients_nonfree(s) == 0 && kvpt_holds_total(s) == 0 &&
	       kvpt_count_state(s, KVP_IX_PENDING) == 0;
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "procs", required_argument, NULL, 'p' },
		{ "seconds", required_argument, NULL, 's' },
		{ "seed", required_argument, NULL, 'x' },
		{ "threads", no_argument, NULL, 't' },
		{ "kill-every", required_argument, NULL, 'k' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned procs = 4, kill_ms = 0, passed = 0, failed = 0, i;
	uint64_t seed = (uint64_t)time(NULL), rs;
	bool threads = false;
	struct kvpt_agent a;
	struct kvp_seg s;
	struct pool_cond pc;
	int opt;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'p': procs = (unsigned)atoi(optarg); break;
		case 's': seconds = (unsigned)atoi(optarg); break;
		case 'x': seed = strtoull(optarg, NULL, 0); break;
		case 't': threads = true; break;
		case 'k': kill_ms = (unsigned)atoi(optarg); break;
		default:
			fprintf(stderr, "usage: stress_pool --procs N --seconds S --seed X "
				"[--threads] [--kill-every MS]\n");
			return 2;
		}
	}
	if (!seconds)
		seconds = 10;
	if (!procs)
		procs = 1;
	printf("seed %llu\n", (unsigned long long)seed);
	printf("stress_pool: %u %s, %u s%s\n", procs, threads ? "threads" : "processes",
	       seconds, kill_ms ? ", random SIGKILLs" : "");
	fflush(stdout);
	rs = seed | 1;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	if (kvpt_agent_start(&a, "--dram", "8M", "--dram-unit", "4K", "--index-entries", "8192",
			     "--dram-high", "85", "--dram-low", "60", NULL)) {
		printf("cannot start the agent\n0 passed, 1 failed\n");
		return 1;
	}
	pool = a.pool;
	t_end_all = kvp_now_ns(CLOCK_MONOTONIC) + (uint64_t)seconds * 1000000000ull;
	if (threads) {
		pthread_t *t = calloc(procs, sizeof(*t));
		for (i = 0; i < procs; i++)
			pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(seed + i));
		for (i = 0; i < procs; i++) {
			pthread_join(t[i], NULL);
			passed++;
		}
		free(t);
	} else {
		pid_t *pid = calloc(procs, sizeof(*pid));
		uint64_t t_end = t_end_all;
		unsigned alive = procs, gen = 0;

		for (i = 0; i < procs; i++) {
			pid[i] = fork();
			if (pid[i] == 0) {
				worker((void *)(uintptr_t)(seed + i));
				_exit(0);
			}
		}
		while (alive) {
			int st;
			pid_t w;

			if (kill_ms && kvp_now_ns(CLOCK_MONOTONIC) < t_end) {
				struct timespec ts = { (time_t)(kill_ms / 1000),
						       (long)(kill_ms % 1000) * 1000000L };
				nanosleep(&ts, NULL); /* the chaos period, not a sync */
				i = (unsigned)(rnd(&rs) % procs);
				if (pid[i] > 0 && kill(pid[i], SIGKILL) == 0) {
					waitpid(pid[i], NULL, 0);
					add(&sh->killed, 1);
					pid[i] = fork(); /* respawn */
					if (pid[i] == 0) {
						worker((void *)(uintptr_t)(seed + procs + ++gen));
						_exit(0);
					}
				}
				continue;
			}
			w = wait(&st);
			if (w < 0)
				break;
			for (i = 0; i < procs; i++)
				if (pid[i] == w) {
					pid[i] = -1;
					alive--;
					if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
						passed++;
					else
						failed++;
				}
		}
		free(pid);
	}
	/* end of run: nobody holds anything, nothing half-put, all reaped */
	kvpt_seg_map(a.pool, &s);
	pc.s = &s;
	if (kvpt_wait_until(pool_quiet, &pc, 2000) >= 0)
		passed++;
	else
		failed++, printf("FAIL: pool not quiet: %llu clients, %llu holds, %llu pending\n",
				 (unsigned long long)kvpt_clients_nonfree(&s),
				 (unsigned long long)kvpt_holds_total(&s),
				 (unsigned long long)kvpt_count_state(&s, KVP_IX_PENDING));
	if (kvp_load_relaxed(&sh->wrong) == 0)
		passed++;
	else
		failed++, printf("FAIL: %llu wrong values read\n",
				 (unsigned long long)kvp_load_relaxed(&sh->wrong));
	if (kvp_load_relaxed(&sh->errors) == 0)
		passed++;
	else
		failed++, printf("FAIL: %llu unexpected statuses\n",
				 (unsigned long long)kvp_load_relaxed(&sh->errors));
	printf("ops %llu batches, %.1f MiB verified, %llu evictions, %llu workers killed, "
	       "%llu reaped\n", (unsigned long long)kvp_load_relaxed(&sh->ops),
	       (double)kvp_load_relaxed(&sh->verified) / 1048576.0,
	       (unsigned long long)kvp_load_relaxed(&s.hdr->h_actr[KVP_ACTR_EVICT]),
	       (unsigned long long)kvp_load_relaxed(&sh->killed),
	       (unsigned long long)kvp_load_relaxed(&s.hdr->h_actr[KVP_ACTR_REAP_CLIENTS]));
	kvp__seg_unmap(&s);
	if (kvpt_agent_stop(&a) != 0)
		failed++, printf("FAIL: agent did not stop cleanly\n");
	else
		passed++;
	printf("%u passed, %u failed\n", passed, failed);
	return failed ? 1 : 0;
}
