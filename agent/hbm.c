/* SPDX-License-Identifier: MIT */
/*
 * hbm.c - the HBM tier from the agent's side (docs/design.md, "The HBM
 * tier"): one helper per --hbm-gpu (kvpool-gpud, agent/gpud.c) owns the
 * GPU's pool; the agent starts and supervises it, decides what is copied
 * into the pool (promotion of DRAM values that were hit), allocates the
 * pool's units in its own memory, publishes each copy in the HBM map, and
 * takes copies back (HBM pressure, values that left the index).
 *
 * A copy is an extra: the entry keeps its DRAM or SSD location, so
 * dropping a copy loses nothing (copy first, free after, trivially) and a
 * reader that cannot use a copy reads the value where it always did.
 *
 * Why a word published here is never stale for a reader that uses it:
 *  1. The helper answers a copy only after the bytes are in the block,
 *     read under a hold at the generation the agent named (else -ENOENT).
 *  2. The agent publishes the word (release) only if the slot is still at
 *     that generation.  Only this thread (the tier thread) takes a slot
 *     out of the index, so it cannot change between that check and the
 *     store.
 *  3. A reader uses a word only under its hold of the slot, only if the
 *     word's index generation is its own and the GPU's slot is UP at the
 *     word's pool generation (shm/client_dev_int.h).
 *  4. The agent frees a block only (a) once the slot left the index or
 *     moved to another generation, which it does only for unheld entries
 *     (I4-I6): no reader of the old generation remains; or (b) under
 *     CHECK with the hold scan finding no hold, after clearing the word
 *     (a reader that holds after that sees no word).
 *  5. A helper that dies takes its generation with it: the GPU slot goes
 *     DOWN (release) with a new generation at the next start, and every
 *     word of the old one is ignored from then on.  A reader that checked
 *     UP just before may still copy from its import of the dead pool: an
 *     importer's mapping keeps that memory (CUDA's pool IPC counts
 *     references), and nobody writes it any more, so it reads the bytes
 *     that were published.  The blocks of a dead pool are forgotten, not
 *     reused, and its words are cleared (so a pool generation, 12 bits in
 *     a word, never wraps onto an old one).
 *
 * Tier thread only, but start (main, before the threads) and stop (main,
 * after them).
 */
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "agent/tier_int.h"
#include "tiers/kvp_hbm.h"

#define KVP_HBM_INFLIGHT 8      /* copies asked of one helper at a time */
#define KVP_HBM_SCAN 4096       /* index slots looked at per round */
#define KVP_HBM_RESTART_MS 1000 /* first restart delay (doubles, 30 s) */

struct kvp_hbm_alloc {
	uint64_t slot;
	uint64_t tag;   /* its copy request (0: published) */
	uint32_t ixgen; /* the slot's generation (full) */
	uint32_t unit, n;
};

struct kvp_hbm_gpu {
	int device;
	unsigned k; /* its slot in h_gpu[] */
	int state;  /* enum kvp_gpu_state */
	pid_t pid;
	int ctl;
	uint64_t gen;
	uint64_t nonce; /* its socket name's unguessable part (gs_nonce) */
	uint64_t restart_ns, backoff_ms;
	bool off_for_good; /* no runtime or device: said once */
	uint64_t bytes, unit, nunits, nfree, cursor;
	uint8_t *used; /* a byte per unit */
	struct kvp_hbm_alloc *al;
	size_t nal, capal;
	size_t sweep; /* the sweep's place in al[] */
	uint64_t rng; /* eviction's sampling */
	unsigned inflight;
};

struct kvp_hbm {
	unsigned n;
	struct kvp_hbm_gpu g[KVP_GPU_MAX];
	uint64_t scan, tag;
	char exe[4096]; /* kvpool-gpud, beside kvpoold */
};

