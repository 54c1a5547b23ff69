#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kvpool.vllm's KVPoolTier as vLLM's tiering manager drives it, in one run
on one agent it starts (figures: docs/performance.md, "The vLLM tier").

  (1) store: one cascade job of 256 rows (submit_store, until
      get_finished_jobs reports it) from the CPU primary tier's rows into
      the pool, rows of 1 MiB and of 4 MiB;
  (2) promote: one load job of the same 256 rows (submit_load of rows the
      tier answered HIT, pinned) from the pool into the primary rows;
      both against a plain memcpy (ctypes.memmove, row by row) of the same
      rows into a buffer of the same size (goal: >= 0.8x its throughput);
  (3) lookups from the scheduler thread: requests of 2,000 keys, each key
      looked up twice as vLLM does (RETRY, then HIT after the step's batched
      probe), the probe at the step's end and the pins' release: keys
      resolved per second (goal: >= 1 M keys/s in batches).

The tier is built by the model of vLLM's SecondaryTierFactory (module_path)
over a model of the CPU primary tier (tests/python/vllm_fake.py), and
driven directly, as TieringOffloadingManager drives it.  Medians of --reps
repetitions, the variants interleaved; every row read back is checked.
Prints a table and one JSON line (appended to --json FILE too).
--quick: a ~20 s smoke run (fewer repetitions, the same sizes).

    PYTHONPATH=python python3 stress/bench_vllm.py [--quick] [--reps N]
"""

import argparse
import ctypes
import json
import os
import shutil
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import vllm_fake as vf  # noqa: E402

vf.install()

import kvpool  # noqa: E402
import kvpt  # noqa: E402


def make_tier(pool, rows, row_bytes, **kw):
    """The tier as vLLM's factory builds it over a primary tier of rows."""
    cfg = dict(type="KVPoolTier", module_path="kvpool.vllm", pool=pool, **kw)
    spec = vf.TieringOffloadingSpec(vf.make_config([cfg], row_bytes=row_bytes, num_blocks=rows))
    primary = vf.PrimaryTier(rows, row_bytes)
    tier = vf.SecondaryTierFactory.create_secondary_tier(cfg, primary.view, spec)
    return tier, primary


def run_job(tier, job, load):
    """submit, then wait for the job as drain_jobs does; its JobResult."""
    (tier.submit_load if load else tier.submit_store)(job)
    tier.drain_jobs()
    res = list(tier.get_finished_jobs())
    assert len(res) == 1 and res[0].job_id == job.job_id, res
    return res[0]


def drop(pool, ns, keys):
    """Delete keys and wait for the agent to reclaim their bytes (outside
    the timed part: room for the next repetition)."""
    with kvpool.Pool(pool, namespace=ns) as p:
        used = p.stat()["dram_used_bytes"]
        for k in keys:
            p.delete(k.hex())
        kvpt.wait_until(lambda: p.stat()["dram_used_bytes"] <= used - len(keys) * 4096, 60, "the rows reclaimed")


