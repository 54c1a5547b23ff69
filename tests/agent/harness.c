/* SPDX-License-Identifier: MIT */
/* harness.c - see harness.h. */
#include <libgen.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <stdarg.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

const char *
kvpt_bindir(void)
{
	static char dir[4096];

	if (!dir[0]) {
		char exe[4096];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n <= 0)
			return ".";
		exe[n] = '\0';
		snprintf(dir, sizeof(dir), "%s", dirname(exe));
	}
	return dir;
}

const char *
kvpt_run_tag(void)
{
	static char tag[17];
	static bool done;

	if (!done) {
		const char *t = getenv("KVPT_RUN");
		size_t i, n = t ? strlen(t) : 0;
		bool ok = n >= 1 && n < sizeof(tag);

		for (i = 0; ok && i < n; i++)
			ok = (t[i] >= 'a' && t[i] <= 'z') ||
			     (t[i] >= 'A' && t[i] <= 'Z') ||
			     (t[i] >= '0' && t[i] <= '9');
		if (ok)
			memcpy(tag, t, n + 1);
		else if (t)
			fprintf(stderr,
				"harness: KVPT_RUN='%s' ignored (want 1-16 of "
				"[A-Za-z0-9])\n",
				t);
		done = true;
	}
	return tag;
}

const char *
kvpt_log_dir(void)
{
	const char *d = getenv("KVPT_LOG_DIR");

	return d && d[0] == '/' && strlen(d) < 2048 ? d : "/tmp";
}

int
kvpt_pool_name(char *out, size_t cap, const char *fmt, ...)
{
	const char *tag = kvpt_run_tag();
	size_t n = 0;
	va_list ap;
	int m;

	if (tag[0]) {
		m = snprintf(out, cap, "%s.", tag);
		if (m < 0 || (size_t)m >= cap)
			return -1;
		n = (size_t)m;
	}
	va_start(ap, fmt);
	m = vsnprintf(out + n, cap - n, fmt, ap);
	va_end(ap);
	if (m < 0 || (size_t)m >= cap - n || n + (size_t)m >= KVP_POOL_NAME_MAX)
		return -1;
	return 0;
}

void
kvpt_agent_log(const char *pool, char *out, size_t cap)
{
	snprintf(out, cap, "%s/kvpt.%s.log", kvpt_log_dir(), pool);
}

long long
kvpt_wait_until(bool (*cond)(void *), void *arg, unsigned timeout_ms)
{
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC);
	struct timespec ts = { 0, 1000000 };

	for (;;) {
		uint64_t now;

		if (cond(arg))
			return (long long)(kvp_now_ns(CLOCK_MONOTONIC) - t0);
		now = kvp_now_ns(CLOCK_MONOTONIC);
		if (now - t0 > (uint64_t)timeout_ms * 1000000ull)
			return -1;
		nanosleep(&ts, NULL); /* poll interval of a deadline wait */
	}
}

uint64_t
kvpt_env_ms_ns(const char *name, unsigned dflt_ms)
{
	const char *v = getenv(name);
	char *end;
	unsigned long long ms = v ? strtoull(v, &end, 10) : dflt_ms;

	if (v && (end == v || *end))
		ms = dflt_ms; /* not a number: the default */
	return (uint64_t)ms * 1000000ull;
}

bool
kvpt_step_wait(const kvp_aword_t *p, uint64_t v, const kvp_aword_t *stop)
{
	unsigned n = 0;

	/* acquire: pairs with the other thread's release of *p */
	while (kvp_load_acquire(p) < v) {
		/* acquire: its stop store */
		if (stop && kvp_load_acquire(stop))
			return false;
		if (++n % 256 == 0)
			sched_yield(); /* fewer cores than threads */
	}
	return true;
}

void
kvpt_delay(uint64_t *seed, unsigned mask)
{
	static kvp_aword_t sink;
	unsigned n;

	*seed ^= *seed << 13;
	*seed ^= *seed >> 7;
	*seed ^= *seed << 17;
	for (n = 0; n < (*seed & mask); n++)
		kvp_load_relaxed(&sink); /* relaxed: a delay, nothing more */
}

struct kvpt_ready {
	struct kvpt_agent *a;
};

