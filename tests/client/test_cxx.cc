// SPDX-License-Identifier: MIT
/*
 * test_cxx.cc - kvpool.h as a C++ engine uses it.  Compiled by g++
 * -std=c++17 -Wall -Wextra -Wpedantic (tests/run.sh compiles it once more
 * with -Werror: tests/client/test_cxx_header.sh), in two ways:
 *   test_cxx         header only: the whole inline implementation is
 *                    compiled as C++ (and must be correct C++ to build)
 *   test_cxx_shared  with KVP_LINK_SHARED, linked with libkvpool.so: the
 *                    declarations alone, struct kvp_client and struct
 *                    kvp_pinset opaque, every call served by the library
 * Each calls every public function against a real kvpoold and checks what
 * it answers.  Exit status 0 (pass) or 1, the failed check on stderr.
 */
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <dlfcn.h>

#include "kvpool.h"
#include "tests/client/client_test.h"

// The declarations say what the documentation says (a C++ engine's
// wrapper would be written against these types).
static_assert(
	std::is_same<decltype(&kvp_open),
		     int (*)(const char *, const char *, kvp_client **)>::value,
	"kvp_open");
static_assert(std::is_same<decltype(&kvp_get),
			   ssize_t (*)(kvp_client *, const void *, uint32_t,
				       void *, uint64_t)>::value,
	      "kvp_get");
static_assert(std::is_same<decltype(&kvp_batch_lookup_pin),
			   ssize_t (*)(kvp_client *, kvp_op *, size_t,
				       kvp_pinset **)>::value,
	      "kvp_batch_lookup_pin");
static_assert(std::is_standard_layout<kvp_op>::value &&
		      std::is_trivially_copyable<kvp_op>::value,
	      "struct kvp_op is a plain C struct");
static_assert(std::is_standard_layout<kvp_lease>::value,
	      "struct kvp_lease is a plain C struct");

template <typename T, typename = void> struct is_complete : std::false_type {
};
template <typename T>
struct is_complete<T, decltype(void(sizeof(T)))> : std::true_type {
};
#ifdef KVP_LINK_SHARED
static_assert(!is_complete<kvp_client>::value &&
		      !is_complete<kvp_pinset>::value,
	      "with -lkvpool the client and the pinset are opaque");
static const char mode[] = "-lkvpool (KVP_LINK_SHARED)";
#else
static const char mode[] = "header only";
#endif

