/* SPDX-License-Identifier: MIT */
/*
 * populate.c - the segment is populated behind an agent that is already
 * serving (docs/design.md, "Start-up").
 *
 * The agent creates the segment with nothing but its header written and
 * says ready at once; every page is still unallocated (tmpfs or hugetlbfs
 * gives zero pages, which is what an empty index and page map are).  A
 * few threads then populate it, chunk by chunk (MADV_POPULATE_WRITE: the
 * kernel allocates and zeroes each page and maps it here): the metadata
 * (index, page map, rings, staging) first, then the arena from its start.
 *
 * The allocator only hands out populated memory: the arena's unpopulated
 * part is one USED run at its end, tagged KVP_DRAM_OWNER_UNPOP
 * (tiers/kvp_dram.h), that no client can allocate from.  As the populated
 * prefix grows, the tier thread (the only agent thread that takes the
 * allocator lock) moves the head of that run forward and frees what it
 * passed over (kvp_dram_unpop_release_locked), then wakes putters waiting
 * for room.  A put that finds no populated room waits or gets BUSY like
 * any put on a full pool (never a fault storm in the caller); eviction
 * aims at the populated capacity (the agent's own frontier).
 *
 * Where the tmpfs fills up (/dev/shm smaller than the segment: another
 * user took the space since the agent checked), the populate stops with a
 * log line and the pool serves with what it has: a page the kernel cannot
 * give is never handed to a client (which would take SIGBUS on it).
 *
 * Threads: the populate threads touch memory and their chunk table only;
 * their progress reaches the tier thread through per-chunk done flags
 * (release stores, acquire loads) and a wake of h_evict_wake.
 */
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/tier_int.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define KVP_POP_CHUNK (64ull << 20)
#define KVP_POP_SYNC (32ull << 20)
#define KVP_POP_MAX_THREADS 16u

struct kvp_pop_chunk {
	uint64_t off, len; /* from the segment base */
};

struct kvp_pop {
	struct kvp_agent *a;
	pthread_t th[KVP_POP_MAX_THREADS];
	unsigned nth;
	struct kvp_pop_chunk *ck;
	kvp_aword_t *done; /* per chunk: 1 once populated (release) */
	uint64_t nck;
	uint64_t arena_ck; /* first chunk of the arena; they run to nck */
	uint64_t arena_off, arena_len, f0;
	kvp_aword_t next;       /* the next chunk a thread takes */
	kvp_aword_t failed;     /* the first error (-errno), 0 */
	kvp_aword_t bytes_done; /* populated so far */
	kvp_aword_t running;    /* threads not yet finished */
	/* 1: the arena waits (the SSD tier's recovery has the CPUs) */
	kvp_aword_t hold;
	uint64_t t0_ns, rate, total;
	/* tier thread */
	uint64_t scan; /* the first arena chunk not yet seen done */
	unsigned logged_pct;
	bool done_logged, fail_logged;
};

/* Online CPUs, for the default thread count. */
static unsigned
kvp_pop_default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		return 1;
	return n > 8 ? 8u : (unsigned)n;
}

/*
 * Populate [p, p + len): the kernel allocates, zeroes and maps each page.
 * Where MADV_POPULATE_WRITE is unknown (kernels before 5.14), each page
 * is touched with an atomic add of 0 (a write the kernel must back, which
 * changes no byte a client may be writing).  0, or -errno: -EFAULT or
 * -ENOMEM when the file system or the huge page pool cannot back a page.
 */
static int
kvp_pop_range(unsigned char *p, uint64_t len, uint64_t page)
{
	uint64_t k;

	for (;;) {
		if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
			return 0;
		if (errno == EINTR || errno == EAGAIN)
			continue;
		if (errno != EINVAL)
			return -errno;
		break;
	}
	for (k = 0; k < len; k += page)
		/* full: a no-op write (0 added) that makes the kernel back
		 * the page; the word may be a live one in the metadata */
		kvp_fetch_add((kvp_aword_t *)(void *)(p + k), 0);
	return 0;
}

