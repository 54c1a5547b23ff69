/* SPDX-License-Identifier: MIT */
/*
 * test_hostile.c - a client that writes the segment cannot kill the agent
 * or the pool (DESIGN-NOTES 9).
 *
 * Each test overwrites what a hostile or buggy process could (the
 * header's geometry, a run's length in the page map, the free bins, the
 * allocator's lock word) or stops a process inside the allocator, then
 * asserts: the agent is alive, the values nobody touched read back with
 * their bytes, puts work again (or answer -EBUSY within their bound while
 * a stopped process holds the lock), `kvpool check` names the damage
 * while it lasts and is clean once the agent repaired it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

#define NV 40
#define VSZ (48u << 10)

static uint32_t
key_of(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x-hostile-%d",
				  (unsigned)i * 2654435761u, i);
}

/* A writable view of the pool: what a hostile process maps. */
static void
map_rw(const char *pool, struct kvp_seg *s)
{
	char msg[256];

	assert_int_equal(kvp_seg_map(pool, true, s, msg, sizeof(msg)), 0);
}

/* Values 0..n-1 (version 1) put, retrying BUSY. */
#define put_all(c, n) \
	assert_int_equal(kvpt_put_keys(c, key_of, 0, n, VSZ, 1), 0)
/* Every value 0..n-1 reads back whole with its bytes (BUSY asked again). */
#define verify_all(c, n) \
	assert_int_equal(kvpt_wrong_keys(c, key_of, 0, n, VSZ, 1, true), 0)

static bool
agent_alive(const struct kvpt_agent *a)
{
	return a->pid > 0 && waitpid(a->pid, NULL, WNOHANG) == 0;
}

/* A client process that holds a client slot (and a hold) until told to
 * die: opened before the header is damaged, it dies after, so the reaper
 * has a slot to reap with the damaged header in place. */
struct dier {
	pid_t pid;
	int go[2];
};

static void
dier_start(struct dier *d, const char *pool)
{
	int ready[2];
	char b;

	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(d->go), 0);
	d->pid = fork();
	assert_true(d->pid >= 0);
	if (d->pid == 0) {
		struct kvp_client *c;
		unsigned char v[64];
		char k[100];
		uint32_t kl = key_of(k, 0);

		if (kvp_open(pool, "ns", &c))
			_exit(2);
		kvp_get_range(c, k, kl, 0, v, sizeof(v)); /* a hold, dropped */
		if (write(ready[1], "r", 1) != 1 || read(d->go[0], &b, 1) != 1)
			_exit(3);
		_exit(0); /* dies without kvp_close */
	}
	assert_int_equal(read(ready[0], &b, 1), 1);
	close(ready[0]);
	close(ready[1]);
}

