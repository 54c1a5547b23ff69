/* SPDX-License-Identifier: MIT */
/*
 * test_layout_swap.c - a client built with two header fields of the same
 * size swapped (KVP_TEST_SWAP_HEADER: h_ssd_used_bytes and
 * h_ssd_live_bytes trade places; every size, and so a signature of sizes
 * alone, is unchanged) must refuse a real agent's segment: its layout
 * signature differs from this ABI's, and kvp_open answers -EPROTO with
 * a message, instead of reading one counter as the other.  Standalone
 * (tests/client/client_test.h): the harness is built with the real
 * layout.  Exit status 0 (pass) or 1, what failed on stderr.
 */
#define KVP_TEST_SWAP_HEADER 1
#include "kvpool.h"
#include "tests/client/client_test.h"

#define FAIL(...)                                               \
	do {                                                    \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__);                   \
		fprintf(stderr, "\n");                          \
		goto out;                                       \
	} while (0)

int
main(void)
{
	struct kvpc_agent a = { .pid = -1 };
	struct kvp_client *c = NULL;
	struct kvp_shm_header h;
	char path[128];
	int rc, fd, ret = 1;

	/* the swap took: the two fields traded offsets */
	if (offsetof(struct kvp_shm_header, h_ssd_used_bytes) !=
	    offsetof(struct kvp_shm_header, h_ssd_live_bytes) + 8) {
		fprintf(stderr, "KVP_TEST_SWAP_HEADER swapped nothing\n");
		return 1;
	}
	if (kvpc_agent_start(&a, "swap"))
		FAIL("cannot start kvpoold");
	rc = kvpc_open_wait(&a, kvp_open, "ns", &c, 10000);
	if (rc != -EPROTO)
		FAIL("kvp_open of a segment with the other field order: %d (%s), "
		     "not -EPROTO",
		     rc, rc ? kvp_strerror(rc) : "opened");
	/* the agent wrote its signature; ours is another */
	snprintf(path, sizeof(path), "/dev/shm/kvpool.%s", a.pool);
	fd = open(path, O_RDONLY);
	if (fd < 0 || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		FAIL("cannot read the segment header at %s", path);
	close(fd);
	if (h.h_layout_sig == kvp_layout_sig())
		FAIL("the swapped build has the agent's signature %016llx",
		     (unsigned long long)h.h_layout_sig);
	if (h.h_abi_major != KVP_ABI_MAJOR)
		FAIL("agent ABI %u, this build %u: not the case under test",
		     h.h_abi_major, KVP_ABI_MAJOR);
	printf("swapped layout refused: agent %016llx, this build %016llx\n",
	       (unsigned long long)h.h_layout_sig,
	       (unsigned long long)kvp_layout_sig());
	ret = 0;
out:
	if (c)
		kvp_close(c);
	if (a.pid > 0 && kvpc_agent_stop(&a) != 0 && !ret) {
		fprintf(stderr, "kvpoold did not stop cleanly: see %s\n",
			a.log);
		ret = 1;
	}
	return ret;
}
