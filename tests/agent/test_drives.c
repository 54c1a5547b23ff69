/* SPDX-License-Identifier: MIT */
/*
 * test_drives.c - several SSD drives (--ssd-dir repeated): values spread
 * over three directories come back whole after a reboot that lists the
 * directories in another order (each keeps its drive id); a directory
 * whose files are cut short and then removed while the agent runs is
 * reported, its values read as clean statuses (never wrong bytes), the
 * other drives keep serving, and demotion goes on to them; --ssd-size
 * is per drive, each reclaiming its own segments.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/agent/harness.h"
#include "tiers/kvp_ssd.h"

#define NDIR 3

static char dirs[NDIR][256];

static uint32_t
key_of(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x_drv_%d",
				  (unsigned)i * 2654435761u, i);
}

static uint32_t
key_new(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x_new_%d",
				  (unsigned)i * 2246822519u, i);
}

static int
setup(void **state)
{
	int k;

	(void)state;
	for (k = 0; k < NDIR; k++)
		if (kvpt_tmpdir(dirs[k], sizeof(dirs[k]), "drives"))
			return -1;
	return 0;
}

static int
teardown(void **state)
{
	int k;

	(void)state;
	for (k = 0; k < NDIR; k++)
		kvpt_tmpdir_remove(dirs[k]);
	return 0;
}

#define DRV_ARGS(d0, d1, d2)                                               \
	"--dram", "64M", "--dram-unit", "4K", "--dram-high", "0",          \
		"--dram-low", "0", "--ssd-dir", d0, "--ssd-dir", d1,       \
		"--ssd-dir", d2, "--ssd-segment", "4M", "--staging", "8M", \
		"--staging-slot", "1M", "--metrics-addr", "off", NULL

/* Key i's SSD location (0: not READY, or no SSD copy). */
static uint64_t
ssd_loc_of(struct kvp_client *c, const struct kvp_seg *s, kvpt_key_fn key,
	   int i)
{
	char k[100];
	uint32_t kl = key(k, i);
	uint64_t w;
	int64_t slot = kvp_ix_find(s, c->nsid, kvp_key_hash(c->nsid, k, kl), k,
				   kl, KVP_IX_M(KVP_IX_READY), &w);

	/* relaxed: a test's look at a READY entry */
	return slot < 0 ? 0 : kvp_load_relaxed(&s->entries[slot].e_ssd);
}

static unsigned
drive_of(uint64_t loc)
{
	return (unsigned)(loc >> 60);
}

/* The id dir recorded ("DRIVE"), or -1. */
static int
dir_id(const char *dir)
{
	char path[300];
	unsigned id;
	FILE *f;
	int n;

	snprintf(path, sizeof(path), "%s/DRIVE", dir);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fscanf(f, "kvpool-drive %u", &id);
	fclose(f);
	return n == 1 ? (int)id : -1;
}

/* 600 values demoted over three drives (each gets some); the node
 * reboots (agent killed, segment gone); the agent starts with the
 * directories in another order: each keeps its id, every value reads
 * back whole. */
static void
test_drives_restart(void **state)
{
	enum {
		N = 600,
		SZ = 32 << 10
	};
	unsigned per[16] = { 0 };
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	int i, ids[NDIR];

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c,
				      DRV_ARGS(dirs[0], dirs[1], dirs[2])),
			 0);
	assert_int_equal(kvpt_put_and_demote(c, &s, N, SZ, key_of, 5, 60000),
			 0);
	for (i = 0; i < N; i++)
		per[drive_of(ssd_loc_of(c, &s, key_of, i))]++;
	for (i = 0; i < NDIR; i++) {
		ids[i] = dir_id(dirs[i]);
		assert_true(ids[i] >= 0 && ids[i] < NDIR);
		/* spread by key: each drive has a fair share */
		assert_true(per[ids[i]] > N / 6);
		assert_int_equal(KVP_DRIVE_STATE(kvp_load_relaxed(
					 &s.hdr->h_drive_state[ids[i]])),
				 KVP_DRIVE_OK);
	}
	print_message("  %d values over 3 drives: %u, %u, %u\n", N, per[0],
		      per[1], per[2]);
	kvp_close(c);
	kvp__seg_unmap(&s);
	kvpt_agent_kill(&a);
	kvpt_pool_remove(a.pool); /* a reboot: only the disks are left */
	assert_int_equal(
		kvpt_agent_restart(&a, DRV_ARGS(dirs[2], dirs[0], dirs[1])), 0);
	for (i = 0; i < NDIR; i++)
		assert_int_equal(dir_id(dirs[i]), ids[i]);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_of, 0, N, SZ, 5, true), 0);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
	for (i = 0; i < NDIR; i++)
		assert_int_equal(kvpt_tmpdir_empty(dirs[i]), 0);
}

