/* SPDX-License-Identifier: MIT */
/*
 * kvp_dram.h - the DRAM tier: a run allocator inside the segment.
 *
 * The arena is cut into units (--dram-unit, a power of two).  A value
 * occupies a chain of runs of contiguous units: one run when the arena
 * has a fitting hole, several when it is fragmented, so free space is
 * always usable and fragmentation cannot collapse capacity.
 *
 * The page map (struct kvp_page per unit) is the single source of truth.
 * A run starts with a header (state, length, owner entry and generation,
 * next run of the same value) and ends with a tag pointing back at its
 * header (for coalescing).  The free bins (log2 size classes, doubly
 * linked through the page map) are derived data.
 *
 * Concurrency: one lock word in the segment (dh_lock, a futex; see
 * KVP_LOCK_WAITERS in shm/kvp_shm.h for its format and its claims), held
 * for a few hundred nanoseconds per allocation, never across a copy.
 * Crash safety: every header write keeps the forward chain "page 0, then
 * page 0 + npages, ..." valid (a split writes the tail header before it
 * shrinks the head; a merge grows one header), so whoever takes the lock
 * over from a dead holder (or from a word no holder claims) rebuilds the
 * bins and counts from the chain.  A run whose owner died before
 * publishing is found by its owner tag (entry slot + generation) and
 * freed by the agent.
 *
 * A client that can write the segment can write any of it (DESIGN-NOTES
 * 9): every unit number, run length and bin link read from the page map
 * is checked against this process's private geometry (s->g) before it is
 * used, each field is read once, and nothing is written until the checks
 * of an operation passed.  A run taken or merged must also carry its tail
 * tag, and a header absorbed by a merge is cleared (interior units are
 * NONE), so a bin link or a length forged outside a value's units cannot
 * hand out or merge units inside it.  A damaged map makes an operation
 * fail with -EUCLEAN (never a write out of bounds); the caller sets
 * dh_damaged and the agent repairs the map (agent/dram.c,
 * kvp_dram_repair_agent).
 *
 * Ownership: this file owns the allocator's words (the lock word and its
 * claims' protocol, struct kvp_dram_hdr, the page map): every write of
 * one is a function here, and tests/structure/test_structure.sh fails on
 * a write anywhere else.  The agent's halves (the repair's verdict, the
 * populate step's tail) are the functions suffixed _agent or _locked.
 *
 * Waiting: a client never waits for the lock longer than its deadline
 * (a live holder may be stopped: SIGSTOP, a debugger, a frozen cgroup);
 * the agent never waits at all (it defers what needs the lock).
 */
#ifndef KVP_DRAM_H
#define KVP_DRAM_H

#include "index/kvp_index.h"
#include "shm/kvp_ctr.h"

KVP_INLINE unsigned
kvp_dram_bin(uint64_t npages)
{
	unsigned b = 63u - (unsigned)__builtin_clzll(npages | 1);

	return b < KVP_DRAM_BINS ? b : KVP_DRAM_BINS - 1;
}

/* Is unit p the header of a well-formed run of *len units (1 .. the rest
 * of the arena)?  One read of its length. */
KVP_INLINE bool
kvp__dram_run_ok(const struct kvp_seg *s, uint64_t p, uint32_t *len)
{
	uint64_t n = s->g.g_dram_pages;
	uint32_t l;

	if (p >= n)
		return false;
	l = s->pages[p].pg_npages;
	*len = l;
	return l >= 1 && l <= n - p;
}

/* Does run p of len units end with its tail tag (its last unit names p)? */
KVP_INLINE bool
kvp__dram_tail_ok(const struct kvp_seg *s, uint64_t p, uint32_t len)
{
	return s->pages[p + len - 1].pg_head == p + 1;
}

/* Unlink free run p from its bin.  Every link it follows or writes is
 * checked first: -EUCLEAN (nothing written) if the bin list is damaged. */
KVP_INLINE int
kvp__dram_bin_unlink(struct kvp_seg *s, uint32_t p)
{
	uint64_t n = s->g.g_dram_pages;
	struct kvp_page *pg = &s->pages[p];
	uint32_t prev = pg->pg_prev, next = pg->pg_next;
	unsigned b = kvp_dram_bin(pg->pg_npages);

	if (p >= n || prev > n || next > n || prev == p + 1 || next == p + 1)
		return -EUCLEAN;
	if (prev ? s->pages[prev - 1].pg_next != p + 1 :
		   s->dram->dh_bin[b] != p + 1)
		return -EUCLEAN;
	if (next && s->pages[next - 1].pg_prev != p + 1)
		return -EUCLEAN;
	if (prev)
		s->pages[prev - 1].pg_next = next;
	else
		s->dram->dh_bin[b] = next;
	if (next)
		s->pages[next - 1].pg_prev = prev;
	pg->pg_next = pg->pg_prev = 0;
	return 0;
}

