/* SPDX-License-Identifier: MIT */
/*
 * stress_pool - the chaos stress: one agent and N workers hammer one pool
 * whose DRAM tier, staging arena and SSD budget are tiny, so eviction,
 * demotion, promotion, partial staging and SSD segment reclaim never stop.
 * Workers do batch puts, batch gets, prefix probes, ranged gets, deletes
 * and leases over a shared key space; every value embeds its key, version
 * and length and every byte depends on them, so torn, stale or foreign
 * reads are caught.  A chaos loop SIGKILLs random workers (and respawns
 * them) and kill -9s the agent and restarts it; during each outage the
 * workers count the DRAM hits they still get and time the SSD reads that
 * answer UNAVAILABLE.  At the end the pool must pass the invariant checker
 * with nothing held, staged, leased or half-put.
 *
 * Deletes are journaled by version (each put's version is unique in the
 * run: the worker's spawn number and a count): a worker pins the key,
 * reads its value, deletes the key and, if the delete succeeded while the
 * pin held that value (a pinned value can leave the index only by a
 * delete), journals (key, version) with a sequence number.  Every read
 * that returns a value checks it against the journal: one deleted before
 * the read began must never come back (issue 25 item 8: after an agent
 * kill -9 with the segment kept, recovery put back values whose
 * tombstones were not yet written).  A key deleted and put again is a
 * new version, so the check is exact.
 *
 *   stress_pool --procs N --seconds S --seed X [--threads] [--kill-every MS]
 *               [--agent-restart-every MS] [--no-ssd]
 *
 * Workers are processes (default) or threads of one process (--threads,
 * for ThreadSanitizer; no worker kills then).  Prints the seed first;
 * ends with "N passed, N failed".
 */
#include <getopt.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "agent/kvp_check.h"
#include "tests/agent/harness.h"

#define KEYSPACE 4000
#define BATCH 64
#define MAXVAL (96u << 10)
#define MAXW 64

struct shared {
	kvp_aword_t wrong;    /* wrong bytes seen (must stay 0) */
	kvp_aword_t verified; /* bytes verified */
	kvp_aword_t ops;
	kvp_aword_t errors; /* unexpected statuses */
	kvp_aword_t killed;
	kvp_aword_t agent_down;  /* 1 while the chaos loop has the agent dead */
	kvp_aword_t outage_hits; /* DRAM hits served while the agent was dead */
	/* reads answered -ENOTCONN while it was dead */
	kvp_aword_t outage_unavail;
	kvp_aword_t unavail_max_ns; /* slowest -ENOTCONN answer */
	kvp_aword_t unavail_slow;   /* -ENOTCONN answers slower than 10 ms */
	kvp_aword_t leases;
	/* each worker's client slot word (reap timing) */
	kvp_aword_t slot_word[MAXW];
	kvp_aword_t slot_idx[MAXW]; /* and its slot + 1 */
	kvp_aword_t last_error;
	kvp_aword_t jseq;        /* delete journal: deletes journaled so far */
	kvp_aword_t jdropped;    /* deletes not journaled (table full) */
	kvp_aword_t jchecked;    /* reads checked against the journal */
	kvp_aword_t resurrected; /* deleted values read again (must stay 0) */
	kvp_aword_t res_key, res_version; /* the first one, for the report */
};

/*
 * The delete journal: an open-addressing set of (key, version) words in
 * shared memory, each with the sequence number its delete took after it
 * returned.  The word is [key + 1:12][version:52] (KEYSPACE < 4095,
 * versions < 2^52: never 0).  Inserted once, never removed.
 */
#define JSLOTS (1u << 20)
struct jslot {
	kvp_aword_t js_word;
	kvp_aword_t js_seq; /* 0 until the inserter has stored it */
};
static struct jslot *journal;

static struct shared *sh;
static const char *pool;
static unsigned seconds;
static uint64_t t_end_all; /* CLOCK_MONOTONIC deadline of the whole run */
static volatile int stop_flag;
struct val_hdr {
	uint64_t magic, version, len, keyhash;
};

static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void add(kvp_aword_t *w, uint64_t d);

static uint64_t
jword(uint64_t key, uint64_t version)
{
	return (key + 1) << 52 | (version & ((1ull << 52) - 1));
}

static uint64_t
jhash(uint64_t w)
{
	w ^= w >> 33;
	w *= 0xff51afd7ed558ccdull;
	w ^= w >> 33;
	return w;
}

/* Journal that version 'version' of key 'key' was deleted (the delete has
 * returned).  A full table drops it (counted). */