#define CHECK(e)                                                          \
	do {                                                              \
		if (!(e)) {                                               \
			std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", \
				     __FILE__, __LINE__, #e);             \
			return 1;                                         \
		}                                                         \
	} while (0)

// a status: what it was and what it means, when it is not what we want
#define CHECK_RC(rc, want)                                                 \
	do {                                                               \
		long long rc_ = (long long)(rc);                           \
		if (rc_ != (long long)(want)) {                            \
			std::fprintf(stderr,                               \
				     "%s:%d: %s = %lld (%s), want %lld\n", \
				     __FILE__, __LINE__, #rc, rc_,         \
				     kvp_strerror((int)rc_),               \
				     (long long)(want));                   \
			return 1;                                          \
		}                                                          \
	} while (0)

// An engine's handle: closed however the scope ends.
struct client {
	kvp_client *c = nullptr;
	client() = default;
	client(const client &) = delete;
	client &operator=(const client &) = delete;
	~client()
	{
		kvp_close(c);
	}
};

static std::vector<unsigned char>
payload(int seed, size_t n)
{
	std::vector<unsigned char> v(n);

	for (size_t k = 0; k < n; k++)
		v[k] = (unsigned char)(seed * 131 + k * 7 + (k >> 8));
	return v;
}

static int
exercise(kvpc_agent *a)
{
	client cl;
	CHECK_RC(kvpc_open_wait(a, kvp_open, "test_cxx|fp16|page16", &cl.c,
				20000),
		 0);
	kvp_client *c = cl.c;

	// single keys
	const std::string key = "cxx-key";
	const uint32_t klen = (uint32_t)key.size();
	const std::vector<unsigned char> val = payload(1, 10000);
	std::vector<unsigned char> out(val.size());

	CHECK_RC(kvp_put(c, key.data(), klen, val.data(), val.size()), 0);
	CHECK_RC(kvp_put(c, key.data(), klen, val.data(), val.size()), -EEXIST);
	CHECK_RC(kvp_get(c, key.data(), klen, out.data(), out.size()),
		 val.size());
	CHECK(out == val);
	CHECK_RC(kvp_get(c, key.data(), klen, out.data(), 10), -EMSGSIZE);
	CHECK_RC(kvp_get_range(c, key.data(), klen, 100, out.data(), 50), 50);
	CHECK(std::memcmp(out.data(), val.data() + 100, 50) == 0);
	CHECK_RC(kvp_exists(c, key.data(), klen), 1);
	CHECK_RC(kvp_exists(c, "cxx-absent", 10), 0);
	CHECK_RC(kvp_put(c, nullptr, 0, val.data(), 1), -EINVAL);

	// batches
	const int n = 64;
	std::vector<std::string> keys(n + 1);
	std::vector<std::vector<unsigned char>> vals(n), bufs(n);
	std::vector<kvp_op> ops(n + 1);

	for (int i = 0; i <= n; i++) {
		keys[i] = i < n ? "cxx-batch-" + std::to_string(i) :
				  "cxx-absent";
		ops[i] = kvp_op{};
		ops[i].key = keys[i].data();
		ops[i].klen = (uint32_t)keys[i].size();
		if (i < n) {
			vals[i] = payload(i + 2, 512 + 37 * (size_t)i);
			ops[i].buf = vals[i].data();
			ops[i].len = vals[i].size();
		}
	}
	CHECK_RC(kvp_batch_put(c, ops.data(), n), n);
	for (int i = 0; i < n; i++)
		CHECK_RC(ops[i].status, 0);
	CHECK_RC(kvp_batch_exists_prefix(c, ops.data(), n + 1), n);
	CHECK_RC(ops[n].status, -ENOENT);
	for (int i = 0; i < n; i++) {
		bufs[i].assign(vals[i].size() + 16, 0);
		ops[i].buf = bufs[i].data();
		ops[i].off = 0;
		ops[i].len = bufs[i].size();
	}
	CHECK_RC(kvp_batch_get(c, ops.data(), n), n);
	for (int i = 0; i < n; i++) {
		CHECK_RC(ops[i].len, vals[i].size());
		CHECK(std::memcmp(bufs[i].data(), vals[i].data(),
				  vals[i].size()) == 0);
	}

	// lookup-and-pin
	kvp_pinset *ps = nullptr;
	CHECK_RC(kvp_batch_lookup_pin(c, ops.data(), n + 1, &ps), n);
	CHECK(ps != nullptr);
	CHECK_RC(kvp_pinset_count(ps), n);
	CHECK_RC(kvp_pinset_len(ps, 3), vals[3].size());
	CHECK_RC(kvp_pinset_tier(c, ps, 3), KVP_TIER_DRAM);
	CHECK_RC(kvp_pinset_tier(c, ps, n), -EINVAL);
	for (int i = 0; i < n; i++) {
		std::fill(bufs[i].begin(), bufs[i].end(), 0);
		ops[i].len = bufs[i].size();
	}
	CHECK_RC(kvp_pinset_get(c, ps, ops.data(), n), n);
	CHECK(std::memcmp(bufs[n - 1].data(), vals[n - 1].data(),
			  vals[n - 1].size()) == 0);
	kvp_pinset_release(c, ps);
	CHECK_RC(kvp_pinset_count(ps), 0);
	kvp_pinset_free(c, ps);

	// leases
	kvp_lease l;
	CHECK_RC(kvp_lease_acquire(c, key.data(), klen, 1000, &l), 0);
	CHECK_RC(l.len, val.size());
	CHECK_RC(l.tier, KVP_TIER_DRAM);
	CHECK_RC(kvp_lease_release(c, &l), 0);
	CHECK_RC(kvp_lease_release(c, &l), 0); // twice is harmless

	// delete
	CHECK_RC(kvp_delete(c, key.data(), klen), 0);
	CHECK_RC(kvp_get(c, key.data(), klen, out.data(), out.size()), -ENOENT);
	CHECK_RC(kvp_delete(c, key.data(), klen), -ENOENT);

	// statuses
	CHECK(std::string(kvp_strerror(-ENOENT)) == "MISS: no such key");
	CHECK(std::string(kvp_strerror(12345)) == "unknown status");
	return 0;
}

int
main()
{
	// where the calls come from: this program, or libkvpool.so.1
	Dl_info info;
	CHECK(dladdr(reinterpret_cast<void *>(&kvp_open), &info) &&
	      info.dli_fname);
#ifdef KVP_LINK_SHARED
	CHECK(std::strstr(info.dli_fname, "/libkvpool.so.1") != nullptr);
#else
	CHECK(std::strstr(info.dli_fname, "libkvpool") == nullptr);
#endif
	std::printf("%s: kvp_open from %s\n", mode, info.dli_fname);

	kvpc_agent a;
	CHECK(kvpc_agent_start(&a, "cxx") == 0);
	int rc = exercise(&a);
	int st = kvpc_agent_stop(&a);
	if (st != 0)
		std::fprintf(stderr,
			     "kvpoold did not stop cleanly (%d): see %s\n", st,
			     a.log);
	if (rc == 0 && st == 0)
		std::printf("ok: every call of kvpool.h from C++ (%s)\n", mode);
	return rc == 0 && st == 0 ? 0 : 1;
}