static bool
kvpt_agent_ready(void *arg)
{
	struct kvpt_agent *a = arg;
	struct kvp_seg s;
	char msg[256];
	bool up = false;
	int st;

	if (waitpid(a->pid, &st, WNOHANG) == a->pid) {
		a->pid = -1;
		return true; /* died: the caller sees pid -1 */
	}
	if (kvp_seg_map(a->pool, false, &s, msg, sizeof(msg)) == 0) {
		/* acquire-free check: the agent stores its pid after the
		 * lock */
		up = kvp_shm_agent_alive(&s) &&
		     kvp_load_relaxed(&s.hdr->h_agent_pid) == (uint64_t)a->pid;
		kvp__seg_unmap(&s);
	}
	return up;
}

/* The agent's DRAM tier is populated (agent/populate.c). */
static bool
kvpt_populated(void *arg)
{
	const struct kvp_seg *s = arg;

	return kvp_dram_capacity(s) == s->g.g_dram_pages;
}

static int
kvpt_spawn(struct kvpt_agent *a, const char *first, va_list ap)
{
	bool wait_populated = true;
	const char *arg;
	va_list scan;

	/* a test that watches the populate (--populate-rate) gets the agent
	 * as soon as it serves; every other test gets the pool it assumes,
	 * its whole DRAM tier there */
	va_copy(scan, ap);
	for (arg = first; arg; arg = va_arg(scan, const char *))
		if (!strcmp(arg, "--populate-rate"))
			wait_populated = false;
	va_end(scan);
	a->pid = fork();
	if (a->pid < 0)
		return -errno;
	if (a->pid == 0) {
		/* child: build argv here, so the parent allocates nothing */
		char *argv[64];
		char path[4200], fg[] = "--foreground", po[] = "--pool",
				 rm[] = "--reap-ms", rv[] = "50",
				 ma[] = "--metrics-addr", mo[] = "off",
				 hp[] = "--hugepages", ho[] = "off";
		int n = 0;

		snprintf(path, sizeof(path), "%s/kvpoold", kvpt_bindir());
		argv[n++] = path;
		argv[n++] = fg;
		argv[n++] = po;
		argv[n++] = a->pool;
		argv[n++] = rm;
		argv[n++] = rv;
		/* no /metrics unless the test asks (a later flag wins) */
		argv[n++] = ma;
		argv[n++] = mo;
		/* /dev/shm unless the run or the test asks for 2 MiB pages:
		 * on a host with a hugetlbfs mount that has room, --hugepages
		 * auto would put the segment there, and the tests of the
		 * segment file's modes, of a cut segment and of files in
		 * the SSD directory assume /dev/shm (tests/agent/
		 * test_hugepages.sh runs the pool tests on 2 MiB pages) */
		argv[n++] = hp;
		argv[n++] = ho;
		/* KVPT_AGENT_ARGS: flags every agent of the run gets (the
		 * pool tests again on another backing: tests/agent/
		 * test_hugepages.sh); the test's own come after and win */
		if (getenv("KVPT_AGENT_ARGS")) {
			char *extra = strdup(getenv("KVPT_AGENT_ARGS")), *save;
			char *tok = extra ? strtok_r(extra, " ", &save) : NULL;

			for (; tok && n < 40; tok = strtok_r(NULL, " ", &save))
				argv[n++] = tok;
		}
		for (arg = first; arg && n < 62; arg = va_arg(ap, const char *))
			argv[n++] = strdup(arg);
		argv[n] = NULL;
		/* the agent dies with the test, whatever way the test ends */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (!getenv("KVPT_AGENT_LOG")) {
			char log[2200];
			int fd;

			kvpt_agent_log(a->pool, log, sizeof(log));
			fd = open(log,
				  O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW,
				  0600);
			if (fd >= 0 && fd != 2) {
				dup2(fd, 2);
				close(fd);
			}
		}
		if (!freopen("/dev/null", "w", stdout))
			_exit(126);
		execv(path, argv);
		_exit(127);
	}
	if (kvpt_wait_until(kvpt_agent_ready, a, 20000) < 0 || a->pid < 0)
		return -ETIMEDOUT;
	if (wait_populated) {
		struct kvp_seg s;

		if (kvpt_seg_map(a->pool, &s) == 0) {
			/* a populate that stops short (tmpfs full) is the
			 * test's to see: at most 2 minutes */
			kvpt_wait_until(kvpt_populated, &s, 120000);
			kvp__seg_unmap(&s);
		}
	}
	return 0;
}

