/* SPDX-License-Identifier: MIT */
/*
 * test_statuses.c - every status a public call can return is documented
 * (the table at the top of kvpool.h) and named by kvp_strerror, and what
 * the calls really return, driven into their corners, stays inside that
 * set; a batch larger than this client's hold slots is served in parts
 * (issue 11: with --holds-per-client 16, a batch get of 40 SSD-resident
 * keys returned 24 x -ENOBUFS, "unknown status").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

/* ---- what each public call may return (0 stands for any success) ---- */

enum call {
	CALL_OPEN,
	CALL_SEG_MAP,
	CALL_PUT,
	CALL_BATCH_PUT,
	CALL_GET,
	CALL_GET_RANGE,
	CALL_BATCH_GET,
	CALL_EXISTS,
	CALL_DELETE,
	CALL_PREFIX,
	CALL_LOOKUP_PIN,
	CALL_PINSET_GET,
	CALL_PINSET_TIER,
	CALL_LEASE_ACQUIRE,
	CALL_LEASE_RELEASE,
	CALL__N
};

#define END 1 /* list terminator (no status is positive) */

static const struct {
	const char *name;
	int st[20];
} calls[CALL__N] = {
	[CALL_OPEN] = { "kvp_open",
			{ 0, -ENOTCONN, -EPROTO, -EUSERS, -EACCES, -EINVAL,
			  -ENOMEM, END } },
	[CALL_SEG_MAP] = { "kvp_seg_map",
			   { 0, -ENOTCONN, -EPROTO, -EACCES, -EINVAL, -ENOMEM,
			     END } },
	[CALL_PUT] = { "kvp_put",
		       { 0, -EEXIST, -EBUSY, -ENOSPC, -ENOTCONN, -E2BIG,
			 -EINVAL, -ESTALE, END } },
	/* batch calls: the call's own return, then each key's status */
	[CALL_BATCH_PUT] = { "kvp_batch_put",
			     { 0, -EEXIST, -EBUSY, -ENOSPC, -ENOTCONN, -E2BIG,
			       -EINVAL, -ESTALE, END } },
	[CALL_GET] = { "kvp_get",
		       { 0, -EMSGSIZE, -ENOENT, -EINVAL, -EBUSY, -EIO, -EBADMSG,
			 -E2BIG, -ENOTCONN, END } },
	[CALL_GET_RANGE] = { "kvp_get_range",
			     { 0, -ENOENT, -EINVAL, -EBUSY, -EIO, -EBADMSG,
			       -E2BIG, -ENOTCONN, END } },
	[CALL_BATCH_GET] = { "kvp_batch_get",
			     { 0, -ENOENT, -EINVAL, -EBUSY, -EIO, -EBADMSG,
			       -E2BIG, -ENOTCONN, END } },
	[CALL_EXISTS] = { "kvp_exists", { 0, -EINVAL, END } },
	[CALL_DELETE] = { "kvp_delete",
			  { 0, -ENOENT, -EBUSY, -EINVAL, -EIO, -ENOTCONN,
			    END } },
	[CALL_PREFIX] = { "kvp_batch_exists_prefix",
			  { 0, -ENOENT, -EINVAL, END } },
	[CALL_LOOKUP_PIN] = { "kvp_batch_lookup_pin",
			      { 0, -ENOENT, -EINVAL, -EBUSY, -ENOMEM, END } },
	[CALL_PINSET_GET] = { "kvp_pinset_get",
			      { 0, -EINVAL, -EBUSY, -EIO, -EBADMSG, -E2BIG,
				-ENOTCONN, END } },
	[CALL_PINSET_TIER] = { "kvp_pinset_tier", { 0, -EINVAL, END } },
	[CALL_LEASE_ACQUIRE] = { "kvp_lease_acquire",
				 { 0, -ENOENT, -EBUSY, -EINVAL, -ENOMEM,
				   END } },
	[CALL_LEASE_RELEASE] = { "kvp_lease_release", { 0, -EINVAL, END } },
};

static const struct {
	int st;
	const char *name;
} names[] = {
	{ -ENOENT, "ENOENT" },     { -EEXIST, "EEXIST" },
	{ -EBUSY, "EBUSY" },       { -E2BIG, "E2BIG" },
	{ -ENOSPC, "ENOSPC" },     { -EMSGSIZE, "EMSGSIZE" },
	{ -EIO, "EIO" },           { -EBADMSG, "EBADMSG" },
	{ -ENOTCONN, "ENOTCONN" }, { -ESTALE, "ESTALE" },
	{ -EPROTO, "EPROTO" },     { -EUSERS, "EUSERS" },
	{ -EACCES, "EACCES" },     { -ENOMEM, "ENOMEM" },
	{ -EUCLEAN, "EUCLEAN" },   { -EINVAL, "EINVAL" },
};