static void
kvp_hbm_publish_state(struct kvp_agent *a, struct kvp_hbm_gpu *g, int st)
{
	struct kvp_gpu_slot *gs = &a->seg.hdr->h_gpu[g->k];

	g->state = st;
	if (st == KVP_GPU_UP) {
		/* relaxed: published by the UP release below */
		kvp_store_relaxed(&gs->gs_device, (uint64_t)g->device);
		kvp_store_relaxed(&gs->gs_bytes, g->bytes);
		kvp_store_relaxed(&gs->gs_unit, g->unit);
		kvp_store_relaxed(&gs->gs_used, 0);
		kvp_store_relaxed(&gs->gs_pid, (uint64_t)g->pid);
		kvp_store_relaxed(&gs->gs_nonce, g->nonce);
		kvp_store_relaxed(&gs->gs_copies, 0);
	}
	/* release: the fields above before UP; readers acquire the word
	 * before trusting a map word of this generation */
	kvp_store_release(&gs->gs_state, KVP_GS_WORD(g->gen, st));
}

/* Start g's helper (tier thread, or main at start). */
static void
kvp_hbm_spawn(struct kvp_agent *a, struct kvp_hbm *H, struct kvp_hbm_gpu *g)
{
	char a_slot[16], a_dev[16], a_bytes[32], a_gen[32];
	char o_pool[] = "--pool", o_slot[] = "--slot", o_dev[] = "--device",
	     o_bytes[] = "--bytes", o_gen[] = "--gen";
	char *argv[] = { H->exe, o_pool,  a->cfg.pool, o_slot, a_slot, o_dev,
			 a_dev,  o_bytes, a_bytes,     o_gen,  a_gen,  NULL };
	sigset_t all;
	int sv[2];
	pid_t pid;

	g->gen++;
	snprintf(a_slot, sizeof(a_slot), "%u", g->k);
	snprintf(a_dev, sizeof(a_dev), "%d", g->device);
	snprintf(a_bytes, sizeof(a_bytes), "%llu",
		 (unsigned long long)a->cfg.hbm_bytes);
	snprintf(a_gen, sizeof(a_gen), "%llu", (unsigned long long)g->gen);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		kvp_log(KVP_LOG_WARN, "hbm", "socketpair: %s", strerror(errno));
		g->restart_ns = kvp_now_ns(CLOCK_MONOTONIC) +
				g->backoff_ms * 1000000ull;
		return;
	}
	pid = fork();
	if (pid == 0) {
		/* the child: async-signal-safe calls only, then exec */
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		if (dup2(sv[1], 3) < 0)
			_exit(127);
		execv(H->exe, argv);
		_exit(127);
	}
	close(sv[1]);
	if (pid < 0) {
		close(sv[0]);
		kvp_log(KVP_LOG_WARN, "hbm", "fork: %s", strerror(errno));
		g->restart_ns = kvp_now_ns(CLOCK_MONOTONIC) +
				g->backoff_ms * 1000000ull;
		return;
	}
	g->pid = pid;
	g->ctl = sv[0];
	g->inflight = 0;
	kvp_hbm_publish_state(a, g, KVP_GPU_STARTING);
}

/* Clear every map word of GPU slot k (KVP_GPU_MAX: of every GPU; its
 * helper went, DOWN is published, or an agent starts): no reader uses them (the generation is gone), and none can
 * meet a later generation whose low bits wrap to theirs.  One pass over
 * the map, once per helper that goes. */
static void
kvp_hbm_clear_words(struct kvp_agent *a, unsigned k)
{
	struct kvp_seg *s = &a->seg;
	uint64_t i;

	for (i = 0; i < s->g.g_index_slots; i++) {
		/* relaxed: our own words (this thread writes them) */
		uint64_t w = kvp_load_relaxed(&s->hbm[i]);

		if ((w & KVP_HBM_VALID) &&
		    (k == KVP_GPU_MAX || KVP_HBM_GPU(w) == k))
			/* release: pairs with readers' acquire */
			kvp_store_release(&s->hbm[i], 0);
	}
}

/* Forget g's pool: its copies go with its generation (readers stop
 * using them: the slot is DOWN, and a new generation comes next). */