/* Pools this process created: removed at exit even when a failed
 * assertion skipped the test's own kvpt_agent_stop. */
static char kvpt_pools[64][64];
static unsigned kvpt_npools;
static pid_t kvpt_creator;

static void
kvpt_cleanup_at_exit(void)
{
	unsigned k;

	if (getpid() != kvpt_creator)
		return; /* a forked child exiting: not its pools */
	for (k = 0; k < kvpt_npools; k++)
		kvpt_pool_remove(kvpt_pools[k]);
}

static unsigned kvpt_pool_seq; /* the next pool's number */

int
kvpt_pool_next(char *out, size_t cap)
{
	return kvpt_pool_name(out, cap, "t%d_%u", (int)getpid(), kvpt_pool_seq);
}

/* A new pool name for a, recorded for removal at exit; 0 or -ENAMETOOLONG. */
static int
kvpt_pool_new(struct kvpt_agent *a)
{
	if (kvpt_npools == 0) {
		kvpt_creator = getpid();
		atexit(kvpt_cleanup_at_exit);
	}
	if (kvpt_pool_name(a->pool, sizeof(a->pool), "t%d_%u", (int)getpid(),
			   kvpt_pool_seq++))
		return -ENAMETOOLONG;
	if (kvpt_npools < 64)
		snprintf(kvpt_pools[kvpt_npools++], 64, "%s", a->pool);
	kvpt_pool_remove(a->pool);
	return 0;
}

static int
kvpt_agent_vstart(struct kvpt_agent *a, const char *arg, va_list ap)
{
	int rc = kvpt_pool_new(a);

	return rc ? rc : kvpt_spawn(a, arg, ap);
}

int
kvpt_agent_start(struct kvpt_agent *a, const char *arg, ...)
{
	va_list ap;
	int rc;

	va_start(ap, arg);
	rc = kvpt_agent_vstart(a, arg, ap);
	va_end(ap);
	return rc;
}

int
kvpt_agent_restart(struct kvpt_agent *a, const char *arg, ...)
{
	va_list ap;
	int rc;

	va_start(ap, arg);
	rc = kvpt_spawn(a, arg, ap);
	va_end(ap);
	return rc;
}

