/* SPDX-License-Identifier: MIT */
/*
 * test_files.c - files and other users on the node: what the agent and
 * its clients adopt is checked before it is used.  A second user (nobody)
 * squats the segment's name, plants a symlink or a file where the log
 * goes, owns the SSD directory; each is refused with a message that names
 * the path, and nothing is written through.  A pool name is checked before
 * any path is built from it; the default log lies in a directory only its
 * owner can write; garbage and extreme segment file names never wrap the
 * next segment id; a start that fails on its SSD directory leaves no new
 * segment behind.
 *
 * Runs as root (the agent's user in these tests) and acts as nobody in
 * forked children (setgroups, setgid, setuid) and the programs they run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

#define NOBODY 65534u /* uid nobody, gid nogroup (Debian) */
#define AS_ROOT 0u
#define OUT_MAX 16384

static char tmp[256]; /* this test's directory: 0755, root's */
static char pub[300]; /* tmp/pub: 1777, where nobody makes things (like /tmp) */
static unsigned npool;
static char pools[32][64];

static int
setup(void **state)
{
	(void)state;
	if (geteuid() != 0)
		return 0; /* every test skips */
	/* a daemonized kvpoold is reparented to us, so we can reap it */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (kvpt_tmpdir(tmp, sizeof(tmp), "files") || chmod(tmp, 0755))
		return -1;
	snprintf(pub, sizeof(pub), "%s/pub", tmp);
	if (mkdir(pub, 0700) || chmod(pub, 01777))
		return -1;
	/* the programs run as nobody are copies in tmp/bin: the build
	 * directory may not be reachable by nobody (a checkout under /root) */
	{
		char cmd[1200];

		snprintf(
			cmd, sizeof(cmd),
			"mkdir -m 0755 '%s/bin' && cp '%s/kvpoold' '%s/kvpool' "
			"'%s/bin/' && chmod 0755 '%s/bin/kvpoold' '%s/bin/kvpool'",
			tmp, kvpt_bindir(), kvpt_bindir(), tmp, tmp, tmp);
		if (system(cmd) != 0)
			return -1;
	}
	return 0;
}

static int
teardown(void **state)
{
	unsigned k;

	(void)state;
	for (k = 0; k < npool; k++)
		kvpt_pool_remove(pools[k]);
	return tmp[0] ? kvpt_tmpdir_remove(tmp) : 0;
}

/* Root, and a user nobody to play the other user. */
static bool
can_run(void)
{
	struct passwd *pw = getpwuid(NOBODY);

	if (geteuid() == 0 && pw && tmp[0])
		return true;
	print_message("  SKIP: needs root and a user nobody (uid %u)\n",
		      NOBODY);
	return false;
}

/* A fresh pool name (removed at teardown whatever happens). */
static void
new_pool(char *pool, size_t cap)
{
	assert_int_equal(
		kvpt_pool_name(pool, cap, "f%d_%u", (int)getpid(), npool), 0);
	assert_true(npool < 32);
	snprintf(pools[npool++], 64, "%s", pool);
	kvpt_pool_remove(pool);
}

static void
seg_path(const char *pool, char *out, size_t cap)
{
	snprintf(out, cap, "/dev/shm/kvpool.%s", pool);
}

static bool
exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* A word of a segment's header, read as a file (whoever owns it). */
static uint64_t
seg_word(const char *pool, size_t off)
{
	char path[128];
	uint64_t v = 0;
	int fd;

	seg_path(pool, path, sizeof(path));
	fd = open(path, O_RDONLY | O_NONBLOCK);
	if (fd < 0)
		return 0;
	if (pread(fd, &v, sizeof(v), (off_t)off) != (ssize_t)sizeof(v))
		v = 0;
	close(fd);
	return v;
}

/* In a forked child: drop to nobody (uid nobody, its groups: gid). */
static void
become(uid_t uid, gid_t gid)
{
	if (setgroups(0, NULL) || setgid(gid) || setuid(uid))
		_exit(120);
}

struct waitc {
	pid_t pid;
	int st;
	bool done;
};

static bool
waited(void *p)
{
	struct waitc *w = p;

	if (!w->done && waitpid(w->pid, &w->st, WNOHANG) == w->pid)
		w->done = true;
	return w->done;
}

