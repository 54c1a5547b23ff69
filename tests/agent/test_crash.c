/* SPDX-License-Identifier: MIT */
/*
 * test_crash.c - processes die at the worst moments; the reaper must give
 * back what they held within a second, measured, not slept on.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

struct seg_cond {
	struct kvp_seg *s;
	uint64_t units0;
};

static bool
all_released(void *p)
{
	struct seg_cond *c = p;

	return kvpt_holds_total(c->s) == 0 && kvpt_clients_nonfree(c->s) == 0 &&
	       kvpt_count_state(c->s, KVP_IX_PENDING) == 0 &&
	       kvpt_units_used(c->s) == c->units0;
}

/* Fork a child that runs fn, reports readiness through a pipe, then
 * waits to be killed. */
static pid_t
spawn_until_ready(void (*fn)(const char *pool), const char *pool)
{
	int p[2];
	pid_t pid;
	char b;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		fn(pool);
		if (write(p[1], "r", 1) != 1)
			_exit(3);
		for (;;)
			pause();
	}
	close(p[1]);
	assert_int_equal(read(p[0], &b, 1), 1);
	close(p[0]);
	return pid;
}

static void
child_holds(const char *pool)
{
	struct kvp_client *c;
	unsigned char buf[10000];
	char key[32];
	uint64_t idx, len;
	int i;

	if (kvp_open(pool, "ns", &c))
		_exit(2);
	memset(buf, 7, sizeof(buf));
	for (i = 0; i < 10; i++) {
		uint32_t kl =
			(uint32_t)snprintf(key, sizeof(key), "held-%d", i);
		if (kvp_put(c, key, kl, buf, sizeof(buf)) && i < 5)
			_exit(2);
		if (i < 5 && kvp__lookup_hold(c, key, kl, &idx, &len) < 0)
			_exit(2);
	}
}

static void
child_half_put(const char *pool)
{
	struct kvp_client *c;
	uint64_t w;
	int64_t i;
	uint32_t first;

	if (kvp_open(pool, "ns", &c))
		_exit(2);
	/* a put cut at its worst point: claimed, allocated, half copied */
	i = kvp_ix_claim(&c->seg, c->slot, c->nsid,
			 kvp_key_hash(c->nsid, "half", 4), "half", 4, &w);
	if (i < 0 || kvp_dram_alloc(&c->seg, 1 << 20, (uint64_t)i,
				    KVP_IX_GEN(w), &first))
		_exit(2);
	memset(c->seg.arena + (uint64_t)first * c->seg.g.g_dram_unit, 1,
	       1 << 19);
}

static void
child_alloc_lock(const char *pool)
{
	struct kvp_client *c;

	if (kvp_open(pool, "ns", &c) || kvp_dram_lock(&c->seg))
		_exit(2);
}

