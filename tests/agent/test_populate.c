/* SPDX-License-Identifier: MIT */
/*
 * test_populate.c - start-up at scale (agent/populate.c, agent/segment.c):
 * the agent is ready before its segment is populated, a put meanwhile
 * succeeds or gets BUSY and never a wrong byte, an agent killed mid-way
 * continues where it was, the backing is chosen as --hugepages says
 * (2 MiB pages from a hugetlbfs mount when KVPT_HUGETLBFS names one with
 * a reserved pool: tests/agent/test_hugepages.sh sets that up as root;
 * 4 KiB with a log line otherwise), and --numa places or refuses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

#define VAL (1u << 20)

static uint32_t
key_of(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x-populate-%d",
				  (unsigned)i * 2654435761u, i);
}

static bool
populated(void *arg)
{
	const struct kvp_seg *s = arg;

	return kvp_dram_capacity(s) == s->g.g_dram_pages;
}

/*
 * Puts while the arena is populated (one thread at 96 MiB/s: about six
 * seconds for 512 MiB): each answers OK or BUSY, nothing else; once it is
 * populated every key reads back whole or is a miss (an eviction while
 * room was short), never another key's or a torn value; later puts find
 * the whole tier; the checker agrees with the map.
 */
static void
test_ready_before_populated(void **state)
{
	struct kvpt_agent a;
	struct kvp_seg s;
	struct kvp_client *c;
	unsigned char *v = malloc(VAL), *r = malloc(VAL);
	int i, ok = 0, busy = 0, early_ok = 0, n = 0;
	char k[100];

	(void)state;
	assert_non_null(v);
	assert_non_null(r);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "512M",
				      "--populate-threads", "1",
				      "--populate-rate", "96M", NULL),
			 0);
	/* ready, and most of the tier still to come */
	assert_true(kvp_dram_capacity(&s) < s.g.g_dram_pages / 2);
	for (i = 0; i < 400 && !populated(&s); i++, n++) {
		uint32_t kl = key_of(k, i);
		int rc;

		kvpt_fill(v, VAL, k, kl, 1);
		rc = kvp_put(c, k, kl, v, VAL);
		assert_true(rc == 0 || rc == -EBUSY);
		if (rc == 0) {
			ok++;
			early_ok += !populated(&s);
		} else {
			busy++;
		}
	}
	print_message("during population: %d puts, %d OK (%d before it "
		      "ended), %d BUSY\n",
		      n, ok, early_ok, busy);
	assert_true(early_ok > 0); /* served before populated */
	assert_true(kvpt_wait_until(populated, &s, 60000) >= 0);
	for (i = 0; i < n; i++) {
		uint32_t kl = key_of(k, i);
		ssize_t got = kvp_get(c, k, kl, r, VAL);

		assert_true(got == -ENOENT || got == (ssize_t)VAL);
		if (got == (ssize_t)VAL)
			assert_true(kvpt_check(r, VAL, k, kl, 1));
	}
	/* the whole tier now: 400 MiB of new values fit at once */
	for (i = 1000; i < 1400; i++) {
		uint32_t kl = key_of(k, i);

		kvpt_fill(v, VAL, k, kl, 2);
		assert_int_equal(kvp_put(c, k, kl, v, VAL), 0);
	}
	for (i = 1000; i < 1400; i++) {
		uint32_t kl = key_of(k, i);

		assert_int_equal(kvp_get(c, k, kl, r, VAL), (ssize_t)VAL);
		assert_true(kvpt_check(r, VAL, k, kl, 2));
	}
	assert_int_equal(kvpt_cli_check(a.pool, -1, NULL, 0), 0);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
	free(v);
	free(r);
}

/* An agent killed while populating: the next one finds the unpopulated
 * tail in the map, continues from there, and the values put meanwhile
 * stay. */