/* Wait for a child (or an orphan reparented to us) up to ms: its exit
 * status, or -1 (a signal; killed at the deadline). */
static int
wait_exit(pid_t pid, unsigned ms)
{
	struct waitc w = { pid, 0, false };

	if (kvpt_wait_until(waited, &w, ms) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &w.st, 0);
		return -1;
	}
	return WIFEXITED(w.st) ? WEXITSTATUS(w.st) : -1;
}

/*
 * Start prog (a program of the build directory, or an absolute path) with
 * the NULL-terminated arguments, as uid (AS_ROOT or NOBODY), with
 * XDG_RUNTIME_DIR = xdg (NULL: unset); stdout and stderr go to the file
 * outf.  Returns the pid.
 */
static pid_t
spawn_v(uid_t uid, const char *xdg, const char *outf, const char *prog,
	va_list ap)
{
	char path[4200];
	const char *argv[32];
	int n = 0, fd;
	pid_t pid;

	if (prog[0] == '/')
		snprintf(path, sizeof(path), "%s", prog);
	else if (uid != AS_ROOT)
		snprintf(path, sizeof(path), "%s/bin/%s", tmp, prog);
	else
		snprintf(path, sizeof(path), "%s/%s", kvpt_bindir(), prog);
	argv[n++] = path;
	while (n < 31 && (argv[n] = va_arg(ap, const char *)))
		n++;
	argv[n] = NULL;
	fd = open(outf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		if (xdg)
			setenv("XDG_RUNTIME_DIR", xdg, 1);
		else
			unsetenv("XDG_RUNTIME_DIR");
		if (uid != AS_ROOT)
			become(uid, NOBODY);
		execv(path, (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	close(fd);
	return pid;
}

static pid_t
spawn(uid_t uid, const char *xdg, const char *outf, const char *prog, ...)
{
	va_list ap;
	pid_t pid;

	va_start(ap, prog);
	pid = spawn_v(uid, xdg, outf, prog, ap);
	va_end(ap);
	return pid;
}

static void
read_file(const char *path, char *out, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f) {
		n = fread(out, 1, cap - 1, f);
		fclose(f);
	}
	out[n] = '\0';
}

/* Run prog to its end (at most 10 s): its exit status (-1: a signal, or
 * killed at the deadline); what it printed in out. */
static int
run(uid_t uid, const char *xdg, char *out, const char *prog, ...)
{
	char outf[300];
	va_list ap;
	pid_t pid;
	int rc;

	snprintf(outf, sizeof(outf), "%s/run.out", tmp);
	va_start(ap, prog);
	pid = spawn_v(uid, xdg, outf, prog, ap);
	va_end(ap);
	rc = wait_exit(pid, 10000);
	read_file(outf, out, OUT_MAX);
	unlink(outf);
	if (rc != 0 && getenv("KVPT_VERBOSE"))
		print_message("  %s exited %d:\n%s", prog, rc, out);
	return rc;
}

/* A daemonized kvpoold said "ready (pid N)": stop it (SIGTERM, then reap
 * it: it is reparented to us).  Returns its exit status; 0 if none ran. */
static int
daemon_stop(const char *out)
{
	const char *p = strstr(out, "(pid ");
	pid_t pid;

	if (!p)
		return 0;
	pid = (pid_t)atoi(p + 5);
	if (pid <= 0)
		return 0;
	kill(pid, SIGTERM);
	return wait_exit(pid, 10000);
}

static size_t
file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (size_t)st.st_size : (size_t)-1;
}

static unsigned
dir_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	unsigned n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return n;
}

struct seg_up {
	const char *pool;
	pid_t pid;
};

static bool
seg_agent_is(void *p)
{
	struct seg_up *u = p;

	return seg_word(u->pool, offsetof(struct kvp_shm_header,
					  h_agent_pid)) == (uint64_t)u->pid;
}

/*
 * A segment squatted by another user is refused: nobody's agent leaves
 * its segment behind (--keep) and makes it writable by everyone.  A root
 * agent on that pool refuses to start, saying what to remove, and writes
 * nothing to it (same incarnation, same agent pid); root's clients and
 * tools refuse it.  Made private again (0600), it is still nobody's:
 * still refused by root, usable by nobody's own client.  A FIFO in the
 * segment's place is refused without blocking the tool that opens it.
 */