static void
kvp_hbm_down(struct kvp_agent *a, struct kvp_hbm_gpu *g, const char *why)
{
	bool was_up = g->state == KVP_GPU_UP;
	int st;

	char buf[48];

	/* DOWN before the reap: while the slot says UP its gs_pid is our
	 * unreaped child's, never a pid another process got since (workers
	 * take the pool only from that pid, tiers/kvp_hbm.h) */
	kvp_hbm_publish_state(a, g, KVP_GPU_DOWN);
	if (g->ctl >= 0)
		close(g->ctl);
	g->ctl = -1;
	if (g->pid > 0) {
		/* it may still run (a bad answer): it goes now */
		if (waitpid(g->pid, &st, WNOHANG) != g->pid) {
			kill(g->pid, SIGKILL);
			waitpid(g->pid, &st, 0);
		} else if (WIFSIGNALED(st)) {
			snprintf(buf, sizeof(buf), "killed by signal %d",
				 WTERMSIG(st));
			why = buf;
		}
	}
	g->pid = 0;
	if (was_up)
		kvp_log(KVP_LOG_WARN, "hbm",
			"GPU %d: helper gone (%s): its %zu HBM copies "
			"(generation %llu) are dropped; restarting in %llu ms",
			g->device, why, g->nal, (unsigned long long)g->gen,
			(unsigned long long)g->backoff_ms);
	kvp_actr_add(a->seg.hdr, KVP_ACTR_HBM_HELPER_DEATHS, 1);
	kvp_hbm_clear_words(a, g->k);
	free(g->used);
	g->used = NULL;
	g->nal = 0;
	g->nunits = g->nfree = 0;
	g->inflight = 0;
	g->restart_ns =
		kvp_now_ns(CLOCK_MONOTONIC) + g->backoff_ms * 1000000ull;
	if (g->backoff_ms < 30000)
		g->backoff_ms *= 2;
}

/* ---- the pool's units (agent memory) ---- */

static int64_t
kvp_hbm_alloc_units(struct kvp_hbm_gpu *g, uint32_t n)
{
	uint64_t tries = 0, u = g->cursor, k;

	if (n > g->nfree || !n)
		return -1;
	while (tries < g->nunits) {
		if (u + n > g->nunits) {
			tries += g->nunits - u;
			u = 0;
			continue;
		}
		for (k = 0; k < n && !g->used[u + k]; k++)
			;
		if (k == n) {
			memset(g->used + u, 1, n);
			g->nfree -= n;
			g->cursor = u + n;
			return (int64_t)u;
		}
		tries += k + 1;
		u += k + 1;
	}
	return -1;
}

static void
kvp_hbm_free_at(struct kvp_agent *a, struct kvp_hbm_gpu *g, size_t j)
{
	struct kvp_hbm_alloc *al = &g->al[j];

	memset(g->used + al->unit, 0, al->n);
	g->nfree += al->n;
	g->al[j] = g->al[--g->nal];
	/* relaxed: a statistic */
	kvp_store_relaxed(&a->seg.hdr->h_gpu[g->k].gs_used,
			  g->nunits - g->nfree);
}

/* The word slot i would carry for allocation al of g. */
static uint64_t
kvp_hbm_word(const struct kvp_hbm_gpu *g, const struct kvp_hbm_alloc *al)
{
	return KVP_HBM_WORD(g->k, g->gen, al->ixgen, al->unit);
}

/* Take allocation j's copy back under CHECK: 1 done (word cleared, units
 * free), 0 held or moved (kept). */
static int
kvp_hbm_drop(struct kvp_agent *a, struct kvp_hbm_gpu *g, size_t j)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_hbm_alloc *al = &g->al[j];
	/* acquire: the slot's state word */
	uint64_t w = kvp_load_acquire(&s->meta[al->slot]);
	struct kvp_cand cand;

	if (KVP_IX_GEN(w) != al->ixgen ||
	    !kvp_ix_cand_take_agent(s, al->slot, w, &cand))
		return 0;
	kvp_ix_holds_scan_agent(s, &cand, 1);
	if (!cand.held) {
		/* release: no word before the CHECK goes; pairs with the
		 * reader's acquire (it holds only after CHECK clears) */
		if (kvp_load_relaxed(&s->hbm[al->slot]) == kvp_hbm_word(g, al))
			kvp_store_release(&s->hbm[al->slot], 0);
	}
	kvp_ix_check_release(s, al->slot, cand.word);
	if (cand.held)
		return 0;
	kvp_hbm_free_at(a, g, j);
	return 1;
}