static void
test_restart_mid_populate(void **state)
{
	struct kvpt_agent a;
	struct kvp_seg s;
	struct kvp_client *c;
	unsigned char *v = malloc(VAL), *r = malloc(VAL);
	int i, ok[20] = { 0 };
	char k[100];
	uint64_t cap_before;

	(void)state;
	assert_non_null(v);
	assert_non_null(r);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "512M",
				      "--populate-threads", "1",
				      "--populate-rate", "64M", NULL),
			 0);
	for (i = 0; i < 20; i++) {
		uint32_t kl = key_of(k, i);

		kvpt_fill(v, VAL, k, kl, 3);
		ok[i] = kvp_put(c, k, kl, v, VAL) == 0;
	}
	kvpt_agent_kill(&a);
	cap_before = kvp_dram_capacity(&s);
	assert_true(cap_before < s.g.g_dram_pages);
	assert_int_equal(kvpt_agent_restart(&a, "--dram", "512M", NULL), 0);
	assert_true(kvpt_wait_until(populated, &s, 60000) >= 0);
	for (i = 0; i < 20; i++) {
		uint32_t kl = key_of(k, i);
		ssize_t got = kvp_get(c, k, kl, r, VAL);

		if (!ok[i])
			continue;
		assert_int_equal(got, (ssize_t)VAL);
		assert_true(kvpt_check(r, VAL, k, kl, 3));
	}
	assert_int_equal(kvpt_cli_check(a.pool, -1, NULL, 0), 0);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
	free(v);
	free(r);
}

/*
 * With an SSD tier the agent populates the index before the rebuild's
 * inserts and holds the arena back until the rebuild is done: once it
 * serves, the arena's turn comes and the whole tier is populated (a hold
 * never released would leave the pool at its first 32 MiB).
 */
static void
test_ssd_tier_populates(void **state)
{
	struct kvpt_agent a;
	struct kvp_seg s;
	struct kvp_client *c;
	char dir[256], log[2300], out[16384];

	(void)state;
	assert_int_equal(kvpt_tmpdir(dir, sizeof(dir), "populate"), 0);
	/* --populate-rate: the harness hands over the agent at once */
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "256M", "--ssd-dir",
				      dir, "--populate-rate", "100G", NULL),
			 0);
	assert_true(kvpt_wait_until(populated, &s, 60000) >= 0);
	kvpt_agent_log(a.pool, log, sizeof(log));
	assert_int_equal(kvpt_run(out, sizeof(out), "cat %s", log), 0);
	assert_non_null(strstr(out, "index and page map populated"));
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
	kvpt_tmpdir_remove(dir);
}

/* The page size the agent reports, and where its segment file is. */
static uint64_t
page_bytes(const struct kvp_seg *s)
{
	/* relaxed: written once by the agent before it serves */
	return kvp_load_relaxed(&s->dram->dh_page_bytes);
}

/* --hugepages on with a directory that is no hugetlbfs: the agent does
 * not start (and says why); auto falls back to 4 KiB pages in /dev/shm. */
static void
test_hugepages_fallback(void **state)
{
	struct kvpt_agent a;
	struct kvp_seg s;
	struct kvp_client *c;
	char log[2300], out[4096];

	(void)state;
	assert_int_not_equal(
		kvpt_agent_start(&a, "--dram", "64M", "--hugepages", "on",
				 "--hugetlbfs", "/nonexistent", NULL),
		0);
	kvpt_agent_log(a.pool, log, sizeof(log));
	assert_int_equal(kvpt_run(out, sizeof(out), "cat %s", log), 0);
	assert_non_null(strstr(out, "--hugepages on:"));
	kvpt_pool_remove(a.pool);

	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "64M",
				      "--hugepages", "auto", "--hugetlbfs",
				      "/nonexistent", NULL),
			 0);
	assert_int_equal(strncmp(s.path, "/dev/shm/", 9), 0);
	assert_int_equal(page_bytes(&s), 4096);
	assert_int_equal(kvp_put(c, "k", 1, "v", 1), 0);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/*
 * With a hugetlbfs mount whose pool has room (KVPT_HUGETLBFS, set by
 * tests/agent/test_hugepages.sh): the segment is a file there, 2 MiB
 * pages, clients find it, values round-trip, a client that dies is
 * reaped (liveness by OFD locks on the new backing), and a restarted
 * agent re-attaches to it.  Skipped without one.
 */