static void
test_squatted_segment(void **state)
{
	char pool[64], path[128], outf[300], msg[512];
	char *out = malloc(OUT_MAX);
	struct kvp_client *c = NULL;
	struct seg_up up;
	struct kvp_seg s;
	struct stat st;
	uint64_t inc, apid;
	pid_t pid;

	(void)state;
	if (!can_run())
		goto out;
	assert_non_null(out);
	new_pool(pool, sizeof(pool));
	seg_path(pool, path, sizeof(path));
	snprintf(outf, sizeof(outf), "%s/nobody-agent.out", tmp);
	pid = spawn(NOBODY, NULL, outf, "kvpoold", "--foreground", "--keep",
		    "--pool", pool, "--dram", "16M", "--metrics-addr", "off",
		    NULL);
	up.pool = pool;
	up.pid = pid;
	assert_true(kvpt_wait_until(seg_agent_is, &up, 20000) >= 0);
	kill(pid, SIGTERM);
	assert_int_equal(wait_exit(pid, 10000), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_uid, NOBODY);
	assert_int_equal(st.st_mode & 07777, 0600);
	/* the squat: nobody makes it writable by everyone */
	assert_int_equal(
		run(NOBODY, NULL, out, "/bin/chmod", "0666", path, NULL), 0);
	inc = seg_word(pool, offsetof(struct kvp_shm_header, h_incarnation));
	apid = seg_word(pool, offsetof(struct kvp_shm_header, h_agent_pid));
	assert_int_equal(apid, (uint64_t)pid);

	/* a root agent refuses it, naming the file to remove */
	assert_int_equal(run(AS_ROOT, NULL, out, "kvpoold", "--foreground",
			     "--pool", pool, "--dram", "16M", "--metrics-addr",
			     "off", NULL),
			 1);
	assert_non_null(strstr(out, path));
	assert_non_null(strstr(out, "writable by everyone"));
	assert_non_null(strstr(out, "rm "));
	/* nothing written to it */
	assert_int_equal(
		seg_word(pool, offsetof(struct kvp_shm_header, h_incarnation)),
		inc);
	assert_int_equal(seg_word(pool,
				  offsetof(struct kvp_shm_header, h_agent_pid)),
			 apid);
	/* root's clients and tools refuse it */
	assert_int_equal(kvp_open(pool, "ns", &c), -EACCES);
	assert_null(c);
	assert_int_equal(kvp_seg_map(pool, false, &s, msg, sizeof(msg)),
			 -EACCES);
	assert_non_null(strstr(msg, path));
	assert_int_not_equal(run(AS_ROOT, NULL, out, "kvpool", "--pool", pool,
				 "stat", NULL),
			     0);
	assert_non_null(strstr(out, "writable by everyone"));
	/* nobody's client refuses a world-writable segment too */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		become(NOBODY, NOBODY);
		_exit(kvp_open(pool, "ns", &c) == -EACCES ? 0 : 1);
	}
	assert_int_equal(wait_exit(pid, 10000), 0);

	/* private again, but nobody's: still not root's to use */
	assert_int_equal(
		run(NOBODY, NULL, out, "/bin/chmod", "0600", path, NULL), 0);
	assert_int_equal(run(AS_ROOT, NULL, out, "kvpoold", "--foreground",
			     "--pool", pool, "--dram", "16M", "--metrics-addr",
			     "off", NULL),
			 1);
	assert_non_null(strstr(out, "owned by uid 65534"));
	assert_non_null(strstr(out, path));
	assert_int_equal(
		seg_word(pool, offsetof(struct kvp_shm_header, h_incarnation)),
		inc);
	assert_int_equal(kvp_open(pool, "ns", &c), -EACCES);
	assert_int_equal(kvp_seg_map(pool, false, &s, msg, sizeof(msg)),
			 -EACCES);
	assert_non_null(strstr(msg, "owned by uid 65534"));
	/* ... and its owner's client may use it */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		become(NOBODY, NOBODY);
		if (kvp_open(pool, "ns", &c) || kvp_put(c, "k", 1, "v", 1))
			_exit(1);
		kvp_close(c);
		_exit(0);
	}
	assert_int_equal(wait_exit(pid, 10000), 0);

	/* a FIFO in the segment's place: refused, and opening it does not
	 * block (a child, so a hang cannot hang the test) */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(run(NOBODY, NULL, out, "/usr/bin/mkfifo", "-m", "0666",
			     path, NULL),
			 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(20);
		_exit(kvp_seg_map(pool, false, &s, msg, sizeof(msg)) ==
					      -EACCES &&
				      kvp_open(pool, "ns", &c) == -EACCES ?
			      0 :
			      1);
	}
	assert_int_equal(wait_exit(pid, 10000), 0);
	assert_int_equal(run(AS_ROOT, NULL, out, "kvpoold", "--foreground",
			     "--pool", pool, "--dram", "16M", "--metrics-addr",
			     "off", NULL),
			 1);
	assert_non_null(strstr(out, "not a regular file"));
	unlink(path);