static void *
kvp_pop_main(void *arg)
{
	struct kvp_pop *P = arg;
	struct kvp_agent *a = P->a;
	struct kvp_seg *s = &a->seg;

	for (;;) {
		/* full: a chunk of our own */
		uint64_t c = kvp_fetch_add(&P->next, 1), done;
		int rc;

		/* acquire: main's stop; relaxed: another thread's error (it
		 * only makes us stop sooner) */
		if (c >= P->nck || kvp_load_acquire(&a->stop) ||
		    kvp_load_relaxed(&P->failed))
			break;
		/* acquire: main's release of the hold (recovery is done) */
		while (c >= P->arena_ck && kvp_load_acquire(&P->hold) &&
		       !kvp_load_acquire(&a->stop)) {
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL); /* recovery: seconds at most */
		}
		rc = kvp_pop_range(a->seg.base + P->ck[c].off, P->ck[c].len,
				   a->seg_page_bytes);
		if (rc) {
			/* full CAS: the first error is the one reported */
			kvp_cas(&P->failed, 0, (uint64_t)(int64_t)rc);
			break;
		}
		/* release: the pages before the flag (the tier thread hands
		 * them out after its acquire) */
		kvp_store_release(&P->done[c], 1);
		/* full: progress */
		done = kvp_fetch_add(&P->bytes_done, P->ck[c].len) +
		       P->ck[c].len;
		if (c >= P->arena_ck) {
			/* wake the tier thread, which frees the units */
			kvp_wake_agent(s);
		}
		if (P->rate) {
			/* --populate-rate: no faster than asked (a node
			 * that is serving keeps its memory bandwidth) */
			uint64_t due = P->t0_ns +
				       done * 1000000000ull / P->rate,
				 now = kvp_now_ns(CLOCK_MONOTONIC);

			if (due > now) {
				struct timespec ts = {
					.tv_sec = (time_t)((due - now) /
							   1000000000ull),
					.tv_nsec = (long)((due - now) %
							  1000000000ull),
				};

				nanosleep(&ts, NULL);
			}
		}
	}
	/* full: the last thread out wakes the tier thread for the summary */
	if (kvp_fetch_add(&P->running, (uint64_t)-1) == 1)
		kvp_wake_agent(s);
	return NULL;
}

/* Append chunks covering [off, off + len) (KVP_POP_CHUNK each, cut at
 * the segment's page size). */
static void
kvp_pop_add(struct kvp_pop *P, uint64_t off, uint64_t len)
{
	while (len) {
		uint64_t k = len < KVP_POP_CHUNK ? len : KVP_POP_CHUNK;

		P->ck[P->nck].off = off;
		P->ck[P->nck].len = k;
		P->nck++;
		off += k;
		len -= k;
	}
}

/*
 * Where the unpopulated tail starts: the header's count says where to
 * look, the map must agree; else the map is walked for it.  g_dram_pages
 * when there is none (the arena is populated, or a previous agent's map
 * lost it: then the rest is populated on first touch, as any tmpfs).
 */
static uint64_t
kvp_pop_find_tail(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	uint64_t n = s->g.g_dram_pages, p = 0, hops = 0;
	/* relaxed: the previous agent's count, a hint checked below */
	uint64_t u = kvp_load_relaxed(&s->dram->dh_unpop_pages);
	uint32_t len;

	if (u && u <= n && kvp_dram_unpop_at(s, n - u, &len))
		return n - u;
	while (p < n && hops++ < n) {
		if (!kvp__dram_run_ok(s, p, &len))
			break;
		if (kvp_dram_unpop_at(s, p, &len))
			return p;
		p += len;
	}
	return n;
}

/*
 * Start populating (after the segment was created or re-attached, before
 * the tier thread starts).  A re-attached segment continues where the
 * unpopulated tail starts (the metadata is populated again: pages that
 * are there cost a page-table walk).  0, or -ENOMEM.
 */
