#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""python/demo.py - the pool from Python (demo.sh runs it after the C
demo): two threads share one kvpool.Pool, each puts 64 pages of 256 KiB
in one batch, reads them back with a pinned batch, checks every byte, and
prints the rate and what the pool holds, then deletes its pages.

    PYTHONPATH=python python3 python/demo.py [--pool NAME]
"""

import argparse
import os
import threading
import time

import kvpool

PAGES, SIZE = 64, 256 << 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool", default="default")
    args = ap.parse_args()
    pool = kvpool.Pool(args.pool, namespace="python-demo|bytes|256K")
    run = f"{os.getpid()}-{time.monotonic_ns()}"
    rates, errors, mine = [], [], []

    def worker(t):
        try:
            names = [f"{run}-t{t}-p{i:03d}" for i in range(PAGES)]
            keys = kvpool.Keys(names, ("_v",))
            vals = bytearray(os.urandom(PAGES * SIZE))
            base = kvpool.buffer_address(vals)[0]
            addrs = [base + i * SIZE for i in range(PAGES)]
            st = pool.batch_put(keys, addrs, [SIZE] * PAGES)
            if any(s not in (0, kvpool.EXISTS) for s in st):
                raise RuntimeError(f"puts: {sorted({kvpool.status_name(s) for s in st})}")
            out = bytearray(PAGES * SIZE)
            ob = kvpool.buffer_address(out, True)[0]
            t0 = time.perf_counter()
            rounds = 20
            for _ in range(rounds):
                with pool.lookup_pin(keys) as ps:  # held while read
                    got = ps.get([ob + i * SIZE for i in range(ps.count)], [SIZE] * ps.count)
                    if ps.count != PAGES or got != [SIZE] * PAGES:
                        raise RuntimeError(f"read {ps.count} of {PAGES} pages: {got[:4]}...")
            rates.append(rounds * PAGES * SIZE / (time.perf_counter() - t0) / 1e9)
            if out != vals:
                raise RuntimeError("bytes read back differ")
            mine.extend(n + "_v" for n in names)
        except Exception as e:
            errors.append(f"thread {t}: {e!r}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("python demo: " + "; ".join(errors))
    st = pool.stat()
    print(
        f"python demo: 2 threads, {PAGES} x {SIZE >> 10} KiB pages each, every byte checked: "
        f"{sum(rates):.1f} GB/s of pinned batch reads; pool '{args.pool}' holds {st['entries']} entries, "
        f"{st['dram_used_bytes'] >> 20} of {st['dram_bytes'] >> 20} MiB DRAM, {st['clients']} clients"
    )
    for k in mine:  # the demo's pages go
        pool.delete(k)
    pool.close()


if __name__ == "__main__":
    main()