static void
dier_die(struct dier *d)
{
	int st;

	assert_int_equal(write(d->go[1], "g", 1), 1);
	assert_int_equal(waitpid(d->pid, &st, 0), d->pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(d->go[0]);
	close(d->go[1]);
}

static bool
no_client_but(void *p)
{
	return kvpt_clients_nonfree(p) == 1;
}

struct geom_cond {
	struct kvp_seg *s;
	struct kvp_geom want;
};

static bool
geom_restored(void *p)
{
	struct geom_cond *g = p;

	return !memcmp(&g->s->hdr->h_geom[0], &g->want, sizeof(g->want)) &&
	       !memcmp(&g->s->hdr->h_geom[1], &g->want, sizeof(g->want));
}

/*
 * The geometry in the header: one copy overwritten (h_max_clients = 4e9,
 * as the issue found), both copies overwritten (200 clients, 2^20 holds
 * per client), with clients dying meanwhile so the reaper runs: the agent
 * lives on its private geometry, restores both copies, every value reads
 * back, a new client can open.  An agent killed right after a copy was
 * overwritten attaches again from the other copy.
 */
static void
test_geometry_overwritten(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c, *c2;
	struct kvp_seg ws;
	struct geom_cond gc;
	struct dier d;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", "--max-clients",
					  "16", NULL),
			 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	put_all(c, NV);
	map_rw(a.pool, &ws);
	gc.s = &ws;
	gc.want = ws.g;

	dier_start(&d, a.pool);
	ws.hdr->h_geom[0].g_max_clients = 4000000000u;
	dier_die(&d);
	assert_int_equal(kvp_open(a.pool, "ns", &c2), 0); /* the other copy */
	kvp_close(c2);
	assert_true(kvpt_wait_until(geom_restored, &gc, 5000) >= 0);
	/* reaped */
	assert_true(kvpt_wait_until(no_client_but, &ws, 5000) >= 0);
	assert_true(agent_alive(&a));

	dier_start(&d, a.pool);
	ws.hdr->h_geom[0].g_max_clients = 200;
	ws.hdr->h_geom[1].g_max_clients = 200;
	ws.hdr->h_geom[0].g_holds_per_client = 1u << 20;
	ws.hdr->h_geom[1].g_holds_per_client = 1u << 20;
	dier_die(&d);
	assert_true(kvpt_wait_until(geom_restored, &gc, 5000) >= 0);
	assert_true(kvpt_wait_until(no_client_but, &ws, 5000) >= 0);
	assert_true(agent_alive(&a));
	assert_int_equal(kvp_open(a.pool, "ns", &c2), 0);
	verify_all(c2, NV);
	kvp_close(c2);
	verify_all(c, NV);

	/* the agent dies right after one copy was overwritten: the next
	 * one attaches from the other copy and restores the first */
	ws.hdr->h_geom[1].g_index_slots = 3;
	kvpt_agent_kill(&a);
	assert_int_equal(kvpt_agent_restart(&a, "--dram", "16M",
					    "--max-clients", "16", NULL),
			 0);
	assert_true(kvpt_wait_until(geom_restored, &gc, 5000) >= 0);
	verify_all(c, NV);
	assert_int_equal(kvpt_cli_check(a.pool, 3000, NULL, 0), 0);

	/* both copies overwritten while no agent runs: nothing can tell the
	 * true geometry; the agent and clients refuse it, clearly, and
	 * nothing crashes */
	kvpt_agent_kill(&a);
	ws.hdr->h_geom[0].g_dram_pages = 7;
	ws.hdr->h_geom[1].g_dram_pages = 7;
	assert_int_equal(kvp_open(a.pool, "ns", &c2), -EPROTO);
	assert_int_equal(kvpt_agent_restart(&a, "--dram", "16M",
					    "--max-clients", "16", NULL),
			 -ETIMEDOUT);
	kvp__seg_unmap(&ws);
	kvp_close(c);
	kvpt_pool_remove(a.pool);
}

/* A run's length in the page map overwritten (0x40000000 units) on the
 * hostile client's own value: `kvpool check` names it (I7); deleting that
 * value makes the agent's free find the damage; the agent rebuilds the
 * map from the index; the other values read back, puts work, check is
 * clean.  The same with a free bin pointing outside the arena. */
