/* SPDX-License-Identifier: MIT */
/*
 * bench_start.c - start-up and page size at scale (issue 14; figures in
 * docs/performance.md, "Start-up and page size").
 *
 *  1. Ready time: `kvpoold --dram S` (daemonized, as an operator starts
 *     it) until its parent returns "ready", at a small and a large S; the
 *     goal is ready(large) / ready(small) <= 2 in one run.
 *  2. Populate time: from ready until the segment reports the whole DRAM
 *     tier populated, against memset over a fresh tmpfs mapping of the
 *     same bytes by the same number of threads (the goal: <= 1.5x).
 *  3. A worker's first touch: a client maps the pool and reads one byte
 *     per 4 KiB of 1 GiB of the arena (what a worker does as it serves
 *     hits): time per GiB, and its page-table bytes (VmPTE) grown by it,
 *     on 4 KiB pages (/dev/shm) and on 2 MiB pages (hugetlbfs) when the
 *     host has a mount with room (--hugetlbfs DIR, or run as root: the
 *     benchmark reserves a pool and mounts one for its run, and puts both
 *     back).  Goal: >= 100x less of both with 2 MiB pages.
 *
 *   bench_start [--quick] [--small SIZE] [--large SIZE] [--touch MIB]
 *               [--hugetlbfs DIR]
 *
 * --quick (the test run's smoke run): 256M and 1G, 256M touched.
 */
#include <getopt.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include "stress/bench_util.h"

static char pool_name[64];

/* Start kvpoold daemonized on pool_name with args; the seconds until its
 * parent returned (the agent said ready), or < 0. */
