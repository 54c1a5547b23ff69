/* SPDX-License-Identifier: MIT */
/*
 * test_crashpoints.c - every crash point of shm/kvp_crash.h, one test each.
 *
 * One agent with a tiny DRAM tier, staging arena and SSD budget, so that a
 * short workload (batch puts, batch gets, prefix probes, ranged gets,
 * lookup-and-pin, leases, deletes, close and reopen) crosses every state
 * transition: eviction, demotion, promotion, staging, segment reclaim,
 * tombstones, lease sweeps and reaping.  For each point:
 *
 *   client point: a forked worker armed with it runs the workload and
 *     must die there (exit status KVP_CRASH_EXIT); the reaper must free
 *     its slot within a second;
 *   agent point: the agent is restarted armed with it (KVP_CRASH_AT), the
 *     test runs the workload (and workers that die mid-put, so the reaper
 *     and the orphan sweep have work) until the agent dies there; then an
 *     unarmed agent is started on the same segment;
 *
 * then `kvpool check` must pass and every value still readable must have
 * exactly its bytes, must not be a value the test deleted, and must be
 * the test's latest put of its key where the test knows it.  Every value
 * carries a version (its first 8 bytes, unique per put) and its bytes
 * depend on (key, length, version); the test's own workload journals
 * what it deleted by version (issue 25 item 8: a delete whose tombstone
 * was not yet written came back after an agent crash that kept the
 * segment).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

#define NKEYS 96
#define BATCH 24
#define VMIN (16u << 10)
#define VMAX (192u << 10)
/* a point must be reached by then */
#define REACH_NS (15ull * 1000 * 1000 * 1000)

static struct kvpt_agent ag;
/* the test's own client: verifies, drives agent points */
static struct kvp_client *pc;

#define AGENT_ARGS                                                          \
	"--dram", "4M", "--dram-unit", "16K", "--dram-high", "60",          \
		"--dram-low", "40", "--index-entries", "1024", "--ssd-dir", \
		kvpt_ssd_dir, "--ssd-segment", "4M", "--ssd-size", "16M",   \
		"--staging", "512K", "--staging-slot", "64K", NULL

static uint32_t
key_of(char *k, unsigned i)
{
	return (uint32_t)snprintf(k, 100, "%064x-cp-%u", i * 2654435761u, i);
}

/* Value length of key i as put in round r; the bytes depend on (key, len,
 * version) and the version is in the value, so any value read back can be
 * verified whoever put it. */
static uint64_t
len_of(unsigned i, unsigned r)
{
	return VMIN +
	       ((uint64_t)i * 7919u + (uint64_t)r * 104729u) % (VMAX - VMIN);
}

struct wl {
	struct kvp_client *c;
	unsigned round;
	bool journal; /* the test's own workload: puts and deletes journaled */
	unsigned char *bufs; /* BATCH * VMAX */
	char keys[BATCH][100];
	unsigned idx[BATCH]; /* key numbers of keys[] */
	uint64_t ver[BATCH]; /* versions put */
	struct kvp_op ops[BATCH];
	uint64_t verified, wrong, failed;
};

/*
 * The journal of the test's own workload (one process: never a child's):
 * the version of its last put of each key that no delete of its own has
 * deleted since (0: none, or not known: a child's workload may have put
 * or deleted it), and every version it deleted.  Puts are insert-if-absent
 * and only the test deletes while it journals (children of the agent
 * points die before they publish anything), so a version in dels[] was
 * deleted and must never be read again, and a key with a known last put
 * reads that version or nothing.
 */
static uint64_t last_put[NKEYS];
struct del {
	unsigned key;
	uint64_t ver;
};
static struct del *dels;
static size_t ndels, capdels;

/* A version no other put of this run has: the putter's pid and a count. */
static uint64_t
ver_next(void)
{
	static uint64_t n;

	return (uint64_t)getpid() << 32 | ++n;
}

