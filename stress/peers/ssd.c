/* SPDX-License-Identifier: MIT */
/*
 * ssd.c - the ssd section: kvpool's SSD tier against fio on the same
 * directory (--ssd-dir).  No worker and no peer: the parent starts an
 * agent of its own per measurement.
 */
#include <sys/stat.h>

#include "stress/peers/peers_int.h"

/*
 * The SSD tier against fio on the same directory, per value size: fio
 * write and read of the same bytes in blocks of the value size (queue
 * depth 16), then a fresh pool that demotes everything (--dram-high 0)
 * and never promotes: the demotion rate, then cold batch gets through
 * the staging arena (every read is an O_DIRECT read off the device).
 * Then the 2,000-key batch of 64 KiB values through an 8-slot arena.
 */
void
kvpb_run_ssd(unsigned r)
{
	char dir[700], store[800], bs[32], sn[32], d[32];
	double fio_r64 = 0;
	unsigned s;

	snprintf(dir, sizeof(dir), "%s/kvpool-bench-peers.%d", kvpb_cfg.ssd_dir,
		 (int)getpid());
	for (s = 0; s < kvpb_cfg.nssd; s++) {
		uint64_t sz = kvpb_cfg.ssd_sizes[s], bad = 0;
		int n = (int)(kvpb_cfg.ssd_bytes / sz);
		unsigned mib = (unsigned)((uint64_t)n * sz >> 20);
		struct kvpt_agent a;
		struct kvp_client *c = NULL;
		struct kvp_seg seg;
		double fw, fr, dem, cold;
		int batch;

		kvpb_rm_rf(dir);
		if (mkdir(dir, 0700)) {
			kvpb_log("bench_peers: cannot create %s: %s\n", dir,
				 strerror(errno));
			return;
		}
		snprintf(bs, sizeof(bs), "%lluk",
			 (unsigned long long)(sz >> 10));
		fw = kvpb_fio_bw(dir, "write", bs, mib ? mib : 1, 16);
		fr = kvpb_fio_bw(dir, "read", bs, mib ? mib : 1, 16);
		if (sz == 65536)
			fio_r64 = fr;
		kvpb_rm_rf(dir);
		mkdir(dir, 0700);
		snprintf(store, sizeof(store), "%s/store", dir);
		snprintf(
			d, sizeof(d), "%lluK",
			(unsigned long long)(((uint64_t)n * sz + (64u << 20)) >>
					     10));
		if (kvpt_pool_up(&a, &seg, &c, "--dram", d, "--dram-high", "0",
				 "--dram-low", "0", "--ssd-dir", store,
				 "--staging", "64M", "--staging-slot", "1M",
				 "--no-promote", NULL)) {
			char log[2200];

			kvpt_agent_log(a.pool, log, sizeof(log));
			kvpb_log(
				"bench_peers: cannot start an SSD agent (log %s)\n",
				log);
			kvpt_agent_stop(&a);
			return;
		}
		dem = kvpb_ssd_fill_and_demote(c, &seg, n, sz);
		batch = (int)((32u << 20) / sz);
		batch = batch > 16 ? 16 : batch < 1 ? 1 : batch;
		cold = kvpb_ssd_cold_gets(c, n, sz, batch, &bad);
		kvpt_pool_down(&a, &seg, c);
		kvpb_log(
			"  ssd %s: fio write %.2f GB/s, demotion %.2f GB/s; fio read %.2f GB/s, "
			"cold get %.2f GB/s\n",
			kvpb_size_name(sz, sn, sizeof(sn)), fw / 1e9, dem / 1e9,
			fr / 1e9, cold / 1e9);
		kvpb_emit(r, "ssd_write", "fio", sz, 1, 16, fw <= 0, "GB/s",
			  fw / 1e9, (const char *)NULL);
		kvpb_emit(r, "ssd_write", "kvpool", sz, 1, 0, 0, "GB/s",
			  dem / 1e9, (const char *)NULL);
		kvpb_emit(r, "ssd_read", "fio", sz, 1, 16, fr <= 0, "GB/s",
			  fr / 1e9, (const char *)NULL);
		kvpb_emit(r, "ssd_read", "kvpool", sz, 1, (unsigned)batch, bad,
			  "GB/s", cold / 1e9, (const char *)NULL);
	}
	{
		/* 2,000 x 64 KiB SSD values, one batch, an 8-slot arena */
		struct kvpt_agent a;
		struct kvp_client *c = NULL;
		struct kvp_seg seg;
		uint64_t bad = 0;
		double t0, secs;

		kvpb_rm_rf(dir);
		mkdir(dir, 0700);
		if (fio_r64 <= 0)
			fio_r64 = kvpb_fio_bw(dir, "read", "64k", 128, 16);
		kvpb_rm_rf(dir);
		mkdir(dir, 0700);
		snprintf(store, sizeof(store), "%s/store64", dir);
		if (kvpt_pool_up(&a, &seg, &c, "--dram", "256M", "--dram-unit",
				 "4K", "--dram-high", "0", "--dram-low", "0",
				 "--ssd-dir", store, "--staging", "512K",
				 "--staging-slot", "64K", "--no-promote",
				 NULL)) {
			kvpb_log("bench_peers: cannot start an SSD agent\n");
			kvpt_agent_stop(&a);
			return;
		}
		kvpb_ssd_fill_and_demote(c, &seg, 2000, 64 << 10);
		t0 = kvpb_now_s();
		kvpb_ssd_cold_gets(c, 2000, 64 << 10, 2000, &bad);
		secs = kvpb_now_s() - t0;
		kvpt_pool_down(&a, &seg, c);
		kvpb_log(
			"  ssd batch: 2000 x 64KiB in %.3f s (bytes / fio 64K read: %.3f s)\n",
			secs, 2000.0 * 65536 / fio_r64);
		kvpb_emit(r, "ssd_batch", "kvpool", 65536, 1, 2000, bad, "s",
			  secs, "bound s",
			  fio_r64 > 0 ? 2000.0 * 65536 / fio_r64 : 0, "GB/s",
			  2000.0 * 65536 / secs / 1e9, (const char *)NULL);
		kvpb_emit(r, "ssd_batch", "fio", 65536, 1, 16, fio_r64 <= 0,
			  "GB/s", fio_r64 / 1e9, (const char *)NULL);
	}
	kvpb_rm_rf(dir);
}