/* Link free run p at the head of its bin.  -EUCLEAN if the bin's head is
 * not a unit. */
KVP_INLINE int
kvp__dram_bin_link(struct kvp_seg *s, uint32_t p)
{
	struct kvp_page *pg = &s->pages[p];
	unsigned b = kvp_dram_bin(pg->pg_npages);
	uint32_t head = s->dram->dh_bin[b];

	if (p >= s->g.g_dram_pages || head > s->g.g_dram_pages)
		return -EUCLEAN;
	pg->pg_prev = 0;
	pg->pg_next = head;
	if (head)
		s->pages[head - 1].pg_prev = p + 1;
	s->dram->dh_bin[b] = p + 1;
	return 0;
}

/* Unit k becomes interior: no header, no tail tag. */
KVP_INLINE void
kvp__dram_interior(struct kvp_seg *s, uint64_t k)
{
	s->pages[k].pg_state = KVP_PG_NONE;
	s->pages[k].pg_npages = 0;
	s->pages[k].pg_head = 0;
}

/* Rebuild bins and counts from the run chain (lock held).  Adjacent free
 * runs are merged.  Returns -EUCLEAN if the chain itself is broken (then
 * only the agent's repair from the index can put it right). */
KVP_INLINE int
kvp_dram_rebuild_locked(struct kvp_seg *s)
{
	uint64_t n = s->g.g_dram_pages, p = 0, used = 0, unpop = 0;
	uint64_t last_free = UINT64_MAX;
	unsigned b;

	while (p < n) {
		struct kvp_page *pg = &s->pages[p];
		uint32_t len, st = pg->pg_state;

		if (!kvp__dram_run_ok(s, p, &len) ||
		    (st != KVP_PG_FREE && st != KVP_PG_USED))
			return -EUCLEAN;
		p += len;
	}
	for (b = 0; b < KVP_DRAM_BINS; b++)
		s->dram->dh_bin[b] = 0;
	for (p = 0; p < n;) {
		struct kvp_page *pg = &s->pages[p];
		uint32_t len = pg->pg_npages;

		if (pg->pg_state == KVP_PG_FREE && last_free != UINT64_MAX) {
			/* merge into the previous free run: one header write,
			 * then the absorbed header and the old tail are
			 * interior */
			s->pages[last_free].pg_npages += len;
			s->pages[p + len - 1].pg_head = (uint32_t)last_free + 1;
			if (p - 1 != last_free)
				kvp__dram_interior(s, p - 1);
			else
				s->pages[last_free].pg_head = 0;
			/* its tag, if it is the tail, stays */
			pg->pg_state = KVP_PG_NONE;
			pg->pg_npages = 0;
			if (len > 1)
				pg->pg_head = 0;
			p += len;
			continue;
		}
		s->pages[p + len - 1].pg_head = (uint32_t)p + 1;
		if (pg->pg_state == KVP_PG_FREE) {
			last_free = p;
		} else {
			/* the unpopulated tail is neither used nor free */
			if (pg->pg_owner == KVP_DRAM_OWNER_UNPOP &&
			    p + len == n)
				unpop = len;
			else
				used += len;
			last_free = UINT64_MAX;
		}
		p += len;
	}
	for (p = 0; p < n; p += s->pages[p].pg_npages)
		if (s->pages[p].pg_state == KVP_PG_FREE)
			/* bins were just cleared */
			kvp__dram_bin_link(s, (uint32_t)p);
	s->dram->dh_used_pages = used;
	s->dram->dh_free_pages = n - used - unpop;
	/* relaxed: a statistic for lock-free readers */
	kvp_store_relaxed(&s->dram->dh_used_mirror, used);
	return 0;
}

/*
 * The units the pool has to give: all but the tail not yet populated
 * (agent/populate.c).  Eviction aims at this capacity, statistics show
 * it.  A relaxed read: the agent moves it under the lock, one way only.
 */
KVP_INLINE uint64_t
kvp_dram_capacity(const struct kvp_seg *s)
{
	uint64_t n = s->g.g_dram_pages;
	/* relaxed: a statistic (the agent writes it under dh_lock) */
	uint64_t u = kvp_load_relaxed(&s->dram->dh_unpop_pages);

	return u < n ? n - u : 0;
}