static void
val_fill(unsigned char *b, uint64_t len, const char *key, uint32_t kl,
	 uint64_t ver)
{
	kvpt_fill(b, len, key, kl, ver);
	memcpy(b, &ver, sizeof(ver)); /* VMIN > 8: room for it */
}

/* The version of value b if it has exactly the bytes of that version of
 * (key, len); 0 if not. */
static uint64_t
val_version(const unsigned char *b, uint64_t len, const char *key, uint32_t kl)
{
	static unsigned char *want;
	uint64_t ver;

	if (len < VMIN || len > VMAX)
		return 0;
	if (!want && !(want = malloc(VMAX)))
		return 0;
	memcpy(&ver, b, sizeof(ver));
	val_fill(want, len, key, kl, ver);
	return memcmp(want, b, len) ? 0 : ver;
}

static void
journal_delete(unsigned key)
{
	if (!last_put[key])
		return;
	if (ndels == capdels) {
		size_t cap = capdels ? capdels * 2 : 256;
		struct del *n = realloc(dels, cap * sizeof(*n));

		assert_non_null(n);
		dels = n;
		capdels = cap;
	}
	dels[ndels].key = key;
	dels[ndels++].ver = last_put[key];
	last_put[key] = 0;
}

static bool
was_deleted(unsigned key, uint64_t ver)
{
	size_t k;

	for (k = 0; k < ndels; k++)
		if (dels[k].key == key && dels[k].ver == ver)
			return true;
	return false;
}

static void
wl_check(struct wl *w, const char *key, uint32_t kl, const unsigned char *b,
	 uint64_t len)
{
	if (val_version(b, len, key, kl))
		w->verified++;
	else
		w->wrong++;
}

/* Statuses that mean "the key cannot be read": must never come back. */
static bool
is_failure(int st)
{
	if (getenv("KVPT_VERBOSE") && st < 0 && st != -ENOENT && st != -EBUSY &&
	    st != -ENOTCONN)
		fprintf(stderr, "status %s\n", kvp_strerror(st));
	return st == -EIO || st == -EBADMSG || st == -EINVAL ||
	       st == -EMSGSIZE || st == -ESTALE;
}

static void
wl_keys(struct wl *w, unsigned base)
{
	unsigned k;

	for (k = 0; k < BATCH; k++) {
		w->idx[k] = (base + k) % NKEYS;
		w->ops[k].klen = key_of(w->keys[k], w->idx[k]);
		w->ops[k].key = w->keys[k];
		w->ops[k].buf = w->bufs + (size_t)k * VMAX;
		w->ops[k].off = 0;
		w->ops[k].len = VMAX;
	}
}

