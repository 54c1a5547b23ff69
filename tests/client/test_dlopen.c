/* SPDX-License-Identifier: MIT */
/*
 * test_dlopen.c - libkvpool.so.1 as an FFI loads it (Python ctypes does
 * this): dlopen() it from the directory of this program, find every call
 * of kvpool.h by name (in its version node, KVPOOL_1.0), find none of the
 * implementation by name, and serve a real kvpoold through the pointers:
 * kvp_open, kvp_put, kvp_get, kvp_exists, kvp_delete, kvp_strerror,
 * kvp_close.  kvpool.h is included with KVP_LINK_SHARED, for its types
 * only: nothing here is linked with the library or inlined from it.
 * Exit status 0 (pass) or 1, what failed on stderr.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KVP_LINK_SHARED
#include "kvpool.h"
#include "tests/client/client_test.h"

/* every call kvpool.h declares, with its version node (libkvpool.map) */
static const struct {
	const char *name, *version;
} api[] = {
	{ "kvp_open", "KVPOOL_1.0" },
	{ "kvp_close", "KVPOOL_1.0" },
	{ "kvp_put", "KVPOOL_1.0" },
	{ "kvp_get", "KVPOOL_1.0" },
	{ "kvp_get_range", "KVPOOL_1.0" },
	{ "kvp_exists", "KVPOOL_1.0" },
	{ "kvp_batch_exists_prefix", "KVPOOL_1.0" },
	{ "kvp_delete", "KVPOOL_1.0" },
	{ "kvp_batch_put", "KVPOOL_1.0" },
	{ "kvp_batch_get", "KVPOOL_1.0" },
	{ "kvp_batch_lookup_pin", "KVPOOL_1.0" },
	{ "kvp_pinset_get", "KVPOOL_1.0" },
	{ "kvp_pinset_count", "KVPOOL_1.0" },
	{ "kvp_pinset_len", "KVPOOL_1.0" },
	{ "kvp_pinset_tier", "KVPOOL_1.0" },
	{ "kvp_pinset_release", "KVPOOL_1.0" },
	{ "kvp_pinset_free", "KVPOOL_1.0" },
	{ "kvp_lease_acquire", "KVPOOL_1.0" },
	{ "kvp_lease_release", "KVPOOL_1.0" },
	{ "kvp_strerror", "KVPOOL_1.0" },
	{ "kvp_batch_put_chain", "KVPOOL_1.1" },
	{ "kvp_stat", "KVPOOL_1.2" },
	{ "kvp_batch_get_dev", "KVPOOL_1.3" },
	{ "kvp_dev_info", "KVPOOL_1.3" },
	{ "kvp_remote", "KVPOOL_1.4" },
	{ "kvp_batch_locate", "KVPOOL_1.4" },
	{ "kvp_ns_count", "KVPOOL_1.5" },
	{ "kvp_ns_event_name", "KVPOOL_1.5" },
	{ "kvp_status_name", "KVPOOL_1.5" },
	{ "kvp_statuses", "KVPOOL_1.5" },
	{ "kvp_version", "KVPOOL_1.5" },
};

/* names of the implementation a loader must not find (a sample of each
 * kind: the tools' mapping, kvp__ helpers, the modules' inline code, the
 * crash-point words) */
static const char *const hidden[] = {
	"kvp_seg_map", "kvp__put",     "kvp__read",      "kvp__seg_unmap",
	"kvp_ix_find", "kvp_ix_claim", "kvp_dram_alloc", "kvp_shm_bind",
	"kvp_hash",    "kvp_now_ns",   "kvp__crash_at",  "kvp_crash_arm",
	"kvp__maps",
};

#define FAIL(...)                                               \
	do {                                                    \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__);                   \
		fprintf(stderr, "\n");                          \
		return 1;                                       \
	} while (0)

struct lib {
	int (*open)(const char *, const char *, struct kvp_client **);
	void (*close)(struct kvp_client *);
	int (*put)(struct kvp_client *, const void *, uint32_t, const void *,
		   uint64_t);
	ssize_t (*get)(struct kvp_client *, const void *, uint32_t, void *,
		       uint64_t);
	int (*exists)(struct kvp_client *, const void *, uint32_t);
	int (*del)(struct kvp_client *, const void *, uint32_t);
	const char *(*strerror)(int);
};