int
kvp_populate_start_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_pop *P;
	uint64_t unit = s->g.g_dram_unit, n = s->g.g_dram_pages, page;
	uint64_t aoff = s->L.off[KVP_R_ARENA], alen = n * unit, start, maxck;
	unsigned k, nth;

	a->pop_frontier = a->seg_created ? 0 : kvp_pop_find_tail(a);
	if (!a->seg_created && a->pop_frontier == n &&
	    kvp_load_relaxed(&s->dram->dh_unpop_pages)) {
		kvp_dram_unpop_forget_agent(s);
	}
	page = a->seg_page_bytes ? a->seg_page_bytes : 4096;
	kvp_dram_page_bytes_set_agent(s, page);
	P = calloc(1, sizeof(*P));
	if (!P)
		return -ENOMEM;
	maxck = s->size / KVP_POP_CHUNK + 8;
	P->ck = calloc(maxck, sizeof(*P->ck));
	P->done = calloc(maxck, sizeof(*P->done));
	if (!P->ck || !P->done) {
		free(P->ck);
		free(P->done);
		free(P);
		return -ENOMEM;
	}
	P->a = a;
	start = a->pop_frontier * unit / page * page;
	/* the first KVP_POP_SYNC of the tail now, before the agent says
	 * ready: a fresh pool takes its first puts at once (about 25 ms on
	 * 4 KiB pages, whatever --dram is) */
	if (a->pop_frontier < n) {
		uint64_t end = start + KVP_POP_SYNC < alen ?
				       start + KVP_POP_SYNC :
				       alen,
			 target = end / unit;

		if (kvp_pop_range(s->base + aoff + start, end - start, page) ==
			    0 &&
		    target > a->pop_frontier && kvp_dram_lock_agent(a) == 0) {
			int rc = kvp_dram_unpop_release_locked(
				s, (uint32_t)a->pop_frontier,
				(uint32_t)(target - a->pop_frontier));

			kvp_dram_unlock(s);
			if (rc == 0) {
				a->pop_frontier = target;
				start = end;
			}
		}
	}
	/* the metadata first (the index, the page map, the leases), then
	 * what follows the arena (rings, spans, staging), then the rest of
	 * the arena from the tail's head, rounded down to a page */
	kvp_pop_add(P, 0, aoff);
	kvp_pop_add(P, aoff + alen, s->size - (aoff + alen));
	P->arena_ck = P->nck;
	P->arena_off = aoff;
	P->arena_len = alen;
	P->f0 = start;
	if (a->pop_frontier < n)
		kvp_pop_add(P, aoff + start, alen - start);
	P->total = 0;
	for (k = 0; k < P->nck; k++)
		P->total += P->ck[k].len;
	P->scan = P->arena_ck;
	P->rate = a->cfg.populate_rate;
	P->t0_ns = kvp_now_ns(CLOCK_MONOTONIC);
	nth = a->cfg.populate_threads ? a->cfg.populate_threads :
					kvp_pop_default_threads();
	if (nth > KVP_POP_MAX_THREADS)
		nth = KVP_POP_MAX_THREADS;
	a->pop = P;
	/* relaxed: no threads yet */
	kvp_store_relaxed(&P->running, nth);
	for (k = 0; k < nth; k++) {
		if (pthread_create(&P->th[k], NULL, kvp_pop_main, P)) {
			/* relaxed: no thread of ours reads it before join */
			kvp_fetch_add(&P->running, (uint64_t)(nth - k) * -1ull);
			break;
		}
		P->nth++;
	}
	if (!P->nth) {
		kvp_log(KVP_LOG_WARN, "populate",
			"cannot start threads: the "
			"segment is populated as it is touched");
		/* every unit free now: touched on first use */
		P->scan = P->nck;
	}
	kvp_log(KVP_LOG_INFO, "populate",
		"populating %.1f GiB (%s pages, %u threads%s) behind the "
		"serving agent; the DRAM tier grows as it goes",
		(double)P->total / (1ull << 30),
		page >= (2ull << 20) ? "2 MiB" : "4 KiB", P->nth,
		P->rate ? ", rate-limited" : "");
	return 0;
}