int
kvpt_agent_stop(struct kvpt_agent *a)
{
	int st = 0;

	if (a->pid > 0) {
		kill(a->pid, SIGTERM);
		waitpid(a->pid, &st, 0);
		a->pid = -1;
	}
	kvpt_pool_remove(a->pool);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void
kvpt_agent_kill(struct kvpt_agent *a)
{
	if (a->pid > 0) {
		kill(a->pid, SIGKILL);
		waitpid(a->pid, NULL, 0);
		a->pid = -1;
	}
}

int
kvpt_agent_pause(struct kvpt_agent *a)
{
	int st;

	if (a->pid <= 0 || kill(a->pid, SIGSTOP))
		return -1;
	if (waitpid(a->pid, &st, WUNTRACED) != a->pid || !WIFSTOPPED(st))
		return -1;
	return 0;
}

int
kvpt_pool_up(struct kvpt_agent *a, struct kvp_seg *s, struct kvp_client **c,
	     const char *arg, ...)
{
	va_list ap;
	int rc;

	va_start(ap, arg);
	rc = kvpt_agent_vstart(a, arg, ap);
	va_end(ap);
	if (!rc)
		rc = kvpt_seg_map(a->pool, s);
	if (!rc)
		rc = kvp_open(a->pool, "ns", c);
	return rc;
}

int
kvpt_pool_down(struct kvpt_agent *a, struct kvp_seg *s, struct kvp_client *c)
{
	kvp_close(c);
	kvp__seg_unmap(s);
	return kvpt_agent_stop(a);
}

void
kvpt_pool_remove(const char *pool)
{
	char name[128], path[320];
	int fd;

	snprintf(name, sizeof(name), "/kvpool.%s", pool);
	/* /dev/shm, or a hugetlbfs mount (kvpoold --hugepages) */
	fd = kvp_shm_open_path(name, O_RDONLY | O_NONBLOCK, path, sizeof(path));
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
}

int
kvpt_seg_map(const char *pool, struct kvp_seg *s)
{
	char msg[256];

	return kvp_seg_map(pool, false, s, msg, sizeof(msg));
}

int
kvpt_seg_bare(struct kvp_seg *s, uint64_t index_slots, uint32_t max_clients,
	      uint32_t holds_per_client, uint32_t max_leases)
{
	struct kvp_geom g;
	char msg[256];
	int rc;

	memset(s, 0, sizeof(*s));
	s->fd = -1;
	memset(&g, 0, sizeof(g));
	g.g_index_slots = index_slots;
	g.g_index_limit = index_slots;
	g.g_dram_unit = 4096;
	g.g_dram_pages = 1;
	g.g_max_value = 1;
	g.g_max_clients = max_clients;
	g.g_holds_per_client = holds_per_client;
	g.g_max_leases = max_leases;
	if (kvp_layout_compute(&g, &s->L, msg, sizeof(msg))) {
		fprintf(stderr, "kvpt_seg_bare: %s\n", msg);
		return -EINVAL;
	}
	g.g_seg_size = s->L.end;
	kvp_geom_seal(&g);
	s->fd = memfd_create("kvpt-bare", MFD_CLOEXEC);
	if (s->fd < 0)
		return -errno;
	s->size = g.g_seg_size;
	if (ftruncate(s->fd, (off_t)s->size) < 0)
		goto err_errno;
	s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd,
		       0);
	if (s->base == MAP_FAILED) {
		s->base = NULL;
		goto err_errno;
	}
	s->hdr = (struct kvp_shm_header *)s->base;
	s->hdr->h_magic = KVP_SHM_MAGIC;
	s->hdr->h_abi_major = KVP_ABI_MAJOR;
	s->hdr->h_abi_minor = KVP_ABI_MINOR;
	s->hdr->h_features = KVP_FEATURES;
	s->hdr->h_layout_sig = kvp_layout_sig();
	s->hdr->h_geom[0] = g;
	s->hdr->h_geom[1] = g;
	/* what a client checks before it binds, then the bind itself */
	rc = kvp_shm_check_header(s->hdr, msg, sizeof(msg));
	if (!rc)
		rc = kvp_shm_bind(s, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, "kvpt_seg_bare: %s\n", msg);
		kvp__seg_unmap(s);
	}
	return rc;
err_errno:
	rc = -errno;
	kvp__seg_unmap(s);
	return rc;
}

int64_t
kvpt_ix_put(struct kvp_seg *s, uint32_t cslot, uint64_t ns, const void *key,
	    size_t klen, uint64_t *w)
{
	int64_t i = kvp_ix_claim(s, cslot, ns, kvp_key_hash(ns, key, klen), key,
				 klen, w);

	if (i < 0)
		return i;
	if (kvp_ix_publish(s, (uint64_t)i, *w))
		return -ESTALE;
	/* acquire: the word the publish CAS installed */
	*w = kvp_load_acquire(&s->meta[i]);
	return i;
}

uint64_t
kvpt_count_state(const struct kvp_seg *s, unsigned state)
{
	uint64_t i, n = 0;

	for (i = 0; i < s->g.g_index_slots; i++)
		/* acquire: pairs with the state CASes */
		n += KVP_IX_STATE(kvp_load_acquire(&s->meta[i])) == state;
	return n;
}

uint64_t
kvpt_holds_total(const struct kvp_seg *s)
{
	uint64_t i,
		n = 0,
		total = (uint64_t)s->g.g_max_clients * s->g.g_holds_per_client;

	for (i = 0; i < total; i++)
		/* acquire: drop release */
		n += kvp_load_acquire(&s->holds[i]) != 0;
	return n;
}

uint64_t
kvpt_units_used(const struct kvp_seg *s)
{
	/* relaxed: mirrored under the allocator lock */
	return kvp_load_relaxed(&s->dram->dh_used_mirror);
}

uint64_t
kvpt_clients_nonfree(const struct kvp_seg *s)
{
	uint64_t n = 0;
	uint32_t i;

	for (i = 0; i < s->g.g_max_clients; i++)
		/* acquire: pairs with the FREE store-release */
		n += KVP_CS_STATE(kvp_load_acquire(&s->clients[i].cs_state)) !=
		     KVP_CS_FREE;
	return n;
}

