/* SPDX-License-Identifier: MIT */
/*
 * test_badinput.c - every kind of bad input gets its documented status,
 * and the pool stays consistent afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

static void
test_bad_keys_and_buffers(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	unsigned char key[256], val[100], out[100];
	struct kvp_op op;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", "--max-value",
					  "1M", NULL),
			 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	memset(key, 'k', sizeof(key));
	memset(val, 1, sizeof(val));
	/* empty key, NULL key, 256-byte key */
	assert_int_equal(kvp_put(c, key, 0, val, 10), -EINVAL);
	assert_int_equal(kvp_put(c, NULL, 5, val, 10), -EINVAL);
	assert_int_equal(kvp_put(c, key, 256, val, 10), -EINVAL);
	assert_int_equal(kvp_get(c, key, 0, out, 10), -EINVAL);
	assert_int_equal(kvp_get(c, key, 256, out, 10), -EINVAL);
	assert_int_equal(kvp_exists(c, key, 256), -EINVAL);
	assert_int_equal(kvp_delete(c, key, 0), -EINVAL);
	/* 255 bytes is the longest key */
	assert_int_equal(kvp_put(c, key, 255, val, 10), 0);
	assert_int_equal(kvp_get(c, key, 255, out, 100), 10);
	/* NULL buffers */
	assert_int_equal(kvp_put(c, "a", 1, NULL, 10), -EINVAL);
	assert_int_equal(kvp_get(c, key, 255, NULL, 10), -EINVAL);
	assert_int_equal(kvp_get_range(c, key, 255, 0, NULL, 5), -EINVAL);
	/* zero-length values are refused (documented in kvpool.h) */
	assert_int_equal(kvp_put(c, "z", 1, val, 0), -EINVAL);
	/* over --max-value: TOO_LARGE, before any work */
	{
		unsigned char *big = calloc(1, (1 << 20) + 1);
		assert_int_equal(kvp_put(c, "big", 3, big, (1 << 20) + 1),
				 -E2BIG);
		assert_int_equal(kvp_put(c, "big", 3, big, 1 << 20), 0);
		free(big);
	}
	/* batch with a bad op: per-key status, the rest served */
	memset(&op, 0, sizeof(op));
	op.key = NULL;
	op.klen = 3;
	op.buf = out;
	op.len = 10;
	assert_int_equal(kvp_batch_get(c, &op, 1), 0);
	assert_int_equal(op.status, -EINVAL);
	assert_int_equal(kvp_batch_put(c, NULL, 3), -EINVAL);
	assert_int_equal(kvp_batch_exists_prefix(c, &op, 1), 0);
	assert_int_equal(op.status, -EINVAL);
	assert_int_equal(kvp_put(NULL, "a", 1, val, 1), -EINVAL);
	/* a key count whose pinset arrays cannot be sized (29 bytes a key
	 * would wrap): refused before any allocation or write */
	{
		struct kvp_pinset *ps = (struct kvp_pinset *)1;
		struct kvp_op miss = { .key = "absent", .klen = 6 };

		assert_int_equal(kvp_batch_lookup_pin(c, &miss,
						      SIZE_MAX / 29 + 1, &ps),
				 -EINVAL);
		assert_null(ps);
		assert_int_equal(kvp_batch_lookup_pin(c, &miss, SIZE_MAX, &ps),
				 -EINVAL);
		/* the largest n that sizes is only as long as its ops: one
		 * absent key ends the prefix */
		assert_int_equal(kvp_batch_lookup_pin(c, &miss, 1, &ps), 0);
		assert_int_equal(miss.status, -ENOENT);
		kvp_pinset_free(c, ps);
	}

	/* the pool is consistent: exactly the two good puts, nothing held,
	 * nothing pending */
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	assert_int_equal(kvpt_count_state(&s, KVP_IX_READY), 2);
	assert_int_equal(kvpt_count_state(&s, KVP_IX_PENDING), 0);
	assert_int_equal(kvpt_holds_total(&s), 0);
	kvp__seg_unmap(&s);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