/*
 * Who this process is to the allocator lock: token (client slot + 1, or
 * KVP_LOCK_TOKEN_AGENT) and its claim word (cs_alloc_claim of its client
 * slot, or h_agent_alloc_claim), cleared: it holds nothing yet.  At
 * kvp_open (a fresh client slot) and at the agent's attach.
 */
KVP_INLINE void
kvp_dram_claim_bind(struct kvp_seg *s, unsigned int token)
{
	kvp_aint_t *claim = token == KVP_LOCK_TOKEN_AGENT ?
				    &s->hdr->h_agent_alloc_claim :
				    &s->clients[token - 1].cs_alloc_claim;

	s->lock_token = token;
	s->lock_claim = claim;
	/* release: nothing held yet; pairs with the acquire of a taker that
	 * checks the claim (kvp__dram_lock_orphan) */
	kvp_istore_release(claim, 0);
}

/* The allocator is damaged: ask the agent to repair it (a hint it reads
 * every round; a stray value only makes it verify the map once more). */
KVP_INLINE void
kvp_dram_report_damage(struct kvp_seg *s)
{
	/* relaxed: a hint; the agent's repair takes the lock and checks */
	kvp_store_relaxed(&s->dram->dh_damaged, 1);
}

KVP_INLINE void kvp_dram_unlock(struct kvp_seg *s);

/*
 * Is lock word v held by no one who can release it?  A token whose claim
 * does not name the word (a stray or forged write), and, when
 * check_alive, a holder whose process is dead (kernel-checked: syscalls,
 * slow paths only).  See the lock word in shm/kvp_shm.h.
 */
KVP_INLINE bool
kvp__dram_lock_orphan(const struct kvp_seg *s, unsigned int v, bool check_alive)
{
	unsigned int t = KVP_LOCK_TOKEN(v);
	const kvp_aint_t *claim;

	if (t == KVP_LOCK_TOKEN_AGENT)
		claim = &s->hdr->h_agent_alloc_claim;
	else if (t >= 1 && t <= s->g.g_max_clients)
		claim = &s->clients[t - 1].cs_alloc_claim;
	else
		return true; /* not a token at all */
	/* acquire: pairs with the holder's claim store, which precedes its
	 * CAS of the word we read */
	if (kvp_iload_acquire(claim) != (v & ~KVP_LOCK_WAITERS))
		return true;
	if (!check_alive)
		return false;
	return t == KVP_LOCK_TOKEN_AGENT ? !kvp_shm_agent_alive(s) :
					   !kvp_shm_client_alive(s, t - 1);
}

/*
 * Take the allocator lock, waiting at most until deadline_ns
 * (CLOCK_MONOTONIC; 0: do not wait; UINT64_MAX: as long as it takes).  A
 * word no holder wrote is taken over at once; a holder seen on the same
 * word for 2 ms is checked with the kernel, and taken over if its
 * process is dead (the bins are then rebuilt from the chain).  0
 * (locked), -EBUSY (held by a live process past the deadline: it may be
 * stopped), -EUCLEAN (a dead holder left the chain broken: not locked,
 * damage reported), -EPERM (this process has no token: a tool).
 */