static void
journal_delete(uint64_t key, uint64_t version)
{
	uint64_t w = jword(key, version), i = jhash(w) % JSLOTS, n;
	/* full: every read that loads jseq after this (acquire, journal_now)
	 * began after the delete returned */
	uint64_t seq = kvp_fetch_add(&sh->jseq, 1) + 1;

	for (n = 0; n < JSLOTS / 2; n++, i = (i + 1) % JSLOTS) {
		/* full CAS: claims the slot; a reader that sees the word
		 * before its sequence takes it as not yet journaled */
		if (kvp_cas(&journal[i].js_word, 0, w)) {
			/* release: pairs with the reader's acquire */
			kvp_store_release(&journal[i].js_seq, seq);
			return;
		}
	}
	add(&sh->jdropped, 1);
}

/* Was version 'version' of key 'key' deleted by a delete journaled before
 * the read that found it began (r0: journal_now() before the read)? */
static bool
journal_deleted_before(uint64_t key, uint64_t version, uint64_t r0)
{
	uint64_t w = jword(key, version), i = jhash(w) % JSLOTS, n;

	for (n = 0; n < JSLOTS / 2; n++, i = (i + 1) % JSLOTS) {
		/* acquire: pairs with the inserter's CAS */
		uint64_t got = kvp_load_acquire(&journal[i].js_word), seq;

		if (!got)
			return false;
		if (got != w)
			continue;
		/* acquire: pairs with the inserter's release */
		seq = kvp_load_acquire(&journal[i].js_seq);
		return seq && seq <= r0;
	}
	return false;
}

/* The journal's clock, loaded before a read begins (acquire: pairs with
 * the deleters' fetch_add). */
static uint64_t
journal_now(void)
{
	return kvp_load_acquire(&sh->jseq);
}

/* A read that began at journal time r0 found a whole value of key 'key'
 * in b: one deleted before it began is counted (must stay 0). */
static void
journal_check(uint64_t key, const unsigned char *b, uint64_t r0)
{
	struct val_hdr h;

	memcpy(&h, b, sizeof(h));
	add(&sh->jchecked, 1);
	if (!journal_deleted_before(key, h.version, r0))
		return;
	/* full: the first one is reported */
	if (kvp_fetch_add(&sh->resurrected, 1) == 0) {
		/* relaxed: a report, read after the workers are gone */
		kvp_store_relaxed(&sh->res_key, key);
		kvp_store_relaxed(&sh->res_version, h.version);
	}
}

static uint32_t
mk(char *k, uint64_t i)
{
	return (uint32_t)snprintf(
		k, 100, "%064llx-stress-%llu",
		(unsigned long long)(i * 0x9e3779b97f4a7c15ull),
		(unsigned long long)i);
}

static void
make_val(unsigned char *b, uint64_t len, const char *k, uint32_t kl,
	 uint64_t version)
{
	struct val_hdr h = { 0x5354524553535631ull, version, len,
			     kvp_hash(1, k, kl) };

	memcpy(b, &h, sizeof(h));
	kvpt_fill(b + sizeof(h), len - sizeof(h), k, kl, version);
}

/* 0 if b[0..len) is a whole, correct value of key k (any version). */
static int
check_val(const unsigned char *b, uint64_t len, const char *k, uint32_t kl)
{
	struct val_hdr h;

	if (len < sizeof(h))
		return -1;
	memcpy(&h, b, sizeof(h));
	if (h.magic != 0x5354524553535631ull || h.len != len ||
	    h.keyhash != kvp_hash(1, k, kl))
		return -1;
	return kvpt_check(b + sizeof(h), len - sizeof(h), k, kl, h.version) ?
		       0 :
		       -1;
}

static void
add(kvp_aword_t *w, uint64_t d)
{
	kvp_fetch_add(w, d); /* full: statistics shared between workers */
}

static void
note_error(int st)
{
	add(&sh->errors, 1);
	/* relaxed: a report */
	kvp_store_relaxed(&sh->last_error, (uint64_t)(int64_t)st);
}

static void
atomic_max(kvp_aword_t *w, uint64_t v)
{
	uint64_t cur;

	/* relaxed: a statistic; the CAS keeps the largest */
	while ((cur = kvp_load_relaxed(w)) < v && !kvp_cas(w, cur, v))
		;
}

/* While the chaos loop has the agent dead: single gets of random keys.
 * DRAM hits must still be served (counted); SSD-resident keys must
 * answer UNAVAILABLE promptly (timed). */
#define RECENT 32

/* Key id whose value the index shows in DRAM now, among this worker's
 * recent puts and then random ones (a look, not a use: no probe); with
 * the agent dead nothing moves it.  'fallback' when none is found. */
static uint64_t
dram_key(struct kvp_client *c, uint64_t *seed, const uint64_t *recent,
	 uint64_t fallback)
{
	int tries;

	for (tries = 0; tries < 2 * RECENT; tries++) {
		uint64_t id = tries < RECENT ? recent[tries] :
					       rnd(seed) % KEYSPACE,
			 w;
		char key[100];
		uint32_t kl = mk(key, id);
		int64_t i = kvp_ix_find(&c->seg, c->nsid,
					kvp_key_hash(c->nsid, key, kl), key, kl,
					KVP_IX_M(KVP_IX_READY), &w);

		/* relaxed: a look at a READY entry (the get decides) */
		if (i >= 0 &&
		    KVP_LOC_TIER(kvp_load_relaxed(&c->seg.entries[i].e_loc)) ==
			    KVP_TIER_DRAM)
			return id;
	}
	return fallback;
}