static void
kill_and_measure(const char *what, void (*fn)(const char *),
		 uint64_t expect_holds, uint64_t expect_pending)
{
	struct kvpt_agent a;
	struct kvp_seg s;
	struct seg_cond cond;
	long long ns;
	pid_t pid;

	assert_int_equal(kvpt_agent_start(&a, "--dram", "64M", "--dram-unit",
					  "4K", "--reap-ms", "1000", NULL),
			 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	cond.s = &s;
	cond.units0 = kvpt_units_used(&s);
	pid = spawn_until_ready(fn, a.pool);
	assert_int_equal(kvpt_holds_total(&s), expect_holds);
	assert_int_equal(kvpt_count_state(&s, KVP_IX_PENDING), expect_pending);
	assert_int_equal(kvpt_clients_nonfree(&s), 1);
	if (fn == child_holds)
		/* its published values stay */
		cond.units0 = kvpt_units_used(&s);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* the reaper period is 1 s here: the pidfd must make it prompt */
	ns = kvpt_wait_until(all_released, &cond, 1000);
	assert_true(ns >= 0);
	print_message("  %s: released %.1f ms after SIGKILL\n", what,
		      (double)ns / 1e6);
	assert_int_equal(
		kvp_load_relaxed(&s.hdr->h_actr[KVP_ACTR_REAP_CLIENTS]), 1);
	assert_int_equal(kvp_load_relaxed(&s.hdr->h_actr[KVP_ACTR_REAP_HOLDS]),
			 expect_holds);
	assert_int_equal(
		kvp_load_relaxed(&s.hdr->h_actr[KVP_ACTR_REAP_PENDING]),
		expect_pending);
	kvp__seg_unmap(&s);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

static void
test_kill_holding(void **state)
{
	(void)state;
	kill_and_measure("holding 5 entries", child_holds, 5, 0);
}

static void
test_kill_mid_put(void **state)
{
	(void)state;
	kill_and_measure("half-way through a 1 MiB put", child_half_put, 0, 1);
}

/* A put whose source faults half-way: the process dies by SIGSEGV inside
 * kvp_put's copy, with a PENDING entry and its allocation. */
static void
test_segv_mid_copy(void **state)
{
	struct kvpt_agent a;
	struct kvp_seg s;
	struct seg_cond cond;
	pid_t pid;
	int st;
	long long ns;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "64M", NULL), 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	cond.s = &s;
	cond.units0 = kvpt_units_used(&s);
	pid = fork();
	if (pid == 0) {
		struct kvp_client *c;
		unsigned char *src = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		/* cmocka catches SIGSEGV: this child must really die of it */
		signal(SIGSEGV, SIG_DFL);
		if (src == MAP_FAILED || kvp_open(a.pool, "ns", &c))
			_exit(2);
		memset(src, 1, 1 << 20);
		mprotect(src + (1 << 20), 1 << 20, PROT_NONE);
		kvp_put(c, "faulting", 8, src, 2 << 20);
		_exit(0); /* not reached */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
	ns = kvpt_wait_until(all_released, &cond, 1000);
	assert_true(ns >= 0);
	assert_int_equal(
		kvp_load_relaxed(&s.hdr->h_actr[KVP_ACTR_REAP_PENDING]), 1);
	print_message("  SIGSEGV mid-copy: released %.1f ms after death\n",
		      (double)ns / 1e6);
	kvp__seg_unmap(&s);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

/* Killed while holding the allocator's lock: the next locker
 * takes it over, rebuilds the bins, and the pool keeps working. */
static void
test_kill_holding_alloc_lock(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	unsigned char buf[4096] = { 0 };
	pid_t pid;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", NULL), 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	pid = spawn_until_ready(child_alloc_lock, a.pool);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvp_put(c, "after", 5, buf, sizeof(buf)), 0);
	assert_int_equal(kvp_get(c, "after", 5, buf, sizeof(buf)), 4096);
	assert_int_equal(
		kvp_load_relaxed(&s.hdr->h_actr[KVP_ACTR_ALLOC_RECOVER]), 1);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

struct restart_cond {
	struct kvp_seg *s;
};

static bool
no_clients(void *p)
{
	return kvpt_clients_nonfree(((struct restart_cond *)p)->s) == 0;
}

/* The agent dies: DRAM hits and puts that fit keep working; a client that
 * dies during the outage is reaped by the restarted agent, which
 * re-attaches to the same segment with a new incarnation. */
static void
test_agent_restart(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct restart_cond rc;
	unsigned char buf[8192], out[8192];
	pid_t pid;
	int i, hits = 0;

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "16M", NULL), 0);
	kvpt_fill(buf, sizeof(buf), "before", 6, 1);
	assert_int_equal(kvp_put(c, "before", 6, buf, sizeof(buf)), 0);
	kvpt_agent_kill(&a);
	assert_false(kvp_shm_agent_alive(&s));
	for (i = 0; i < 1000; i++)
		hits += kvp_get(c, "before", 6, out, sizeof(out)) == 8192;
	assert_int_equal(hits, 1000);
	assert_true(kvpt_check(out, sizeof(out), "before", 6, 1));
	kvpt_fill(buf, sizeof(buf), "during", 6, 1);
	assert_int_equal(kvp_put(c, "during", 6, buf, sizeof(buf)), 0);
	pid = spawn_until_ready(child_holds, a.pool);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_int_equal(kvpt_clients_nonfree(&s), 2); /* nobody reaps yet */
	assert_int_equal(kvpt_agent_restart(&a, "--dram", "16M", NULL), 0);
	assert_int_equal(kvp_load_relaxed(&s.hdr->h_incarnation), 2);
	kvp_close(c);
	rc.s = &s;
	assert_true(kvpt_wait_until(no_clients, &rc, 1000) >= 0);
	assert_int_equal(kvpt_holds_total(&s), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvp_get(c, "during", 6, out, sizeof(out)), 8192);
	assert_true(kvpt_check(out, sizeof(out), "during", 6, 1));
	assert_int_equal(kvp_get(c, "held-0", 6, out, sizeof(out)),
			 10000 > 8192 ? -EMSGSIZE : 0);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_holding),
		cmocka_unit_test(test_kill_mid_put),
		cmocka_unit_test(test_segv_mid_copy),
		cmocka_unit_test(test_kill_holding_alloc_lock),
		cmocka_unit_test(test_agent_restart),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