def bench_rows(pool, rows, row_bytes, reps, out):
    tier, primary = make_tier(pool, rows, row_bytes)
    base = ctypes.addressof(ctypes.c_char.from_buffer(primary._map))
    total = rows * row_bytes
    dst = ctypes.create_string_buffer(total)  # memcpy's destination, faulted in below
    ctypes.memset(dst, 1, total)
    want = [vf.row_bytes_for(f"b{row_bytes}", i, row_bytes) for i in range(rows)]
    for i, w in enumerate(want):
        primary.write_row(i, w)
    edge = 4096
    t = {"store": [], "load": [], "memcpy": []}
    job_id = [0]
    ctx = vf.ReqContext("bench")

    def job(keys, load):
        job_id[0] += 1
        return vf.TransferJob(job_id[0], keys, vf._ids(range(rows)), load, ctx)

    dst_addr = ctypes.addressof(dst)
    # the first round writes arena pages this process never wrote: a fault
    # each (and, on this VM, a slow first write); timed apart, not judged
    keys = [vf.make_offload_key(f"{row_bytes}/warm/{i}".encode().ljust(32, b"."), 0) for i in range(rows)]
    t0 = time.perf_counter()
    if not run_job(tier, job(keys, False), False).success:
        sys.exit("bench_vllm: the first store failed")
    cold = time.perf_counter() - t0
    drop(pool, tier.namespace, keys)
    for r in range(reps):
        keys = [vf.make_offload_key(f"{row_bytes}/{r}/{i}".encode().ljust(32, b"."), 0) for i in range(rows)]
        order = ("memcpy", "store", "load") if r % 2 == 0 else ("store", "load", "memcpy")
        for what in order:
            if what == "memcpy":
                t0 = time.perf_counter()
                for i in range(rows):
                    ctypes.memmove(dst_addr + i * row_bytes, base + i * row_bytes, row_bytes)
                t["memcpy"].append(time.perf_counter() - t0)
            elif what == "store":
                t0 = time.perf_counter()
                res = run_job(tier, job(keys, False), False)
                t["store"].append(time.perf_counter() - t0)
                if not res.success or tier.stats().get("store_failed"):
                    sys.exit(f"bench_vllm: a store of {rows} rows of {row_bytes} bytes failed")
            else:
                for k in keys:  # vLLM's lookups: RETRY, the step's probe, HIT
                    tier.lookup(k, ctx)
                tier.on_schedule_end()
                if any(tier.lookup(k, ctx) is not vf.LookupResult.HIT for k in keys):
                    sys.exit("bench_vllm: a stored row is not a hit")
                for i in range(rows):  # the load overwrites what was cleared
                    primary._map[i * row_bytes : i * row_bytes + edge] = bytes(edge)
                    primary._map[(i + 1) * row_bytes - edge : (i + 1) * row_bytes] = bytes(edge)
                t0 = time.perf_counter()
                res = run_job(tier, job(keys, True), True)
                t["load"].append(time.perf_counter() - t0)
                if not res.success:
                    sys.exit(f"bench_vllm: a load of {rows} rows of {row_bytes} bytes failed")
                bad = [
                    i
                    for i in range(rows)
                    if primary._map[i * row_bytes : i * row_bytes + edge] != want[i][:edge]
                    or primary._map[(i + 1) * row_bytes - edge : (i + 1) * row_bytes] != want[i][-edge:]
                ]
                if r == 0:
                    bad += [i for i in range(rows) if primary.row(i) != want[i]]
                if bad:
                    sys.exit(f"bench_vllm: rows {sorted(set(bad))[:5]} read back wrong")
                tier.on_request_finished(ctx)
        drop(pool, tier.namespace, keys)
    tier.shutdown()
    m = {k: statistics.median(v) for k, v in t.items()}
    gbs = {k: total / v / 1e9 for k, v in m.items()}
    out[row_bytes] = {
        "store_ms": round(m["store"] * 1e3, 2),
        "load_ms": round(m["load"] * 1e3, 2),
        "memcpy_ms": round(m["memcpy"] * 1e3, 2),
        "store_gbs": round(gbs["store"], 2),
        "load_gbs": round(gbs["load"], 2),
        "memcpy_gbs": round(gbs["memcpy"], 2),
        "store_first_gbs": round(total / cold / 1e9, 2),
        "store_ratio": round(gbs["store"] / gbs["memcpy"], 3),
        "load_ratio": round(gbs["load"] / gbs["memcpy"], 3),
    }