struct drive_wait {
	const struct kvp_seg *s;
	unsigned id;
};

static bool
drive_reported(void *arg)
{
	struct drive_wait *w = arg;
	/* relaxed: a statistic the agent publishes */
	unsigned st = KVP_DRIVE_STATE(
		kvp_load_relaxed(&w->s->hdr->h_drive_state[w->id]));

	return st == KVP_DRIVE_GONE || st == KVP_DRIVE_FAILED;
}

/* Cut every segment file of dir to its first block (the records are gone,
 * the files stay open in the agent), then remove the directory. */
static void
break_dir(const char *dir)
{
	struct dirent *de;
	char path[600];
	DIR *d = opendir(dir);

	assert_non_null(d);
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "seg-", 4))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		assert_int_equal(truncate(path, 4096), 0);
	}
	closedir(d);
	assert_int_equal(kvpt_run(NULL, 0, "rm -rf '%s'", dir), 0);
}

/* One of three directories breaks while the agent runs: its values read
 * FAILED or MISS (never wrong bytes), it is reported (the header, `kvpool
 * stat`), the other drives serve theirs, and new values are demoted to
 * them and read back whole. */
static void
test_drive_removed(void **state)
{
	enum {
		N = 600,
		M = 300,
		SZ = 32 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	unsigned char *out = malloc(SZ);
	unsigned ok = 0, failed = 0;
	char k[100], stat[8192];
	struct drive_wait w;
	int i, broken;

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c,
				      DRV_ARGS(dirs[0], dirs[1], dirs[2])),
			 0);
	assert_int_equal(kvpt_put_and_demote(c, &s, N, SZ, key_of, 5, 60000),
			 0);
	broken = dir_id(dirs[1]);
	assert_true(broken >= 0);
	break_dir(dirs[1]);
	w.s = &s;
	w.id = (unsigned)broken;
	assert_true(kvpt_wait_until(drive_reported, &w, 10000) >= 0);
	for (i = 0; i < N; i++) {
		uint64_t loc = ssd_loc_of(c, &s, key_of, i);
		uint32_t kl = key_of(k, i);
		ssize_t n = kvp_get(c, k, kl, out, SZ);

		if (loc && drive_of(loc) == (unsigned)broken) {
			/* a clean status, never bytes */
			assert_true(n == -EIO || n == -ENOENT || n == -EBADMSG);
			failed++;
		} else {
			assert_int_equal(n, SZ);
			assert_true(kvpt_check(out, SZ, k, kl, 5));
			ok++;
		}
	}
	print_message("  drive %d broken: %u values failed cleanly, %u read "
		      "from the other drives\n",
		      broken, failed, ok);
	assert_true(failed > 0 && ok > N / 2);
	/* reported where operators look */
	assert_int_equal(kvpt_run(stat, sizeof(stat),
				  "%s/kvpool --pool %s stat", kvpt_bindir(),
				  a.pool),
			 0);
	assert_non_null(strstr(stat, "gone"));
	/* demotion goes on, to the drives that are left */
	assert_int_equal(kvpt_put_and_demote(c, &s, M, SZ, key_new, 6, 60000),
			 0);
	for (i = 0; i < M; i++)
		assert_true(drive_of(ssd_loc_of(c, &s, key_new, i)) !=
			    (unsigned)broken);
	assert_int_equal(kvpt_wrong_keys(c, key_new, 0, M, SZ, 6, true), 0);
	free(out);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
	/* the directories come back empty for the next test */
	for (i = 0; i < NDIR; i++)
		assert_int_equal(kvpt_tmpdir_empty(dirs[i]), 0);
}

/* A directory missing at start: reported, the pool starts with the
 * others and serves. */