static const char *
errname(int st)
{
	unsigned k;

	for (k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		if (names[k].st == st)
			return names[k].name;
	return NULL;
}

static bool
documented(enum call c, int st)
{
	unsigned k;

	if (st > 0)
		st = 0; /* a size or a count */
	for (k = 0; calls[c].st[k] != END; k++)
		if (calls[c].st[k] == st)
			return true;
	return false;
}

/* What a call returned must be one of its documented statuses, and
 * kvp_strerror must know it. */
#define SEEN(c, rc) seen_at(c, (int)(rc), __LINE__)

static void
seen_at(enum call c, int rc, int line)
{
	if (!documented(c, rc))
		fail_msg(
			"line %d: %s returned %d (%s), which it does not document",
			line, calls[c].name, rc, kvp_strerror(rc));
	if (!strcmp(kvp_strerror(rc > 0 ? 0 : rc), "unknown status"))
		fail_msg("line %d: kvp_strerror does not know %d", line, rc);
}

/* The status table at the top of kvpool.h (the comment before the
 * include guard), read from the source tree next to the build. */
static char *
header_status_table(void)
{
	char path[4300];
	const char *try[2];
	unsigned k;

	snprintf(path, sizeof(path), "%s/../../kvpool.h", kvpt_bindir());
	try[0] = path;
	try[1] = "kvpool.h";
	for (k = 0; k < 2; k++) {
		FILE *f = fopen(try[k], "r");
		char *buf, *end;
		size_t n;

		if (!f)
			continue;
		buf = calloc(1, 1 << 20);
		n = fread(buf, 1, (1 << 20) - 1, f);
		fclose(f);
		buf[n] = '\0';
		end = strstr(buf, "#ifndef KVPOOL_H");
		if (!end || !strstr(buf, "Status codes"))
			fail_msg("%s: no status table before the include guard",
				 try[k]);
		*end = '\0';
		return buf;
	}
	fail_msg("kvpool.h not found next to %s", kvpt_bindir());
	return NULL;
}

/* Every status of every call is in the header's table and named by
 * kvp_strerror (a status missing from either is a defect). */
static void
test_every_status_documented(void **state)
{
	char *table = header_status_table();
	unsigned c, k, n = 0;

	(void)state;
	for (c = 0; c < CALL__N; c++) {
		for (k = 0; calls[c].st[k] != END; k++) {
			int st = calls[c].st[k];
			const char *nm = errname(st);
			char needle[32];

			if (!strcmp(kvp_strerror(st), "unknown status"))
				fail_msg(
					"%s can return %d: kvp_strerror does not know it",
					calls[c].name, st);
			if (st == 0)
				continue;
			assert_non_null(nm);
			snprintf(needle, sizeof(needle), "-%s", nm);
			if (!strstr(table, needle))
				fail_msg(
					"%s can return -%s: not in the status table of kvpool.h",
					calls[c].name, nm);
			n++;
		}
	}
	/* and what must never come out: internal codes */
	assert_false(documented(CALL_GET, -ENOBUFS));
	print_message("  %u (call, status) pairs documented and named\n", n);
	free(table);
}

/* ---- few hold slots ---- */

static uint32_t
key_s(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x_ssd_%d",
				  (unsigned)i * 2654435761u, i);
}

static uint32_t
key_d(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x_dram_%d", (unsigned)i * 40503u,
				  i);
}

enum {
	NS = 48,
	ND = 48,
	N = NS + ND,
	SZ = 64 << 10,
	HOLDS = 16
};

struct mixed {
	char keys[N][100];
	struct kvp_op ops[N];
	unsigned char *out;
};

/* ops[k]: SSD keys and DRAM keys alternating, each with a whole buffer */
static void
mixed_ops(struct mixed *x)
{
	int k;

	for (k = 0; k < N; k++) {
		x->ops[k].klen = k % 2 ? key_d(x->keys[k], k / 2) :
					 key_s(x->keys[k], k / 2);
		x->ops[k].key = x->keys[k];
		x->ops[k].buf = x->out + (size_t)k * SZ;
		x->ops[k].off = 0;
		x->ops[k].len = SZ;
		x->ops[k].status = 1;
	}
}