/* One round of everything a worker does. */
static void
wl_round(struct wl *w)
{
	unsigned r = w->round++, base = (r * BATCH) % NKEYS, k;
	struct kvp_pinset *ps = NULL;
	struct kvp_lease l;
	ssize_t n;

	/* batch put of fresh values */
	wl_keys(w, base);
	for (k = 0; k < BATCH; k++) {
		w->ops[k].len = len_of((base + k) % NKEYS, r);
		w->ver[k] = ver_next();
		val_fill(w->ops[k].buf, w->ops[k].len, w->keys[k],
			 w->ops[k].klen, w->ver[k]);
	}
	kvp_batch_put(w->c, w->ops, BATCH);
	for (k = 0; k < BATCH && w->journal; k++)
		if (w->ops[k].status == 0)
			last_put[w->idx[k]] = w->ver[k];
	/* batch get of older keys (SSD-resident by now, many of them) */
	wl_keys(w, base + NKEYS - BATCH);
	kvp_batch_get(w->c, w->ops, BATCH);
	for (k = 0; k < BATCH; k++) {
		if (w->ops[k].status == 0)
			wl_check(w, w->keys[k], w->ops[k].klen, w->ops[k].buf,
				 w->ops[k].len);
		else if (is_failure(w->ops[k].status))
			w->failed++;
	}
	/* a probe, then lookup-and-pin and a load of what was pinned */
	wl_keys(w, base + NKEYS - 2 * BATCH);
	kvp_batch_exists_prefix(w->c, w->ops, BATCH);
	n = kvp_batch_lookup_pin(w->c, w->ops, 6, &ps);
	if (n > 0) {
		kvp_pinset_get(w->c, ps, w->ops, (size_t)n);
		for (k = 0; k < (unsigned)n; k++) {
			if (w->ops[k].status == 0)
				wl_check(w, w->keys[k], w->ops[k].klen,
					 w->ops[k].buf, w->ops[k].len);
			else if (is_failure(w->ops[k].status))
				w->failed++;
		}
	}
	kvp_pinset_free(w->c, ps);
	/* a ranged read must equal the slice of the whole value */
	wl_keys(w, base + 7);
	{
		unsigned char *whole = w->bufs, *part = w->bufs + VMAX;
		ssize_t len = kvp_get(w->c, w->keys[0], w->ops[0].klen, whole,
				      VMAX),
			m;

		if (len > 0) {
			wl_check(w, w->keys[0], w->ops[0].klen, whole,
				 (uint64_t)len);
			m = kvp_get_range(w->c, w->keys[0], w->ops[0].klen,
					  4096, part, 8192);
			/* the key may have been replaced in between: then the
			 * whole value changed length too */
			if (m > 0 && memcmp(part, whole + 4096, (size_t)m) &&
			    kvp_get(w->c, w->keys[0], w->ops[0].klen, whole,
				    VMAX) == len)
				w->wrong++;
		} else if (is_failure((int)len)) {
			w->failed++;
		}
	}
	/* leases: one released, one left to expire (the sweep frees it) */
	if (kvp_lease_acquire(w->c, w->keys[1], w->ops[1].klen, 1000, &l) == 0)
		kvp_lease_release(w->c, &l);
	kvp_lease_acquire(w->c, w->keys[2], w->ops[2].klen, 1, &l);
	/* deletes (of DRAM- and SSD-resident keys alike) */
	wl_keys(w, base + BATCH - 6);
	for (k = 0; k < 6; k++)
		if (kvp_delete(w->c, w->keys[k], w->ops[k].klen) == 0 &&
		    w->journal)
			journal_delete(w->idx[k]);
}

static void
wl_init(struct wl *w, struct kvp_client *c)
{
	memset(w, 0, sizeof(*w));
	w->c = c;
	w->journal = true; /* the test's own (children: child_run) */
	w->bufs = malloc((size_t)BATCH * VMAX);
	assert_non_null(w->bufs);
}

/* A forked worker: arm point id, open, run rounds (closing and reopening
 * every fourth) until the point kills it; exit 0 if it never did. */
static void
child_run(int id)
{
	struct kvp_client *c = NULL;
	struct wl w;
	uint64_t t_end = kvp_now_ns(CLOCK_MONOTONIC) + REACH_NS;

	kvp_crash_arm(id, 0);
	memset(&w, 0, sizeof(w)); /* w.journal false: a child's own */
	w.bufs = malloc((size_t)BATCH * VMAX);
	if (!w.bufs)
		_exit(3);
	while (kvp_now_ns(CLOCK_MONOTONIC) < t_end) {
		if (!c) {
			if (kvp_open(ag.pool, "cp", &c))
				_exit(4);
			w.c = c;
		}
		wl_round(&w);
		if (w.round % 4 == 3) {
			kvp_close(c);
			c = NULL;
		}
	}
	_exit(w.wrong || w.failed ? 5 : 0);
}

static bool
only_us(void *p)
{
	struct kvp_seg *s = p;

	return kvpt_clients_nonfree(s) == 1;
}

/* After a crash: the pool passes `kvpool check` and every readable value
 * has its exact bytes. */