static void
test_drive_missing_at_start(void **state)
{
	enum {
		N = 100,
		SZ = 32 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	char gone[300];
	int k, missing = 0;

	(void)state;
	snprintf(gone, sizeof(gone), "%s/not-mounted", dirs[2]);
	assert_int_equal(
		kvpt_pool_up(&a, &s, &c, DRV_ARGS(dirs[0], gone, dirs[1])), 0);
	for (k = 0; k < 16; k++)
		/* relaxed: a statistic the agent publishes */
		missing += KVP_DRIVE_STATE(kvp_load_relaxed(
				   &s.hdr->h_drive_state[k])) ==
			   KVP_DRIVE_MISSING;
	assert_int_equal(missing, 1);
	assert_int_equal(kvpt_put_and_demote(c, &s, N, SZ, key_of, 7, 60000),
			 0);
	assert_int_equal(kvpt_wrong_keys(c, key_of, 0, N, SZ, 7, true), 0);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
	assert_int_equal(access(gone, F_OK), -1); /* never created */
	for (k = 0; k < NDIR; k++)
		assert_int_equal(kvpt_tmpdir_empty(dirs[k]), 0);
}

/* Three segments given back, at least (for kvpt_wait_until). */
static bool
reclaimed_three(void *p)
{
	return kvpt_actr(p, KVP_ACTR_SEGMENT_RECLAIM) >= 3;
}

/* --ssd-size is per drive: each drive gives its own oldest segments back
 * when it is full, through its own reclaim (locations translated both
 * ways); every key then reads whole or misses, never wrong bytes, and no
 * drive passes its size. */
static void
test_drives_reclaim(void **state)
{
	enum {
		N = 900,
		SZ = 32 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	unsigned char *out = malloc(SZ);
	unsigned hit = 0, miss = 0, k;
	char key[100];
	int i;

	(void)state;
	assert_int_equal(
		kvpt_pool_up(&a, &s, &c, "--dram", "64M", "--dram-unit", "4K",
			     "--dram-high", "0", "--dram-low", "0", "--ssd-dir",
			     dirs[0], "--ssd-dir", dirs[1], "--ssd-dir",
			     dirs[2], "--ssd-segment", "1M", "--ssd-size", "6M",
			     "--staging", "8M", "--staging-slot", "1M", NULL),
		0);
	/* 900 x 36 KiB on disk: 32 MiB, over the 18 MiB of three drives */
	for (i = 0; i < N; i++) {
		uint32_t kl = key_of(key, i);
		int rc;

		kvpt_fill(out, SZ, key, kl, 9);
		while ((rc = kvp_put(c, key, kl, out, SZ)) == -EBUSY)
			;
		assert_int_equal(rc, 0);
	}
	/* demotion runs behind the puts (a loaded machine: seconds), and the
	 * reclaims with it */
	kvpt_wait_until(reclaimed_three, &s, 60000);
	for (i = 0; i < N; i++) {
		uint32_t kl = key_of(key, i);
		ssize_t n = kvp_get(c, key, kl, out, SZ);

		if (n == -ENOENT) {
			miss++;
			continue;
		}
		assert_int_equal(n, SZ);
		assert_true(kvpt_check(out, SZ, key, kl, 9));
		hit++;
	}
	print_message("  %u values read whole, %u gone with reclaimed "
		      "segments (%llu reclaims)\n",
		      hit, miss,
		      (unsigned long long)kvpt_actr(&s,
						    KVP_ACTR_SEGMENT_RECLAIM));
	assert_true(kvpt_actr(&s, KVP_ACTR_SEGMENT_RECLAIM) >= 3);
	assert_true(miss > 0 && hit > N / 3);
	for (k = 0; k < 16; k++)
		/* relaxed: a statistic the agent publishes */
		assert_true(kvp_load_relaxed(&s.hdr->h_drive_used[k]) <=
			    (6u << 20));
	free(out);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
	for (i = 0; i < NDIR; i++)
		assert_int_equal(kvpt_tmpdir_empty(dirs[i]), 0);
}

/* A store from before drives had ids (one --ssd-dir, no DRIVE file) keeps
 * drive 0 when a second directory is listed before it: the index that
 * survived the agent (kill -9, segment kept) names its records as drive
 * 0's, and every value still reads back whole. */
static void
test_drives_upgrade(void **state)
{
	enum {
		N = 200,
		SZ = 32 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	char path[300];
	int i;

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "64M",
				      "--dram-unit", "4K", "--dram-high", "0",
				      "--dram-low", "0", "--ssd-dir", dirs[0],
				      "--ssd-segment", "4M", "--staging", "8M",
				      "--staging-slot", "1M", NULL),
			 0);
	assert_int_equal(kvpt_put_and_demote(c, &s, N, SZ, key_of, 3, 60000),
			 0);
	for (i = 0; i < N; i++)
		assert_int_equal(drive_of(ssd_loc_of(c, &s, key_of, i)), 0);
	kvp_close(c);
	kvp__seg_unmap(&s);
	kvpt_agent_kill(&a); /* the segment and its index stay */
	snprintf(path, sizeof(path), "%s/DRIVE", dirs[0]);
	assert_int_equal(unlink(path), 0); /* as an older agent left it */
	assert_int_equal(
		kvpt_agent_restart(&a, DRV_ARGS(dirs[1], dirs[0], dirs[2])), 0);
	assert_int_equal(dir_id(dirs[0]), 0);
	assert_true(dir_id(dirs[1]) > 0 && dir_id(dirs[2]) > 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_of, 0, N, SZ, 3, true), 0);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
	for (i = 0; i < NDIR; i++)
		assert_int_equal(kvpt_tmpdir_empty(dirs[i]), 0);
}

