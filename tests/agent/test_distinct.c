/* SPDX-License-Identifier: MIT */
/*
 * test_distinct - the hit-rate ceiling's counter (agent/distinct.c): the
 * HyperLogLog against known numbers of distinct keys (within its error),
 * and a window of a real agent against the keys a test put and read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>

#include "agent/tier_int.h"
#include "tests/agent/harness.h"

/* the standard error of 2^14 registers: 1.04 / 2^7 */
#define SIGMA (1.04 / 128.0)

static struct kvp_hll hll;

/* Keys base .. base + n - 1 (any 64-bit values: kvp_hll_add mixes). */
static double
count(uint64_t base, uint64_t n)
{
	uint64_t k;

	kvp_hll_clear(&hll);
	for (k = 0; k < n; k++)
		kvp_hll_add(&hll, base + k);
	return kvp_hll_estimate(&hll);
}

/* Known numbers of distinct keys, 1 to a million: within 4 standard
 * errors (the linear counting below 40,960 keys does much better); none
 * counts 0, adding every key again changes nothing. */
static void
test_known_counts(void **state)
{
	static const uint64_t ns[] = { 1,     10,    100,    1000,
				       10000, 40000, 100000, 1000000 };
	unsigned i;

	(void)state;
	assert_true(count(0, 0) == 0);
	for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		double e = count(12345, ns[i]), err = e / (double)ns[i] - 1;
		struct kvp_hll once = hll;
		uint64_t k;

		print_message("  %7llu keys: %.1f (%+.2f%%)\n",
			      (unsigned long long)ns[i], e, 100 * err);
		if (fabs(err) > 4 * SIGMA && fabs(e - (double)ns[i]) > 1)
			fail_msg("%llu keys counted as %.1f",
				 (unsigned long long)ns[i], e);
		for (k = 0; k < ns[i]; k++)
			kvp_hll_add(&hll, 12345 + k);
		assert_memory_equal(once.reg, hll.reg, sizeof(hll.reg));
	}
}

/* The error is the HyperLogLog's: 24 disjoint sets of 100,000 keys
 * (estimates independent), their mean absolute error within 1.5 standard
 * errors (expected: 0.8 of one) and none beyond 4. */
static void
test_error_spread(void **state)
{
	double sum = 0, worst = 0;
	unsigned r;

	(void)state;
	for (r = 0; r < 24; r++) {
		double err = count((uint64_t)r << 40, 100000) / 100000.0 - 1;

		sum += fabs(err);
		worst = fabs(err) > worst ? fabs(err) : worst;
	}
	print_message("  mean |error| %.3f%%, worst %.3f%% (sigma %.3f%%)\n",
		      100 * sum / 24, 100 * worst, 100 * SIGMA);
	assert_true(sum / 24 <= 1.5 * SIGMA);
	assert_true(worst <= 4 * SIGMA);
}

static bool
window_closed(void *arg)
{
	const struct kvp_seg *s = arg;

	return kvpt_actr(s, KVP_ACTR_WINDOW_SECONDS) != 0;
}

static bool
window_with_stores(void *arg)
{
	const struct kvp_seg *s = arg;

	return kvpt_actr(s, KVP_ACTR_WINDOW_STORES) != 0;
}

/*
 * A real agent's window (--ceiling-window 2): once the first window has
 * closed (idle: 0 keys), 6,000 keys are put, the first 3,000 read and the
 * first 1,000 of those probed, all within the second window; it counts
 * 6,000 keys within 4 standard errors, 6,000 stores and 3,000 lookups
 * (a key probed and then read counts once).
 */
static void
test_agent_window(void **state)
{
	enum {
		N = 6000
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	char key[32];
	unsigned char v = 7, out;
	uint64_t keys;
	int k;

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "64M",
				      "--dram-unit", "4K", "--ceiling-window",
				      "2", NULL),
			 0);
	assert_true(kvpt_wait_until(window_closed, &s, 10000) >= 0);
	assert_int_equal(kvpt_actr(&s, KVP_ACTR_WINDOW_KEYS), 0);
	assert_int_equal(kvpt_actr(&s, KVP_ACTR_WINDOW_STORES), 0);
	for (k = 0; k < N; k++) {
		uint32_t kl = (uint32_t)snprintf(key, sizeof(key), "d%d", k);

		assert_int_equal(kvp_put(c, key, kl, &v, 1), 0);
	}
	for (k = 0; k < N / 2; k++) {
		uint32_t kl = (uint32_t)snprintf(key, sizeof(key), "d%d", k);

		if (k < 1000)
			assert_int_equal(kvp_exists(c, key, kl), 1);
		assert_int_equal(kvp_get(c, key, kl, &out, 1), 1);
	}
	assert_true(kvpt_wait_until(window_with_stores, &s, 10000) >= 0);
	keys = kvpt_actr(&s, KVP_ACTR_WINDOW_KEYS);
	print_message(
		"  window: %llu keys (of %d), %llu lookups, %llu "
		"stores\n",
		(unsigned long long)keys, N,
		(unsigned long long)kvpt_actr(&s, KVP_ACTR_WINDOW_LOOKUPS),
		(unsigned long long)kvpt_actr(&s, KVP_ACTR_WINDOW_STORES));
	assert_true(fabs((double)keys / N - 1) <= 4 * SIGMA);
	assert_int_equal(kvpt_actr(&s, KVP_ACTR_WINDOW_STORES), N);
	assert_int_equal(kvpt_actr(&s, KVP_ACTR_WINDOW_LOOKUPS), N / 2);
	assert_int_equal(kvpt_actr(&s, KVP_ACTR_WINDOW_SECONDS), 2);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_counts),
		cmocka_unit_test(test_error_spread),
		cmocka_unit_test(test_agent_window),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