static void
verify_pool(const char *what)
{
	char out[8192];
	unsigned char *buf = malloc(VMAX);
	uint64_t ok = 0, back = 0, stale = 0, ver;
	unsigned i, first_back = NKEYS, first_stale = NKEYS;
	int rc;

	assert_non_null(buf);
	rc = kvpt_cli_check(ag.pool, 3000, out, sizeof(out));
	if (rc != 0)
		fprintf(stderr, "after %s: kvpool check failed:\n%s", what,
			out[0] ? out : "(no output)\n");
	assert_int_equal(rc, 0);
	for (i = 0; i < NKEYS; i++) {
		char k[100];
		uint32_t kl = key_of(k, i);
		ssize_t n = kvp_get(pc, k, kl, buf, VMAX);

		if (n >= 0) {
			ver = val_version(buf, (uint64_t)n, k, kl);
			if (!ver)
				fail_msg("after %s: key %u has wrong bytes",
					 what, i);
			ok++;
			if (was_deleted(i, ver)) {
				back++;
				first_back = first_back < i ? first_back : i;
			} else if (last_put[i] && ver != last_put[i]) {
				stale++;
				first_stale = first_stale < i ? first_stale : i;
			}
		} else if (n != -ENOENT && n != -EBUSY) {
			fail_msg("after %s: key %u: %s", what, i,
				 kvp_strerror((int)n));
		}
	}
	free(buf);
	if (back)
		fail_msg("after %s: %llu deleted values came back (first: key "
			 "%u; %zu deletes journaled)",
			 what, (unsigned long long)back, first_back, ndels);
	if (stale)
		fail_msg("after %s: %llu keys read an older value than their "
			 "last put (first: key %u)",
			 what, (unsigned long long)stale, first_stale);
}

static void
test_client_point(void **state)
{
	int id = (int)(intptr_t)*state, st = 0;
	struct kvp_seg s;
	pid_t pid;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		child_run(id);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	/* it put and deleted keys the journal does not know: every last
	 * put is unknown from now on (deletes journaled stay deleted) */
	memset(last_put, 0, sizeof(last_put));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != KVP_CRASH_EXIT)
		fail_msg("%s: the worker did not die there (status %#x)",
			 kvp_crash_name(id), st);
	/* the reaper frees its slot (and so its holds, half-done put,
	 * staging bits, half-taken lease) within a second */
	assert_int_equal(kvpt_seg_map(ag.pool, &s), 0);
	if (kvpt_wait_until(only_us, &s, 1000) < 0)
		fail_msg("%s: the dead worker was not reaped within 1 s",
			 kvp_crash_name(id));
	kvp__seg_unmap(&s);
	verify_pool(kvp_crash_name(id));
}

/* Did the agent's log say it died at point id? */
static bool
agent_log_says(int id)
{
	char path[2200], line[512];
	bool found = false;
	FILE *f;

	kvpt_agent_log(ag.pool, path, sizeof(path));
	f = fopen(path, "r");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "crash point ") &&
		    strstr(line, kvp_crash_name(id)))
			found = true;
	fclose(f);
	return found;
}

/* What the agent said, for whoever reads a failure (the CI keeps the
 * test's output, not the agents' logs). */
static void
dump_log(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[512];

	while (f && fgets(line, sizeof(line), f))
		print_message("  agent log: %s", line);
	if (f)
		fclose(f);
}