/* Room for n units on g for a value last used at tick: drop copies of
 * values used longer ago (the oldest use of a sample of 32 copies each
 * time, as the DRAM tier's eviction orders them, I31; a held one is
 * skipped, and never one used since tick: a copy is not traded for a
 * colder one) until there is.  Sampling keeps a round's cost independent
 * of how many copies a pool holds.  True if there is room now. */
static bool
kvp_hbm_make_room(struct kvp_agent *a, struct kvp_hbm_gpu *g, uint32_t n,
		  uint64_t tick)
{
	unsigned fails = 0;

	while (g->nfree < n && g->nal && fails < 8) {
		uint64_t best_use = UINT64_MAX;
		size_t best = SIZE_MAX;
		unsigned t;

		for (t = 0; t < 32; t++) {
			size_t j;
			uint64_t u;

			g->rng = g->rng * 6364136223846793005ull +
				 1442695040888963407ull;
			j = (size_t)((g->rng >> 33) % g->nal);
			if (g->al[j].tag)
				continue; /* a copy in flight */
			/* relaxed: a hint (I31) */
			u = KVP_USE_TICK(kvp_load_relaxed(
				&a->seg.entries[g->al[j].slot].e_use));
			if (u < best_use) {
				best_use = u;
				best = j;
			}
		}
		if (best != SIZE_MAX && best_use < tick &&
		    kvp_hbm_drop(a, g, best))
			kvp_actr_add(a->seg.hdr, KVP_ACTR_HBM_EVICTIONS, 1);
		else
			fails++;
	}
	return g->nfree >= n;
}

/* ---- the helper's answers ---- */

static void
kvp_hbm_answers(struct kvp_agent *a, struct kvp_hbm_gpu *g)
{
	struct kvp_seg *s = &a->seg;

	for (;;) {
		struct kvp_hbm_rep r;
		ssize_t n = recv(g->ctl, &r, sizeof(r), MSG_DONTWAIT);
		size_t j;

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			kvp_hbm_down(a, g, n == 0 ? "exited" : strerror(errno));
			return;
		}
		if (n != (ssize_t)sizeof(r))
			continue;
		for (j = 0; j < g->nal; j++)
			if (g->al[j].tag == r.hr_tag)
				break;
		if (j == g->nal)
			continue;
		g->inflight--;
		if (r.hr_status == 0) {
			struct kvp_hbm_alloc *al = &g->al[j];
			/* acquire: the slot's state word (2: only this
			 * thread takes slots out, so it stays) */
			uint64_t w = kvp_load_acquire(&s->meta[al->slot]);

			if (KVP_IX_GEN(w) == al->ixgen &&
			    (KVP_IX_STATE(w) == KVP_IX_READY ||
			     KVP_IX_STATE(w) == KVP_IX_DELETED)) {
				al->tag = 0;
				/* release: the helper's copy (done before
				 * its answer) before the word; pairs with
				 * the reader's acquire */
				kvp_store_release(&s->hbm[al->slot],
						  kvp_hbm_word(g, al));
				kvp_fetch_add(&s->hdr->h_gpu[g->k].gs_copies,
					      1);
				kvp_actr_add(s->hdr, KVP_ACTR_HBM_COPIES, 1);
				continue;
			}
		}
		kvp_hbm_free_at(a, g, j);
	}
}

