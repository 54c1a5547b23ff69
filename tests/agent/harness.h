/* SPDX-License-Identifier: MIT */
/*
 * harness.h - start and stop a real kvpoold for a test, on a pool name
 * private to the test; wait on conditions with deadlines, never on sleeps.
 */
#ifndef KVP_TEST_HARNESS_H
#define KVP_TEST_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "kvpool.h"

struct kvpt_agent {
	pid_t pid;
	char pool[64];
};

/* Start kvpoold --foreground --pool <unique> <args...> (NULL terminated)
 * from the directory of the running test binary; returns once the agent
 * holds its segment lock and its DRAM tier is populated (unless the
 * arguments name --populate-rate: a test of the populate itself, which
 * gets the agent as soon as it serves).  The pool is kvpt_pool_name("t<pid>_<n>"); the
 * agent logs to kvpt_agent_log(pool) (stderr if KVPT_AGENT_LOG is set).
 * 0 or -errno. */
int kvpt_agent_start(struct kvpt_agent *a, const char *arg, ...);
/*
 * A run's own files.  tests/run.sh sets KVPT_RUN (a tag, [A-Za-z0-9]{1,16})
 * and KVPT_LOG_DIR (a directory of its own): every pool a test creates is
 * named "<tag>.<name>" and every agent log lies in that directory, so the
 * run judges only the segments and logs it left, never those of another
 * run on the same machine.  Without them (a test run by hand): no tag,
 * logs in /tmp.
 */
const char *kvpt_run_tag(void); /* "" when KVPT_RUN is unset */
const char *kvpt_log_dir(void); /* KVPT_LOG_DIR (absolute) or /tmp */
/* "<tag>.<fmt...>" (or just fmt... without a tag) into out: 0, or -1 if it
 * does not fit in cap or KVP_POOL_NAME_MAX */