uint64_t
kvpt_ctr_total(const struct kvp_seg *s, enum kvp_ctr k)
{
	uint64_t n = kvp_load_relaxed(&s->hdr->h_actr[KVP_ACTR_RETIRED0 + k]);
	uint32_t i;

	for (i = 0; i < s->g.g_max_clients; i++)
		/* relaxed: stats */
		n += kvp_load_relaxed(&s->clients[i].cs_ctr[k]);
	return n;
}

static uint64_t
kvpt_seed(const void *key, uint32_t klen, uint64_t version)
{
	return kvp_hash(version * 0x9e3779b97f4a7c15ull + 7, key, klen);
}

void
kvpt_fill(void *buf, uint64_t len, const void *key, uint32_t klen,
	  uint64_t version)
{
	uint64_t x = kvpt_seed(key, klen, version), i;
	unsigned char *b = buf;

	for (i = 0; i + 8 <= len; i += 8) {
		uint64_t v = x ^ (i * 0xff51afd7ed558ccdull);
		memcpy(b + i, &v, 8);
	}
	for (; i < len; i++)
		b[i] = (unsigned char)(x >> ((i % 8) * 8));
}

bool
kvpt_check(const void *buf, uint64_t len, const void *key, uint32_t klen,
	   uint64_t version)
{
	uint64_t x = kvpt_seed(key, klen, version), i;
	const unsigned char *b = buf;

	for (i = 0; i + 8 <= len; i += 8) {
		uint64_t v = x ^ (i * 0xff51afd7ed558ccdull), got;
		memcpy(&got, b + i, 8);
		if (got != v)
			return false;
	}
	for (; i < len; i++)
		if (b[i] != (unsigned char)(x >> ((i % 8) * 8)))
			return false;
	return true;
}

int
kvpt_put_keys(struct kvp_client *c, kvpt_key_fn key, int from, int to,
	      uint64_t vsize, uint64_t version)
{
	unsigned char *v = malloc(vsize);
	char k[300];
	int i, rc = 0;

	if (!v)
		return -ENOMEM;
	for (i = from; i < to && rc == 0; i++) {
		uint32_t kl = key(k, i);

		kvpt_fill(v, vsize, k, kl, version);
		while ((rc = kvp_put(c, k, kl, v, vsize)) == -EBUSY)
			;
	}
	free(v);
	return rc;
}

int
kvpt_wrong_keys(struct kvp_client *c, kvpt_key_fn key, int from, int to,
		uint64_t vsize, uint64_t version, bool retry_busy)
{
	unsigned char *v = malloc(vsize);
	char k[300];
	int i, wrong = 0;

	if (!v)
		return to - from;
	for (i = from; i < to; i++) {
		uint32_t kl = key(k, i);
		ssize_t got;
		bool ok;

		while ((got = kvp_get(c, k, kl, v, vsize)) == -EBUSY &&
		       retry_busy)
			;
		if (version == 0)
			ok = got == -ENOENT;
		else
			ok = got == (ssize_t)vsize &&
			     kvpt_check(v, vsize, k, kl, version);
		if (!ok && !wrong++)
			fprintf(stderr, "key %d: %zd bytes%s (want %s)\n", i,
				got, got == (ssize_t)vsize ? ", wrong" : "",
				version ? "its value" : "a miss");
	}
	free(v);
	return wrong;
}

int
kvpt_tmpdir(char *dir, size_t cap, const char *tag)
{
	if ((size_t)snprintf(dir, cap, "/var/tmp/kvpt-%s-%d-XXXXXX", tag,
			     (int)getpid()) >= cap)
		return -1;
	return mkdtemp(dir) ? 0 : -1;
}

char kvpt_ssd_dir[256];

int
kvpt_ssd_dir_setup(void **state)
{
	(void)state;
	return kvpt_tmpdir(kvpt_ssd_dir, sizeof(kvpt_ssd_dir),
			   program_invocation_short_name);
}

int
kvpt_ssd_dir_teardown(void **state)
{
	(void)state;
	return kvpt_tmpdir_remove(kvpt_ssd_dir);
}

int
kvpt_ssd_dir_fresh(void)
{
	return kvpt_tmpdir_empty(kvpt_ssd_dir);
}

