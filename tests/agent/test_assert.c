/* SPDX-License-Identifier: MIT */
/*
 * test_assert.c - KVP_ASSERT (shm/kvp_assert.h) is armed where it should
 * be and nowhere else: in the debug, asan and tsan builds a broken
 * invariant of the agent's own state (an operation in flight handed back
 * twice: I30) aborts the agent with a log line naming the invariant; in
 * the release build the check is compiled out and its condition is not
 * even evaluated.  Run in every variant (tests/run.sh).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>

#include "agent/tier_int.h"

static int evaluated;

static int
side_effect(void)
{
	evaluated++;
	return 1;
}

static void
test_condition_evaluated_only_in_debug(void **state)
{
	(void)state;
	evaluated = 0;
	KVP_ASSERT(side_effect(), "I0");
#ifdef KVP_DEBUG
	assert_int_equal(evaluated, 1);
#else
	assert_int_equal(evaluated, 0);
#endif
}

/* The agent's pool of operations in flight, as kvp_tier_open_agent
 * makes it: every op free. */
static struct kvp_tier *
tier_new(void)
{
	struct kvp_tier *t = calloc(1, sizeof(*t));
	uint32_t k;

	assert_non_null(t);
	for (k = 0; k < KVP_TIER_MAX_OPS; k++)
		t->freeops[k] = KVP_TIER_MAX_OPS - 1 - k;
	t->nfree = KVP_TIER_MAX_OPS;
	return t;
}

static void
test_double_put_aborts_in_debug(void **state)
{
	int pfd[2], st = 0;
	char buf[1024] = "";
	ssize_t n, got = 0;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct kvp_tier *t = tier_new();
		struct kvp_top *op;
		uint64_t tag;

		dup2(pfd[1], 2); /* kvp_log writes to stderr */
		close(pfd[0]);
		op = kvp_top_get(t, TOP_STAGE, NULL, &tag);
		if (!op || tag == 0 || !kvp_top_get(t, TOP_PROMOTE, NULL, &tag))
			_exit(3);
		kvp_top_put(t, op);
		/* the bug: the free pool now holds op twice */
		kvp_top_put(t, op);
		_exit(t->nfree == KVP_TIER_MAX_OPS ? 0 : 4);
	}
	close(pfd[1]);
	while ((n = read(pfd[0], buf + got, sizeof(buf) - 1 - (size_t)got)) > 0)
		got += n;
	close(pfd[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
#ifdef KVP_DEBUG
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGABRT);
	assert_non_null(strstr(buf, "invariant I30 broken"));
	assert_non_null(strstr(buf, "agent/ops.c"));
#else
	/* compiled out: the bug goes unseen, as in any release build */
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
#endif
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_condition_evaluated_only_in_debug),
		cmocka_unit_test(test_double_put_aborts_in_debug),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