static void
test_page_map_overwritten(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c, *bad;
	struct kvp_seg ws;
	unsigned char *v = malloc(VSZ);
	char out[8192];
	uint64_t w, loc;
	int64_t slot;
	int rc;

	(void)state;
	assert_non_null(v);
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", "--dram-unit",
					  "16K", NULL),
			 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &bad), 0);
	put_all(c, NV);
	memset(v, 7, VSZ);
	assert_int_equal(kvp_put(bad, "mine", 4, v, VSZ), 0);
	map_rw(a.pool, &ws);
	slot = kvp_ix_find(&ws, bad->nsid, kvp_key_hash(bad->nsid, "mine", 4),
			   "mine", 4, KVP_IX_M(KVP_IX_READY), &w);
	assert_true(slot >= 0);
	loc = kvp_load_relaxed(&ws.entries[slot].e_loc);
	ws.pages[KVP_LOC_VAL(loc)].pg_npages = 0x40000000u;
	assert_int_equal(kvpt_cli_check(a.pool, 0, out, sizeof(out)), 1);
	assert_non_null(strstr(out, "I7"));
	assert_int_equal(kvp_delete(bad, "mine", 4), 0);
	if (kvpt_cli_check(a.pool, 5000, out, sizeof(out)))
		fail_msg("after the repair: %s", out);
	assert_true(agent_alive(&a));
	verify_all(c, NV);
	assert_int_equal(kvp_put(bad, "mine2", 5, v, VSZ), 0);

	/* a bin that leads out of the arena: the next allocation finds it */
	ws.dram->dh_bin[2] = 0xfffffff0u;
	ws.dram->dh_bin[KVP_DRAM_BINS - 1] = 0xfffffff0u;
	do
		rc = kvp_put(bad, "mine3", 5, v, VSZ);
	while (rc == -EBUSY);
	assert_int_equal(rc, 0);
	assert_true(agent_alive(&a));
	assert_int_equal(kvpt_cli_check(a.pool, 5000, NULL, 0), 0);
	verify_all(c, NV);
	kvp__seg_unmap(&ws);
	kvp_close(bad);
	kvp_close(c);
	free(v);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

/* A process that takes the allocator lock and stops (a debugger, a
 * frozen cgroup): puts answer -EBUSY within KVP_PUT_WAIT_MS + 10 ms (plus
 * what the host adds to a plain timed wait of that length meanwhile),
 * gets are unaffected (DRAM hits, and SSD reads, staged since nothing
 * can be promoted), the agent reclaims deleted values (their frees wait
 * in its own memory); once the process goes on, everything is freed and
 * puts succeed. */