/* Key i: its value (version) whole, else the status got (a miss:
 * -ENOENT); 1 if it is neither. */
static int
read_key(struct kvp_client *c, unsigned char *v, int i, uint64_t sz,
	 uint64_t version, ssize_t *got)
{
	char k[100];
	uint32_t kl = key_of(k, i);

	while ((*got = kvp_get(c, k, kl, v, sz)) == -EBUSY)
		;
	if (*got == (ssize_t)sz)
		return !kvpt_check(v, sz, k, kl, version);
	return *got != -ENOENT;
}

/* Issue 25, item 11: a DRIVE file copied from another drive into a
 * directory listed first, at a restart that re-attaches the segment: the
 * copy takes the id, the original directory is refused.  The entries
 * whose records are in the refused directory must not read the copy's
 * records under their id (FAILED for ever, and puts of their keys
 * EEXIST): they lose their SSD copy, a get is a clean miss and a put of
 * the key succeeds; `kvpool check` is clean; the other drives' values,
 * the copy's own included (recovered under the id it took), read back
 * whole. */
static void
test_drive_id_copied(void **state)
{
	enum {
		N = 300,
		SZ = 32 << 10
	};
	unsigned char *v = malloc(SZ);
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	uint8_t drv[N];
	int i, ids[NDIR], refused = 0, missed = 0, whole = 0, missing = 0;

	(void)state;
	assert_non_null(v);
	assert_int_equal(kvpt_pool_up(&a, &s, &c,
				      DRV_ARGS(dirs[0], dirs[1], dirs[2])),
			 0);
	assert_int_equal(kvpt_put_and_demote(c, &s, N, SZ, key_of, 9, 60000),
			 0);
	for (i = 0; i < NDIR; i++)
		ids[i] = dir_id(dirs[i]);
	for (i = 0; i < N; i++) {
		drv[i] = (uint8_t)drive_of(ssd_loc_of(c, &s, key_of, i));
		refused += drv[i] == ids[0];
	}
	assert_true(refused > 0);
	kvp_close(c);
	kvp__seg_unmap(&s);
	/* the agent dies; the segment stays (the next one re-attaches) */
	kvpt_agent_kill(&a);
	assert_int_equal(kvpt_run(NULL, 0, "cp '%s/DRIVE' '%s/DRIVE'", dirs[0],
				  dirs[1]),
			 0);
	assert_int_equal(
		kvpt_agent_restart(&a, DRV_ARGS(dirs[1], dirs[0], dirs[2])), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	for (i = 0; i < (int)KVP_SSD_DRIVES; i++)
		/* relaxed: a statistic the agent publishes */
		missing += KVP_DRIVE_STATE(kvp_load_relaxed(
				   &s.hdr->h_drive_state[i])) ==
			   KVP_DRIVE_MISSING;
	assert_int_equal(missing, 1); /* dirs[0]: its id is the copy's */
	for (i = 0; i < N; i++) {
		ssize_t got;

		if (drv[i] != ids[0]) {
			/* dirs[2]'s, and dirs[1]'s under its new id */
			assert_int_equal(read_key(c, v, i, SZ, 9, &got), 0);
			whole += got == SZ;
			continue;
		}
		/* a record of the refused directory: a clean miss, then a
		 * put of the key is taken */
		if (read_key(c, v, i, SZ, 9, &got) || got != -ENOENT)
			fail_msg("key %d of the refused drive: %zd (want a "
				 "miss)",
				 i, got);
		missed++;
	}
	print_message("  %d keys of the refused drive miss, %d others read "
		      "whole\n",
		      missed, whole);
	assert_int_equal(missed, refused);
	assert_int_equal(whole, N - refused);
	assert_int_equal(kvpt_cli_check(a.pool, 5000, NULL, 0), 0);
	for (i = 0; i < N; i++) {
		char k[100];
		uint32_t kl = key_of(k, i);

		if (drv[i] != ids[0])
			continue;
		kvpt_fill(v, SZ, k, kl, 10);
		assert_int_equal(kvp_put(c, k, kl, v, SZ), 0);
	}
	for (i = 0; i < N; i++) {
		ssize_t got;

		assert_int_equal(read_key(c, v, i, SZ,
					  drv[i] == ids[0] ? 10 : 9, &got),
				 0);
		assert_int_equal(got, SZ);
	}
	free(v);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
	for (i = 0; i < NDIR; i++)
		assert_int_equal(kvpt_tmpdir_empty(dirs[i]), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_drives_restart),
		cmocka_unit_test(test_drive_removed),
		cmocka_unit_test(test_drive_missing_at_start),
		cmocka_unit_test(test_drives_reclaim),
		cmocka_unit_test(test_drives_upgrade),
		cmocka_unit_test(test_drive_id_copied),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