/* Is g's helper ready?  Its first message says. */
static void
kvp_hbm_ready(struct kvp_agent *a, struct kvp_hbm_gpu *g)
{
	struct kvp_hbm_msg m;
	ssize_t n = recv(g->ctl, &m, sizeof(m), MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	/* ready without a nonce: not a helper of this build */
	if (n == (ssize_t)sizeof(m) && !m.hm_status && !m.hm_nonce)
		m.hm_status = -EPROTO;
	if (n != (ssize_t)sizeof(m) || m.hm_magic != KVP_HBM_MSG_MAGIC ||
	    m.hm_status) {
		int st = n == (ssize_t)sizeof(m) ? m.hm_status : -EIO;

		if (st == -ENOTSUP || st == -ENODEV) {
			/* no runtime, device or driver: off, said once */
			kvp_log(KVP_LOG_WARN, "hbm", "GPU %d: HBM tier off: %s",
				g->device, kvp_strerror(st));
			kvp_hbm_down(a, g, kvp_strerror(st));
			g->off_for_good = true;
			kvp_hbm_publish_state(a, g, KVP_GPU_OFF);
			return;
		}
		kvp_hbm_down(a, g,
			     n == 0 ? "exited at start" : kvp_strerror(st));
		return;
	}
	g->bytes = m.hm_bytes;
	g->nonce = m.hm_nonce;
	g->unit = a->seg.g.g_dram_unit > KVP_HBM_UNIT_MIN ?
			  a->seg.g.g_dram_unit :
			  KVP_HBM_UNIT_MIN;
	g->nunits = g->bytes / g->unit;
	if (g->nunits > KVP_HBM_UNITS_MAX)
		g->nunits = KVP_HBM_UNITS_MAX; /* the map's 24 bits */
	g->nfree = g->nunits;
	g->cursor = 0;
	g->used = calloc(g->nunits ? g->nunits : 1, 1);
	if (!g->used) {
		kvp_hbm_down(a, g, "out of memory");
		return;
	}
	g->backoff_ms = KVP_HBM_RESTART_MS;
	kvp_hbm_publish_state(a, g, KVP_GPU_UP);
	kvp_log(KVP_LOG_INFO, "hbm",
		"GPU %d: HBM tier up: %llu MiB (helper pid %d, generation "
		"%llu)",
		g->device, (unsigned long long)(g->bytes >> 20), (int)g->pid,
		(unsigned long long)g->gen);
}

/* ---- promotion ---- */

/* Ask g's helper to copy slot i (state word w, len bytes, last used at
 * tick). */
static bool
kvp_hbm_promote(struct kvp_agent *a, struct kvp_hbm *H, struct kvp_hbm_gpu *g,
		uint64_t i, uint64_t w, uint64_t len, uint64_t tick)
{
	uint32_t n = (uint32_t)((len + g->unit - 1) / g->unit);
	struct kvp_hbm_req q;
	int64_t u;

	if (n > g->nunits / 4) /* one value never takes most of the pool */
		return false;
	if (g->nfree < n && !kvp_hbm_make_room(a, g, n, tick))
		return false;
	u = kvp_hbm_alloc_units(g, n);
	if (u < 0)
		return false;
	if (g->nal == g->capal) {
		size_t nc = g->capal ? g->capal * 2 : 256;
		void *p = realloc(g->al, nc * sizeof(*g->al));

		if (!p) {
			memset(g->used + u, 0, n);
			g->nfree += n;
			return false;
		}
		g->al = p;
		g->capal = nc;
	}
	q.hq_slot = i;
	q.hq_word = w;
	q.hq_len = len;
	q.hq_off = (uint64_t)u * g->unit;
	q.hq_tag = ++H->tag;
	g->al[g->nal].slot = i;
	g->al[g->nal].tag = q.hq_tag;
	g->al[g->nal].ixgen = KVP_IX_GEN(w);
	g->al[g->nal].unit = (uint32_t)u;
	g->al[g->nal].n = n;
	g->nal++;
	/* relaxed: a statistic */
	kvp_store_relaxed(&a->seg.hdr->h_gpu[g->k].gs_used,
			  g->nunits - g->nfree);
	if (send(g->ctl, &q, sizeof(q), MSG_DONTWAIT | MSG_NOSIGNAL) !=
	    (ssize_t)sizeof(q)) {
		kvp_hbm_free_at(a, g, g->nal - 1);
		return false;
	}
	g->inflight++;
	return true;
}

/* Does slot i have a copy a reader would use now? */
static bool
kvp_hbm_has_copy(struct kvp_agent *a, struct kvp_hbm *H, uint64_t i,
		 uint32_t ixgen)
{
	/* relaxed: our own word (the tier thread writes it) */
	uint64_t hw = kvp_load_relaxed(&a->seg.hbm[i]);
	unsigned k;

	if (!(hw & KVP_HBM_VALID) || KVP_HBM_IXGEN(hw) != (ixgen & 0xffffff))
		return false;
	for (k = 0; k < H->n; k++)
		if (H->g[k].k == KVP_HBM_GPU(hw) &&
		    H->g[k].state == KVP_GPU_UP &&
		    (H->g[k].gen & 0xfff) == KVP_HBM_GGEN(hw))
			return true;
	return false;
}

/* Values that were hit, DRAM-resident, not in HBM yet: a copy each, on
 * the UP GPU with the most room, a few at a time per helper. */
static void
kvp_hbm_scan(struct kvp_agent *a, struct kvp_hbm *H)
{
	struct kvp_seg *s = &a->seg;
	uint64_t n = s->g.g_index_slots, k;

	for (k = 0; k < H->n; k++)
		if (H->g[k].state == KVP_GPU_UP &&
		    H->g[k].inflight < KVP_HBM_INFLIGHT)
			break;
	if (k == H->n)
		return; /* no helper can take a copy now */
	for (k = 0; k < KVP_HBM_SCAN && k < n; k++) {
		uint64_t i = (H->scan++) & (n - 1);
		/* acquire: the slot's state word */
		uint64_t w = kvp_load_acquire(&s->meta[i]), len, use, loc;
		struct kvp_hbm_gpu *best = NULL;
		unsigned j;

		if (KVP_IX_STATE(w) != KVP_IX_READY || KVP_IX_FLAGS(w))
			continue;
		/* relaxed: hints and a location the helper checks again under
		 * its hold */
		use = kvp_load_relaxed(&s->entries[i].e_use);
		loc = kvp_load_relaxed(&s->entries[i].e_loc);
		len = kvp_load_relaxed(&s->entries[i].e_len);
		if (!(use & KVP_USE_HIT) ||
		    KVP_LOC_TIER(loc) != KVP_TIER_DRAM || !len ||
		    len > s->g.g_max_value ||
		    kvp_hbm_has_copy(a, H, i, KVP_IX_GEN(w)))
			continue;
		for (j = 0; j < H->n; j++) {
			struct kvp_hbm_gpu *g = &H->g[j];

			if (g->state == KVP_GPU_UP &&
			    g->inflight < KVP_HBM_INFLIGHT &&
			    (!best || g->nfree > best->nfree))
				best = g;
		}
		if (!best)
			return; /* every helper busy */
		/* a copy in flight for this slot already? */
		for (j = 0; j < best->nal; j++)
			if (best->al[j].slot == i && best->al[j].tag)
				break;
		if (j < best->nal)
			continue;
		kvp_hbm_promote(a, H, best, i, w, len, KVP_USE_TICK(use));
	}
}

/* Copies whose slot left the index or moved to another generation: their
 * units come back (4: no reader of the old generation remains).  A part
 * of the copies per round (KVP_HBM_SCAN), from where the last one
 * stopped. */
static void
kvp_hbm_sweep(struct kvp_agent *a, struct kvp_hbm_gpu *g)
{
	struct kvp_seg *s = &a->seg;
	unsigned k;

	for (k = 0; k < KVP_HBM_SCAN && g->nal; k++) {
		struct kvp_hbm_alloc *al;
		uint64_t w;

		if (g->sweep >= g->nal)
			g->sweep = 0;
		al = &g->al[g->sweep];
		/* acquire: the slot's state word */
		w = kvp_load_acquire(&s->meta[al->slot]);
		if (al->tag || (KVP_IX_GEN(w) == al->ixgen &&
				KVP_IX_STATE(w) != KVP_IX_EMPTY)) {
			g->sweep++;
			continue;
		}
		if (kvp_load_relaxed(&s->hbm[al->slot]) == kvp_hbm_word(g, al))
			/* release: pairs with readers' acquire (none of
			 * them uses it: stale by its generation) */
			kvp_store_release(&s->hbm[al->slot], 0);
		/* the last copy takes its place: looked at next */
		kvp_hbm_free_at(a, g, g->sweep);
	}
}

/* ---- the agent's entry points ---- */

int
kvp_hbm_start_agent(struct kvp_agent *a)
{
	struct kvp_hbm *H;
	ssize_t n;
	unsigned k;
	char *slash;

	if (!a->cfg.nhbm)
		return 0;
	H = calloc(1, sizeof(*H));
	if (!H)
		return -ENOMEM;
	n = readlink("/proc/self/exe", H->exe, sizeof(H->exe) - 32);
	if (n <= 0) {
		free(H);
		return -EIO;
	}
	H->exe[n] = 0;
	slash = strrchr(H->exe, '/');
	snprintf(slash ? slash + 1 : H->exe,
		 sizeof(H->exe) - (size_t)(slash ? slash + 1 - H->exe : 0),
		 "kvpool-gpud");
	H->n = a->cfg.nhbm;
	/* an earlier agent's words: their generations are over */
	kvp_hbm_clear_words(a, KVP_GPU_MAX);
	for (k = 0; k < H->n; k++) {
		struct kvp_hbm_gpu *g = &H->g[k];
		/* relaxed: a predecessor's word; ours comes next */
		uint64_t old = kvp_load_relaxed(&a->seg.hdr->h_gpu[k].gs_state);

		g->k = k;
		g->device = a->cfg.hbm_gpu[k];
		g->ctl = -1;
		/* the next generation after any an earlier agent used: its
		 * copies' words are stale from here on */
		g->gen = KVP_GS_GEN(old);
		g->backoff_ms = KVP_HBM_RESTART_MS;
		g->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)k;
		kvp_hbm_spawn(a, H, g);
	}
	a->hbm = H;
	kvp_log(KVP_LOG_INFO, "hbm", "%u HBM helper%s started (%s)", H->n,
		H->n == 1 ? "" : "s", H->exe);
	return 0;
}