KVP_INLINE int
kvp_dram_lock_until(struct kvp_seg *s, uint64_t deadline_ns)
{
	volatile kvp_aint_t *w = &s->dram->dh_lock;
	unsigned int mine, v, seen = 0;
	uint64_t seen_ns = 0, now = 0;
	bool stolen = false;

	if (!s->lock_token)
		return -EPERM;
	s->lock_seq = (s->lock_seq + 1) & 0x7fffu;
	mine = (s->lock_seq << 16) | s->lock_token;
	/* release: our claim, before the word that names it (the CAS) */
	kvp_istore_release(s->lock_claim, mine);
	for (;;) {
		/* full CAS: the lock; acquires what the last holder wrote */
		if (kvp_icas(w, 0, mine))
			break;
		/* acquire: the holder's word, then its claim */
		v = kvp_iload_acquire(w);
		if (!v)
			continue;
		now = kvp_now_ns(CLOCK_MONOTONIC);
		if (v != seen) {
			seen = v;
			seen_ns = now;
		}
		if (kvp__dram_lock_orphan(s, v, now - seen_ns >= 2000000ull)) {
			/* full CAS: take over exactly that word */
			if (kvp_icas(w, v, mine | (v & KVP_LOCK_WAITERS))) {
				stolen = true;
				break;
			}
			continue;
		}
		if (deadline_ns != UINT64_MAX && now >= deadline_ns) {
			/* release: no claim left behind */
			kvp_istore_release(s->lock_claim, 0);
			return -EBUSY;
		}
		/* full CAS: say a waiter sleeps, so the holder wakes one */
		if (!(v & KVP_LOCK_WAITERS) &&
		    !kvp_icas(w, v, v | KVP_LOCK_WAITERS))
			continue;
		kvp_futex_wait(w, v | KVP_LOCK_WAITERS,
			       deadline_ns - now < 2000000ull ?
				       deadline_ns - now :
				       2000000ull);
		/* full CAS: after a sleep others may sleep too: keep the
		 * flag */
		if (kvp_icas(w, 0, mine | KVP_LOCK_WAITERS))
			break;
	}
	s->lock_held = mine;
	if (stolen) {
		/* the holder is gone (or never was): the bins may be half
		 * updated; the run chain is always valid (top of this file) */
		if (kvp_dram_rebuild_locked(s) < 0) {
			kvp_dram_unlock(s);
			kvp_dram_report_damage(s);
			return -EUCLEAN;
		}
		/* stat */
		kvp_actr_add(s->hdr, KVP_ACTR_ALLOC_RECOVER, 1);
	}
	return 0;
}

/*
 * Take the lock over from its holder if the kernel says that holder's
 * process is dead (or no holder wrote the word): the agent, which never
 * waits for the lock, calls this when a holder has kept it for a while.
 * 0 (locked; bins rebuilt), -EBUSY (a live holder), -EUCLEAN.
 */
KVP_INLINE int
kvp_dram_lock_takeover(struct kvp_seg *s)
{
	volatile kvp_aint_t *w = &s->dram->dh_lock;
	/* acquire: the holder's word, then its claim */
	unsigned int v = kvp_iload_acquire(w), mine;

	if (!s->lock_token)
		return -EPERM;
	if (!v || !kvp__dram_lock_orphan(s, v, true))
		return -EBUSY;
	s->lock_seq = (s->lock_seq + 1) & 0x7fffu;
	mine = (s->lock_seq << 16) | s->lock_token;
	kvp_istore_release(s->lock_claim, mine); /* release: claim, then word */
	/* full CAS: take over exactly that word */
	if (!kvp_icas(w, v, mine | (v & KVP_LOCK_WAITERS))) {
		kvp_istore_release(s->lock_claim, 0); /* release */
		return -EBUSY;
	}
	s->lock_held = mine;
	if (kvp_dram_rebuild_locked(s) < 0) {
		kvp_dram_unlock(s);
		kvp_dram_report_damage(s);
		return -EUCLEAN;
	}
	kvp_actr_add(s->hdr, KVP_ACTR_ALLOC_RECOVER, 1); /* stat */
	return 0;
}

KVP_INLINE int
kvp_dram_lock(struct kvp_seg *s)
{
	return kvp_dram_lock_until(s, UINT64_MAX);
}

/* Release the lock this process holds (s->lock_held). */
KVP_INLINE void
kvp_dram_unlock(struct kvp_seg *s)
{
	volatile kvp_aint_t *w = &s->dram->dh_lock;
	unsigned int v;

	/* relaxed: a statistic for lock-free readers */
	kvp_store_relaxed(&s->dram->dh_used_mirror, s->dram->dh_used_pages);
	for (;;) {
		/* acquire: our word, perhaps with a waiter's flag added */
		v = kvp_iload_acquire(w);
		if ((v & ~KVP_LOCK_WAITERS) != s->lock_held)
			break; /* not ours any more: nothing to release */
		/* full CAS (release half): everything we wrote under the lock
		 * before the next holder's acquiring CAS */
		if (kvp_icas(w, v, 0))
			break;
	}
	/* release: the claim goes after the word */
	kvp_istore_release(s->lock_claim, 0);
	s->lock_held = 0;
	if (v & KVP_LOCK_WAITERS)
		kvp_futex_wake_one(w);
}

/* Are units (p, p + take) interior (no header, no tail tag but the run's
 * own, at p + len - 1)?  A header or tag there means two runs overlap:
 * the map is damaged. */