static void
outage_probe(struct kvp_client *c, uint64_t *seed, unsigned char *buf,
	     const uint64_t *recent)
{
	int k;

	/* acquire */
	for (k = 0; k < 16 && kvp_load_acquire(&sh->agent_down); k++) {
		char key[100];
		/* a key the index shows in DRAM (whatever the eviction
		 * policy kept there) and random ones (likely on SSD) */
		uint64_t id = k & 1 ? rnd(seed) % KEYSPACE :
				      dram_key(c, seed, recent,
					       recent[rnd(seed) % RECENT]);
		uint32_t kl = mk(key, id);
		uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC), dt,
			 r0 = journal_now();
		ssize_t n = kvp_get(c, key, kl, buf, MAXVAL);

		dt = kvp_now_ns(CLOCK_MONOTONIC) - t0;
		/* acquire: restarted meanwhile */
		if (!kvp_load_acquire(&sh->agent_down))
			break;
		if (n >= 0) {
			if (check_val(buf, (uint64_t)n, key, kl)) {
				add(&sh->wrong, 1);
			} else {
				add(&sh->outage_hits, 1);
				add(&sh->verified, (uint64_t)n);
				journal_check(id, buf, r0);
			}
		} else if (n == -ENOTCONN) {
			add(&sh->outage_unavail, 1);
			atomic_max(&sh->unavail_max_ns, dt);
			if (dt > 10000000ull)
				add(&sh->unavail_slow, 1);
		} else if (n != -ENOENT && n != -EBUSY) {
			note_error((int)n);
		}
	}
}

/* Statuses a read may answer under chaos; anything else is a failure. */
static bool
read_ok_status(int st)
{
	return st == -ENOENT || st == -EBUSY || st == -ENOTCONN;
}

/* Worker idx, spawn number 'serial' (unique in the run: its versions are
 * serial << 32 | a count, unique in the run too). */
