#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""stress/bench_python.py - what the Python binding costs over the C calls
it makes, in one run against one agent it starts:

  - single-key calls (exists, get of 4 KiB and 1 MiB, put of 4 KiB) through
    kvpool.Pool against the same C call made through ctypes with its
    arguments prepared (the floor a Python caller can reach);
  - batch_exists_prefix and batch_get of 256 keys, from a list of str keys,
    from kvpool.Keys, and the C call on a prebuilt op array;
  - batch_get of 64 x 1 MiB from 1 and 2 threads sharing one Pool (the GIL
    is released in every C call: two threads copy in parallel).

Medians of interleaved repetitions.  --quick: fewer of them (the test
run).  --json FILE appends one JSON line of figures.

    PYTHONPATH=python python3 stress/bench_python.py [--quick] [--json FILE]
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import kvpool  # noqa: E402
import kvpt  # noqa: E402


def timed(fn, reps):
    """Median seconds of one call of fn over reps calls (timed in groups
    so the clock's cost stays out)."""
    group = 1
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    if one < 20e-6:
        group = 200
    elif one < 1e-3:
        group = 20
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(group):
            fn()
        out.append((time.perf_counter() - t0) / group)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    reps = 7 if args.quick else 31
    rows = []
    figures = {}
    lib = kvpool._native.lib
    with kvpt.Agent("--dram", "512M", "--max-value", "4M") as a:
        p = kvpool.Pool(a.pool, namespace="bench")
        small = os.urandom(4096)
        big = os.urandom(1 << 20)
        p.put("small", small)
        p.put("big", big)
        sbuf = bytearray(4096)
        bbuf = bytearray(1 << 20)
        c = p._client()
        h = c.h
        sa = kvpool.buffer_address(sbuf, True)[0]
        ba = kvpool.buffer_address(bbuf, True)[0]

        def pair(name, py, cc):
            tp, tc = [], []
            for _ in range(3):  # interleaved
                tp.append(timed(py, reps))
                tc.append(timed(cc, reps))
            fp, fc = statistics.median(tp), statistics.median(tc)
            rows.append((name, fp * 1e6, fc * 1e6, fp / fc))
            figures[name] = {"python_us": fp * 1e6, "c_us": fc * 1e6, "ratio": fp / fc}

        pair("exists", lambda: p.exists("small"), lambda: lib.kvp_exists(h, b"small", 5))
        pair("get 4 KiB", lambda: p.get("small", sbuf), lambda: lib.kvp_get(h, b"small", 5, sa, 4096))
        pair("get 1 MiB", lambda: p.get("big", bbuf), lambda: lib.kvp_get(h, b"big", 3, ba, 1 << 20))
        seq = [0]

        def put_py():
            seq[0] += 1
            p.put(f"p{seq[0]}", small)

        def put_c():
            seq[0] += 1
            k = f"p{seq[0]}".encode()
            lib.kvp_put(h, k, len(k), small, 4096)

        pair("put 4 KiB", put_py, put_c)

        # batches of 128 pages x 2 objects
        names = [f"{i * 7919:064x}" for i in range(128)]
        sfx = ("_0_k", "_0_v")
        keys = [n + x for n in names for x in sfx]
        val = os.urandom(16384)
        st = p.batch_put(keys, [kvpool.buffer_address(val)[0]] * 256, [16384] * 256)
        assert st == [0] * 256, st
        ops, n, _, _ = p._fill(c, keys)
        pair("exists_prefix 256, list", lambda: p.batch_exists_prefix(keys),
             lambda: lib.kvp_batch_exists_prefix(h, ops, n))
        pair("exists_prefix 256, Keys", lambda: p.batch_exists_prefix(kvpool.Keys(names, sfx)),
             lambda: lib.kvp_batch_exists_prefix(h, ops, n))
        out = bytearray(256 * 16384)
        ob = kvpool.buffer_address(out, True)[0]
        addrs = [ob + i * 16384 for i in range(256)]
        lens = [16384] * 256
        gops, gn, _, _ = p._fill(c, keys, addrs, lens)
        pair("batch_get 256 x 16 KiB, Keys", lambda: p.batch_get(kvpool.Keys(names, sfx), addrs, lens),
             lambda: lib.kvp_batch_get(h, gops, gn))

        # threads: 64 x 1 MiB per call, 1 vs 2 threads on one Pool
        mkeys = [f"m{i}" for i in range(64)]
        st = p.batch_put(mkeys, [kvpool.buffer_address(big)[0]] * 64, [1 << 20] * 64)
        assert st == [0] * 64, st
        calls = 8 if args.quick else 40

        # destinations touched once before (a first touch costs more than
        # the copy on this guest)
        bufs = [bytearray(b"\x01" * (64 << 20)) for _ in range(2)]
        bases = [kvpool.buffer_address(b, True)[0] for b in bufs]

        def run_threads(nt):

            def work(t):
                ad = [bases[t] + i * (1 << 20) for i in range(64)]
                for _ in range(calls):
                    r = p.batch_get(mkeys, ad, [1 << 20] * 64)
                    assert r == [1 << 20] * 64

            ths = [threading.Thread(target=work, args=(t,)) for t in range(nt)]
            t0 = time.perf_counter()
            for t in ths:
                t.start()
            for t in ths:
                t.join()
            return nt * calls * 64 * (1 << 20) / (time.perf_counter() - t0) / 1e9

        run_threads(2)  # the values' pages mapped in this process
        src = bytearray(b"\x02" * (64 << 20))
        sb = kvpool.buffer_address(src, True)[0]

        def memcpy_gbps():
            t0 = time.perf_counter()
            for _ in range(calls):
                for i in range(64):
                    ctypes.memmove(bases[0] + i * (1 << 20), sb + i * (1 << 20), 1 << 20)
            return calls * 64 * (1 << 20) / (time.perf_counter() - t0) / 1e9

        g1s, g2s, gms = [], [], []
        for _ in range(3):  # interleaved
            gms.append(memcpy_gbps())
            g1s.append(run_threads(1))
            g2s.append(run_threads(2))
        g1, g2, gm = statistics.median(g1s), statistics.median(g2s), statistics.median(gms)
        figures["threads"] = {"gbps_1": g1, "gbps_2": g2, "memcpy_gbps": gm, "scaling": g2 / g1,
                              "cpus": os.cpu_count()}
        p.close()

    print(f"{'call':34} {'python us':>10} {'C us':>10} {'ratio':>7}")
    for name, fp, fc, r in rows:
        print(f"{name:34} {fp:10.2f} {fc:10.2f} {r:7.2f}")
    print(f"batch_get 64 x 1 MiB: 1 thread {g1:.2f} GB/s ({g1 / gm:.2f}x memcpy of the same bytes, {gm:.2f} GB/s),"
          f" 2 threads {g2:.2f} GB/s ({g2 / g1:.2f}x; {os.cpu_count()} CPUs)")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({"bench": "python", "quick": args.quick, "figures": figures}) + "\n")


if __name__ == "__main__":
    main()