static void
test_agent_point(void **state)
{
	int id = (int)(intptr_t)*state, st = 0, rc;
	uint64_t t_end;
	struct wl w;
	char path[2200];

	kvpt_agent_log(ag.pool, path, sizeof(path));
	unlink(path); /* the log of this run only */
	kvpt_agent_kill(&ag);
	setenv("KVP_CRASH_AT", kvp_crash_name(id), 1);
	rc = kvpt_agent_restart(&ag, AGENT_ARGS);
	unsetenv("KVP_CRASH_AT");
	wl_init(&w, pc);
	if (rc == 0 && ag.pid > 0) {
		t_end = kvp_now_ns(CLOCK_MONOTONIC) + REACH_NS;
		while (kvp_now_ns(CLOCK_MONOTONIC) < t_end) {
			pid_t child;

			wl_round(&w);
			if (waitpid(ag.pid, &st, WNOHANG) == ag.pid) {
				ag.pid = -1;
				break;
			}
			/* a worker that dies in the middle of a put, so the
			 * reaper and the orphan-run sweep have work */
			child = fork();
			assert_true(child >= 0);
			if (child == 0)
				child_run(KVP_CP_C_PUT_ALLOCATED);
			waitpid(child, NULL, 0);
		}
		if (ag.pid > 0) {
			dump_log(path);
			fail_msg("%s: the agent never reached it",
				 kvp_crash_name(id));
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != KVP_CRASH_EXIT) {
			dump_log(path);
			fail_msg("%s: the agent died otherwise (status %#x)",
				 kvp_crash_name(id), st);
		}
	} else if (!agent_log_says(id)) {
		dump_log(path);
		fail_msg("%s: the agent did not start and did not die there "
			 "(start: %s, pid %d)",
			 kvp_crash_name(id), strerror(-rc), (int)ag.pid);
	}
	assert_int_equal(w.wrong, 0);
	assert_int_equal(w.failed, 0);
	free(w.bufs);
	/* an unarmed agent attaches to the same segment and repairs */
	assert_int_equal(kvpt_agent_restart(&ag, AGENT_ARGS), 0);
	assert_true(ag.pid > 0);
	{
		struct kvp_seg s;

		assert_int_equal(kvpt_seg_map(ag.pool, &s), 0);
		if (kvpt_wait_until(only_us, &s, 1000) < 0)
			fail_msg(
				"%s: dead workers not reaped by the new agent within 1 s",
				kvp_crash_name(id));
		kvp__seg_unmap(&s);
	}
	verify_pool(kvp_crash_name(id));
}

static int
group_setup(void **state)
{
	struct wl w;
	unsigned r;

	(void)state;
	if (kvpt_ssd_dir_setup(state))
		return -1;
	if (kvpt_agent_start(&ag, AGENT_ARGS) || kvp_open(ag.pool, "cp", &pc))
		return -1;
	/* warm up: the SSD tier holds values, DRAM is under pressure */
	wl_init(&w, pc);
	for (r = 0; r < 12; r++)
		wl_round(&w);
	free(w.bufs);
	if (w.wrong || w.failed)
		fprintf(stderr,
			"warm-up: %llu wrong, %llu failed, %llu verified\n",
			(unsigned long long)w.wrong,
			(unsigned long long)w.failed,
			(unsigned long long)w.verified);
	return w.wrong || w.failed ? -1 : 0;
}

static int
group_teardown(void **state)
{
	(void)state;
	print_message("  %zu deletes journaled\n", ndels);
	free(dels);
	kvp_close(pc);
	kvpt_agent_stop(&ag);
	return kvpt_ssd_dir_teardown(state);
}

int
main(int argc, char **argv)
{
	struct CMUnitTest tests[KVP_CP__N];
	const char *only = argc > 1 ? argv[1] : NULL;
	size_t n = 0;
	unsigned id;

	for (id = 0; id < KVP_CP__N; id++) {
		if (only && kvp_crash_lookup(only) != (int)id)
			continue;
		memset(&tests[n], 0, sizeof(tests[n]));
		tests[n].name = kvp_crash_name(id);
		tests[n].test_func = kvp_crash_is_agent(id) ? test_agent_point :
							      test_client_point;
		tests[n].initial_state = (void *)(intptr_t)id;
		n++;
	}
	return _cmocka_run_group_tests("crashpoints", tests, n, group_setup,
				       group_teardown);
}