int
kvpt_run(char *out, size_t cap, const char *fmt, ...)
{
	char cmd[8192], sink[4096];
	va_list ap;
	size_t n = 0;
	FILE *f;
	int m, st;

	va_start(ap, fmt);
	m = vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (m < 0 || (size_t)m >= sizeof(cmd))
		return -1;
	fflush(NULL); /* nothing of ours buffered twice in the child */
	f = popen(cmd, "r");
	if (!f)
		return -1;
	if (out && cap) {
		n = fread(out, 1, cap - 1, f);
		out[n] = '\0';
	}
	while (fread(sink, 1, sizeof(sink), f) > 0)
		; /* the rest: the command never blocks on a full pipe */
	st = pclose(f);
	return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int
kvpt_cli_check(const char *pool, int wait_ms, char *out, size_t cap)
{
	char wait[32] = "", own[8192];
	int st;

	if (wait_ms >= 0)
		snprintf(wait, sizeof(wait), " --wait %d", wait_ms);
	st = kvpt_run(out ? out : own, out ? cap : sizeof(own),
		      "%s/kvpool --pool %s check%s 2>&1", kvpt_bindir(), pool,
		      wait);
	if (!out && st != 0)
		fprintf(stderr, "kvpool --pool %s check: exit %d\n%s", pool, st,
			own);
	return st;
}

int
kvpt_tmpdir_remove(const char *dir)
{
	char cmd[1200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int
kvpt_tmpdir_empty(const char *dir)
{
	char cmd[2400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -m 0700 '%s'", dir,
		 dir);
	return system(cmd) == 0 ? 0 : -1;
}

bool
kvpt_present(struct kvp_client *c, const struct kvp_seg *s, const void *key,
	     uint32_t klen)
{
	uint64_t w;

	return kvp_ix_find(s, c->nsid, kvp_key_hash(c->nsid, key, klen), key,
			   klen, KVP_IX_M(KVP_IX_READY), &w) >= 0;
}

bool
kvpt_all_on_ssd(struct kvp_client *c, const struct kvp_seg *s, int n,
		kvpt_key_fn key)
{
	char k[300];
	int i;

	for (i = 0; i < n; i++) {
		uint32_t kl = key(k, i);
		uint64_t w;
		int64_t slot = kvp_ix_find(s, c->nsid,
					   kvp_key_hash(c->nsid, k, kl), k, kl,
					   KVP_IX_M(KVP_IX_READY), &w);

		/* relaxed: a test's look at a READY entry */
		if (slot < 0 ||
		    KVP_LOC_TIER(kvp_load_relaxed(&s->entries[slot].e_loc)) !=
			    KVP_TIER_SSD)
			return false;
	}
	return true;
}

struct kvpt_ssd_cond {
	struct kvp_client *c;
	const struct kvp_seg *s;
	int n;
	kvpt_key_fn key;
};

static bool
kvpt_ssd_cond_true(void *p)
{
	struct kvpt_ssd_cond *sc = p;

	return kvpt_all_on_ssd(sc->c, sc->s, sc->n, sc->key);
}

int
kvpt_put_and_demote(struct kvp_client *c, const struct kvp_seg *s, int n,
		    uint64_t vsize, kvpt_key_fn key, uint64_t version,
		    unsigned timeout_ms)
{
	struct kvpt_ssd_cond sc = { c, s, n, key };
	int rc = kvpt_put_keys(c, key, 0, n, vsize, version);

	if (rc)
		return rc;
	return kvpt_wait_until(kvpt_ssd_cond_true, &sc, timeout_ms) >= 0 ?
		       0 :
		       -ETIMEDOUT;
}

uint64_t
kvpt_actr(const struct kvp_seg *s, enum kvp_actr k)
{
	return kvp_load_relaxed(&s->hdr->h_actr[k]); /* relaxed: a statistic */
}

unsigned
kvpt_spans_in_use(const struct kvp_seg *s)
{
	unsigned n = 0;
	uint64_t k;

	for (k = 0; k < s->g.g_staging_slots; k++)
		/* acquire: pairs with the freer's FREE release */
		n += KVP_SP_STATE(kvp_load_acquire(&s->spans[k].sp_state)) !=
		     KVP_SP_FREE;
	return n;
}
