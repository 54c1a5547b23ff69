#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kvpool.sglang against the C calls it wraps, in one run on one agent it
starts (figures: docs/performance.md, "sglang adapter").

  (1) batch_get_v1 of 128 pages x 2 objects (K, V) of 1 MiB, DRAM to the
      host pool, vs one ctypes call of kvp_batch_get on a prebuilt struct
      kvp_op array of the same 256 objects into the same addresses
      (goal: adapter throughput >= 0.8x the C call's);
  (2) batch_exists of the 128 pages (256 object keys) vs one
      kvp_batch_exists_prefix on prebuilt ops (goal: <= 2x the C call's
      time), with the prefetch pins on (the default: lookup and pin, then
      released as batch_get_v1 would) and off;
  (3) batch_get_v2 of the 128 pages (sglang's HybridCacheController with
      a separate-pool draft model: the KV anchor's transfer plus the
      draft's, K and V of --draft-kib each per page) vs one kvp_batch_get
      of the same objects into the same addresses (goal: adapter
      throughput >= 0.8x the C call's).

Medians of --reps repetitions, the variants interleaved in each one; the
ctypes entry cost (kvp_batch_get of 0 ops) is printed too.  Every read is
checked against what was written.  Prints a table, the ratios and one JSON
line (appended to --json FILE too).  --quick: a ~20 s smoke run.

    PYTHONPATH=python python3 stress/bench_sglang.py [--quick] [--reps N]
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

import kvpool  # noqa: E402
import kvpool.sglang as ks  # noqa: E402
from kvpool import _native  # noqa: E402

import kvpt  # noqa: E402
import sglang_fake as sf  # noqa: E402


def c_ops(keys, ptrs, sizes):
    """A struct kvp_op array for keys (and the key buffers it points to)."""
    n = len(keys)
    ops = (_native.Op * n)()
    kb = [ctypes.create_string_buffer(k.encode(), len(k)) for k in keys]
    for i in range(n):
        ops[i].key = ctypes.addressof(kb[i])
        ops[i].klen = len(keys[i])
        ops[i].buf = ptrs[i] if ptrs else None
        ops[i].len = sizes[i] if sizes else 0
    return ops, kb


def median_us(xs):
    return statistics.median(xs) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a ~20 s smoke run")
    ap.add_argument("--reps", type=int, default=0, help="repetitions of the get (exists: 20x more)")
    ap.add_argument("--pages", type=int, default=128)
    ap.add_argument("--obj-kib", type=int, default=1024, help="bytes of one object (K or V of a page), KiB")
    ap.add_argument("--draft-kib", type=int, default=256, help="bytes of one draft object (K or V of a page), KiB")
    ap.add_argument("--json", default=None, help="append the JSON line to this file")
    a = ap.parse_args()
    reps = a.reps or (5 if a.quick else 21)
    ereps = reps * (40 if a.quick else 100)
    pages = a.pages
    obj = a.obj_kib * 1024
    dobj = a.draft_kib * 1024
    values = 2 * pages * obj
    dram = max(256 << 20, 4 * (values + 2 * pages * dobj))
    free = shutil.disk_usage("/dev/shm").free
    if dram > free // 2:
        print(f"SKIP bench_sglang: /dev/shm has {free >> 20} MiB free; {dram >> 20} MiB of DRAM tier needed")
        return 77

    # a host pool whose page objects are obj bytes: page_size 16, bf16
    # K of one token = layer_num * head_num * head_dim * 2 bytes
    page_size = 16
    head_dim = 128
    per_token = obj // page_size
    heads_layers = per_token // (head_dim * 2)
    hp = sf.FakeHostPool(
        page_size=page_size, n_pages=pages, layer_num=heads_layers, head_num=1, head_dim=head_dim, use_torch=True
    )
    assert hp.obj_bytes == obj, (hp.obj_bytes, obj)
    keys = sf.page_keys("bench", pages)
    idx = hp.indices(range(pages))

    print(f"bench_sglang: {pages} pages x 2 objects of {obj >> 10} KiB ({values >> 20} MiB), "
          f"agent --dram {dram >> 20}M, reps {reps} (exists {ereps}), torch {'yes' if sf.torch else 'no'}")
    t_start = time.monotonic()
    with kvpt.Agent("--dram", f"{dram >> 20}M", "--max-value", f"{max(obj, 1 << 20) >> 10}K") as ag:
        # no sglang server args here: name the deployment (the store fails closed without)
        extra = {"pool": ag.pool, "interface_v1": 1, "pin_max_pages": 4 * pages, "namespace": "bench_sglang"}
        cfg = sf.StorageConfig(extra_config=extra)
        st = ks.KVPoolStore(cfg, {})
        st.register_mem_pool_host(hp)
        for i in range(pages):
            hp.fill(i, i)
        ok = st.batch_set_v1(keys, idx)
        if not all(ok):
            sys.exit(f"bench_sglang: batch_set_v1 stored {sum(ok)} of {pages} pages")
        # the v2 path: the anchor and a separate-pool draft's K/V sidecar
        draft = sf.SidecarHostPool([dobj, dobj], pages)
        st.register_mem_host_pool_v2(hp, "kv")
        st.register_mem_host_pool_v2(draft, "draft")
        didx = draft.indices(range(pages))
        for i in range(pages):
            draft.fill(i, 100000 + i)

        def transfers():
            return [sf.PoolTransfer(name="kv", host_indices=idx, keys=keys),
                    sf.PoolTransfer(name="draft", host_indices=didx, keys=keys, indices_from_pool="kv")]

        res = st.batch_set_v2(transfers())
        if not all(res.get("draft", [])) or not all(res.get("kv", [])):
            sys.exit(f"bench_sglang: batch_set_v2 stored {sum(res.get('draft', []))} draft pages of {pages}")

        # reads are checked: every byte once, then a sample per object
        # (its first and last 4 KiB, which the clear before each read zeroes)
        ptrs, sizes = hp.get_page_buffer_meta(idx)
        edge = min(4096, obj // 2)
        want = []
        for i in range(pages):
            for j, e in enumerate(hp.expect(i)):
                want.append((ptrs[2 * i + j], e[:edge], e[-edge:]))
        full = [True]

        def clear():
            for p, _, _ in want:
                ctypes.memset(p, 0, edge)
                ctypes.memset(p + obj - edge, 0, edge)

        def check(what):
            if full[0]:
                full[0] = False
                bad = [i for i in range(pages) if hp.page(i) != hp.expect(i)]
            else:
                bad = [
                    k // 2
                    for k, (p, a, b) in enumerate(want)
                    if ctypes.string_at(p, edge) != a or ctypes.string_at(p + obj - edge, edge) != b
                ]
            if bad:
                sys.exit(f"bench_sglang: {what}: pages {bad[:5]} read back wrong")

        # the C side: a client of its own in the store's namespace, ops built once
        h = ctypes.c_void_p()
        rc = _native.lib.kvp_open(ag.pool.encode(), st.namespace.encode(), ctypes.byref(h))
        if rc:
            sys.exit(f"bench_sglang: kvp_open: {kvpool.status_name(rc)}")
        okeys = [k.decode() for k in st._expand(keys)]  # the same object keys, as str
        get_ops, _kb1 = c_ops(okeys, ptrs, sizes)
        ex_ops, _kb2 = c_ops(okeys, None, None)
        lib = _native.lib
        nobj = len(okeys)
        # (3): the KV objects then the draft's, as batch_get_v2 reads them
        dptrs, dsizes = draft.get_page_buffer_meta(didx)
        dkeys = [k.decode() for k in kvpool.Keys(keys, st._v2["draft"].sfx)]
        v2_ops, _kb3 = c_ops(okeys + dkeys, list(ptrs) + list(dptrs), list(sizes) + list(dsizes))
        nv2 = nobj + len(dkeys)
        v2_bytes = values + 2 * pages * dobj
        dedge = min(4096, dobj // 2)
        dwant = [(draft.base + i * 2 * dobj + j * dobj, draft.expect(100000 + i)[j * dobj : (j + 1) * dobj])
                 for i in range(pages) for j in range(2)]

        def dclear():
            for p, _ in dwant:
                ctypes.memset(p, 0, dedge)
                ctypes.memset(p + dobj - dedge, 0, dedge)

        def dcheck(what):
            bad = [k // 2 for k, (p, e) in enumerate(dwant)
                   if ctypes.string_at(p, dedge) != e[:dedge] or ctypes.string_at(p + dobj - dedge, dedge) != e[-dedge:]]
            if bad:
                sys.exit(f"bench_sglang: {what}: draft pages {bad[:5]} read back wrong")

        # warm both paths (page tables of the host pool and the arena)
        st.batch_get_v1(keys, idx)
        lib.kvp_batch_get(h, get_ops, nobj)
        st.batch_get_v2(transfers())
        for i in range(pages):
            if draft.page(i) != draft.expect(100000 + i):
                sys.exit(f"bench_sglang: batch_get_v2: draft page {i} read back wrong")

        t = {k: [] for k in ("c_get", "py_get", "c_get_v2", "py_get_v2", "c_exists", "c_pin", "py_exists_pin",
                             "py_exists", "entry")}
        psh = ctypes.c_void_p()
        pc = time.perf_counter
        for r in range(reps):
            for which in (("c", "py") if r % 2 == 0 else ("py", "c")):
                clear()
                if which == "c":
                    t0 = pc()
                    n = lib.kvp_batch_get(h, get_ops, nobj)
                    t["c_get"].append(pc() - t0)
                    if n < 0 or any(get_ops[i].status for i in range(nobj)):
                        sys.exit("bench_sglang: kvp_batch_get failed")
                    check("kvp_batch_get")
                else:
                    t0 = pc()
                    ok = st.batch_get_v1(keys, idx)
                    t["py_get"].append(pc() - t0)
                    if not all(ok):
                        sys.exit(f"bench_sglang: batch_get_v1 read {sum(ok)} of {pages} pages")
                    check("batch_get_v1")
        for r in range(reps):
            for which in (("c", "py") if r % 2 == 0 else ("py", "c")):
                clear()
                dclear()
                if which == "c":
                    t0 = pc()
                    n = lib.kvp_batch_get(h, v2_ops, nv2)
                    t["c_get_v2"].append(pc() - t0)
                    if n < 0 or any(v2_ops[i].status for i in range(nv2)):
                        sys.exit("bench_sglang: kvp_batch_get (v2 objects) failed")
                    check("kvp_batch_get (v2 objects)")
                    dcheck("kvp_batch_get (v2 objects)")
                else:
                    t0 = pc()
                    res = st.batch_get_v2(transfers())
                    t["py_get_v2"].append(pc() - t0)
                    if not all(res.get("kv", [])) or not all(res.get("draft", [])):
                        sys.exit(f"bench_sglang: batch_get_v2 read {[sum(v) for v in res.values()]} of {pages} pages")
                    check("batch_get_v2")
                    dcheck("batch_get_v2")
        st.pin_prefetch = True
        for r in range(ereps):
            t0 = pc()
            lib.kvp_batch_get(h, get_ops, 0)
            t["entry"].append(pc() - t0)
            t0 = pc()
            n = lib.kvp_batch_exists_prefix(h, ex_ops, nobj)
            t["c_exists"].append(pc() - t0)
            if n != nobj:
                sys.exit(f"bench_sglang: kvp_batch_exists_prefix found {n} of {nobj}")
            t0 = pc()
            n = lib.kvp_batch_lookup_pin(h, ex_ops, nobj, ctypes.byref(psh))
            t["c_pin"].append(pc() - t0)
            lib.kvp_pinset_free(h, psh)
            if n != nobj:
                sys.exit(f"bench_sglang: kvp_batch_lookup_pin pinned {n} of {nobj}")
            st.pin_prefetch = True
            t0 = pc()
            n = st.batch_exists(keys)
            t["py_exists_pin"].append(pc() - t0)
            st._drop_parked()  # what batch_get_v1 would release (not timed)
            if n != pages:
                sys.exit(f"bench_sglang: batch_exists (pinned) counted {n} of {pages}")
            st.pin_prefetch = False
            t0 = pc()
            n = st.batch_exists(keys)
            t["py_exists"].append(pc() - t0)
            if n != pages:
                sys.exit(f"bench_sglang: batch_exists counted {n} of {pages}")
        lib.kvp_close(h)
        st.close()

    m = {k: median_us(v) for k, v in t.items()}
    gib = values / (1 << 30)
    c_bw = gib / (m["c_get"] / 1e6)
    py_bw = gib / (m["py_get"] / 1e6)
    get_ratio = py_bw / c_bw
    v2gib = v2_bytes / (1 << 30)
    c_bw2 = v2gib / (m["c_get_v2"] / 1e6)
    py_bw2 = v2gib / (m["py_get_v2"] / 1e6)
    v2_ratio = py_bw2 / c_bw2
    ex_ratio_pin = m["py_exists_pin"] / m["c_exists"]
    ex_ratio = m["py_exists"] / m["c_exists"]
    pin_ratio = m["py_exists_pin"] / m["c_pin"]
    print(f"{'call':52s} {'median':>12s}")
    print(f"{'kvp_batch_get, 256 x 1 MiB (one ctypes call)':52s} {m['c_get']:10.0f} us  {c_bw:6.2f} GiB/s")
    print(f"{'KVPoolStore.batch_get_v1, 128 pages':52s} {m['py_get']:10.0f} us  {py_bw:6.2f} GiB/s")
    print(f"{'kvp_batch_get, 256 KV + 256 draft objects (one call)':52s} {m['c_get_v2']:10.0f} us  {c_bw2:6.2f} GiB/s")
    print(f"{'KVPoolStore.batch_get_v2, 128 pages, KV + draft':52s} {m['py_get_v2']:10.0f} us  {py_bw2:6.2f} GiB/s")
    print(f"{'kvp_batch_exists_prefix, 256 keys (one ctypes call)':52s} {m['c_exists']:10.1f} us")
    print(f"{'kvp_batch_lookup_pin, 256 keys (one ctypes call)':52s} {m['c_pin']:10.1f} us")
    print(f"{'KVPoolStore.batch_exists, 128 pages, pinned':52s} {m['py_exists_pin']:10.1f} us")
    print(f"{'KVPoolStore.batch_exists, 128 pages, pin_prefetch off':52s} {m['py_exists']:10.1f} us")
    print(f"{'ctypes entry (kvp_batch_get of 0 ops)':52s} {m['entry']:10.1f} us")
    print(f"get: adapter/C throughput {get_ratio:.3f} (goal >= 0.8)  get_v2: {v2_ratio:.3f} (goal >= 0.8)  "
          f"exists: adapter/C time {ex_ratio:.2f} unpinned, {ex_ratio_pin:.2f} pinned "
          f"(goal <= 2; pinned vs kvp_batch_lookup_pin {pin_ratio:.2f})")
    load = os.getloadavg()[0]
    line = {
        "bench": "sglang",
        "pages": pages,
        "obj_bytes": obj,
        "reps": reps,
        "exists_reps": ereps,
        "torch": sf.torch is not None,
        "c_get_us": round(m["c_get"], 1),
        "py_get_us": round(m["py_get"], 1),
        "get_ratio": round(get_ratio, 3),
        "draft_obj_bytes": dobj,
        "c_get_v2_us": round(m["c_get_v2"], 1),
        "py_get_v2_us": round(m["py_get_v2"], 1),
        "get_v2_ratio": round(v2_ratio, 3),
        "c_exists_us": round(m["c_exists"], 2),
        "py_exists_pinned_us": round(m["py_exists_pin"], 2),
        "py_exists_us": round(m["py_exists"], 2),
        "exists_ratio_pinned": round(ex_ratio_pin, 2),
        "exists_ratio": round(ex_ratio, 2),
        "c_pin_us": round(m["c_pin"], 2),
        "pin_ratio": round(pin_ratio, 2),
        "ctypes_entry_us": round(m["entry"], 2),
        "loadavg": round(load, 2),
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