static void
test_stopped_lock_holder(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	unsigned char *v = malloc(VSZ);
	char k[100];
	uint64_t t0, worst = 0, late = 0;
	pid_t holder;
	int i, st, nssd = 0;

	(void)state;
	assert_non_null(v);
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	setenv("KVP_PUT_WAIT_MS", "50", 1);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "8M", "--dram-unit",
				      "16K", "--ssd-dir", kvpt_ssd_dir,
				      "--ssd-segment", "4M", "--staging", "2M",
				      "--staging-slot", "64K", NULL),
			 0);
	/* more than the DRAM tier holds: the oldest are demoted */
	put_all(c, 200);
	for (i = 0; i < 200; i++) {
		uint32_t kl = key_of(k, i);
		uint64_t w;
		int64_t sl = kvp_ix_find(&s, c->nsid,
					 kvp_key_hash(c->nsid, k, kl), k, kl,
					 KVP_IX_M(KVP_IX_READY), &w);
		/* relaxed: a test's look */
		nssd += sl >= 0 &&
			KVP_LOC_TIER(kvp_load_relaxed(&s.entries[sl].e_loc)) ==
				KVP_TIER_SSD;
	}
	assert_true(nssd >= 20);
	holder = fork();
	assert_true(holder >= 0);
	if (holder == 0) {
		struct kvp_client *hc;

		if (kvp_open(a.pool, "ns", &hc) || kvp_dram_lock(&hc->seg))
			_exit(2);
		raise(SIGSTOP);
		kvp_dram_unlock(&hc->seg);
		kvp_close(hc);
		_exit(0);
	}
	assert_int_equal(waitpid(holder, &st, WUNTRACED), holder);
	assert_true(WIFSTOPPED(st));
	for (i = 0; i < 5; i++) {
		char nk[32];
		int n = snprintf(nk, sizeof(nk), "new-%d", i);
		kvp_aint_t never = 0;

		t0 = kvp_now_ns(CLOCK_MONOTONIC);
		assert_int_equal(kvp_put(c, nk, (uint32_t)n, v, VSZ), -EBUSY);
		t0 = kvp_now_ns(CLOCK_MONOTONIC) - t0;
		if (t0 > worst)
			worst = t0;
		/* what the machine adds to any 50 ms timed wait right now
		 * (a loaded CI host can hold a woken thread off its core for
		 * tens of ms): the bound below is the put's, not the
		 * scheduler's */
		t0 = kvp_now_ns(CLOCK_MONOTONIC);
		kvp_futex_wait(&never, 0, 50000000ull);
		t0 = kvp_now_ns(CLOCK_MONOTONIC) - t0;
		if (t0 > 50000000ull && t0 - 50000000ull > late)
			late = t0 - 50000000ull;
	}
	printf("  a put with the allocator lock held by a stopped process: -EBUSY "
	       "after %.1f ms at worst (a plain 50 ms wait overran by %.1f ms "
	       "at worst)\n",
	       (double)worst / 1e6, (double)late / 1e6);
	assert_true(worst < 60ull * 1000 * 1000 + late);
	/* every value reads back: DRAM hits, SSD reads through staging */
	verify_all(c, 200);
	/* deletes are reclaimed by the agent meanwhile (frees deferred) */
	for (i = 0; i < 10; i++) {
		uint32_t kl = key_of(k, i);
		assert_int_equal(kvp_delete(c, k, kl), 0);
	}
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	while (kvpt_count_state(&s, KVP_IX_DELETED) &&
	       kvp_now_ns(CLOCK_MONOTONIC) - t0 < 5000000000ull)
		kvp_futex_wait(&s.hdr->h_space_seq,
			       kvp_iload_acquire(&s.hdr->h_space_seq),
			       10000000ull);
	assert_int_equal(kvpt_count_state(&s, KVP_IX_DELETED), 0);
	assert_true(agent_alive(&a));
	kill(holder, SIGCONT);
	assert_int_equal(waitpid(holder, &st, 0), holder);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* the deferred frees land; puts succeed again */
	for (i = 0; i < 5; i++) {
		char nk[32];
		int n = snprintf(nk, sizeof(nk), "new-%d", i), rc;

		while ((rc = kvp_put(c, nk, (uint32_t)n, v, VSZ)) == -EBUSY)
			;
		assert_int_equal(rc, 0);
	}
	assert_int_equal(kvpt_cli_check(a.pool, 5000, NULL, 0), 0);
	unsetenv("KVP_PUT_WAIT_MS");
	free(v);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/* The allocator's lock word overwritten: with a word no holder claims
 * (naming a live client, or no client at all), the next locker takes it
 * over at once; with a word whose claim is forged too (two writes), the
 * lock looks held by a live client: puts answer -EBUSY within their bound
 * (never hang) and the agent's frees wait, until the word is released.
 * Every value reads back throughout; the agent lives. */