def bench_lookups(pool, reqs, per_req, reps, out):
    """Keys resolved per second from the scheduler thread: requests of
    per_req present keys; per repetition every request's keys looked up
    (RETRY), the step's end (one probe per request), looked up again (HIT),
    and the requests finished (pins released)."""
    row = 4096  # the probe does not read rows: small ones keep the pool small
    n = reqs * per_req
    tier, primary = make_tier(pool, 64, row)
    keys = [vf.make_offload_key(f"lk/{i}".encode().ljust(32, b"."), 0) for i in range(n)]
    tier._pool()  # open (once, as the first step of an engine does)
    with kvpool.Pool(pool, namespace=tier.namespace) as p:
        blob = bytes(row)
        for i in range(0, n, 1000):
            ks = [k.hex() for k in keys[i : i + 1000]]
            st = p.batch_put(ks, [kvpool.buffer_address(blob)[0]] * len(ks), [row] * len(ks))
            if any(s not in (0, kvpool.EXISTS) for s in st):
                sys.exit("bench_vllm: storing the lookup keys failed")
    ctxs = [vf.ReqContext(f"lk{r}") for r in range(reqs)]
    groups = [keys[r * per_req : (r + 1) * per_req] for r in range(reqs)]
    lookup = tier.lookup
    t_all, t_answer, t_cpu = [], [], []
    hit = vf.LookupResult.HIT
    for _ in range(reps):
        c0 = time.thread_time()  # the scheduler thread's own CPU (this VM is shared)
        t0 = time.perf_counter()
        for ctx, ks in zip(ctxs, groups):
            for k in ks:
                lookup(k, ctx)
        tier.on_schedule_end()
        t1 = time.perf_counter()
        for ctx, ks in zip(ctxs, groups):
            for k in ks:
                if lookup(k, ctx) is not hit:
                    sys.exit("bench_vllm: a present key is not a hit")
        t2 = time.perf_counter()
        for ctx in ctxs:
            tier.on_request_finished(ctx)
        t3 = time.perf_counter()
        t_cpu.append(time.thread_time() - c0)
        t_all.append(t3 - t0)
        t_answer.append(t2 - t1)
        if tier.pinned_rows():
            sys.exit("bench_vllm: pins left after the requests finished")
    tier.shutdown()
    m_all, m_ans = statistics.median(t_all), statistics.median(t_answer)
    out["lookups"] = {
        "keys": n,
        "requests": reqs,
        "resolved_keys_per_s": round(n / m_all),
        "resolved_keys_per_cpu_s": round(n / statistics.median(t_cpu)),
        "answer_calls_per_s": round(n / m_ans),
        "cycle_ms": round(m_all * 1e3, 2),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a ~20 s smoke run")
    ap.add_argument("--reps", type=int, default=0, help="repetitions of each copy (lookups: 4x more)")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--json", default=None, help="append the JSON line to this file")
    a = ap.parse_args()
    reps = a.reps or (3 if a.quick else 11)
    rows = a.rows
    sizes = (1 << 20, 4 << 20)
    need = rows * sum(sizes)
    dram = need + (128 << 20)
    free = shutil.disk_usage("/dev/shm").free
    if dram > free // 2:
        print(f"SKIP bench_vllm: /dev/shm has {free >> 20} MiB free; {dram >> 20} MiB of DRAM tier needed")
        return 77
    print(f"bench_vllm: {rows} rows of 1 MiB and of 4 MiB, agent --dram {dram >> 20}M, reps {reps}")
    t_start = time.monotonic()
    out = {}
    # the lookups pin 16,000 rows at once: the default --holds-per-client
    # (65,536) holds them
    with kvpt.Agent("--dram", f"{dram >> 20}M") as ag:
        for size in sizes:
            bench_rows(ag.pool, rows, size, reps, out)
        bench_lookups(ag.pool, 8, 2000, reps * 4, out)
    print(f"{'job (' + str(rows) + ' rows)':34s} {'median':>10s} {'GB/s':>8s} {'vs memcpy':>10s}")
    for size in sizes:
        o = out[size]
        for what in ("store", "load", "memcpy"):
            ratio = f"{o[what + '_ratio']:10.3f}" if what != "memcpy" else ""
            label = {"store": "store (cascade)", "load": "promote (load)", "memcpy": "memcpy"}[what]
            print(f"{label + f', {size >> 20} MiB rows':34s} {o[what + '_ms']:8.1f}ms {o[what + '_gbs']:8.2f} {ratio}")
    print("first store (arena pages new to this process): "
          + ", ".join(f"{size >> 20} MiB rows {out[size]['store_first_gbs']:.2f} GB/s" for size in sizes))
    lk = out["lookups"]
    print(f"lookups: {lk['keys']} keys in {lk['requests']} requests: {lk['resolved_keys_per_s'] / 1e6:.2f} M keys/s "
          f"resolved (two lookups, the step's probe, the release; "
          f"{lk['resolved_keys_per_cpu_s'] / 1e6:.2f} M per second of the thread's CPU), "
          f"answers {lk['answer_calls_per_s'] / 1e6:.2f} M/s")
    line = {
        "bench": "vllm",
        "rows": rows,
        "reps": reps,
        "1MiB": out[1 << 20],
        "4MiB": out[4 << 20],
        "lookups": lk,
        "loadavg": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "seconds": round(time.monotonic() - t_start, 1),
    }
    print(json.dumps(line))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