static double
start_agent(const char *dram, const char *const *extra)
{
	char path[4200], log[600];
	double t0 = kvpb_now_s(), t1;
	pid_t pid;
	int st;

	snprintf(path, sizeof(path), "%s/kvpoold", kvpt_bindir());
	kvpt_agent_log(pool_name, log, sizeof(log));
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		const char *argv[20];
		int n = 0;

		argv[n++] = path;
		argv[n++] = "--pool";
		argv[n++] = pool_name;
		argv[n++] = "--dram";
		argv[n++] = dram;
		argv[n++] = "--metrics-addr";
		argv[n++] = "off";
		argv[n++] = "--log";
		argv[n++] = log;
		while (*extra && n < 18)
			argv[n++] = *extra++;
		argv[n] = NULL;
		if (!freopen("/dev/null", "w", stdout))
			_exit(126);
		execv(path, (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0)
		return -1;
	t1 = kvpb_now_s();
	return t1 - t0;
}

static void
stop_agent(void)
{
	struct kvp_seg s;
	pid_t pid;

	if (kvpt_seg_map(pool_name, &s))
		return;
	/* relaxed: the agent's pid, for the signal */
	pid = (pid_t)kvp_load_relaxed(&s.hdr->h_agent_pid);
	kvp__seg_unmap(&s);
	if (pid > 0) {
		kill(pid, SIGTERM);
		while (kill(pid, 0) == 0)
			sched_yield();
	}
	kvpt_pool_remove(pool_name);
}

static bool
all_populated(void *arg)
{
	const struct kvp_seg *s = arg;

	return kvp_dram_capacity(s) == s->g.g_dram_pages;
}

/* memset over a fresh tmpfs mapping of 'bytes' by nth threads, 64 MiB at
 * a time (the populate threads' chunk): seconds. */
static unsigned char *ms_base;
static uint64_t ms_bytes;
static kvp_aword_t ms_next;

static void *
ms_thread(void *arg)
{
	(void)arg;
	for (;;) {
		/* full: a chunk of our own */
		uint64_t c = kvp_fetch_add(&ms_next, 1), off = c << 26;

		if (off >= ms_bytes)
			return NULL;
		memset(ms_base + off, 0,
		       ms_bytes - off < (1ull << 26) ? ms_bytes - off :
						       (1ull << 26));
	}
}

static double
memset_secs(uint64_t bytes, unsigned nth)
{
	pthread_t th[16];
	double t0, t;
	unsigned k;
	int fd = memfd_create("kvpb-memset", MFD_CLOEXEC);

	if (fd < 0 || ftruncate(fd, (off_t)bytes) < 0)
		return -1;
	ms_base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (ms_base == MAP_FAILED)
		return -1;
	ms_bytes = bytes;
	kvp_store_relaxed(&ms_next, 0); /* relaxed: no threads yet */
	t0 = kvpb_now_s();
	for (k = 0; k < nth; k++)
		pthread_create(&th[k], NULL, ms_thread, NULL);
	for (k = 0; k < nth; k++)
		pthread_join(th[k], NULL);
	t = kvpb_now_s() - t0;
	munmap(ms_base, bytes);
	return t;
}

/* VmPTE of this process, bytes. */
static uint64_t
vm_pte(void)
{
	char line[256];
	unsigned long long kb = 0;
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPTE: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return kb << 10;
}

/* In a child: open a client, read one byte per 4 KiB of 'bytes' of the
 * arena; report ns per GiB and page-table growth through a pipe. */
static int
first_touch(uint64_t bytes, double *ns_per_gib, uint64_t *pte_per_gib)
{
	int p[2];
	double out[2] = { 0, 0 };
	pid_t pid;
	int st;

	if (pipe(p) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		struct kvp_client *c;
		uint64_t pte0, k, t0, sum = 0;

		close(p[0]);
		if (kvp_open(pool_name, "bench", &c))
			_exit(1);
		if (bytes > c->seg.g.g_dram_pages * c->seg.g.g_dram_unit)
			bytes = c->seg.g.g_dram_pages * c->seg.g.g_dram_unit;
		pte0 = vm_pte();
		t0 = kvpb_now_ns();
		for (k = 0; k < bytes; k += 4096)
			sum += ((volatile unsigned char *)c->seg.arena)[k];
		out[0] = (double)(kvpb_now_ns() - t0) * (double)(1ull << 30) /
			 (double)bytes;
		out[1] = (double)(vm_pte() - pte0) * (double)(1ull << 30) /
			 (double)bytes;
		kvpb_clobber(&sum);
		if (write(p[1], out, sizeof(out)) != (ssize_t)sizeof(out))
			_exit(2);
		kvp_close(c);
		_exit(0);
	}
	close(p[1]);
	if (pid < 0 || read(p[0], out, sizeof(out)) != (ssize_t)sizeof(out)) {
		close(p[0]);
		return -1;
	}
	close(p[0]);
	waitpid(pid, &st, 0);
	*ns_per_gib = out[0];
	*pte_per_gib = (uint64_t)out[1];
	return 0;
}

/* As root, with no mount given: reserve huge pages for 'bytes' and mount
 * a hugetlbfs for this run (put back by huge_cleanup). */
static char huge_dir[64];
static unsigned long long huge_before;
static bool huge_ours;

static void
huge_cleanup(void)
{
	FILE *f;

	if (!huge_ours)
		return;
	/* lazily: the mount leaves the namespace now even if a process
	 * that is still exiting maps a file of it */
	if (umount2(huge_dir, MNT_DETACH))
		fprintf(stderr, "bench_start: umount %s: %s\n", huge_dir,
			strerror(errno));
	rmdir(huge_dir);
	f = fopen("/proc/sys/vm/nr_hugepages", "we");
	if (f) {
		fprintf(f, "%llu\n", huge_before);
		fclose(f);
	}
	huge_ours = false;
}

static const char *
huge_setup(uint64_t bytes)
{
	unsigned long long got = 0;
	FILE *f;

	if (geteuid() != 0)
		return NULL;
	f = fopen("/proc/sys/vm/nr_hugepages", "re");
	if (!f || fscanf(f, "%llu", &huge_before) != 1) {
		if (f)
			fclose(f);
		return NULL;
	}
	fclose(f);
	f = fopen("/proc/sys/vm/nr_hugepages", "we");
	if (!f)
		return NULL;
	fprintf(f, "%llu\n", huge_before + bytes / (2u << 20) + 64);
	fclose(f);
	f = fopen("/proc/sys/vm/nr_hugepages", "re");
	if (f) {
		if (fscanf(f, "%llu", &got) != 1)
			got = 0;
		fclose(f);
	}
	snprintf(huge_dir, sizeof(huge_dir), "/tmp/kvpb-huge-XXXXXX");
	huge_ours = true;
	if (got < huge_before + bytes / (2u << 20) + 64 || !mkdtemp(huge_dir) ||
	    mount("none", huge_dir, "hugetlbfs", 0, "pagesize=2M,mode=0700")) {
		huge_cleanup();
		return NULL;
	}
	return huge_dir;
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "small", required_argument, NULL, 's' },
		{ "large", required_argument, NULL, 'l' },
		{ "touch", required_argument, NULL, 't' },
		{ "hugetlbfs", required_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *small = "1G", *large = "8G", *huge = NULL;
	uint64_t touch = 1ull << 30;
	unsigned nth;
	double r_small, r_large, ms, pop;
	long long waited;
	static const char *off4k[] = { "--hugepages", "off", NULL };
	struct kvp_seg s;
	int opt;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'q':
			small = "256M";
			large = "1G";
			touch = 256ull << 20;
			break;
		case 's':
			small = optarg;
			break;
		case 'l':
			large = optarg;
			break;
		case 't':
			touch = strtoull(optarg, NULL, 10) << 20;
			break;
		case 'h':
			huge = optarg;
			break;
		default:
			fprintf(stderr, "usage: bench_start [--quick] [--small "
					"SIZE] [--large SIZE] [--touch MIB] "
					"[--hugetlbfs DIR]\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0); /* nothing buffered across fork */
	nth = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	nth = nth < 1 ? 1 : nth > 8 ? 8 : nth;
	kvpt_pool_name(pool_name, sizeof(pool_name), "bstart%d", (int)getpid());
	printf("bench_start: %u CPUs (populate threads %u), kvpoold from %s\n",
	       (unsigned)sysconf(_SC_NPROCESSORS_ONLN), nth, kvpt_bindir());

	/* 1. ready time, small and large, 4 KiB pages: the median of three
	 * starts each (tens of milliseconds: one start is noise); the last
	 * large agent stays up for 2. */
	{
		double rs[3], rl[3], t;
		int k, j;

		for (k = 0; k < 3; k++) {
			rs[k] = start_agent(small, off4k);
			stop_agent();
			rl[k] = start_agent(large, off4k);
			if (k < 2)
				stop_agent();
			if (rs[k] < 0 || rl[k] < 0) {
				fprintf(stderr,
					"bench_start: kvpoold did not start\n");
				stop_agent();
				return 1;
			}
		}
		for (k = 0; k < 3; k++) /* sort three */
			for (j = k + 1; j < 3; j++) {
				if (rs[j] < rs[k]) {
					t = rs[k];
					rs[k] = rs[j];
					rs[j] = t;
				}
				if (rl[j] < rl[k]) {
					t = rl[k];
					rl[k] = rl[j];
					rl[j] = t;
				}
			}
		r_small = rs[1];
		r_large = rl[1];
	}
	printf("ready      --dram %-6s %8.3f s (median of 3)\n", small,
	       r_small);
	printf("ready      --dram %-6s %8.3f s (median of 3)   ratio %.2f "
	       "(goal <= 2)\n",
	       large, r_large, r_large / r_small);
	/* 2. populate time against memset (the agent is still populating) */
	if (kvpt_seg_map(pool_name, &s)) {
		stop_agent();
		return 1;
	}
	waited = kvpt_wait_until(all_populated, &s, 600000);
	pop = r_large + (double)waited / 1e9;
	/* 3a. first touch, 4 KiB pages (the large pool, populated) */
	{
		double ns;
		uint64_t pte;

		if (first_touch(touch, &ns, &pte) == 0)
			printf("worker first touch, 4 KiB pages: %8.1f ms/GiB, "
			       "page tables %8llu KiB/GiB\n",
			       ns / 1e6, (unsigned long long)(pte >> 10));
		kvp__seg_unmap(&s);
		stop_agent();
		if (waited >= 0) {
			ms = memset_secs(s.size, nth);
			printf("populated  --dram %-6s %8.3f s after start "
			       "(%.2f GB/s); memset of the same %.2f GiB by %u "
			       "threads %.3f s: ratio %.2f (goal <= 1.5)\n",
			       large, pop, (double)s.size / pop / 1e9,
			       (double)s.size / (1ull << 30), nth, ms,
			       pop / ms);
		}
		/* 3b. 2 MiB pages */
		if (!huge)
			huge = huge_setup(touch + (256ull << 20));
		if (!huge) {
			printf("worker first touch, 2 MiB pages: skipped (no "
			       "hugetlbfs mount with room; give --hugetlbfs DIR "
			       "or run as root)\n");
		} else {
			char dram[32];
			double ns2;
			uint64_t pte2;

			snprintf(dram, sizeof(dram), "%llu",
				 (unsigned long long)touch);
			const char *on2m[] = { "--hugepages", "on",
					       "--hugetlbfs", huge, NULL };

			if (start_agent(dram, on2m) < 0 && (stop_agent(), 1)) {
				fprintf(stderr,
					"bench_start: kvpoold --hugepages "
					"on did not start\n");
			} else if (kvpt_seg_map(pool_name, &s) == 0) {
				kvpt_wait_until(all_populated, &s, 600000);
				kvp__seg_unmap(&s);
				if (first_touch(touch, &ns2, &pte2) == 0)
					/* VmPTE counts in 4 KiB: a growth of
					 * 0 is below 4 KiB per touch */
					printf("worker first touch, 2 MiB pages: "
					       "%8.1f ms/GiB, page tables %s%llu "
					       "KiB/GiB; 4 KiB / 2 MiB: time "
					       "%.0fx, page tables %s%.0fx (goal "
					       ">= 100x)\n",
					       ns2 / 1e6, pte2 ? "" : "< ",
					       (unsigned long long)(pte2 ? pte2 >> 10 :
									   4096 * (1ull << 30) /
											    touch >>
										    10),
					       ns / (ns2 > 0 ? ns2 : 1),
					       pte2 ? "" : ">= ",
					       (double)pte /
						       (double)(pte2 ? pte2 :
								       4096 *
										(1ull
										 << 30) /
										touch));
				stop_agent();
			}
			huge_cleanup();
		}
	}
	return 0;
}