out:
	free(out);
}

/*
 * Root's own segment made writable by everyone (after its agent died) is
 * refused by the restarted agent and by clients.  A --group segment (mode
 * 0660, group nogroup) is shared with that group: nobody's client uses
 * it, a user outside the group cannot; an agent without --group refuses
 * it (it would not be the segment it was asked for), with --group it
 * re-attaches.  A group segment another user made is refused by a root
 * agent started with the same --group, and by root's clients.
 */
static void
test_own_segment_modes(void **state)
{
	char path[128], pool[64], outf[300], log[2200], *out = malloc(OUT_MAX);
	struct kvp_client *c = NULL;
	struct kvpt_agent a;
	struct seg_up up;
	struct stat st;
	unsigned char v[16];
	pid_t pid;

	(void)state;
	if (!can_run())
		goto out;
	assert_non_null(out);
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", NULL), 0);
	seg_path(a.pool, path, sizeof(path));
	kvpt_agent_log(a.pool, log, sizeof(log));
	kvpt_agent_kill(&a);
	assert_int_equal(chmod(path, 0666), 0);
	assert_int_equal(kvpt_agent_restart(&a, "--dram", "16M", NULL),
			 -ETIMEDOUT);
	read_file(log, out, OUT_MAX);
	assert_non_null(strstr(out, "writable by everyone"));
	assert_int_equal(kvp_open(a.pool, "ns", &c), -EACCES);
	assert_int_equal(chmod(path, 0600), 0);
	assert_int_equal(kvpt_agent_restart(&a, "--dram", "16M", NULL), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);

	/* a --group segment */
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", "--group",
					  "nogroup", NULL),
			 0);
	seg_path(a.pool, path, sizeof(path));
	kvpt_agent_log(a.pool, log, sizeof(log));
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0660);
	assert_int_equal(st.st_gid, NOBODY);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		become(NOBODY, NOBODY); /* in group nogroup */
		if (kvp_open(a.pool, "ns", &c) ||
		    kvp_put(c, "g", 1, "shared", 6) ||
		    kvp_get(c, "g", 1, v, sizeof(v)) != 6)
			_exit(1);
		kvp_close(c);
		_exit(0);
	}
	assert_int_equal(wait_exit(pid, 10000), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		become(NOBODY, 1); /* not in the group: the kernel says no */
		_exit(kvp_open(a.pool, "ns", &c) == -EACCES ? 0 : 1);
	}
	assert_int_equal(wait_exit(pid, 10000), 0);
	kvpt_agent_kill(&a);
	assert_int_equal(kvpt_agent_restart(&a, "--dram", "16M", NULL),
			 -ETIMEDOUT);
	read_file(log, out, OUT_MAX);
	assert_non_null(strstr(out, "--group"));
	assert_non_null(strstr(out, path));
	assert_int_equal(kvpt_agent_restart(&a, "--dram", "16M", "--group",
					    "nogroup", NULL),
			 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvp_get(c, "g", 1, v, sizeof(v)), 6);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);

	/* a group segment that nobody made */
	new_pool(pool, sizeof(pool));
	seg_path(pool, path, sizeof(path));
	snprintf(outf, sizeof(outf), "%s/nobody-group.out", tmp);
	pid = spawn(NOBODY, NULL, outf, "kvpoold", "--foreground", "--keep",
		    "--pool", pool, "--dram", "16M", "--metrics-addr", "off",
		    "--group", "nogroup", NULL);
	up.pool = pool;
	up.pid = pid;
	assert_true(kvpt_wait_until(seg_agent_is, &up, 20000) >= 0);
	kill(pid, SIGTERM);
	assert_int_equal(wait_exit(pid, 10000), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0660);
	assert_int_equal(st.st_uid, NOBODY);
	assert_int_equal(run(AS_ROOT, NULL, out, "kvpoold", "--foreground",
			     "--pool", pool, "--dram", "16M", "--metrics-addr",
			     "off", "--group", "nogroup", NULL),
			 1);
	assert_non_null(strstr(out, path));
	assert_int_equal(kvp_open(pool, "ns", &c), -EACCES);
	unlink(path);