KVP_INLINE bool
kvp__dram_interior_ok(const struct kvp_seg *s, uint64_t p, uint32_t take,
		      uint32_t len)
{
	uint64_t k;

	for (k = p + 1; k < p + take; k++) {
		const struct kvp_page *pg = &s->pages[k];

		if (pg->pg_state != KVP_PG_NONE || pg->pg_npages ||
		    (pg->pg_head &&
		     !(k == p + len - 1 && pg->pg_head == p + 1)))
			return false;
	}
	return true;
}

/* Carve up to 'want' units from the free run at p (lock held).  Returns
 * the number taken, 0 if p is not a well-formed free run in its bin, or
 * the units it would hand out are not all interior (damage: nothing
 * written). */
KVP_INLINE uint32_t
kvp__dram_take(struct kvp_seg *s, uint32_t p, uint64_t want, uint32_t owner,
	       uint32_t gen)
{
	struct kvp_page *pg = &s->pages[p];
	uint32_t len, take;

	if (!kvp__dram_run_ok(s, p, &len) || pg->pg_state != KVP_PG_FREE ||
	    !kvp__dram_tail_ok(s, p, len))
		return 0;
	take = want < len ? (uint32_t)want : len;
	if (!kvp__dram_interior_ok(s, p, take, len) ||
	    kvp__dram_bin_unlink(s, p))
		return 0;
	if (take < len) {
		/* tail header first: the chain stays valid through FREE(len) */
		struct kvp_page *t = &s->pages[p + take];
		t->pg_state = KVP_PG_FREE;
		t->pg_npages = len - take;
		t->pg_owner = t->pg_owner_gen = 0;
		s->pages[p + len - 1].pg_head = p + take + 1;
		/* checked by the unlink above */
		kvp__dram_bin_link(s, p + take);
	}
	pg->pg_owner = owner;
	pg->pg_owner_gen = gen;
	pg->pg_next = 0;
	pg->pg_state = KVP_PG_USED;
	pg->pg_npages = take;
	s->pages[p + take - 1].pg_head = p + 1;
	s->dram->dh_used_pages += take;
	s->dram->dh_free_pages -= take;
	if (s->dram->dh_used_pages > s->dram->dh_peak_used_pages)
		s->dram->dh_peak_used_pages = s->dram->dh_used_pages;
	return take;
}

/*
 * Allocate 'bytes' for entry slot 'owner_slot' at generation 'gen',
 * waiting for the lock at most until deadline_ns (see kvp_dram_lock_until).
 * All or nothing.  Returns the first unit of the run chain in *first.
 * -ENOSPC when the free units do not add up; -EBUSY when the lock stayed
 * held; -EUCLEAN if the allocator is damaged (reported to the agent; runs
 * taken before the damage showed are tagged and the agent frees them).
 */
KVP_INLINE int
kvp_dram_alloc_until(struct kvp_seg *s, uint64_t bytes, uint64_t owner_slot,
		     uint32_t gen, uint32_t *first, uint64_t deadline_ns)
{
	uint64_t unit = s->g.g_dram_unit, n = s->g.g_dram_pages;
	uint64_t want = (bytes + unit - 1) / unit, got = 0;
	uint32_t owner = (uint32_t)owner_slot + 1, prev = 0, head = 0;
	unsigned b;
	int rc;

	if (want == 0)
		want = 1;
	if (want > n)
		return -ENOSPC;
	rc = kvp_dram_lock_until(s, deadline_ns);
	if (rc)
		return rc;
	if (s->dram->dh_free_pages < want) {
		s->dram->dh_alloc_fail++;
		kvp_dram_unlock(s);
		return -ENOSPC;
	}
	/* one run if any hole fits: first fit in the exact class (a few
	 * probes), then any run of a larger class */
	for (b = kvp_dram_bin(want); b < KVP_DRAM_BINS && !head; b++) {
		uint32_t q = s->dram->dh_bin[b];
		int probes = 0;

		for (; q && probes < 32; probes++) {
			uint32_t len;

			if (q > n || !kvp__dram_run_ok(s, q - 1, &len))
				goto damaged;
			if (len >= want) {
				head = q;
				break;
			}
			q = s->pages[q - 1].pg_next;
		}
	}
	if (head) {
		if (!kvp__dram_take(s, head - 1, want, owner, gen))
			goto damaged;
		*first = head - 1;
		kvp_crashpoint(C_ALLOC_LOCKED);
		kvp_dram_unlock(s);
		return 0;
	}
	/* fragmented: chain the largest runs until the value fits */
	for (b = KVP_DRAM_BINS; b-- > 0 && got < want;) {
		while (s->dram->dh_bin[b] && got < want) {
			uint32_t q = s->dram->dh_bin[b] - 1, took;

			if (q >= n)
				goto damaged;
			took = kvp__dram_take(s, q, want - got, owner, gen);
			if (!took)
				goto damaged;
			got += took;
			if (prev)
				s->pages[prev - 1].pg_next = q + 1;
			else
				*first = q;
			prev = q + 1;
		}
	}
	kvp_dram_unlock(s);
	if (got == want)
		return 0;
	kvp_dram_report_damage(s); /* the counts promised more than the bins */
	return -EUCLEAN;
damaged:
	kvp_dram_unlock(s);
	kvp_dram_report_damage(s);
	return -EUCLEAN;
}