void
kvp_hbm_round_agent(struct kvp_agent *a)
{
	struct kvp_hbm *H = a->hbm;
	uint64_t now;
	unsigned k;

	if (!H)
		return;
	now = kvp_now_ns(CLOCK_MONOTONIC);
	for (k = 0; k < H->n; k++) {
		struct kvp_hbm_gpu *g = &H->g[k];

		if (g->state == KVP_GPU_STARTING)
			kvp_hbm_ready(a, g);
		else if (g->state == KVP_GPU_UP)
			kvp_hbm_answers(a, g);
		else if (!g->off_for_good && g->ctl < 0 && now >= g->restart_ns)
			kvp_hbm_spawn(a, H, g);
		if (g->state == KVP_GPU_UP) {
			siginfo_t si;

			/* a helper that died without closing (a stopped
			 * process keeps its socket open: only its exit
			 * counts); WNOWAIT: kvp_hbm_down reaps it after
			 * DOWN */
			si.si_pid = 0;
			if (waitid(P_PID, (id_t)g->pid, &si,
				   WEXITED | WNOHANG | WNOWAIT) == 0 &&
			    si.si_pid == g->pid) {
				kvp_hbm_down(a, g, "exited");
				continue;
			}
			kvp_hbm_sweep(a, g);
		}
	}
	kvp_hbm_scan(a, H);
}

void
kvp_hbm_stop_agent(struct kvp_agent *a)
{
	struct kvp_hbm *H = a->hbm;
	unsigned k;

	if (!H)
		return;
	for (k = 0; k < H->n; k++) {
		struct kvp_hbm_gpu *g = &H->g[k];
		uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC);
		int st;

		/* OFF before the reap (as kvp_hbm_down's DOWN) */
		kvp_hbm_publish_state(a, g, KVP_GPU_OFF);
		if (g->ctl >= 0)
			close(g->ctl); /* the helper exits on its end */
		g->ctl = -1;
		while (g->pid > 0 && waitpid(g->pid, &st, WNOHANG) == 0) {
			struct timespec ts = { 0, 5 * 1000 * 1000 };

			if (kvp_now_ns(CLOCK_MONOTONIC) - t0 > 2000000000ull) {
				kill(g->pid, SIGKILL);
				waitpid(g->pid, &st, 0);
				break;
			}
			nanosleep(&ts, NULL); /* poll of a bounded wait */
		}
		g->pid = 0;
		free(g->used);
		free(g->al);
	}
	free(H);
	a->hbm = NULL;
}