out:
	free(out);
}

/*
 * The log: nobody plants a symlink to a root-only file where --log
 * points (in a sticky, world-writable directory like /tmp): the agent
 * refuses it (O_NOFOLLOW) and starts nothing; the file is untouched.  A
 * link planted at the old default, /tmp/kvpoold.<pool>.log, is never
 * looked at: a root agent logs in /run/kvpool.  A file nobody made where
 * --log points is refused, not appended to.
 */
static void
test_log_planted(void **state)
{
	int rc;
	char pool[64], path[128], shared[300], secret[300], link[400],
		deflt[300];
	char runlog[300], foreign[400], *out = malloc(OUT_MAX);
	struct stat st;
	FILE *f;

	(void)state;
	if (!can_run())
		goto out;
	assert_non_null(out);
	new_pool(pool, sizeof(pool));
	seg_path(pool, path, sizeof(path));
	snprintf(shared, sizeof(shared), "%s/shared", tmp);
	assert_int_equal(mkdir(shared, 0700), 0);
	assert_int_equal(chmod(shared, 01777), 0);
	snprintf(secret, sizeof(secret), "%s/secret", tmp);
	f = fopen(secret, "w");
	assert_non_null(f);
	fputs("root only\n", f);
	fclose(f);
	assert_int_equal(chmod(secret, 0600), 0);

	/* a symlink where --log points */
	snprintf(link, sizeof(link), "%s/agent.log", shared);
	assert_int_equal(
		run(NOBODY, NULL, out, "/bin/ln", "-s", secret, link, NULL), 0);
	rc = run(AS_ROOT, NULL, out, "kvpoold", "--pool", pool, "--dram", "16M",
		 "--metrics-addr", "off", "--log", link, NULL);
	assert_int_equal(daemon_stop(out), 0);
	assert_int_equal(rc, 1);
	assert_non_null(strstr(out, "symlink"));
	assert_non_null(strstr(out, link));
	assert_int_equal(file_size(secret), 10);
	assert_false(exists(path));

	/* a symlink at the old default: not followed, not even looked at */
	snprintf(deflt, sizeof(deflt), "/tmp/kvpoold.%s.log", pool);
	unlink(deflt);
	assert_int_equal(run(NOBODY, NULL, out, "/bin/ln", "-s", secret, deflt,
			     NULL),
			 0);
	snprintf(runlog, sizeof(runlog), "/run/kvpool/kvpoold.%s.log", pool);
	rc = run(AS_ROOT, NULL, out, "kvpoold", "--pool", pool, "--dram", "16M",
		 "--metrics-addr", "off", NULL);
	assert_int_equal(daemon_stop(out), 0);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, runlog));
	unlink(deflt);
	assert_int_equal(file_size(secret), 10);
	assert_int_equal(lstat(runlog, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(lstat("/run/kvpool", &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(st.st_mode & 022, 0);
	read_file(runlog, out, OUT_MAX);
	assert_non_null(strstr(out, "serving pool"));
	unlink(runlog);
	assert_false(exists(path));

	/* a file nobody made where --log points */
	snprintf(foreign, sizeof(foreign), "%s/other.log", shared);
	assert_int_equal(
		run(NOBODY, NULL, out, "/usr/bin/touch", foreign, NULL), 0);
	rc = run(AS_ROOT, NULL, out, "kvpoold", "--pool", pool, "--dram", "16M",
		 "--metrics-addr", "off", "--log", foreign, NULL);
	assert_int_equal(daemon_stop(out), 0);
	assert_int_equal(rc, 1);
	assert_non_null(strstr(out, "owned by uid 65534"));
	assert_int_equal(file_size(foreign), 0);
	assert_false(exists(path));
out:
	free(out);
}

/*
 * Another user's default log: $XDG_RUNTIME_DIR/kvpool/kvpoold.<pool>.log,
 * the directory created 0700 and the file 0600, both the user's.  Without
 * XDG_RUNTIME_DIR the agent says so and starts nothing.  A kvpool
 * directory in the runtime directory that someone else made (here: root,
 * world-writable) is refused.
 */
static void
test_log_runtime_dir(void **state)
{
	int rc;
	char pool[64], path[128], xdg[300], dir[400], log[500], shared[300];
	char *out = malloc(OUT_MAX);
	struct stat st;

	(void)state;
	if (!can_run())
		goto out;
	assert_non_null(out);
	new_pool(pool, sizeof(pool));
	seg_path(pool, path, sizeof(path));
	snprintf(xdg, sizeof(xdg), "%s/xdg", tmp);
	assert_int_equal(mkdir(xdg, 0700), 0);
	assert_int_equal(chown(xdg, NOBODY, NOBODY), 0);
	rc = run(NOBODY, xdg, out, "kvpoold", "--pool", pool, "--dram", "16M",
		 "--metrics-addr", "off", NULL);
	assert_int_equal(daemon_stop(out), 0);
	assert_int_equal(rc, 0);
	snprintf(dir, sizeof(dir), "%s/kvpool", xdg);
	snprintf(log, sizeof(log), "%s/kvpoold.%s.log", dir, pool);
	assert_int_equal(lstat(dir, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_uid, NOBODY);
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_int_equal(lstat(log, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_uid, NOBODY);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_false(exists(path));

	/* no runtime directory: a clear error, nothing started */
	rc = run(NOBODY, NULL, out, "kvpoold", "--pool", pool, "--dram", "16M",
		 "--metrics-addr", "off", NULL);
	assert_int_equal(daemon_stop(out), 0);
	assert_int_equal(rc, 1);
	assert_non_null(strstr(out, "XDG_RUNTIME_DIR"));
	assert_false(exists(path));

	/* the runtime directory's kvpool directory is someone else's */
	snprintf(shared, sizeof(shared), "%s/rt", tmp);
	assert_int_equal(mkdir(shared, 0700), 0);
	assert_int_equal(chmod(shared, 01777), 0);
	snprintf(dir, sizeof(dir), "%s/kvpool", shared);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(chmod(dir, 0777), 0);
	rc = run(NOBODY, shared, out, "kvpoold", "--pool", pool, "--dram",
		 "16M", "--metrics-addr", "off", NULL);
	assert_int_equal(daemon_stop(out), 0);
	assert_int_equal(rc, 1);
	assert_non_null(strstr(out, dir));
	assert_non_null(strstr(out, "refused"));
	assert_int_equal(dir_entries(dir), 0);
	assert_false(exists(path));
out:
	free(out);
}

/*
 * A pool name is validated before any path is built from it: a name with
 * a '/' (here one that would lead the old /tmp/kvpoold.<pool>.log out of
 * /tmp/kvpoold.<x>/ into /tmp) and one over 63 characters (once cut to 63
 * silently, starting an agent on another pool) exit 2 at once, creating
 * nothing.
 */
static void
test_pool_name_checked(void **state)
{
	int rc;
	char pool[64], up[300], escaped[300], bad[300], longname[80], cut[64];
	char path[200], *out = malloc(OUT_MAX);

	(void)state;
	if (!can_run())
		goto out;
	assert_non_null(out);
	new_pool(pool, sizeof(pool));
	snprintf(up, sizeof(up), "/tmp/kvpoold.%s", pool);
	assert_int_equal(mkdir(up, 0755), 0);
	snprintf(bad, sizeof(bad), "%s/../%s-out", pool, pool);
	snprintf(escaped, sizeof(escaped), "/tmp/%s-out.log", pool);
	rc = run(AS_ROOT, NULL, out, "kvpoold", "--pool", bad, "--dram", "16M",
		 "--metrics-addr", "off", NULL);
	assert_int_equal(daemon_stop(out), 0);
	assert_int_equal(rc, 2);
	assert_non_null(strstr(out, "bad value"));
	assert_false(exists(escaped));
	rmdir(up);
	unlink(escaped);

	memset(longname, 'x', 64);
	longname[64] = '\0';
	memcpy(cut, longname, 63);
	cut[63] = '\0';
	/* removed at teardown if made */
	snprintf(pools[npool++], 64, "%s", cut);
	rc = run(AS_ROOT, NULL, out, "kvpoold", "--pool", longname, "--dram",
		 "16M", "--metrics-addr", "off", NULL);
	assert_int_equal(daemon_stop(out), 0);
	assert_int_equal(rc, 2);
	assert_non_null(strstr(out, "bad value"));
	seg_path(cut, path, sizeof(path));
	assert_false(exists(path));
out:
	free(out);
}

#define SSD_ARGS(dir)                                                       \
	"--dram", "16M", "--dram-unit", "4K", "--ssd-dir", dir,             \
		"--ssd-segment", "4M", "--staging", "4M", "--staging-slot", \
		"1M"

/*
 * The SSD directory: one that nobody owns, and one that everyone can
 * write, are refused with a message that names them, nothing is written
 * into them (not even the LOCK file) and no segment is left.  --ssd-dir on
 * a regular file: the agent exits and removes the segment it created.  A
 * segment it re-attached to (its agent killed) is kept, values and all,
 * for the next agent.
 */
static void
test_ssd_dir_refused(void **state)
{
	char pool[64], path[128], d1[400], d2[300], file[300], good[300];
	char log[2200], *out = malloc(OUT_MAX);
	struct kvp_client *c;
	struct kvpt_agent a;
	unsigned char v[16];
	int fd;

	(void)state;
	if (!can_run())
		goto out;
	assert_non_null(out);
	new_pool(pool, sizeof(pool));
	seg_path(pool, path, sizeof(path));

	snprintf(d1, sizeof(d1), "%s/ssd-nobody", pub);
	assert_int_equal(run(NOBODY, NULL, out, "/bin/mkdir", "-m", "0755", d1,
			     NULL),
			 0);
	assert_int_equal(run(AS_ROOT, NULL, out, "kvpoold", "--foreground",
			     "--pool", pool, "--metrics-addr", "off",
			     SSD_ARGS(d1), NULL),
			 1);
	assert_non_null(strstr(out, d1));
	assert_non_null(strstr(out, "owned by uid 65534"));
	assert_int_equal(dir_entries(d1), 0);
	assert_false(exists(path));

	snprintf(d2, sizeof(d2), "%s/ssd-open", tmp);
	assert_int_equal(mkdir(d2, 0700), 0);
	assert_int_equal(chmod(d2, 0777), 0);
	assert_int_equal(run(AS_ROOT, NULL, out, "kvpoold", "--foreground",
			     "--pool", pool, "--metrics-addr", "off",
			     SSD_ARGS(d2), NULL),
			 1);
	assert_non_null(strstr(out, d2));
	assert_non_null(strstr(out, "writable by group or others"));
	assert_int_equal(dir_entries(d2), 0);
	assert_false(exists(path));

	snprintf(file, sizeof(file), "%s/ssd-file", tmp);
	fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(run(AS_ROOT, NULL, out, "kvpoold", "--foreground",
			     "--pool", pool, "--metrics-addr", "off",
			     SSD_ARGS(file), NULL),
			 1);
	assert_non_null(strstr(out, "not a directory"));
	assert_non_null(strstr(out, "removed"));
	assert_false(exists(path));

	/* re-attached: kept */
	snprintf(good, sizeof(good), "%s/ssd-good", tmp);
	assert_int_equal(mkdir(good, 0700), 0);
	assert_int_equal(kvpt_agent_start(&a, SSD_ARGS(good), NULL), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvp_put(c, "kept", 4, "value", 5), 0);
	kvp_close(c);
	kvpt_agent_kill(&a);
	assert_int_equal(kvpt_agent_restart(&a, SSD_ARGS(file), NULL),
			 -ETIMEDOUT);
	kvpt_agent_log(a.pool, log, sizeof(log));
	read_file(log, out, OUT_MAX);
	assert_non_null(strstr(out, "kept (re-attached to)"));
	seg_path(a.pool, path, sizeof(path));
	assert_true(exists(path));
	assert_int_equal(kvpt_agent_restart(&a, SSD_ARGS(good), NULL), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvp_get(c, "kept", 4, v, sizeof(v)), 5);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
out:
	free(out);
}

static uint32_t
key_a(char *k, int i)
{
	return (uint32_t)sprintf(k, "first-%d", i);
}

static uint32_t
key_b(char *k, int i)
{
	return (uint32_t)sprintf(k, "second-%d", i);
}

#define NKEYS 6
#define VSIZE (64u << 10)

/* Keys 0..NKEYS-1 of key read back whole with version's bytes. */
#define check_keys(c, key, version) \
	assert_int_equal(           \
		kvpt_wrong_keys(c, key, 0, NKEYS, VSIZE, version, false), 0)

#define AGENT_DEMOTE(a, dir)                                                 \
	kvpt_agent_start(a, "--dram", "16M", "--dram-unit", "4K",            \
			 "--dram-high", "0", "--dram-low", "0", "--ssd-dir", \
			 dir, "--ssd-segment", "4M", "--staging", "4M",      \
			 "--staging-slot", "1M", NULL)

/*
 * Garbage and extreme names in the SSD directory: values demoted before
 * they were planted come back, values demoted after them too, across
 * another restart (a garbage seg-ffffffff.kvs once made the next id wrap
 * to 0: those values were lost at the restart, and with a seg-00000000.kvs
 * there demotion failed for good with "File exists").  The planted names
 * are left alone and logged.
 */
static void
test_ssd_garbage_names(void **state)
{
	static const char *const names[] = {
		"seg-ffffffff.kvs",     "seg-00000000.kvs",  "seg-1.kvs",
		"seg-0000000A.kvs",     "seg-+0000001.kvs",  "seg- 0000001.kvs",
		"seg-00000001.kvs.bak", "seg-000000001.kvs", "seg-00000001.kvx",
		"seg-fffffffff.kvs",
	};
	char dir[300], p[600], log[2200], *out = malloc(OUT_MAX);
	unsigned char junk[4096];
	struct kvp_client *c;
	struct kvpt_agent a;
	struct kvp_seg s;
	unsigned k;
	int fd;

	(void)state;
	if (!can_run())
		goto out;
	assert_non_null(out);
	snprintf(dir, sizeof(dir), "%s/ssd-names", tmp);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(AGENT_DEMOTE(&a, dir), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	assert_int_equal(
		kvpt_put_and_demote(c, &s, NKEYS, VSIZE, key_a, 1, 30000), 0);
	kvp__seg_unmap(&s);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);

	memset(junk, 0xa5, sizeof(junk));
	for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[k]);
		fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, junk, sizeof(junk)),
				 (ssize_t)sizeof(junk));
		close(fd);
	}
	snprintf(p, sizeof(p), "%s/seg-00000abc.kvs", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/seg-00000abd.kvs", dir);
	assert_int_equal(mkfifo(p, 0600), 0);

	/* values from before the garbage come back; new ones go to disk */
	assert_int_equal(AGENT_DEMOTE(&a, dir), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	check_keys(c, key_a, 1);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	assert_int_equal(
		kvpt_put_and_demote(c, &s, NKEYS, VSIZE, key_b, 2, 30000), 0);
	kvp__seg_unmap(&s);
	kvp_close(c);
	kvpt_agent_log(a.pool, log, sizeof(log));
	assert_int_equal(kvpt_agent_stop(&a), 0);
	/* the new segment's id is above every segment-named file there */
	snprintf(p, sizeof(p), "%s/seg-00000abe.kvs", dir);
	assert_true(exists(p));
	read_file(log, out, OUT_MAX);
	assert_non_null(
		strstr(out, "seg-ffffffff.kvs: not a segment file name"));
	assert_non_null(strstr(out, "seg-1.kvs: not a segment file name"));
	assert_non_null(strstr(out, "seg-00000abd.kvs: not a regular file"));

	/* and both sets survive another restart */
	assert_int_equal(AGENT_DEMOTE(&a, dir), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	check_keys(c, key_a, 1);
	check_keys(c, key_b, 2);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
	for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[k]);
		assert_int_equal(file_size(p), sizeof(junk));
	}
out:
	free(out);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_squatted_segment),
		cmocka_unit_test(test_own_segment_modes),
		cmocka_unit_test(test_log_planted),
		cmocka_unit_test(test_log_runtime_dir),
		cmocka_unit_test(test_pool_name_checked),
		cmocka_unit_test(test_ssd_dir_refused),
		cmocka_unit_test(test_ssd_garbage_names),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