static void
test_forged_lock_word(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c, *c2;
	struct kvp_seg ws;
	unsigned char *v = malloc(VSZ);
	uint64_t t0;
	int rc;

	(void)state;
	assert_non_null(v);
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", NULL), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	put_all(c, NV);
	map_rw(a.pool, &ws);
	memset(v, 1, VSZ);
	/* a word naming our own (live) client, which claims nothing */
	kvp_istore_release(&ws.dram->dh_lock, (0x1234u << 16) | (c->slot + 1));
	assert_int_equal(kvp_put(c, "x1", 2, v, VSZ), 0);
	/* a word that is no token at all */
	kvp_istore_release(&ws.dram->dh_lock, 0x7654fff0u);
	assert_int_equal(kvp_put(c, "x2", 2, v, VSZ), 0);
	/* a word with a forged claim of another live client: held, as far
	 * as anyone can tell */
	assert_int_equal(kvp_open(a.pool, "ns", &c2), 0);
	kvp_istore_release(&ws.clients[c2->slot].cs_alloc_claim,
			   (0x55u << 16) | (c2->slot + 1));
	kvp_istore_release(&ws.dram->dh_lock, (0x55u << 16) | (c2->slot + 1));
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	rc = kvp_put(c, "x3", 2, v, VSZ);
	t0 = kvp_now_ns(CLOCK_MONOTONIC) - t0;
	assert_int_equal(rc, -EBUSY);
	assert_true(t0 < 200ull * 1000 * 1000);
	{
		char k[100];
		uint32_t kl = key_of(k, NV - 1);
		assert_int_equal(kvp_delete(c, k, kl), 0); /* its free waits */
	}
	verify_all(c, NV - 1);
	assert_true(agent_alive(&a));
	kvp_istore_release(&ws.dram->dh_lock, 0);
	kvp_istore_release(&ws.clients[c2->slot].cs_alloc_claim, 0);
	kvp_close(c2);
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	while ((rc = kvp_put(c, "x3", 2, v, VSZ)) == -EBUSY &&
	       kvp_now_ns(CLOCK_MONOTONIC) - t0 < 10000000000ull)
		;
	assert_int_equal(rc, 0);
	assert_true(agent_alive(&a));
	verify_all(c, NV - 1);
	assert_int_equal(kvpt_cli_check(a.pool, 5000, NULL, 0), 0);
	kvp__seg_unmap(&ws);
	kvp_close(c);
	free(v);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

/* Staging geometry overwritten (h_staging_slots = 1e8, both copies),
 * then a client dies: the tier thread and the reaper use their own
 * geometry; SSD reads go on. */
static void
test_staging_geometry_overwritten(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg ws;
	struct dier d;

	(void)state;
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	assert_int_equal(kvpt_agent_start(&a, "--dram", "8M", "--dram-unit",
					  "16K", "--dram-high", "0",
					  "--dram-low", "0", "--ssd-dir",
					  kvpt_ssd_dir, "--ssd-segment", "4M",
					  "--staging", "1M", "--staging-slot",
					  "64K", NULL),
			 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	map_rw(a.pool, &ws);
	assert_int_equal(kvpt_put_and_demote(c, &ws, NV, VSZ, key_of, 1, 30000),
			 0);
	dier_start(&d, a.pool);
	ws.hdr->h_geom[0].g_staging_slots = 100000000;
	ws.hdr->h_geom[1].g_staging_slots = 100000000;
	dier_die(&d);
	verify_all(c, NV);
	assert_true(kvpt_wait_until(no_client_but, &ws, 5000) >= 0);
	assert_true(agent_alive(&a));
	verify_all(c, NV);
	kvp__seg_unmap(&ws);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

/* ---- a client that cuts the segment file (ftruncate) ---- */

struct cut_wait {
	const char *path;
	uint64_t size;
	char log[4200];
	const char *what;
};

static bool
cut_restored(void *p)
{
	const struct cut_wait *w = p;
	struct stat st;

	return stat(w->path, &st) == 0 && (uint64_t)st.st_size == w->size;
}

static bool
cut_logged(void *p)
{
	const struct cut_wait *w = p;
	char line[1024];
	bool found = false;
	FILE *f = fopen(w->log, "r");

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, w->what) != NULL;
	if (f)
		fclose(f);
	return found;
}

static bool
cut_open(void *p)
{
	struct kvp_client *c;
	const struct cut_wait *w = p;

	if (kvp_open(w->what, "ns", &c))
		return false;
	kvp_close(c);
	return true;
}

/* Every key 0..n-1 reads whole (version 1) or is a miss: never the zeros
 * a cut left.  Returns the number read whole. */
static int
cut_verify(struct kvp_client *c, int n, unsigned char *out, uint64_t vsz)
{
	int i, whole = 0;

	for (i = 0; i < n; i++) {
		char k[100];
		uint32_t kl = key_of(k, i);
		ssize_t r = kvp_get(c, k, kl, out, vsz);

		if (r == -ENOENT)
			continue;
		assert_int_equal(r, vsz);
		assert_true(kvpt_check(out, vsz, k, kl, 1));
		whole++;
	}
	return whole;
}

/*
 * A client cuts the segment file mid-arena, then to nothing: the agent
 * survives (its faults past the cut are served the restored size), the
 * values whose DRAM bytes the cut zeroed leave the index before anyone is
 * told the cut was handled, the others read back whole, the header is
 * restored, puts and gets work, and `kvpool check` is clean.
 */
static void
test_cut_segment(void **state)
{
	enum {
		N = 40,
		SZ = 1 << 20
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct cut_wait w;
	unsigned char *v = malloc(SZ), *out = malloc(SZ);
	int i, whole;

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "64M",
				      "--max-value", "1M", NULL),
			 0);
	for (i = 0; i < N; i++) {
		char k[100];
		uint32_t kl = key_of(k, i);

		kvpt_fill(v, SZ, k, kl, 1);
		assert_int_equal(kvp_put(c, k, kl, v, SZ), 0);
	}
	memset(&w, 0, sizeof(w));
	w.path = s.path;
	w.size = s.size;
	kvpt_agent_log(a.pool, w.log, sizeof(w.log));
	/* cut 20 MiB into the arena; touch nothing mapped until restored */
	assert_int_equal(truncate(s.path,
				  (off_t)(s.L.off[KVP_R_ARENA] + (20u << 20))),
			 0);
	assert_true(kvpt_wait_until(cut_restored, &w, 5000) >= 0);
	w.what = "past the cut left DRAM";
	assert_true(kvpt_wait_until(cut_logged, &w, 10000) >= 0);
	assert_true(agent_alive(&a));
	whole = cut_verify(c, N, out, SZ);
	print_message("  cut mid-arena: %d of %d values whole, the rest "
		      "misses\n",
		      whole, N);
	assert_true(whole >= 10 && whole <= N - 10);
	kvpt_fill(v, SZ, "after", 5, 2);
	assert_int_equal(kvp_put(c, "after", 5, v, SZ), 0);
	assert_int_equal(kvp_get(c, "after", 5, out, SZ), SZ);
	assert_true(kvpt_check(out, SZ, "after", 5, 2));
	assert_int_equal(kvpt_cli_check(a.pool, 5000, NULL, 0), 0);

	/* to nothing: the header too */
	assert_int_equal(truncate(s.path, 0), 0);
	assert_true(kvpt_wait_until(cut_restored, &w, 5000) >= 0);
	w.what = a.pool;
	assert_true(kvpt_wait_until(cut_open, &w, 5000) >= 0);
	assert_true(agent_alive(&a));
	/* the client table was cut too: this client's slot is gone (its
	 * calls that check answer -ESTALE): a new one */
	assert_int_equal(kvp_put(c, "x", 1, v, 4096), -ESTALE);
	kvp_close(c);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(cut_verify(c, N, out, SZ), 0);
	assert_int_equal(kvp_get(c, "after", 5, out, SZ), -ENOENT);
	assert_int_equal(kvp_put(c, "after", 5, v, SZ), 0);
	assert_int_equal(kvp_get(c, "after", 5, out, SZ), SZ);
	assert_true(kvpt_check(out, SZ, "after", 5, 2));
	assert_int_equal(kvpt_cli_check(a.pool, 5000, NULL, 0), 0);
	free(v);
	free(out);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_geometry_overwritten),
		cmocka_unit_test(test_page_map_overwritten),
		cmocka_unit_test(test_stopped_lock_holder),
		cmocka_unit_test(test_forged_lock_word),
		cmocka_unit_test(test_staging_geometry_overwritten),
		cmocka_unit_test(test_cut_segment),
	};

	return cmocka_run_group_tests(tests, kvpt_ssd_dir_setup,
				      kvpt_ssd_dir_teardown);
}