/* kvp_dram_alloc_until without a deadline (tests, tools). */
KVP_INLINE int
kvp_dram_alloc(struct kvp_seg *s, uint64_t bytes, uint64_t owner_slot,
	       uint32_t gen, uint32_t *first)
{
	return kvp_dram_alloc_until(s, bytes, owner_slot, gen, first,
				    UINT64_MAX);
}

/*
 * Address and length of the run starting at unit p (a held chain), and
 * the next run (+1, 0 = last) in *next; NULL if p is not a well-formed
 * run: the chain was damaged, and the caller stops (never reads or
 * writes past the arena).
 */
KVP_INLINE unsigned char *
kvp_dram_run(const struct kvp_seg *s, uint32_t p, uint64_t *run_bytes,
	     uint32_t *next)
{
	uint32_t len, nx;

	if (!kvp__dram_run_ok(s, p, &len))
		return NULL;
	nx = s->pages[p].pg_next;
	*run_bytes = (uint64_t)len * s->g.g_dram_unit;
	*next = nx <= s->g.g_dram_pages ? nx : 0;
	return s->arena + (uint64_t)p * s->g.g_dram_unit;
}

/* Free the USED run at p (lock held), merging with free neighbours.
 * -EUCLEAN if p or a neighbour is not well formed (nothing freed; bins
 * may need the rebuild the caller's report brings).  Headers and tags a
 * merge makes interior are cleared. */
KVP_INLINE int
kvp__dram_free_run_locked(struct kvp_seg *s, uint32_t p)
{
	uint64_t n = s->g.g_dram_pages, P = p, L, k;
	struct kvp_page *pg = &s->pages[p];
	uint32_t len, qlen = 0, hlen = 0, h = 0;
	uint64_t stale[4];
	unsigned ns = 0;
	bool right = false, left = false;

	if (!kvp__dram_run_ok(s, p, &len) || pg->pg_state != KVP_PG_USED ||
	    !kvp__dram_tail_ok(s, p, len))
		return -EUCLEAN;
	if (p + len < n && s->pages[p + len].pg_state == KVP_PG_FREE) {
		if (!kvp__dram_run_ok(s, p + len, &qlen) ||
		    !kvp__dram_tail_ok(s, p + len, qlen))
			return -EUCLEAN;
		right = true;
	}
	if (p > 0) {
		h = s->pages[p - 1].pg_head;
		left = h && h - 1 < p &&
		       s->pages[h - 1].pg_state == KVP_PG_FREE &&
		       kvp__dram_run_ok(s, h - 1, &hlen) && h - 1 + hlen == p;
	}
	/* the bins first: nothing else is written if they are damaged */
	if ((right && kvp__dram_bin_unlink(s, p + len)) ||
	    (left && kvp__dram_bin_unlink(s, h - 1)))
		return -EUCLEAN;
	s->dram->dh_used_pages -= len;
	s->dram->dh_free_pages += len;
	pg->pg_owner = pg->pg_owner_gen = 0;
	pg->pg_next = 0;
	pg->pg_state = KVP_PG_FREE;
	L = len;
	if (right) {
		/* one write grows the run over the neighbour (chain valid) */
		pg->pg_npages = len + qlen;
		stale[ns++] = p + len - 1; /* our tail */
		stale[ns++] = p + len;     /* its header */
		L += qlen;
	}
	if (left) {
		s->pages[h - 1].pg_npages = (uint32_t)(hlen + L);
		stale[ns++] = p - 1; /* its tail */
		stale[ns++] = p;     /* our header */
		P = h - 1;
		L += hlen;
	}
	for (k = 0; k < ns; k++) {
		if (stale[k] == P)
			continue;
		/* the tail's tag is set below */
		kvp__dram_interior(s, stale[k]);
	}
	s->pages[P + L - 1].pg_head = (uint32_t)P + 1;
	return kvp__dram_bin_link(s, (uint32_t)P);
}