static void
worker(unsigned idx, uint64_t seed, uint64_t serial)
{
	uint64_t t_end = t_end_all, nput = 0;
	struct kvp_client *c;
	struct kvp_op ops[BATCH];
	char keys[BATCH][100];
	unsigned char *bufs = malloc((size_t)BATCH * MAXVAL);
	uint64_t recent[RECENT] = { 0 };
	unsigned nrecent = 0;
	int k, rc;

	seed = seed * 0x9e3779b97f4a7c15ull + 1;
	if (!bufs || (rc = kvp_open(pool, "stress", &c))) {
		note_error(bufs ? rc : -ENOMEM);
		free(bufs);
		return;
	}
	if (idx < MAXW) {
		/* relaxed: before... */
		kvp_store_relaxed(&sh->slot_word[idx], c->slot_word);
		/* release: ...this */
		kvp_store_release(&sh->slot_idx[idx], c->slot + 1);
	}
	while (!stop_flag && kvp_now_ns(CLOCK_MONOTONIC) < t_end) {
		uint64_t op = rnd(&seed) % 100, base = rnd(&seed) % KEYSPACE;
		uint64_t r0 = journal_now(); /* before the op's reads begin */
		ssize_t n;

		/* acquire: the chaos loop's flag */
		if (kvp_load_acquire(&sh->agent_down))
			outage_probe(c, &seed, bufs, recent);
		for (k = 0; k < BATCH; k++) {
			ops[k].klen =
				mk(keys[k], (base + (uint64_t)k) % KEYSPACE);
			ops[k].key = keys[k];
			ops[k].buf = bufs + (size_t)k * MAXVAL;
			ops[k].off = 0;
			ops[k].len = MAXVAL;
		}
		add(&sh->ops, 1);
		if (op < 30) { /* batch put of fresh versions */
			for (k = 0; k < BATCH; k++) {
				ops[k].len = 64 + rnd(&seed) % (MAXVAL - 64);
				make_val(ops[k].buf, ops[k].len, keys[k],
					 ops[k].klen, serial << 32 | ++nput);
			}
			kvp_batch_put(c, ops, BATCH);
			for (k = 0; k < BATCH; k++)
				if (ops[k].status == 0)
					recent[nrecent++ % RECENT] =
						(base + (uint64_t)k) % KEYSPACE;
				else if (ops[k].status != -EEXIST &&
					 ops[k].status != -EBUSY &&
					 ops[k].status != -ENOSPC &&
					 ops[k].status != -ENOTCONN)
					note_error(ops[k].status);
			/* batch get (through the staging arena in parts) */
		} else if (op < 65) {
			/* acquire: the chaos loop's flag, before and after */
			bool down = kvp_load_acquire(&sh->agent_down);

			kvp_batch_get(c, ops, BATCH);
			down = down && kvp_load_acquire(&sh->agent_down);
			for (k = 0; k < BATCH; k++) {
				if (ops[k].status == 0) {
					if (check_val(ops[k].buf, ops[k].len,
						      keys[k], ops[k].klen)) {
						add(&sh->wrong, 1);
					} else {
						add(&sh->verified, ops[k].len);
						journal_check(
							(base + (uint64_t)k) %
								KEYSPACE,
							ops[k].buf, r0);
					}
					if (down)
						add(&sh->outage_hits, 1);
				} else if (!read_ok_status(ops[k].status)) {
					note_error(ops[k].status);
				}
			}
			/* prefix probe, then whole and ranged gets */
		} else if (op < 78) {
			n = kvp_batch_exists_prefix(c, ops, BATCH);
			if (n < 0)
				note_error((int)n);
			for (k = 0; k < n && k < 8; k++) {
				unsigned char *whole = bufs,
					      *part = bufs + MAXVAL;
				ssize_t len = kvp_get(c, keys[k], ops[k].klen,
						      whole, MAXVAL);

				if (len < 0 && !read_ok_status((int)len))
					note_error((int)len);
				if (len > 64) {
					uint64_t off =
						rnd(&seed) % (uint64_t)len;
					ssize_t m;

					if (check_val(whole, (uint64_t)len,
						      keys[k], ops[k].klen)) {
						add(&sh->wrong, 1);
						continue;
					}
					journal_check((base + (uint64_t)k) %
							      KEYSPACE,
						      whole, r0);
					/* the ranged read must equal the slice,
					 * unless the key was replaced meanwhile
					 * (then the new value must itself be
					 * valid) */
					m = kvp_get_range(c, keys[k],
							  ops[k].klen, off,
							  part, 4096);
					if (m > 0 && memcmp(part, whole + off,
							    (size_t)m)) {
						ssize_t l2 = kvp_get(
							c, keys[k], ops[k].klen,
							whole, MAXVAL);
						if (l2 >= 0 &&
						    check_val(whole,
							      (uint64_t)l2,
							      keys[k],
							      ops[k].klen))
							add(&sh->wrong, 1);
					} else if (m > 0) {
						add(&sh->verified, (uint64_t)m);
					} else if (m < 0 &&
						   !read_ok_status((int)m) &&
						   m != -EINVAL) {
						note_error((int)m);
					}
				}
			}
			/* leases: half released, half left to expire */
		} else if (op < 88) {
			for (k = 0; k < 4; k++) {
				struct kvp_lease l;
				rc = kvp_lease_acquire(
					c, keys[k], ops[k].klen,
					5 + (uint32_t)(rnd(&seed) % 45), &l);
				if (rc == 0) {
					add(&sh->leases, 1);
					if (k & 1)
						kvp_lease_release(c, &l);
				} else if (rc != -ENOENT && rc != -EBUSY) {
					note_error(rc);
				}
			}
		} else { /* deletes, journaled: pin, read, delete */
			for (k = 0; k < 4; k++) {
				uint64_t id = (base + (uint64_t)k) % KEYSPACE,
					 version = 0;
				struct kvp_pinset *ps = NULL;
				struct val_hdr h;

				if (kvp_batch_lookup_pin(c, &ops[k], 1, &ps) ==
					    1 &&
				    kvp_pinset_get(c, ps, &ops[k], 1) >= 0 &&
				    ops[k].status == 0 &&
				    !check_val(ops[k].buf, ops[k].len, keys[k],
					       ops[k].klen)) {
					journal_check(id, ops[k].buf, r0);
					memcpy(&h, ops[k].buf, sizeof(h));
					version = h.version;
				}
				rc = kvp_delete(c, keys[k], ops[k].klen);
				if (rc && rc != -ENOENT && rc != -EBUSY)
					note_error(rc);
				/* deleted while the pin held that version: it
				 * was deleted (by us, or by another worker
				 * before us) */
				if (rc == 0 && version)
					journal_delete(id, version);
				kvp_pinset_free(c, ps);
			}
		}
	}
	kvp_close(c);
	free(bufs);
}

static unsigned nthreads_arg;

/* After the workers: read every key and check it against the journal
 * (every delete in it returned before this began). */