static void
test_hugepages_on(void **state)
{
	const char *dir = getenv("KVPT_HUGETLBFS");
	struct kvpt_agent a;
	struct kvp_seg s;
	struct kvp_client *c;
	char k[100];
	unsigned char *v = malloc(VAL), *r = malloc(VAL);
	pid_t pid;
	int i, st;

	(void)state;
	assert_non_null(v);
	assert_non_null(r);
	if (!dir) {
		print_message("SKIP hugepages on: no KVPT_HUGETLBFS (run "
			      "tests/agent/test_hugepages.sh as root)\n");
		free(v);
		free(r);
		skip();
	}
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "128M",
				      "--hugepages", "on", "--hugetlbfs", dir,
				      NULL),
			 0);
	assert_int_equal(strncmp(s.path, dir, strlen(dir)), 0);
	assert_int_equal(page_bytes(&s), 2u << 20);
	assert_true(kvpt_wait_until(populated, &s, 30000) >= 0);
	for (i = 0; i < 50; i++) {
		uint32_t kl = key_of(k, i);

		kvpt_fill(v, VAL, k, kl, 4);
		assert_int_equal(kvp_put(c, k, kl, v, VAL), 0);
	}
	/* a client that dies holding a slot: reaped */
	pid = fork();
	if (pid == 0) {
		struct kvp_client *cc;

		if (kvp_open(a.pool, "ns", &cc))
			_exit(1);
		kill(getpid(), SIGKILL);
		_exit(2);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	kvpt_agent_kill(&a);
	assert_int_equal(kvpt_agent_restart(&a, "--dram", "128M", "--hugepages",
					    "on", "--hugetlbfs", dir, NULL),
			 0);
	for (i = 0; i < 50; i++) {
		uint32_t kl = key_of(k, i);

		assert_int_equal(kvp_get(c, k, kl, r, VAL), (ssize_t)VAL);
		assert_true(kvpt_check(r, VAL, k, kl, 4));
	}
	assert_int_equal(kvpt_cli_check(a.pool, 5000, NULL, 0), 0);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
	free(v);
	free(r);
}

/* --numa 0 binds (node 0 is online on every Linux host); a node that is
 * not online is refused with a line that says so. */
static void
test_numa(void **state)
{
	struct kvpt_agent a;
	struct kvp_seg s;
	struct kvp_client *c;
	char log[2300], out[8192];

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "64M", "--numa",
				      "0", NULL),
			 0);
	assert_int_equal(kvp_put(c, "k", 1, "v", 1), 0);
	kvpt_agent_log(a.pool, log, sizeof(log));
	assert_int_equal(kvpt_run(out, sizeof(out), "cat %s", log), 0);
	assert_non_null(strstr(out, "segment bound to node 0"));
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);

	assert_int_not_equal(kvpt_agent_start(&a, "--dram", "64M", "--numa",
					      "1000", NULL),
			     0);
	kvpt_agent_log(a.pool, log, sizeof(log));
	assert_int_equal(kvpt_run(out, sizeof(out), "cat %s", log), 0);
	assert_non_null(strstr(out, "--numa 1000: no such node online"));
	kvpt_pool_remove(a.pool);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ready_before_populated),
		cmocka_unit_test(test_restart_mid_populate),
		cmocka_unit_test(test_ssd_tier_populates),
		cmocka_unit_test(test_hugepages_fallback),
		cmocka_unit_test(test_hugepages_on),
		cmocka_unit_test(test_numa),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