/*
 * The arena's unpopulated tail at creation: one USED run of every unit,
 * owned by KVP_DRAM_OWNER_UNPOP (nothing free, nothing used).  On a map
 * nobody else sees yet (the agent, before it publishes the segment).
 */
KVP_INLINE void
kvp_dram_init_unpop(struct kvp_seg *s)
{
	uint64_t n = s->g.g_dram_pages;
	struct kvp_page *pg = &s->pages[0];

	pg->pg_state = KVP_PG_USED;
	pg->pg_npages = (uint32_t)n;
	pg->pg_owner = KVP_DRAM_OWNER_UNPOP;
	pg->pg_owner_gen = 0;
	pg->pg_next = 0;
	s->pages[n - 1].pg_head = 1;
	s->dram->dh_used_pages = 0;
	s->dram->dh_free_pages = 0;
	/* relaxed: not yet published (the segment's link() does) */
	kvp_store_relaxed(&s->dram->dh_unpop_pages, n);
}

/*
 * Is unit f the head of the unpopulated tail (a USED run owned by
 * KVP_DRAM_OWNER_UNPOP that ends the arena, with its tail tag)?  *len is
 * its length.
 */
KVP_INLINE bool
kvp_dram_unpop_at(const struct kvp_seg *s, uint64_t f, uint32_t *len)
{
	return kvp__dram_run_ok(s, f, len) &&
	       s->pages[f].pg_state == KVP_PG_USED &&
	       s->pages[f].pg_owner == KVP_DRAM_OWNER_UNPOP &&
	       f + *len == s->g.g_dram_pages && kvp__dram_tail_ok(s, f, *len);
}

/*
 * Units [f, f + k) of the unpopulated tail that starts at f are populated
 * now: they become free (merged with a free run before them), the tail
 * starts at f + k, or is gone when k is all of it.  Lock held; the
 * agent's populate step only.  Every write keeps the run chain valid: the
 * new tail's header and tag go first, then the head shrinks to k (the
 * chain is f -> f + k -> end), then it is freed like any run.  0, or
 * -EUCLEAN (f is not the tail's head, or k is out of range: nothing
 * written).
 */
KVP_INLINE int
kvp_dram_unpop_release_locked(struct kvp_seg *s, uint32_t f, uint32_t k)
{
	uint64_t n = s->g.g_dram_pages;
	struct kvp_page *pg = &s->pages[f];
	uint32_t len;

	if (!kvp_dram_unpop_at(s, f, &len) || k == 0 || k > len)
		return -EUCLEAN;
	if (k < len) {
		struct kvp_page *t = &s->pages[f + k];

		t->pg_owner = KVP_DRAM_OWNER_UNPOP;
		t->pg_owner_gen = 0;
		t->pg_next = t->pg_prev = 0;
		t->pg_npages = len - k;
		t->pg_state = KVP_PG_USED;
		s->pages[n - 1].pg_head = f + k + 1;
		pg->pg_npages = k;
		s->pages[f + k - 1].pg_head = f + 1;
	}
	/* kvp__dram_free_run_locked moves k units from used to free */
	s->dram->dh_used_pages += k;
	/* relaxed: a statistic (under the lock) */
	kvp_store_relaxed(&s->dram->dh_unpop_pages,
			  kvp_load_relaxed(&s->dram->dh_unpop_pages) - k);
	if (kvp__dram_free_run_locked(s, f)) {
		s->dram->dh_used_pages -= k;
		return -EUCLEAN;
	}
	return 0;
}

/*
 * Free the run chain of entry (owner_slot, gen) starting at unit first,
 * waiting for the lock at most until deadline_ns.  Only runs tagged with
 * that owner are freed: a damaged or stale location frees nothing that
 * belongs to someone else.  Returns units freed, -EBUSY (lock held past
 * the deadline: nothing freed), -EUCLEAN (damage found and reported).
 */