/* dlsym's void * as a function pointer (POSIX guarantees it converts) */
#define SYM(h, name, fp)                                        \
	do {                                                    \
		void *p_ = dlsym(h, name);                      \
		if (!p_)                                        \
			FAIL("dlsym(%s): %s", name, dlerror()); \
		memcpy(&(fp), &p_, sizeof(p_));                 \
	} while (0)

static int
serve(struct lib *l, struct kvpc_agent *a)
{
	static const char key[] = "dlopen-key";
	unsigned char val[3000], out[3000];
	struct kvp_client *c = NULL;
	ssize_t got;
	unsigned k;
	int rc;

	for (k = 0; k < sizeof(val); k++)
		val[k] = (unsigned char)(k * 13 + 5);
	rc = kvpc_open_wait(a, l->open, "test_dlopen", &c, 20000);
	if (rc)
		FAIL("kvp_open: %d (%s)", rc, l->strerror(rc));
	rc = l->put(c, key, sizeof(key) - 1, val, sizeof(val));
	if (rc)
		FAIL("kvp_put: %d (%s)", rc, l->strerror(rc));
	rc = l->put(c, key, sizeof(key) - 1, val, sizeof(val));
	if (rc != -EEXIST)
		FAIL("second kvp_put: %d (%s), want -EEXIST", rc,
		     l->strerror(rc));
	got = l->get(c, key, sizeof(key) - 1, out, sizeof(out));
	if (got != (ssize_t)sizeof(val) || memcmp(out, val, sizeof(val)))
		FAIL("kvp_get: %zd, or the bytes differ", got);
	if (l->exists(c, key, sizeof(key) - 1) != 1)
		FAIL("kvp_exists: not there");
	rc = l->del(c, key, sizeof(key) - 1);
	if (rc)
		FAIL("kvp_delete: %d (%s)", rc, l->strerror(rc));
	got = l->get(c, key, sizeof(key) - 1, out, sizeof(out));
	if (got != -ENOENT)
		FAIL("kvp_get after delete: %zd, want -ENOENT", got);
	if (strcmp(l->strerror(-ENOENT), "MISS: no such key"))
		FAIL("kvp_strerror(-ENOENT): %s", l->strerror(-ENOENT));
	l->close(c);
	return 0;
}

int
main(void)
{
	char path[4200];
	struct kvpc_agent a;
	struct lib l;
	void *h;
	unsigned k;
	int rc, st;

	if (kvpc_bindir(path, sizeof(path) - 32))
		FAIL("no directory of this program");
	/* the SONAME, as a loader asks for it */
	strcat(path, "/libkvpool.so.1");
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		FAIL("dlopen(%s): %s", path, dlerror());
	for (k = 0; k < sizeof(api) / sizeof(api[0]); k++)
		if (!dlvsym(h, api[k].name, api[k].version))
			FAIL("%s@%s is not in the library: %s", api[k].name,
			     api[k].version, dlerror());
	for (k = 0; k < sizeof(hidden) / sizeof(hidden[0]); k++)
		if (dlsym(h, hidden[k]))
			FAIL("%s is exported: only kvpool.h's calls may be",
			     hidden[k]);
	printf("ok: %s exports the %zu calls of kvpool.h, none of %zu internal names\n",
	       path, sizeof(api) / sizeof(api[0]),
	       sizeof(hidden) / sizeof(hidden[0]));
	SYM(h, "kvp_open", l.open);
	SYM(h, "kvp_close", l.close);
	SYM(h, "kvp_put", l.put);
	SYM(h, "kvp_get", l.get);
	SYM(h, "kvp_exists", l.exists);
	SYM(h, "kvp_delete", l.del);
	SYM(h, "kvp_strerror", l.strerror);
	if (kvpc_agent_start(&a, "dlopen"))
		FAIL("cannot start kvpoold");
	rc = serve(&l, &a);
	st = kvpc_agent_stop(&a);
	if (st)
		FAIL("kvpoold did not stop cleanly (%d): see %s", st, a.log);
	if (rc)
		return 1;
	printf("ok: kvp_open, kvp_put, kvp_get, kvp_exists, kvp_delete, kvp_close through dlsym\n");
	dlclose(h);
	return 0;
}