static void
test_namespaces_isolated(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *m1, *m2;
	unsigned char v1[64], v2[64], out[64];
	struct kvp_op op = { .key = "shared-key", .klen = 10 };

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", NULL), 0);
	assert_int_equal(kvp_open(a.pool, "model-a|layout-1", &m1), 0);
	assert_int_equal(kvp_open(a.pool, "model-b|layout-1", &m2), 0);
	memset(v1, 1, sizeof(v1));
	memset(v2, 2, sizeof(v2));
	assert_int_equal(kvp_put(m1, "shared-key", 10, v1, 64), 0);
	assert_int_equal(kvp_get(m2, "shared-key", 10, out, 64), -ENOENT);
	assert_int_equal(kvp_exists(m2, "shared-key", 10), 0);
	assert_int_equal(kvp_batch_exists_prefix(m2, &op, 1), 0);
	assert_int_equal(kvp_delete(m2, "shared-key", 10), -ENOENT);
	assert_int_equal(kvp_put(m2, "shared-key", 10, v2, 64), 0);
	assert_int_equal(kvp_get(m1, "shared-key", 10, out, 64), 64);
	assert_memory_equal(out, v1, 64);
	assert_int_equal(kvp_get(m2, "shared-key", 10, out, 64), 64);
	assert_memory_equal(out, v2, 64);
	kvp_close(m1);
	kvp_close(m2);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

static void
test_open_errors(void **state)
{
	struct kvp_client *c = (struct kvp_client *)1;
	char name[64], path[96];
	struct kvp_shm_header h;
	int fd;

	(void)state;
	/* no agent, no segment: UNAVAILABLE, with a message */
	assert_int_equal(kvpt_pool_name(name, sizeof(name), "kvpt_nobody_%d",
					(int)getpid()),
			 0);
	kvpt_pool_remove(name);
	assert_int_equal(kvp_open(name, "ns", &c), -ENOTCONN);
	assert_null(c);
	assert_int_equal(kvp_open("bad/name", "ns", &c), -EINVAL);
	assert_int_equal(kvp_open("x", "", &c), -EINVAL);
	assert_int_equal(kvp_open("x", "ns", NULL), -EINVAL);

	/* a segment from another ABI: -EPROTO, never mapped as ours */
	assert_int_equal(kvpt_pool_name(name, sizeof(name), "kvpt_abi_%d",
					(int)getpid()),
			 0);
	snprintf(path, sizeof(path), "/kvpool.%s", name);
	fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	memset(&h, 0, sizeof(h));
	h.h_magic = KVP_SHM_MAGIC;
	h.h_abi_major = KVP_ABI_MAJOR + 1;
	h.h_layout_sig = kvp_layout_sig();
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	assert_int_equal(kvp_open(name, "ns", &c), -EPROTO);
	h.h_abi_major = KVP_ABI_MAJOR;
	h.h_magic = 0x1234;
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	assert_int_equal(kvp_open(name, "ns", &c), -EPROTO);
	h.h_magic = KVP_SHM_MAGIC;
	h.h_layout_sig ^= 1;
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	assert_int_equal(kvp_open(name, "ns", &c), -EPROTO);
	/* our ABI, but no sound geometry in either copy */
	h.h_layout_sig ^= 1;
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	assert_int_equal(kvp_open(name, "ns", &c), -EPROTO);
	close(fd);
	shm_unlink(path);
}

/* A second agent on the same pool is refused; the first keeps serving. */
static void
test_second_agent_refused(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	char cmd[512];
	unsigned char v[8] = { 0 };

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", NULL), 0);
	snprintf(cmd, sizeof(cmd),
		 "%s/kvpoold --foreground --pool %s --dram 16M 2>/dev/null",
		 kvpt_bindir(), a.pool);
	assert_int_equal(WEXITSTATUS(system(cmd)), 1);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvp_put(c, "still", 5, v, 8), 0);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_keys_and_buffers),
		cmocka_unit_test(test_namespaces_isolated),
		cmocka_unit_test(test_open_errors),
		cmocka_unit_test(test_second_agent_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