KVP_INLINE int64_t
kvp_dram_free_chain_until(struct kvp_seg *s, uint32_t first,
			  uint64_t owner_slot, uint32_t gen,
			  uint64_t deadline_ns)
{
	uint64_t n = s->g.g_dram_pages, freed = 0, guard = 0;
	uint32_t p = first, owner = (uint32_t)owner_slot + 1;
	int rc = kvp_dram_lock_until(s, deadline_ns);

	if (rc)
		return rc;
	while (p < n && guard++ < n) {
		struct kvp_page *pg = &s->pages[p];
		uint32_t next = pg->pg_next, len;

		if (pg->pg_state != KVP_PG_USED || pg->pg_owner != owner ||
		    pg->pg_owner_gen != gen)
			/* not (or no longer) this value's: a stale location */
			break;
		if (!kvp__dram_run_ok(s, p, &len) ||
		    kvp__dram_free_run_locked(s, p)) {
			rc = -EUCLEAN;
			break;
		}
		freed += len;
		if (!next || next > n)
			break;
		p = next - 1;
	}
	kvp_dram_unlock(s);
	if (rc) {
		kvp_dram_report_damage(s);
		return rc;
	}
	return (int64_t)freed;
}

KVP_INLINE int64_t
kvp_dram_free_chain(struct kvp_seg *s, uint32_t first, uint64_t owner_slot,
		    uint32_t gen)
{
	return kvp_dram_free_chain_until(s, first, owner_slot, gen, UINT64_MAX);
}

/*
 * The agent's repair (agent/dram.c, kvp_dram_repair_agent) decides which
 * runs to keep; these write its verdict.  Lock held, agent only.
 */

/* The damage report is being handled: clear the hint (under the lock). */
KVP_INLINE void
kvp_dram_damage_clear_locked(struct kvp_seg *s)
{
	/* relaxed: under the lock; a report after this sets it again */
	kvp_store_relaxed(&s->dram->dh_damaged, 0);
}

/*
 * Rewrite the page map from a repair's verdict: the units set in 'used'
 * form USED runs (a new run at every unit set in 'start'), the gaps become
 * maximal free runs in fresh bins; the unpopulated tail from unit
 * 'frontier' on (marked used and started by the caller) keeps its owner
 * tag and is counted neither used nor free.  *kept_runs counts the USED
 * runs kept (the tail among them).
 */
KVP_INLINE void
kvp_dram_map_rewrite_locked(struct kvp_seg *s, const uint64_t *used,
			    const uint64_t *start, uint64_t frontier,
			    uint64_t *kept_runs)
{
	uint64_t n = s->g.g_dram_pages, p, used_units = 0;
	unsigned b;

#define KVP__BIT(m, i) (((m)[(i) / 64] >> ((i) % 64)) & 1)
	for (b = 0; b < KVP_DRAM_BINS; b++)
		s->dram->dh_bin[b] = 0;
	for (p = 0; p < n;) {
		uint64_t q = p + 1, k;

		if (KVP__BIT(used, p)) {
			while (q < n && KVP__BIT(used, q) &&
			       !KVP__BIT(start, q))
				q++;
			s->pages[p].pg_state = KVP_PG_USED;
			used_units += q - p;
			(*kept_runs)++;
		} else {
			while (q < n && !KVP__BIT(used, q))
				q++;
			s->pages[p].pg_state = KVP_PG_FREE;
			s->pages[p].pg_owner = s->pages[p].pg_owner_gen = 0;
		}
		s->pages[p].pg_npages = (uint32_t)(q - p);
		s->pages[p].pg_head = 0;
		for (k = p + 1; k < q; k++) /* interior units carry no header */
			kvp__dram_interior(s, k);
		s->pages[q - 1].pg_head = (uint32_t)p + 1;
		if (s->pages[p].pg_state == KVP_PG_FREE)
			/* bins were just cleared */
			kvp__dram_bin_link(s, (uint32_t)p);
		p = q;
	}
#undef KVP__BIT
	if (frontier < n) {
		struct kvp_page *pg = &s->pages[frontier];

		pg->pg_owner = KVP_DRAM_OWNER_UNPOP;
		pg->pg_owner_gen = 0;
		pg->pg_next = 0;
		used_units -= n - frontier;
	}
	s->dram->dh_used_pages = used_units;
	s->dram->dh_free_pages = n - used_units - (n - frontier);
}

/* A re-attached segment whose map has no unpopulated tail: its count goes
 * (agent/populate.c, before the populate threads start). */
KVP_INLINE void
kvp_dram_unpop_forget_agent(struct kvp_seg *s)
{
	/* relaxed: the count of a tail the map does not have */
	kvp_store_relaxed(&s->dram->dh_unpop_pages, 0);
}

/* The backing's page size, for tools (agent/populate.c). */
KVP_INLINE void
kvp_dram_page_bytes_set_agent(struct kvp_seg *s, uint64_t page)
{
	/* relaxed: for tools (kvpool stat) */
	kvp_store_relaxed(&s->dram->dh_page_bytes, page);
}

#endif /* KVP_DRAM_H */