static void
journal_sweep(void)
{
	struct kvp_client *c;
	struct kvp_op ops[BATCH];
	char keys[BATCH][100];
	unsigned char *bufs = malloc((size_t)BATCH * MAXVAL);
	uint64_t base, r0 = journal_now();
	int k;

	if (!bufs || kvp_open(pool, "stress", &c)) {
		note_error(-ENOMEM);
		free(bufs);
		return;
	}
	for (base = 0; base < KEYSPACE; base += BATCH) {
		for (k = 0; k < BATCH; k++) {
			ops[k].klen =
				mk(keys[k], (base + (uint64_t)k) % KEYSPACE);
			ops[k].key = keys[k];
			ops[k].buf = bufs + (size_t)k * MAXVAL;
			ops[k].off = 0;
			ops[k].len = MAXVAL;
		}
		kvp_batch_get(c, ops, BATCH);
		for (k = 0; k < BATCH; k++)
			if (ops[k].status == 0 &&
			    !check_val(ops[k].buf, ops[k].len, keys[k],
				       ops[k].klen))
				journal_check((base + (uint64_t)k) % KEYSPACE,
					      ops[k].buf, r0);
	}
	kvp_close(c);
	free(bufs);
}

static void *
worker_thread(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg;

	worker((unsigned)(seed % MAXW), seed, seed % MAXW);
	return NULL;
}

struct pool_cond {
	struct kvp_seg *s;
};

static bool
pool_quiet(void *p)
{
	struct kvp_seg *s = ((struct pool_cond *)p)->s;

	return kvpt_clients_nonfree(s) == 0 && kvpt_holds_total(s) == 0 &&
	       kvpt_count_state(s, KVP_IX_PENDING) == 0;
}

static bool
no_leases(void *p)
{
	struct kvp_seg *s = ((struct pool_cond *)p)->s;
	uint64_t k;

	for (k = 0; k < s->g.g_max_leases; k++)
		/* acquire: pairs with the sweep's CAS */
		if (KVP_LS_STATE(kvp_load_acquire(&s->leases[k].ls_state)) !=
		    KVP_LS_FREE)
			return false;
	return true;
}

static char ssd_dir[256];
static bool use_ssd = true;

static int
agent_up(struct kvpt_agent *a, bool first)
{
	if (use_ssd) {
		if (first)
			return kvpt_agent_start(
				a, "--dram", "8M", "--dram-unit", "4K",
				"--index-entries", "8192", "--dram-high", "85",
				"--dram-low", "60", "--ssd-dir", ssd_dir,
				"--ssd-segment", "4M", "--ssd-size", "24M",
				"--staging", "1M", "--staging-slot", "64K",
				NULL);
		return kvpt_agent_restart(a, "--dram", "8M", "--dram-unit",
					  "4K", "--index-entries", "8192",
					  "--dram-high", "85", "--dram-low",
					  "60", "--ssd-dir", ssd_dir,
					  "--ssd-segment", "4M", "--ssd-size",
					  "24M", "--staging", "1M",
					  "--staging-slot", "64K", NULL);
	}
	if (first)
		return kvpt_agent_start(a, "--dram", "8M", "--dram-unit", "4K",
					"--index-entries", "8192",
					"--dram-high", "85", "--dram-low", "60",
					NULL);
	return kvpt_agent_restart(a, "--dram", "8M", "--dram-unit", "4K",
				  "--index-entries", "8192", "--dram-high",
				  "85", "--dram-low", "60", NULL);
}

/* A DRAM hit was served during this outage (outage_hits moved past
 * *arg). */
static bool
outage_served(void *arg)
{
	/* relaxed: a count */
	return kvp_load_relaxed(&sh->outage_hits) > *(const uint64_t *)arg;
}

static void
sleep_until(uint64_t t)
{
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);

	if (t > now) {
		struct timespec ts = { (time_t)((t - now) / 1000000000ull),
				       (long)((t - now) % 1000000000ull) };
		/* the chaos schedule, not a synchronisation */
		nanosleep(&ts, NULL);
	}
}

static uint64_t base_seed;

/* Worker i, spawn number 'serial' (unique in the run). */
static pid_t
spawn(unsigned i, uint64_t serial)
{
	pid_t p;

	kvp_store_relaxed(&sh->slot_idx[i], 0); /* relaxed: before the fork */
	p = fork();
	if (p == 0) {
		worker(i, base_seed * 1000 + serial, serial);
		_exit(0);
	}
	return p;
}

/* The killed worker's client slot is reaped when its word changes. */
struct reap_cond {
	struct kvp_seg *s;
	uint32_t slot;
	uint64_t word;
};