/*
 * Before the SSD tier's recovery inserts its records into the index: the
 * metadata (index, page map) populated first, this thread helping the
 * populate threads with the chunks not yet taken.  A record inserted into
 * an index page nobody touched yet pays a page fault on one thread (the
 * rebuild of 300,000 records: 0.88 s of inserts on fresh 4 KiB pages,
 * 0.19 s on populated memory); populated by every thread first, they do
 * not.  Returns once every metadata chunk is done, or the populate failed.
 */
void
kvp_populate_meta_agent(struct kvp_agent *a)
{
	struct kvp_pop *P = a->pop;
	uint64_t c, k, t0 = kvp_now_ns(CLOCK_MONOTONIC);

	if (!P)
		return;
	for (;;) {
		/* relaxed: a hint; the CAS takes the chunk */
		c = kvp_load_relaxed(&P->next);
		if (c >= P->arena_ck)
			break;
		/* full CAS: a metadata chunk of our own (an arena chunk is
		 * never taken here: the threads keep those) */
		if (!kvp_cas(&P->next, c, c + 1))
			continue;
		if (kvp_pop_range(a->seg.base + P->ck[c].off, P->ck[c].len,
				  a->seg_page_bytes ? a->seg_page_bytes :
						      4096)) {
			/* the threads report it; first touch does the rest */
			break;
		}
		/* release: as a populate thread's */
		kvp_store_release(&P->done[c], 1);
		/* full: progress */
		kvp_fetch_add(&P->bytes_done, P->ck[c].len);
	}
	for (k = 0; k < P->arena_ck && P->nth; k++) {
		/* acquire: the thread's release; relaxed: its error */
		while (!kvp_load_acquire(&P->done[k]) &&
		       !kvp_load_relaxed(&P->failed) &&
		       kvp_load_relaxed(&P->running)) {
			struct timespec ts = { 0, 200000 };

			nanosleep(&ts, NULL); /* a chunk: milliseconds */
		}
	}
	kvp_log(KVP_LOG_INFO, "populate",
		"index and page map populated in %.3f s (before the SSD "
		"tier's records go into the index)",
		(double)(kvp_now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
}

/*
 * The arena waits while the SSD tier's recovery runs (on a host with few
 * CPUs the populate threads' page zeroing took 70% of the time the
 * rebuild had: recovery comes before ready, the arena after it; 32 MiB of
 * it are there already).  kvp_populate_hold_agent(a, false) lets it go.
 */
void
kvp_populate_hold_agent(struct kvp_agent *a, bool hold)
{
	if (a->pop)
		/* release: pairs with the threads' acquire */
		kvp_store_release(&a->pop->hold, hold ? 1 : 0);
}

/* Is the arena still being populated (room is coming)? */
bool
kvp_populate_pending_agent(const struct kvp_agent *a)
{
	const struct kvp_pop *P = a->pop;

	/* relaxed: statistics of our own threads */
	return P && a->pop_frontier < a->seg.g.g_dram_pages &&
	       !kvp_load_relaxed(&P->failed) &&
	       kvp_load_relaxed(&P->running) > 0;
}

/*
 * The tier thread's step: hand the units populated since the last step
 * to the allocator (the lock without waiting: next round if a client
 * holds it), wake putters, log progress every 25% and at the end.
 */
void
kvp_populate_step_agent(struct kvp_agent *a)
{
	struct kvp_pop *P = a->pop;
	struct kvp_seg *s = &a->seg;
	uint64_t n = s->g.g_dram_pages, unit = s->g.g_dram_unit, bytes, target;
	unsigned pct;
	int rc;

	if (!P || a->pop_frontier >= n)
		goto summary;
	/* acquire: pairs with the populate thread's release of the flag */
	while (P->scan < P->nck && kvp_load_acquire(&P->done[P->scan]))
		P->scan++;
	bytes = P->scan < P->nck ? P->ck[P->scan].off - P->arena_off :
				   P->arena_len;
	if (!P->nth)
		bytes = P->arena_len; /* no threads: first touch it is */
	target = bytes / unit;
	if (target > n)
		target = n;
	if (target > a->pop_frontier) {
		if (kvp_dram_lock_agent(a))
			return; /* next round */
		rc = kvp_dram_unpop_release_locked(
			s, (uint32_t)a->pop_frontier,
			(uint32_t)(target - a->pop_frontier));
		kvp_dram_unlock(s);
		if (rc) {
			/* the tail is not where we left it (a client wrote
			 * the map): the repair rebuilds it from our frontier */
			a->dram_damaged = true;
			return;
		}
		a->pop_frontier = target;
		kvp_wake_space_agent(s); /* putters waiting for room */
	}
	pct = (unsigned)(a->pop_frontier * 100 / n);
	if (pct / 25 > P->logged_pct / 25 && a->pop_frontier < n) {
		P->logged_pct = pct;
		kvp_log(KVP_LOG_INFO, "populate", "DRAM tier %u%% populated",
			pct);
		kvp_notify_agent("STATUS=serving pool '%s', DRAM tier %u%% "
				 "populated",
				 a->cfg.pool, pct);
	}
summary:
	if (!P)
		return;
	/* relaxed: our threads' error, a statistic */
	if (kvp_load_relaxed(&P->failed) && !P->fail_logged) {
		int err = (int)(int64_t)kvp_load_relaxed(&P->failed);

		P->fail_logged = true;
		kvp_log(KVP_LOG_ERROR, "populate",
			"stopped at %.1f of %.1f GiB of the DRAM tier: %s (%s); "
			"the pool serves with what is populated",
			(double)(a->pop_frontier * unit) / (1ull << 30),
			(double)(n * unit) / (1ull << 30), strerror(-err),
			a->seg_page_bytes >= (2ull << 20) ?
				"the huge page pool ran out" :
				"/dev/shm is full: another user took its space");
	}
	/* relaxed: the threads' count */
	if (!P->done_logged && a->pop_frontier >= n &&
	    !kvp_load_relaxed(&P->running)) {
		double secs =
			(double)(kvp_now_ns(CLOCK_MONOTONIC) - P->t0_ns) / 1e9;

		P->done_logged = true;
		kvp_notify_agent("STATUS=serving pool '%s', DRAM tier "
				 "populated",
				 a->cfg.pool);
		kvp_log(KVP_LOG_INFO, "populate",
			"segment populated: %.2f GiB in %.2f s (%.2f GB/s, "
			"%u threads)",
			/* relaxed: the threads are done */
			(double)kvp_load_relaxed(&P->bytes_done) / (1ull << 30),
			secs,
			secs > 0 ? (double)kvp_load_relaxed(&P->bytes_done) /
					   secs / 1e9 :
				   0.0,
			P->nth);
	}
}

/* Stop and join the populate threads (at stop, after a->stop is set). */
void
kvp_populate_stop_agent(struct kvp_agent *a)
{
	struct kvp_pop *P = a->pop;
	unsigned k;

	if (!P)
		return;
	for (k = 0; k < P->nth; k++)
		pthread_join(P->th[k], NULL);
	free(P->ck);
	free((void *)P->done);
	free(P);
	a->pop = NULL;
}

/*
 * The units the watermarks are percentages of (never read from the
 * segment): the whole arena while it is being populated (room is
 * coming: a put waits for it, nothing is evicted early because the pool
 * is young), what is populated once the populate stopped short
 * (populate.c: /dev/shm filled up).
 */
uint64_t
kvp_dram_capacity_agent(const struct kvp_agent *a)
{
	/* the agent's own frontier, never the segment's count (a client
	 * can write dh_unpop_pages: it would make the agent evict early) */
	if (!a->pop || kvp_populate_pending_agent(a))
		return a->seg.g.g_dram_pages;
	return a->pop_frontier;
}

/* Is DRAM use above the agent's own high watermark (--dram-high)? */
bool
kvp_dram_above_high_agent(const struct kvp_agent *a)
{
	/* relaxed: a heuristic; the allocator's counts decide */
	uint64_t used = kvp_load_relaxed(&a->seg.dram->dh_used_mirror);

	return used * 100 > kvp_dram_capacity_agent(a) * a->cfg.dram_high_pct;
}
