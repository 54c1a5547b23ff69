/* SPDX-License-Identifier: MIT */
/*
 * client_test.h - what the tests of tests/client/ share: a real kvpoold
 * (the binary next to the test's) on a pool of their own, started and
 * awaited with a deadline, then stopped.  These tests use kvpool.h the
 * way an engine does (from C++, linked with -lkvpool, through dlopen), so
 * they cannot use tests/agent/harness.c, which needs the internals: this
 * file uses nothing of kvpool but its binaries and the declarations of
 * kvpool.h.  C and C++.
 *
 * Pools and logs are named as tests/agent/harness.h names them, so
 * tests/run.sh judges what they leave: the pool "<KVPT_RUN>.<name><pid>"
 * ("t<pid>_<name>" without KVPT_RUN), the agent's log
 * "$KVPT_LOG_DIR/kvpt.<pool>.log" (/tmp without KVPT_LOG_DIR).
 */
#ifndef KVP_CLIENT_TEST_H
#define KVP_CLIENT_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"

struct kvpc_agent {
	pid_t pid;
	char pool[64];
	char log[4200];
};

/* kvp_open as the test reaches it: inline, from -lkvpool, or dlsym'd */
typedef int (*kvpc_open_fn)(const char *pool, const char *ns,
			    struct kvp_client **out);

/* The directory of the running executable into out (its kvpoold and
 * libkvpool.so lie there).  0 or -1. */
static inline int
kvpc_bindir(char *out, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", out, cap - 1);
	char *slash;

	if (n <= 0)
		return -1;
	out[n] = '\0';
	slash = strrchr(out, '/');
	if (!slash)
		return -1;
	*slash = '\0';
	return 0;
}

static inline void
kvpc_pool_remove(const char *pool)
{
	char name[128];

	snprintf(name, sizeof(name), "/kvpool.%s", pool);
	shm_unlink(name);
}

/* Start kvpoold --foreground on a pool named after 'name' (DRAM only,
 * 64 MiB, no /metrics).  Returns 0 once started (not yet ready: see
 * kvpc_open_wait), or -1. */
static inline int
kvpc_agent_start(struct kvpc_agent *a, const char *name)
{
	const char *tag = getenv("KVPT_RUN"), *dir = getenv("KVPT_LOG_DIR");
	char path[4200];

	if (kvpc_bindir(path, sizeof(path) - 16))
		return -1;
	strcat(path, "/kvpoold");
	if (tag && *tag)
		snprintf(a->pool, sizeof(a->pool), "%s.%s%d", tag, name,
			 (int)getpid());
	else
		snprintf(a->pool, sizeof(a->pool), "t%d_%s", (int)getpid(),
			 name);
	snprintf(a->log, sizeof(a->log), "%s/kvpt.%s.log",
		 dir && *dir ? dir : "/tmp", a->pool);
	kvpc_pool_remove(a->pool);
	fflush(NULL); /* the child must not write our buffered output again */
	a->pid = fork();
	if (a->pid < 0)
		return -1;
	if (a->pid == 0) {
		char fg[] = "--foreground", po[] = "--pool", dr[] = "--dram",
		     ds[] = "64M", ma[] = "--metrics-addr", mo[] = "off";
		char *argv[] = { path, fg, po, a->pool, dr, ds, ma, mo, NULL };
		int fd = open(a->log,
			      O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);

		/* the agent dies with the test, whatever way the test ends */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0 && fd != 2) {
			dup2(fd, 2);
			close(fd);
		}
		if (!freopen("/dev/null", "w", stdout))
			_exit(126);
		execv(path, argv);
		_exit(127);
	}
	return 0;
}

/* Open a client of a's pool through open_fn, waiting until the agent has
 * made its segment (the segment appears whole: the agent links it into
 * place once it is ready) for at most timeout_ms, polling every 1 ms.
 * 0 and *out; the last status of kvp_open; or -ECHILD if the agent died. */
static inline int
kvpc_open_wait(struct kvpc_agent *a, kvpc_open_fn open_fn, const char *ns,
	       struct kvp_client **out, unsigned timeout_ms)
{
	struct timespec t0, now, tick = { 0, 1000000 };
	int rc, st;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		rc = open_fn(a->pool, ns, out);
		if (rc != -ENOTCONN)
			return rc;
		if (waitpid(a->pid, &st, WNOHANG) == a->pid) {
			fprintf(stderr, "kvpoold exited (status %d): see %s\n",
				st, a->log);
			a->pid = -1;
			return -ECHILD;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - t0.tv_sec) * 1000 +
			    (now.tv_nsec - t0.tv_nsec) / 1000000 >
		    (long)timeout_ms)
			return rc;
		/* the poll interval of a deadline wait */
		nanosleep(&tick, NULL);
	}
}

/* SIGTERM, wait; the agent removes its segment (no client maps it).
 * Returns its exit status (0: a clean stop), or -1. */
static inline int
kvpc_agent_stop(struct kvpc_agent *a)
{
	int st = 0;

	if (a->pid <= 0)
		return -1;
	kill(a->pid, SIGTERM);
	if (waitpid(a->pid, &st, 0) != a->pid)
		st = -1;
	a->pid = -1;
	kvpc_pool_remove(a->pool); /* in case it could not */
	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif /* KVP_CLIENT_TEST_H */