static bool
reaped(void *p)
{
	struct reap_cond *rc = p;

	/* acquire: pairs with the reaper's FREE store-release */
	return kvp_load_acquire(&rc->s->clients[rc->slot].cs_state) != rc->word;
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "procs", required_argument, NULL, 'p' },
		{ "seconds", required_argument, NULL, 's' },
		{ "seed", required_argument, NULL, 'x' },
		{ "threads", no_argument, NULL, 't' },
		{ "kill-every", required_argument, NULL, 'k' },
		{ "agent-restart-every", required_argument, NULL, 'a' },
		{ "no-ssd", no_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned procs = 4, kill_ms = 0, restart_ms = 0, passed = 0, failed = 0,
		 i;
	unsigned restarts = 0, reaps_timed = 0, kills_in_outage = 0;
	uint64_t hits0 = 0;
	uint64_t seed = (uint64_t)time(NULL), rs, reap_worst = 0, reap_sum = 0;
	uint64_t outage_reap_worst = 0;
	bool threads = false;
	struct kvpt_agent a;
	struct kvp_seg s;
	struct pool_cond pc;
	struct kvp_check_report rep;
	pthread_t *th = NULL;
	pid_t *pid = NULL;
	uint64_t next_kill, next_restart, t_end;
	int opt;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'p':
			procs = (unsigned)atoi(optarg);
			break;
		case 's':
			seconds = (unsigned)atoi(optarg);
			break;
		case 'x':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 't':
			threads = true;
			break;
		case 'k':
			kill_ms = (unsigned)atoi(optarg);
			break;
		case 'a':
			restart_ms = (unsigned)atoi(optarg);
			break;
		case 'n':
			use_ssd = false;
			break;
		default:
			fprintf(stderr,
				"usage: stress_pool --procs N --seconds S --seed X "
				"[--threads] [--kill-every MS] [--agent-restart-every MS] "
				"[--no-ssd]\n");
			return 2;
		}
	}
	if (!seconds)
		seconds = 10;
	if (!procs)
		procs = 1;
	if (procs > MAXW)
		procs = MAXW;
	nthreads_arg = procs;
	printf("seed %llu\n", (unsigned long long)seed);
	printf("stress_pool: %u %s, %u s, %s%s%s\n", procs,
	       threads ? "threads" : "processes", seconds,
	       use_ssd ? "DRAM 8 MiB + SSD 24 MiB, staging 1 MiB" :
			 "DRAM 8 MiB only",
	       kill_ms && !threads ? ", random SIGKILLs" : "",
	       restart_ms ? ", agent kill -9 + restart" : "");
	fflush(stdout);
	rs = seed | 1;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	base_seed = seed;
	journal = mmap(NULL, JSLOTS * sizeof(*journal), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (journal == MAP_FAILED)
		return 1;
	if (use_ssd && kvpt_tmpdir(ssd_dir, sizeof(ssd_dir), "stress")) {
		printf("cannot create %s\n0 passed, 1 failed\n", ssd_dir);
		return 1;
	}
	if (agent_up(&a, true)) {
		printf("cannot start the agent\n0 passed, 1 failed\n");
		return 1;
	}
	pool = a.pool;
	if (kvpt_seg_map(a.pool, &s)) {
		printf("cannot map the pool\n0 passed, 1 failed\n");
		return 1;
	}
	t_end_all =
		kvp_now_ns(CLOCK_MONOTONIC) + (uint64_t)seconds * 1000000000ull;
	t_end = t_end_all;
	if (threads) {
		th = calloc(procs, sizeof(*th));
		for (i = 0; i < procs; i++)
			pthread_create(&th[i], NULL, worker_thread,
				       (void *)(uintptr_t)(seed * MAXW + i));
	} else {
		pid = calloc(procs, sizeof(*pid));
		for (i = 0; i < procs; i++)
			pid[i] = spawn(i, i);
	}
	/* the chaos loop */
	if (threads)
		kill_ms = 0;
	next_kill = kill_ms ?
			    kvp_now_ns(CLOCK_MONOTONIC) + kill_ms * 1000000ull :
			    UINT64_MAX;
	next_restart = restart_ms ? kvp_now_ns(CLOCK_MONOTONIC) +
					    restart_ms * 1000000ull :
				    UINT64_MAX;
	for (;;) {
		uint64_t next = next_kill < next_restart ? next_kill :
							   next_restart;

		if (next >= t_end)
			break;
		sleep_until(next);
		if (next == next_kill) {
			uint32_t slot;
			uint64_t word;

			next_kill += kill_ms * 1000000ull;
			i = (unsigned)(rnd(&rs) % procs);
			if (pid[i] <= 0 || kill(pid[i], SIGKILL))
				continue;
			waitpid(pid[i], NULL, 0);
			add(&sh->killed, 1);
			/* acquire: pairs with the worker's release of slot_idx,
			 * which orders its relaxed store of slot_word before
			 * it; agent_down is ours (relaxed) */
			slot = (uint32_t)kvp_load_acquire(&sh->slot_idx[i]);
			word = kvp_load_relaxed(&sh->slot_word[i]);
			if (slot && !kvp_load_relaxed(&sh->agent_down)) {
				struct reap_cond rc = { &s, slot - 1, word };
				long long ns =
					kvpt_wait_until(reaped, &rc, 3000);
				uint64_t v = ns < 0 ? 3000000000ull :
						      (uint64_t)ns;

				reaps_timed++;
				reap_sum += v;
				if (v > reap_worst)
					reap_worst = v;
			} else if (slot) {
				kills_in_outage++;
			}
			/* relaxed: killed is only written by this thread */
			pid[i] = spawn(i, procs + (uint64_t)kvp_load_relaxed(
							  &sh->killed));
		} else {
			next_restart += restart_ms * 1000000ull;
			kvpt_agent_kill(&a);
			/* relaxed: the workers' count */
			hits0 = kvp_load_relaxed(&sh->outage_hits);
			/* release: workers probe */
			kvp_store_release(&sh->agent_down, 1);
			restarts++;
			/* the outage: workers keep serving DRAM hits; one of
			 * them dies meanwhile (the restarted agent reaps it)
			 * and its replacement opens the pool with no agent */
			sleep_until(kvp_now_ns(CLOCK_MONOTONIC) +
				    150ull * 1000000);
			struct reap_cond orc = { &s, 0, 0 };
			if (!threads) {
				i = (unsigned)(rnd(&rs) % procs);
				if (pid[i] > 0 && kill(pid[i], SIGKILL) == 0) {
					waitpid(pid[i], NULL, 0);
					add(&sh->killed, 1);
					/* acquire: pairs with the worker's
					 * release */
					orc.slot = (uint32_t)kvp_load_acquire(
						&sh->slot_idx[i]);
					/* relaxed: ordered by the acquire
					 * above; killed is only written by this
					 * thread */
					orc.word = kvp_load_relaxed(
						&sh->slot_word[i]);
					pid[i] = spawn(
						i,
						procs + (uint64_t)kvp_load_relaxed(
								&sh->killed));
				}
			}
			sleep_until(kvp_now_ns(CLOCK_MONOTONIC) +
				    150ull * 1000000);
			/* the outage lasts until a worker served a DRAM hit
			 * in it (every worker may be inside a call that waits
			 * out the agent's grace when it begins, under a
			 * sanitizer above all), 3 s at most */
			kvpt_wait_until(outage_served, &hits0, 3000);
			if (agent_up(&a, false) || a.pid <= 0) {
				printf("FAIL: the agent did not restart\n");
				failed++;
				/* release */
				kvp_store_release(&sh->agent_down, 0);
				break;
			}
			kvp_store_release(&sh->agent_down, 0); /* release */
			if (orc.slot) {
				long long ns;

				orc.slot--;
				ns = kvpt_wait_until(reaped, &orc, 3000);
				kills_in_outage++;
				if (ns < 0 || (uint64_t)ns > outage_reap_worst)
					outage_reap_worst =
						ns < 0 ? 3000000000ull :
							 (uint64_t)ns;
			}
		}
	}
	if (threads) {
		for (i = 0; i < procs; i++) {
			pthread_join(th[i], NULL);
			passed++;
		}
		free(th);
	} else {
		unsigned alive = procs;

		while (alive) {
			int st;
			pid_t w = wait(&st);

			if (w < 0)
				break;
			for (i = 0; i < procs; i++)
				if (pid[i] == w) {
					pid[i] = -1;
					alive--;
					if (WIFEXITED(st) &&
					    WEXITSTATUS(st) == 0)
						passed++;
					else
						failed++,
							printf("FAIL: worker %u exited with %#x\n",
							       i, st);
				}
		}
		free(pid);
	}
	(void)nthreads_arg;
	/* end of run: nobody holds anything, nothing half-put, all reaped,
	 * every lease expired or released and swept */
	/* From here every worker has exited (joined or waited for): the
	 * statistics in sh are read with relaxed loads, ordered by the
	 * join/wait; the agent's counters are statistics too (relaxed). */
	/* every key read once more: no deleted value is there (the last
	 * agent restart recovered from the same segment) */
	journal_sweep();
	pc.s = &s;
	if (kvpt_wait_until(pool_quiet, &pc, 3000) >= 0)
		passed++;
	else
		failed++,
			printf("FAIL: pool not quiet: %llu clients, %llu holds, %llu pending\n",
			       (unsigned long long)kvpt_clients_nonfree(&s),
			       (unsigned long long)kvpt_holds_total(&s),
			       (unsigned long long)kvpt_count_state(
				       &s, KVP_IX_PENDING));
	if (kvpt_wait_until(no_leases, &pc, 3000) >= 0)
		passed++;
	else
		failed++, printf("FAIL: leases left after their expiry\n");
	if (kvp_check_wait(&s, 3000, stdout, &rep) == 0 && rep.holds == 0 &&
	    rep.spans_in_use == 0 && rep.leases_live == 0 &&
	    rep.entries_pending == 0)
		passed++;
	else
		failed++,
			printf("FAIL: invariant check (%u violations, %llu holds, %llu staging "
			       "slots, %llu leases)\n",
			       rep.violations, (unsigned long long)rep.holds,
			       (unsigned long long)rep.spans_in_use,
			       (unsigned long long)rep.leases_live);
	kvp_check_summary(&rep, stdout);
	if (kvp_load_relaxed(&sh->wrong) == 0)
		passed++;
	else
		failed++, printf("FAIL: %llu wrong values read\n",
				 (unsigned long long)kvp_load_relaxed(
					 &sh->wrong));
	if (kvp_load_relaxed(&sh->resurrected) == 0)
		passed++;
	else
		failed++,
			printf("FAIL: %llu reads returned a deleted value (first: key "
			       "%llu version %#llx)\n",
			       (unsigned long long)kvp_load_relaxed(
				       &sh->resurrected),
			       (unsigned long long)kvp_load_relaxed(
				       &sh->res_key),
			       (unsigned long long)kvp_load_relaxed(
				       &sh->res_version));
	if (kvp_load_relaxed(&sh->errors) == 0)
		passed++;
	else
		failed++, printf("FAIL: %llu unexpected statuses (last: %s)\n",
				 (unsigned long long)kvp_load_relaxed(
					 &sh->errors),
				 kvp_strerror((int)(int64_t)kvp_load_relaxed(
					 &sh->last_error)));
	if (reaps_timed || kills_in_outage) {
		if (reap_worst <= 1000000000ull &&
		    outage_reap_worst <= 1000000000ull)
			passed++;
		else
			failed++,
				printf("FAIL: a killed worker was reaped only after %.0f ms\n",
				       (double)(reap_worst > outage_reap_worst ?
							reap_worst :
							outage_reap_worst) /
					       1e6);
	}
	if (restarts) {
		/* DRAM hits kept coming while the agent was dead */
		if (kvp_load_relaxed(&sh->outage_hits) > 0)
			passed++;
		else
			failed++,
				printf("FAIL: no DRAM hit was served during %u agent outages\n",
				       restarts);
	}
	printf("deletes: %llu journaled (%llu not: table full), %llu reads "
	       "checked against them, %llu deleted values back\n",
	       (unsigned long long)(kvp_load_relaxed(&sh->jseq) -
				    kvp_load_relaxed(&sh->jdropped)),
	       (unsigned long long)kvp_load_relaxed(&sh->jdropped),
	       (unsigned long long)kvp_load_relaxed(&sh->jchecked),
	       (unsigned long long)kvp_load_relaxed(&sh->resurrected));
	printf("ops %llu batches, %.1f MiB verified, %llu leases; %llu evictions, %llu "
	       "demotions, %llu promotions, %llu staged, %llu busy rejects, %llu SSD segments "
	       "reclaimed\n",
	       (unsigned long long)kvp_load_relaxed(&sh->ops),
	       (double)kvp_load_relaxed(&sh->verified) / 1048576.0,
	       (unsigned long long)kvp_load_relaxed(&sh->leases),
	       (unsigned long long)kvp_load_relaxed(
		       &s.hdr->h_actr[KVP_ACTR_EVICT]),
	       (unsigned long long)kvp_load_relaxed(
		       &s.hdr->h_actr[KVP_ACTR_DEMOTE]),
	       (unsigned long long)kvp_load_relaxed(
		       &s.hdr->h_actr[KVP_ACTR_PROMOTE]),
	       (unsigned long long)kvp_load_relaxed(
		       &s.hdr->h_actr[KVP_ACTR_STAGED]),
	       (unsigned long long)kvp_load_relaxed(
		       &s.hdr->h_actr[KVP_ACTR_BUSY_REJECT]),
	       (unsigned long long)kvp_load_relaxed(
		       &s.hdr->h_actr[KVP_ACTR_SEGMENT_RECLAIM]));
	printf("chaos: %llu workers killed (%u with the agent up: reaped in %.1f ms worst, "
	       "%.1f ms mean; %u during outages: reaped %.1f ms after the restart at worst), "
	       "%u agent restarts; during outages %llu DRAM hits served, "
	       "%llu reads UNAVAILABLE (slowest %.1f ms, %llu over 10 ms)\n",
	       (unsigned long long)kvp_load_relaxed(&sh->killed), reaps_timed,
	       (double)reap_worst / 1e6,
	       reaps_timed ? (double)reap_sum / reaps_timed / 1e6 : 0.0,
	       kills_in_outage, (double)outage_reap_worst / 1e6, restarts,
	       (unsigned long long)kvp_load_relaxed(&sh->outage_hits),
	       (unsigned long long)kvp_load_relaxed(&sh->outage_unavail),
	       (double)kvp_load_relaxed(&sh->unavail_max_ns) / 1e6,
	       (unsigned long long)kvp_load_relaxed(&sh->unavail_slow));
	kvp__seg_unmap(&s);
	if (kvpt_agent_stop(&a) != 0)
		failed++, printf("FAIL: agent did not stop cleanly\n");
	else
		passed++;
	if (use_ssd && kvpt_tmpdir_remove(ssd_dir))
		printf("warning: could not remove %s\n", ssd_dir);
	printf("%u passed, %u failed\n", passed, failed);
	return failed ? 1 : 0;
}