static void
check_all_ok(struct mixed *x, size_t n, enum call call)
{
	size_t k;

	for (k = 0; k < n; k++) {
		SEEN(call, x->ops[k].status);
		if (x->ops[k].status != 0)
			fail_msg("key %zu (%s): %s", k, k % 2 ? "DRAM" : "SSD",
				 kvp_strerror(x->ops[k].status));
		assert_int_equal(x->ops[k].len, SZ);
		assert_true(kvpt_check(x->ops[k].buf, SZ, x->keys[k],
				       x->ops[k].klen, 7));
	}
}

/*
 * --holds-per-client 16: a batch get of 48 SSD-resident keys mixed with
 * 48 DRAM-resident ones gets every key OK with its bytes (SSD keys are
 * resolved whenever the hold slots run out); so does a batch while a
 * pinset holds half of the slots.  A lookup-and-pin stops its prefix at
 * the 17th key with -EBUSY, its 16 keys load, and while it holds every
 * slot, gets and leases answer -EBUSY (documented), never -ENOBUFS.
 */
static void
test_few_hold_slots(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct kvp_lease leases[ND], l;
	struct kvp_pinset *ps;
	struct mixed *x = calloc(1, sizeof(*x));
	unsigned char *v = malloc(SZ);
	char k[100];
	ssize_t n;
	int i;

	(void)state;
	x->out = malloc((size_t)N * SZ);
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	assert_int_equal(
		kvpt_agent_start(&a, "--dram", "64M", "--dram-unit", "4K",
				 "--dram-high", "0", "--dram-low", "0",
				 "--holds-per-client", "16", "--no-promote",
				 "--ssd-dir", kvpt_ssd_dir, "--ssd-segment",
				 "8M", "--staging", "8M", "--staging-slot",
				 "1M", NULL),
		0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	assert_int_equal(s.g.g_holds_per_client, HOLDS);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	/* 48 SSD-resident keys (the agent demotes everything: --dram-high 0) */
	assert_int_equal(kvpt_put_and_demote(c, &s, NS, SZ, key_s, 7, 30000),
			 0);
	/* 48 DRAM-resident keys: put and leased while the agent is stopped,
	 * so it can copy them to SSD but never move them out of DRAM */
	assert_int_equal(kvpt_agent_pause(&a), 0);
	for (i = 0; i < ND; i++) {
		uint32_t kl = key_d(k, i);

		kvpt_fill(v, SZ, k, kl, 7);
		assert_int_equal(kvp_put(c, k, kl, v, SZ), 0);
		assert_int_equal(
			kvp_lease_acquire(c, k, kl, 600000, &leases[i]), 0);
		assert_int_equal(leases[i].tier, KVP_TIER_DRAM);
	}
	kill(a.pid, SIGCONT);
	assert_true(kvpt_all_on_ssd(c, &s, NS, key_s));

	/* the batch: every key OK, in parts, nothing left held or staged */
	mixed_ops(x);
	n = kvp_batch_get(c, x->ops, N);
	SEEN(CALL_BATCH_GET, n);
	check_all_ok(x, N, CALL_BATCH_GET);
	assert_int_equal(n, N);
	assert_int_equal(kvpt_holds_total(&s), 0);
	assert_int_equal(kvpt_spans_in_use(&s), 0);
	/* the SSD keys went through the agent, the DRAM ones were hits */
	assert_true(kvpt_ctr_total(&s, KVP_CTR_RESOLVE_OK) >= NS);
	assert_true(kvpt_ctr_total(&s, KVP_CTR_GET_HIT) >= ND);

	/* lookup-and-pin of all 96: the 16 hold slots stop the prefix */
	mixed_ops(x);
	n = kvp_batch_lookup_pin(c, x->ops, N, &ps);
	SEEN(CALL_LOOKUP_PIN, n);
	assert_int_equal(n, HOLDS);
	for (i = 0; i <= HOLDS; i++)
		SEEN(CALL_LOOKUP_PIN, x->ops[i].status);
	assert_int_equal(x->ops[HOLDS].status, -EBUSY);
	assert_false(ps->capped);
	n = kvp_pinset_get(c, ps, x->ops, HOLDS);
	SEEN(CALL_PINSET_GET, n);
	check_all_ok(x, HOLDS, CALL_PINSET_GET);
	/* every slot is pinned: reads and leases are BUSY, not -ENOBUFS */
	{
		uint32_t kl = key_s(k, 40);
		int rc = (int)kvp_get(c, k, kl, v, SZ);

		SEEN(CALL_GET, rc);
		assert_int_equal(rc, -EBUSY);
		kl = key_d(k, 40);
		rc = (int)kvp_get_range(c, k, kl, 0, v, 100);
		SEEN(CALL_GET_RANGE, rc);
		assert_int_equal(rc, -EBUSY);
		rc = kvp_lease_acquire(c, k, kl, 1000, &l);
		SEEN(CALL_LEASE_ACQUIRE, rc);
		assert_int_equal(rc, -EBUSY);
		/* the key is there: BUSY is never a miss */
		SEEN(CALL_EXISTS, kvp_exists(c, k, kl));
		assert_int_equal(kvp_exists(c, k, kl), 1);
	}
	mixed_ops(x);
	n = kvp_batch_get(c, x->ops + HOLDS, 4);
	SEEN(CALL_BATCH_GET, n);
	assert_int_equal(n, 0);
	for (i = HOLDS; i < HOLDS + 4; i++) {
		SEEN(CALL_BATCH_GET, x->ops[i].status);
		assert_int_equal(x->ops[i].status, -EBUSY);
	}
	kvp_pinset_free(c, ps);
	assert_int_equal(kvpt_holds_total(&s), 0);

	/* a pinset holding half of the slots: the batch still gets all 96 */
	mixed_ops(x);
	n = kvp_batch_lookup_pin(c, x->ops + 10, HOLDS / 2, &ps);
	assert_int_equal(n, HOLDS / 2);
	mixed_ops(x);
	n = kvp_batch_get(c, x->ops, N);
	check_all_ok(x, N, CALL_BATCH_GET);
	assert_int_equal(n, N);
	mixed_ops(x);
	n = kvp_pinset_get(c, ps, x->ops + 10, HOLDS / 2);
	assert_int_equal(n, HOLDS / 2);
	for (i = 10; i < 10 + HOLDS / 2; i++) {
		assert_int_equal(x->ops[i].status, 0);
		assert_true(kvpt_check(x->ops[i].buf, SZ, x->keys[i],
				       x->ops[i].klen, 7));
	}
	assert_int_equal(kvpt_holds_total(&s), HOLDS / 2);
	kvp_pinset_free(c, ps);
	/* and single gets of every key, one after another */
	for (i = 0; i < N; i++) {
		ssize_t got = kvp_get(c, x->keys[i], x->ops[i].klen, v, SZ);

		SEEN(CALL_GET, got);
		assert_int_equal(got, SZ);
		assert_true(kvpt_check(v, SZ, x->keys[i], x->ops[i].klen, 7));
	}
	assert_int_equal(kvpt_holds_total(&s), 0);
	for (i = 0; i < ND; i++)
		SEEN(CALL_LEASE_RELEASE, kvp_lease_release(c, &leases[i]));
	free(x->out);
	free(x);
	free(v);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/* The other corners of the API, each answer checked against its call's
 * documented statuses: bad arguments, misses, sizes, a full client
 * table (-EUSERS), no pool at all. */
static void
test_statuses_in_use(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c, *c2, *c3 = NULL;
	struct kvp_pinset *ps;
	struct kvp_lease l;
	struct kvp_seg s;
	struct kvp_op op;
	unsigned char v[4096], out[4096];
	char msg[256];
	int rc;

	(void)state;
	memset(v, 3, sizeof(v));
	kvpt_pool_remove("kvpt_st_nobody");
	rc = kvp_open("kvpt_st_nobody", "ns", &c);
	SEEN(CALL_OPEN, rc);
	assert_int_equal(rc, -ENOTCONN);
	SEEN(CALL_OPEN, kvp_open("bad/name", "ns", &c));
	SEEN(CALL_SEG_MAP,
	     kvp_seg_map("kvpt_st_nobody", false, &s, msg, sizeof(msg)));
	SEEN(CALL_SEG_MAP,
	     kvp_seg_map("bad name", false, &s, msg, sizeof(msg)));

	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", "--max-clients",
					  "2", "--max-value", "1M", NULL),
			 0);
	rc = kvp_open(a.pool, "ns", &c);
	SEEN(CALL_OPEN, rc);
	SEEN(CALL_OPEN, kvp_open(a.pool, "ns", &c2));
	rc = kvp_open(a.pool, "ns", &c3);
	SEEN(CALL_OPEN, rc);
	assert_int_equal(rc, -EUSERS);
	assert_null(c3);
	kvp_close(c2);

	SEEN(CALL_PUT, kvp_put(c, "k", 1, v, sizeof(v)));
	SEEN(CALL_PUT, kvp_put(c, "k", 1, v, sizeof(v)));    /* EEXIST */
	SEEN(CALL_PUT, kvp_put(c, "k", 0, v, sizeof(v)));    /* EINVAL */
	SEEN(CALL_PUT, kvp_put(c, "big", 3, v, (2u << 20))); /* E2BIG */
	SEEN(CALL_GET, kvp_get(c, "k", 1, out, sizeof(out)));
	SEEN(CALL_GET, kvp_get(c, "k", 1, out, 10));             /* EMSGSIZE */
	SEEN(CALL_GET, kvp_get(c, "nope", 4, out, sizeof(out))); /* ENOENT */
	SEEN(CALL_GET, kvp_get(c, NULL, 4, out, sizeof(out)));   /* EINVAL */
	/* off past end */
	SEEN(CALL_GET_RANGE, kvp_get_range(c, "k", 1, 5000, out, 10));
	/* 0 bytes */
	SEEN(CALL_GET_RANGE, kvp_get_range(c, "k", 1, 4096, out, 10));
	SEEN(CALL_EXISTS, kvp_exists(c, "k", 1));
	SEEN(CALL_EXISTS, kvp_exists(c, "k", 0));
	memset(&op, 0, sizeof(op));
	op.key = "k";
	op.klen = 1;
	op.buf = out;
	op.len = sizeof(out);
	SEEN(CALL_PREFIX, kvp_batch_exists_prefix(c, &op, 1));
	SEEN(CALL_PREFIX, op.status);
	SEEN(CALL_PREFIX, kvp_batch_exists_prefix(c, NULL, 1));
	SEEN(CALL_BATCH_GET, kvp_batch_get(c, NULL, 1));
	SEEN(CALL_BATCH_PUT, kvp_batch_put(c, &op, 1));
	SEEN(CALL_BATCH_PUT, op.status); /* EEXIST */
	SEEN(CALL_LOOKUP_PIN, kvp_batch_lookup_pin(c, &op, 1, &ps));
	SEEN(CALL_LOOKUP_PIN, op.status);
	SEEN(CALL_PINSET_TIER, kvp_pinset_tier(c, ps, 0));
	SEEN(CALL_PINSET_TIER, kvp_pinset_tier(c, ps, 1));
	SEEN(CALL_PINSET_GET, kvp_pinset_get(c, ps, &op, 1));
	SEEN(CALL_PINSET_GET, op.status);
	SEEN(CALL_PINSET_GET, kvp_pinset_get(c, ps, &op, 2)); /* n > count */
	kvp_pinset_free(c, ps);
	SEEN(CALL_LOOKUP_PIN, kvp_batch_lookup_pin(c, &op, 1, NULL));
	op.key = "zz";
	op.klen = 2;
	SEEN(CALL_LOOKUP_PIN, kvp_batch_lookup_pin(c, &op, 1, &ps));
	SEEN(CALL_LOOKUP_PIN, op.status); /* ENOENT */
	kvp_pinset_free(c, ps);
	SEEN(CALL_LEASE_ACQUIRE, kvp_lease_acquire(c, "k", 1, 1000, &l));
	SEEN(CALL_LEASE_RELEASE, kvp_lease_release(c, &l));
	SEEN(CALL_LEASE_RELEASE, kvp_lease_release(c, NULL));
	SEEN(CALL_LEASE_ACQUIRE, kvp_lease_acquire(c, "nope", 4, 1000, &l));
	SEEN(CALL_LEASE_ACQUIRE, kvp_lease_acquire(c, "k", 1, 0, &l));
	SEEN(CALL_DELETE, kvp_delete(c, "k", 1));
	SEEN(CALL_DELETE, kvp_delete(c, "k", 1)); /* ENOENT */
	SEEN(CALL_DELETE, kvp_delete(c, "k", 0));
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_status_documented),
		cmocka_unit_test(test_statuses_in_use),
		cmocka_unit_test(test_few_hold_slots),
	};

	return cmocka_run_group_tests(tests, kvpt_ssd_dir_setup,
				      kvpt_ssd_dir_teardown);
}