int kvpt_pool_name(char *out, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The pool name the next kvpt_agent_start of this process takes (a test
 * that must act before its agent exists, e.g. squat its names): 0 or -1 */
int kvpt_pool_next(char *out, size_t cap);
/* "<log dir>/kvpt.<pool>.log": where the harness's agent on pool logs */
void kvpt_agent_log(const char *pool, char *out, size_t cap);

/* Restart on the same pool (after a kill). */
int kvpt_agent_restart(struct kvpt_agent *a, const char *arg, ...);
int kvpt_agent_stop(struct kvpt_agent *a); /* SIGTERM + wait; removes segment */
void kvpt_agent_kill(struct kvpt_agent *a); /* SIGKILL + wait */
/* SIGSTOP the agent and wait until it is stopped (the signal is
 * asynchronous: a request posted meanwhile could still be taken); 0, or
 * -1 if it did not stop.  SIGCONT resumes it. */
int kvpt_agent_pause(struct kvpt_agent *a);
void kvpt_pool_remove(const char *pool); /* shm_unlink, ignore errors */

/*
 * The pool most agent tests start from: kvpt_agent_start(a, arg...), a
 * mapped view of its segment in s (kvpt_seg_map) and a client *c opened
 * in namespace "ns".  0, or the first step's error.  kvpt_pool_down
 * undoes it in reverse (kvp_close, unmap, kvpt_agent_stop) and returns
 * the agent's exit status (0: a clean stop).
 */
int kvpt_pool_up(struct kvpt_agent *a, struct kvp_seg *s, struct kvp_client **c,
		 const char *arg, ...);
int kvpt_pool_down(struct kvpt_agent *a, struct kvp_seg *s,
		   struct kvp_client *c);

/* Wait until cond(arg) is true or timeout_ms passes; polls every ~1 ms
 * (a condition with a deadline, not a sleep).  Returns elapsed ns, or -1
 * on timeout. */
long long kvpt_wait_until(bool (*cond)(void *), void *arg, unsigned timeout_ms);

/* How long a stress runs: the environment's name (milliseconds) if it
 * is a number, else dflt_ms; in nanoseconds. */
uint64_t kvpt_env_ms_ns(const char *name, unsigned dflt_ms);

/* Lock-step races (two threads meeting at every round so that what
 * they race lands as close together as it can): spin until *p >= v,
 * yielding every 256 looks (fewer cores than threads); false if *stop
 * (when stop is not NULL) became non-zero first. */
bool kvpt_step_wait(const kvp_aword_t *p, uint64_t v, const kvp_aword_t *stop);
/* A random delay of 0..mask loads (mask 2^n - 1; xorshift64 on *seed):
 * both sides of a lock-step race sweep their offset with it. */
void kvpt_delay(uint64_t *seed, unsigned mask);

/* A mapped view of a pool for assertions (no client slot). */
int kvpt_seg_map(const char *pool, struct kvp_seg *s);

/*
 * A bare segment, for unit tests of what lives in it (the index, the hold
 * protocol) without an agent: a memfd (no /dev/shm name, nothing left
 * behind) of exactly the layout's size, mapped MAP_SHARED (forked children
 * share it), its header written as the agent writes it (magic, ABI, layout
 * signature, both geometry copies) and bound with kvp_shm_bind, as every
 * process binds a segment.  No SSD tier; one DRAM unit.  Every other byte
 * is zero: client slots FREE, index slots EMPTY(0), no holds, no leases;
 * the allocator lock and the page map are not initialised.  index_slots:
 * a power of two >= 16.  0, or -errno (-EPROTO: the fixture wrote a
 * header a client would refuse).  Unmap with kvp__seg_unmap.
 */
int kvpt_seg_bare(struct kvp_seg *s, uint64_t index_slots, uint32_t max_clients,
		  uint32_t holds_per_client, uint32_t max_leases);
/* Put a key into a segment's index as a putter does, without a value:
 * kvp_ix_claim (client slot cslot, hash kvp_key_hash(ns, key)), then
 * kvp_ix_publish.  The READY slot and its word in *w, or kvp_ix_claim's
 * error (-EEXIST, -ENOSPC). */
int64_t kvpt_ix_put(struct kvp_seg *s, uint32_t cslot, uint64_t ns,
		    const void *key, size_t klen, uint64_t *w);

/* Totals read from a segment, as the CLI computes them. */
uint64_t kvpt_count_state(const struct kvp_seg *s, unsigned state);
uint64_t kvpt_holds_total(const struct kvp_seg *s);
uint64_t kvpt_units_used(const struct kvp_seg *s);
uint64_t kvpt_clients_nonfree(const struct kvp_seg *s);
uint64_t kvpt_ctr_total(const struct kvp_seg *s, enum kvp_ctr k);

/* Is key READY in c's namespace?  A look at the index that is not a use
 * (kvp_exists is one: a probe keeps its key young for the evictor). */
bool kvpt_present(struct kvp_client *c, const struct kvp_seg *s,
		  const void *key, uint32_t klen);

/* The SSD tier, as tests drive it.  A test names its keys with a
 * kvpt_key_fn (key i into k, returns its length). */
typedef uint32_t (*kvpt_key_fn)(char *k, int i);
/* Are keys 0..n-1 all READY and SSD-resident? */
bool kvpt_all_on_ssd(struct kvp_client *c, const struct kvp_seg *s, int n,
		     kvpt_key_fn key);
/* Put keys 0..n-1 (vsize bytes, kvpt_fill(version)), retrying -EBUSY, then
 * wait up to timeout_ms until the agent demoted all of them (run it with
 * --dram-high 0).  0, a put's error, or -ETIMEDOUT. */
int kvpt_put_and_demote(struct kvp_client *c, const struct kvp_seg *s, int n,
			uint64_t vsize, kvpt_key_fn key, uint64_t version,
			unsigned timeout_ms);
/* an agent counter */
uint64_t kvpt_actr(const struct kvp_seg *s, enum kvp_actr k);
/* staging slots not FREE */
unsigned kvpt_spans_in_use(const struct kvp_seg *s);

/* Self-verifying payloads: every byte depends on (key, version). */
void kvpt_fill(void *buf, uint64_t len, const void *key, uint32_t klen,
	       uint64_t version);
bool kvpt_check(const void *buf, uint64_t len, const void *key, uint32_t klen,
		uint64_t version);
/* Put keys from..to-1 (vsize bytes, kvpt_fill(version)), retrying -EBUSY:
 * 0, or the first other status. */
int kvpt_put_keys(struct kvp_client *c, kvpt_key_fn key, int from, int to,
		  uint64_t vsize, uint64_t version);
/* How many of keys from..to-1 do not read back whole as version's vsize
 * bytes (version 0: as misses, -ENOENT).  An -EBUSY answer is asked again
 * when retry_busy, else it counts as wrong.  The first wrong key is
 * printed (stderr). */
int kvpt_wrong_keys(struct kvp_client *c, kvpt_key_fn key, int from, int to,
		    uint64_t vsize, uint64_t version, bool retry_busy);

/* A private directory for a test's SSD store: /var/tmp/kvpt-<tag>-<pid>-XXXXXX
 * (mkdtemp, 0700) into dir; emptied again (rm -rf, mkdir 0700: the agent
 * refuses an SSD directory others can write), or removed.  0 or -1. */
int kvpt_tmpdir(char *dir, size_t cap, const char *tag);
int kvpt_tmpdir_empty(const char *dir);
int kvpt_tmpdir_remove(const char *dir);
/* One such directory for a whole test program, kvpt_ssd_dir: made by
 * kvpt_ssd_dir_setup and removed by kvpt_ssd_dir_teardown (cmocka group
 * setup and teardown; tagged with the program's name), emptied for a
 * test by kvpt_ssd_dir_fresh.  0 or -1. */
extern char kvpt_ssd_dir[256];
int kvpt_ssd_dir_setup(void **state);
int kvpt_ssd_dir_teardown(void **state);
int kvpt_ssd_dir_fresh(void);

/* Run a shell command (printf-style): its output into out (NUL
 * terminated, cut at cap - 1; out NULL: discarded); its exit status, or
 * -1 if it did not exit (or could not run). */
int kvpt_run(char *out, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* `kvpool --pool POOL check [--wait MS]` (wait_ms < 0: its default):
 * its exit status; what it printed (stdout and stderr) into out, or,
 * with out NULL, to stderr when it failed. */
int kvpt_cli_check(const char *pool, int wait_ms, char *out, size_t cap);

/* Directory of the running executable (for sibling binaries). */
const char *kvpt_bindir(void);

#endif
