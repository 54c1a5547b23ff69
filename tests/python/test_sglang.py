# SPDX-License-Identifier: MIT
"""kvpool.sglang.KVPoolStore as sglang drives it, against a fake host pool
(sglang_fake.FakeHostPool answers get_page_buffer_meta as sglang's MHA and
MLA host pools do).  Every test starts its own agent (kvpt.Agent).  Other
processes are started with the "spawn" method: a Pool is never forked.
The round trips run with host_indices as torch tensors when torch is
importable (TestRoundTripTorch) and as plain lists (TestRoundTripPlain)."""

import ctypes
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unittest

import kvpool
import kvpool.sglang as ks
import kvpt
import sglang_fake as sf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_spawn = multiprocessing.get_context("spawn")

# sglang's server args of a scheduler process (no sglang here): every
# process of these tests, spawned workers too, runs this on import
SERVER_ARGS = [sf.ServerArgs()]
ks._server_args = lambda: SERVER_ARGS[0]


def store_for(pool, host=None, **cfg):
    """A registered store as sglang's factory builds it; host: a FakeHostPool."""
    extra = {"pool": pool, "interface_v1": 1}
    extra.update(cfg.pop("extra", {}))
    st = ks.KVPoolStore(sf.StorageConfig(extra_config=extra, **cfg), {})
    st.register_mem_pool_host(host if host is not None else sf.FakeHostPool())
    return st


def holds_by_pid(pool):
    """{pid: [holds per client slot]} from `kvpool clients`."""
    out = {}
    for ln in kvpt.clients_of(pool).splitlines()[1:]:
        f = ln.split()
        if len(f) >= 6 and f[0].isdigit():
            out.setdefault(int(f[1]), []).append(int(f[4]))
    return out


# ---- workers of other processes (spawned: they import this module) ----


def _w_set(pool, cfg, host_kw, tag, n, seed0, q):
    try:
        hp = sf.FakeHostPool(**host_kw)
        st = store_for(pool, hp, **cfg)
        for i in range(n):
            hp.fill(i, seed0 + i)
        q.put(("ok", st.batch_set_v1(sf.page_keys(tag, n), hp.indices(range(n))), st.namespace))
        st.close()
    except BaseException as e:  # report, never hang the parent
        q.put(("error", repr(e), None))


def _w_get(pool, cfg, host_kw, tag, n, seed0, q):
    try:
        hp = sf.FakeHostPool(**host_kw)
        st = store_for(pool, hp, **cfg)
        keys = sf.page_keys(tag, n)
        have = st.batch_exists(keys)
        ok = st.batch_get_v1(keys, hp.indices(range(n)))
        good = [hp.page(i) == hp.expect(seed0 + i) for i in range(n)]
        q.put(("ok", (have, ok, good), st.namespace))
        st.close()
    except BaseException as e:
        q.put(("error", repr(e), None))


def _w_pin_and_spin(pool, tag, n, q):
    """Pin pages (batch_exists) and keep loading them until killed."""
    try:
        hp = sf.FakeHostPool()
        st = store_for(pool, hp)
        keys = sf.page_keys(tag, n)
        q.put(("pinned", st.batch_exists(keys), os.getpid()))
        while True:
            st.batch_get_v1(keys, hp.indices(range(n)))
            st.batch_exists(keys)
    except BaseException as e:
        q.put(("error", repr(e), None))


# ---- sglang's hybrid path (sf.HybridController): ranks over gloo ----

HYB_PAGES = 300  # three 128-page load batches
HYB_WIN = {"swa": 4, "mamba": 1, "indexer": None, "draft": None}


def _hyb_group(kind, mla):
    kv = sf.FakeHostPool(mla=mla, page_size=1, n_pages=HYB_PAGES + 40, layer_num=1, head_num=1, head_dim=8)
    name, side, policy, src = sf.sidecar(kind, HYB_PAGES + 40)
    group = sf.HostPoolGroup(
        [
            sf.PoolEntry("kv", kv, sf._DevicePool("bfloat16"), is_primary_index_anchor=True),
            sf.PoolEntry(name, side, sf._DevicePool("bfloat16")),
        ]
    )
    return group, kv, side, name, policy, src


def _hyb_transfer(name, policy, src, side, win, slots):
    if src == "kv":  # indices and keys come from the KV pool's
        return sf.PoolTransfer(name=name, hit_policy=policy, indices_from_pool="kv")
    return sf.PoolTransfer(name=name, host_indices=side.indices(slots), keys=["?"] * win, hit_policy=policy)


HYB_KINDS = (("swa", False), ("mamba", False), ("indexer", True), ("draft", False))


def _w_hybrid_rank(pool, role, rank, init, q):
    """One TP rank of a HybridCacheController per sidecar kind (role
    "write" or "read"); one value per kind."""
    try:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)

        def amin(x):
            t = sf.torch.tensor([x], dtype=sf.torch.int64)
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
            return int(t.item())

        q.put(("ok", [_hybrid_kind(pool, role, kind, mla, rank, amin) for kind, mla in HYB_KINDS], None))
    except BaseException as e:
        q.put(("error", repr(e), None))


def _hybrid_kind(pool, role, kind, mla, rank, amin):
    group, kv, side, name, policy, src = _hyb_group(kind, mla)
    # no interface_v1 in the launch: the zero-copy calls are the default
    cfg = sf.StorageConfig(tp_rank=rank, tp_size=2, is_mla_model=mla, extra_config={"pool": pool})
    st = ks.KVPoolStore(cfg, {})
    ctl = sf.HybridController(st, group, amin, backup_skip=mla and rank != 0)
    keys = sf.page_keys("hyb-" + kind, HYB_PAGES)
    win = HYB_WIN[kind]
    shared = mla and kind != "mamba" and side.mla
    seed = lambda i: 1000 * (0 if (mla and (src == "kv" or shared)) else rank) + i  # noqa: E731
    if role == "write":
        for i in range(HYB_PAGES):
            kv.fill(i, seed(i))
        if src == "kv":
            for i in range(HYB_PAGES):
                side.fill(i, 50000 + seed(i))
            t = _hyb_transfer(name, policy, src, side, win, None)
        else:
            for j in range(win):
                side.fill(j, 50000 + seed(j))
            t = _hyb_transfer(name, policy, src, side, win, range(win))
            t.keys = keys[-win:]
        ok = ctl.backup(keys, range(HYB_PAGES), [t])
        ctl.stop()
        st.close()
        return ok
    slots = list(range(40, 40 + HYB_PAGES))
    t = _hyb_transfer(name, policy, src, side, win, range(20, 20 + (win or 0)))
    hit, done, got = ctl.prefetch(keys + sf.page_keys("hyb-absent", 7), slots, [t])
    kv_ok = all(kv.page(slots[i]) == kv.expect(seed(i)) for i in range(HYB_PAGES))
    if src == "kv":
        side_ok = all(side.page(slots[i]) == side.expect(50000 + seed(i)) for i in range(HYB_PAGES))
    else:
        side_ok = all(side.page(20 + j) == side.expect(50000 + seed(j)) for j in range(win))
    # 1,000 more operations: misses, a pool never registered, wrong
    # index counts, then a pool that fails every call
    bad = sf.PoolTransfer(name="nonesuch", host_indices=side.indices([0]), keys=keys[:1])
    for i in range(1000):
        if i == 600:
            st.pool.close()
        m = i % 4
        if m == 0:
            miss = _hyb_transfer(name, policy, src, side, win, range(win or 0))
            ctl.prefetch(sf.page_keys("miss%d" % i, 3), range(3), [miss])
        elif m == 1:
            wrong = sf.PoolTransfer(name=name, host_indices=side.indices([0, 1, 2]), keys=keys[:1], hit_policy=policy)
            ctl.backup(keys[:2], range(2), [bad, wrong])
        elif m == 2:
            ctl.prefetch(keys[:8], range(8), [bad])
        else:
            ctl.prefetch(keys[:8], range(200, 208), [_hyb_transfer(name, policy, src, side, win, range(win or 0))])
    alive = ctl.thread.is_alive()
    ctl.stop()
    st.close()
    return hit, done, got, kv_ok, side_ok, alive


def run_ranks(fn, *args, timeout=120):
    """fn(*args, rank, init, q) on two spawned ranks; their values."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix="kvpt-gloo-")
    os.close(fd)
    os.unlink(path)
    qs, ps = [], []
    for r in range(2):
        q = _spawn.Queue()
        p = _spawn.Process(target=fn, args=args + (r, "file://" + path, q))
        p.start()
        qs.append(q)
        ps.append(p)
    try:
        out = []
        for q in qs:
            kind, val, _ = q.get(timeout=timeout)
            if kind != "ok":
                raise AssertionError(f"{fn.__name__}: {val}")
            out.append(val)
        return out
    finally:
        for p in ps:
            p.join(timeout=timeout)
            if p.is_alive():
                p.kill()
                p.join()
        if os.path.exists(path):
            os.unlink(path)


def _w_fill(pool, nbytes, q):
    """Another process writes nbytes of 1 MiB values (evicting)."""
    try:
        filler = b"f" * (1 << 20)
        deadline = time.monotonic() + 120
        with kvpool.Pool(pool, namespace="filler") as p:
            i = 0
            while i < nbytes >> 20 and time.monotonic() < deadline:
                try:
                    p.put(f"fill{i}", filler)
                    i += 1
                except kvpool.Busy:
                    pass  # the put waited for room already (KVP_PUT_WAIT_MS): again
        q.put(("ok", i << 20, None))
    except BaseException as e:
        q.put(("error", repr(e), None))


def run_spawned(fn, *args, timeout=60):
    q = _spawn.Queue()
    p = _spawn.Process(target=fn, args=args + (q,))
    p.start()
    try:
        kind, val, ns = q.get(timeout=timeout)
    finally:
        p.join(timeout=timeout)
        if p.is_alive():
            p.kill()
            p.join()
    if kind != "ok":
        raise AssertionError(f"{fn.__name__}: {val}")
    return val, ns


# ---- round trips, with and without torch tensors as host_indices ----


class _RoundTrip:
    use_torch = True

    def host(self, **kw):
        kw.setdefault("use_torch", self.use_torch)
        return sf.FakeHostPool(**kw)

    def test_mha_set_get_bytes(self):
        with kvpt.Agent("--dram", "64M") as ag:
            a, b = self.host(), self.host()
            st, st2 = store_for(ag.pool, a), store_for(ag.pool, b)
            keys = sf.page_keys("mha", 20)
            for i in range(20):
                a.fill(i, 100 + i)
            self.assertEqual(st.batch_set_v1(keys, a.indices(range(20))), [True] * 20)
            self.assertEqual(st2.batch_exists(keys + sf.page_keys("absent", 3)), 20)
            # other slots of another engine's host pool, in another order
            slots = list(range(40, 60))[::-1]
            self.assertEqual(st2.batch_get_v1(keys, b.indices(slots)), [True] * 20)
            for i, s in enumerate(slots):
                self.assertEqual(b.page(s), a.expect(100 + i), f"page {i}")
            self.assertEqual(st2.parked_pages(), 0)
            st.close()
            st2.close()

    def test_public_calls_path(self):
        """Page keys of unequal length, and keys that hold the suffixes'
        last char (k, v), take the binding's plain path instead of packed
        kvpool.Keys: the same keys, the same answers."""
        with kvpt.Agent("--dram", "64M") as ag:
            a, b = self.host(), self.host()
            st, st2 = store_for(ag.pool, a), store_for(ag.pool, b)
            keys = ["short", "a-longer-key", "k" * 100] + sf.page_keys("pub", 3)
            for i in range(6):
                a.fill(i, 40 + i)
                b.fill(i, 40 + i)
            self.assertEqual(st.batch_set_v1(keys[:3], a.indices(range(3))), [True] * 3)
            self.assertEqual(st2.batch_set_v1(keys[3:], a.indices(range(3, 6))), [True] * 3)
            for s, h in ((st, a), (st2, b)):  # each store loads into its own host pool
                self.assertEqual(s.batch_exists(keys + ["absent"]), 6)
                self.assertEqual(s.batch_get_v1(keys, h.indices(range(10, 16))), [True] * 6)
                self.assertEqual([h.page(10 + i) for i in range(6)], [a.expect(40 + i) for i in range(6)])
            self.assertIsNotNone(st._expand(keys).plain)  # not packed
            self.assertIsNotNone(st._expand(["kk", "vv"]).plain)  # the check char in names
            self.assertIsNone(st._expand(keys[3:]).plain)  # packed
            st.close()
            st2.close()

    def test_copy_path_tensors(self):
        """sglang's copy path (interface_v1 off) hands flat page tensors."""
        if not self.use_torch or sf.torch is None:
            self.skipTest("torch tensors")
        torch = sf.torch
        with kvpt.Agent("--dram", "64M") as ag:
            st = store_for(ag.pool, self.host(), extra={"interface_v1": 0})
            pages = [torch.arange(i, i + 512, dtype=torch.int32).to(torch.bfloat16) for i in range(3)]
            self.assertTrue(st.batch_set(["t0", "t1", "t2"], pages))
            self.assertEqual(st.batch_exists(["t0", "t1", "t2", "t3"]), 3)
            outs = [torch.zeros(512, dtype=torch.bfloat16) for _ in range(4)]
            got = st.batch_get(["t0", "t1", "t2", "t3"], outs)
            self.assertIsNone(got[3])
            for i in range(3):
                self.assertIs(got[i], outs[i])
                self.assertTrue(torch.equal(outs[i], pages[i]))
            raw = st.get("t1")
            self.assertEqual(raw.dtype, torch.uint8)
            self.assertTrue(torch.equal(raw.view(torch.bfloat16), pages[1]))
            st.close()

    def test_mla_and_layouts(self):
        with kvpt.Agent("--dram", "64M") as ag:
            for kw in ({"mla": True}, {"layout": "page_first_direct"}, {"layout": "page_head"}):
                a, b = self.host(**kw), self.host(**kw)
                mla = kw.get("mla", False)
                st, st2 = store_for(ag.pool, a, is_mla_model=mla), store_for(ag.pool, b, is_mla_model=mla)
                keys = sf.page_keys(repr(kw), 6)
                for i in range(6):
                    a.fill(i, i + 7)
                self.assertEqual(st.batch_set_v1(keys, a.indices(range(6))), [True] * 6, kw)
                self.assertEqual(st2.batch_get_v1(keys, b.indices(range(6))), [True] * 6, kw)
                self.assertEqual([b.page(i) for i in range(6)], [a.expect(i + 7) for i in range(6)], kw)
                st.close()
                st2.close()

    def test_misses_false_never_none(self):
        ag = kvpt.Agent("--dram", "64M")
        try:
            hp = self.host()
            st = store_for(ag.pool, hp)
            keys = sf.page_keys("miss", 5)
            self.assertEqual(st.batch_exists(keys), 0)
            self.assertEqual(st.batch_get_v1(keys, hp.indices(range(5))), [False] * 5)
            # a wrong number of host indices: False per page, not an exception
            with self.assertLogs("kvpool.sglang", "ERROR"):
                self.assertEqual(st.batch_get_v1(keys, hp.indices(range(4))), [False] * 5)
                self.assertEqual(st.batch_set_v1(keys, hp.indices(range(4))), [False] * 5)
            self.assertIsNone(st.get(keys[0]))
            self.assertFalse(st.exists(keys[0]))
            # the agent gone: every answer is still False or 0, never raised
            ag.kill()
            self.assertEqual(st.batch_exists(keys), 0)
            for r in (st.batch_get_v1(keys, hp.indices(range(5))), st.batch_set_v1(keys, hp.indices(range(5)))):
                self.assertIsInstance(r, list)
                self.assertEqual(len(r), 5)
                self.assertTrue(all(x is False or x is True for x in r))
            # a pool that fails every call (closed under the store): False, 0, None
            st.pool.close()
            with self.assertLogs("kvpool.sglang", "ERROR") as logs:
                self.assertEqual(st.batch_exists(keys), 0)
                self.assertEqual(st.batch_get_v1(keys, hp.indices(range(5))), [False] * 5)
                self.assertEqual(st.batch_get_v1(keys, hp.indices(range(5))), [False] * 5)
                self.assertEqual(st.batch_set_v1(keys, hp.indices(range(5))), [False] * 5)
                self.assertFalse(st.exists(keys[0]))
                self.assertIsNone(st.get(keys[0]))
            self.assertEqual(len([m for m in logs.output if "batch_get_v1" in m]), 1)  # once per kind
            st.close()
        finally:
            ag.stop()


@unittest.skipIf(sf.torch is None, "torch is not importable")
class TestRoundTripTorch(_RoundTrip, unittest.TestCase):
    use_torch = True


class TestRoundTripPlain(_RoundTrip, unittest.TestCase):
    use_torch = False


# ---- the rest ----


class TestStore(unittest.TestCase):
    def test_exists_counts_pages_not_objects(self):
        with kvpt.Agent("--dram", "64M") as ag:
            hp = sf.FakeHostPool()
            st = store_for(ag.pool, hp)
            keys = sf.page_keys("kv", 6)
            for i in range(6):
                hp.fill(i, i)
            self.assertEqual(st.batch_set_v1(keys[:3], hp.indices(range(3))), [True] * 3)
            # page 3: K only, put beside the store in its namespace
            with kvpool.Pool(ag.pool, namespace=st.namespace) as p:
                p.put(keys[3] + "_0_k", b"k" * hp.obj_bytes)
                self.assertTrue(p.exists(keys[0] + "_0_k") and p.exists(keys[0] + "_0_v"))
            self.assertEqual(st.batch_exists(keys), 3)
            self.assertFalse(st.exists(keys[3]))
            self.assertEqual(st.batch_get_v1(keys[:4], hp.indices(range(10, 14))), [True, True, True, False])
            st.close()

    def test_exists_counts_as_true(self):
        with kvpt.Agent("--dram", "64M") as ag:
            a, b = sf.FakeHostPool(), sf.FakeHostPool()
            st, st2 = store_for(ag.pool, a), store_for(ag.pool, b)
            keys = sf.page_keys("twice", 4)
            for i in range(4):
                a.fill(i, i)
                b.fill(i, 50 + i)  # another engine's bytes for the same keys
            self.assertEqual(st.batch_set_v1(keys, a.indices(range(4))), [True] * 4)
            self.assertEqual(st.batch_set_v1(keys, a.indices(range(4))), [True] * 4)
            self.assertEqual(st2.batch_set_v1(keys, b.indices(range(4))), [True] * 4)
            self.assertEqual(st2.batch_get_v1(keys, b.indices(range(8, 12))), [True] * 4)
            # the first writer won
            self.assertEqual([b.page(8 + i) for i in range(4)], [a.expect(i) for i in range(4)])
            st.close()
            st2.close()

    def test_dtype_and_rank_isolation(self):
        with kvpt.Agent("--dram", "64M") as ag:
            bf16 = sf.FakeHostPool(kv_dtype="bfloat16", head_dim=16)
            fp8 = sf.FakeHostPool(kv_dtype="float8_e4m3fn", head_dim=32)  # the same object size
            self.assertEqual(bf16.obj_bytes, fp8.obj_bytes)
            s_bf, s_fp = store_for(ag.pool, bf16), store_for(ag.pool, fp8)
            self.assertNotEqual(s_bf.namespace, s_fp.namespace)
            self.assertIn("float8_e4m3fn", s_fp.namespace)
            keys = sf.page_keys("iso", 4)
            for i in range(4):
                bf16.fill(i, i)
            self.assertEqual(s_bf.batch_set_v1(keys, bf16.indices(range(4))), [True] * 4)
            self.assertEqual(s_fp.batch_exists(keys), 0)
            self.assertEqual(s_fp.batch_get_v1(keys, fp8.indices(range(4))), [False] * 4)
            # another TP rank of the same model holds other heads: not its pages
            r1 = store_for(ag.pool, sf.FakeHostPool(), tp_rank=1, tp_size=2)
            r0 = store_for(ag.pool, sf.FakeHostPool(), tp_rank=0, tp_size=2)
            self.assertEqual(r0.batch_set_v1(keys, bf16.indices(range(4))), [True] * 4)
            self.assertEqual(r1.batch_exists(keys), 0)
            self.assertEqual(r0.batch_exists(keys), 4)
            # and a user namespace separates tenants
            t = store_for(ag.pool, sf.FakeHostPool(), extra={"namespace": "tenant-b"})
            self.assertTrue(t.namespace.endswith("|tenant-b"))
            self.assertEqual(t.batch_exists(keys), 0)
            for s in (s_bf, s_fp, r0, r1, t):
                s.close()

    def test_agent_restart(self):
        """The agent killed and restarted under a live store: its pages and
        pins stay usable, and calls keep answering."""
        ag = kvpt.Agent("--dram", "64M")
        try:
            hp = sf.FakeHostPool()
            st = store_for(ag.pool, hp)
            keys = sf.page_keys("restart", 4)
            for i in range(4):
                hp.fill(i, 70 + i)
            self.assertEqual(st.batch_set_v1(keys, hp.indices(range(4))), [True] * 4)
            self.assertEqual(st.batch_exists(keys), 4)  # pinned across the restart
            ag.kill()
            ag.start()
            self.assertEqual(st.batch_get_v1(keys, hp.indices(range(8, 12))), [True] * 4)
            self.assertEqual([hp.page(8 + i) for i in range(4)], [hp.expect(70 + i) for i in range(4)])
            more = sf.page_keys("after", 4)
            self.assertEqual(st.batch_set_v1(more, hp.indices(range(4))), [True] * 4)
            self.assertEqual(st.batch_exists(more), 4)
            st.close()
        finally:
            ag.stop()

    def test_layer_first_refused(self):
        st = ks.KVPoolStore(sf.StorageConfig(extra_config={"pool": "nonexistent-pool"}), {})
        with self.assertRaises(ValueError) as cm:
            st.register_mem_pool_host(sf.FakeHostPool(layout="layer_first"))
        self.assertIn("--hicache-mem-layout page_first", str(cm.exception))
        self.assertIsNone(st.pool)

    def test_copy_path(self):
        with kvpt.Agent("--dram", "64M") as ag:
            hp = sf.FakeHostPool()
            st = store_for(ag.pool, hp, extra={"interface_v1": 0})
            page = bytearray(sf.pattern(9, 4096))
            self.assertTrue(st.set("p0", page))
            self.assertTrue(st.set("p0", page))  # there already: True
            self.assertTrue(st.exists("p0"))
            self.assertEqual(st.batch_exists(["p0", "p1"]), 1)
            out = bytearray(4096)
            self.assertIs(st.get("p0", out), out)
            self.assertEqual(out, page)
            self.assertEqual(bytes(st.get("p0")), bytes(page))
            self.assertTrue(st.batch_set(["p1", "p2"], [bytearray(b"a" * 100), bytearray(b"b" * 100)]))
            outs = [bytearray(100), bytearray(100), bytearray(100)]
            got = st.batch_get(["p1", "p2", "p3"], outs)
            self.assertEqual(got[:2], outs[:2])
            self.assertIsNone(got[2])
            self.assertEqual(outs[1], b"b" * 100)
            # addresses and sizes, as sglang's zero-copy callers pass them
            buf = ctypes.create_string_buffer(100)
            self.assertTrue(st.get("p1", ctypes.addressof(buf), 100))
            self.assertEqual(buf.raw, b"a" * 100)
            self.assertEqual(st.batch_get(["p1", "p9"], [ctypes.addressof(buf)] * 2, [100, 100]), 1)
            st.close()

    def test_three_threads_one_store(self):
        """sglang's prefetch, prefetch-io and backup threads at once."""
        with kvpt.Agent("--dram", "64M") as ag:
            hp = sf.FakeHostPool(n_pages=96)
            st = store_for(ag.pool, hp)
            pre = sf.page_keys("pre", 16)
            for i in range(16):
                hp.fill(i, 1000 + i)
            self.assertEqual(st.batch_set_v1(pre, hp.indices(range(16))), [True] * 16)
            errors = []
            barrier = threading.Barrier(4)

            def backup():  # writes new pages from slots 16..31
                for r in range(30):
                    keys = sf.page_keys(f"new{r}", 16)
                    for i in range(16):
                        hp.fill(16 + i, r * 100 + i)
                    if st.batch_set_v1(keys, hp.indices(range(16, 32))) != [True] * 16:
                        errors.append(("set", r))
                barrier.wait(30)
                barrier.wait(30)

            def prefetch():
                for r in range(60):
                    if st.batch_exists(pre) != 16:
                        errors.append(("exists", r))
                barrier.wait(30)
                barrier.wait(30)

            def io():  # loads into slots 48..63
                for r in range(30):
                    ok = st.batch_get_v1(pre, hp.indices(range(48, 64)))
                    if ok != [True] * 16 or any(hp.page(48 + i) != hp.expect(1000 + i) for i in range(16)):
                        errors.append(("get", r))
                    for i in range(16):
                        hp.clear(48 + i)
                barrier.wait(30)
                barrier.wait(30)

            ts = [threading.Thread(target=f) for f in (backup, prefetch, io)]
            for t in ts:
                t.start()
            barrier.wait(60)
            slots = holds_by_pid(ag.pool).get(os.getpid(), [])
            barrier.wait(30)
            for t in ts:
                t.join()
            self.assertEqual(errors, [])
            # a client slot per thread that called the pool: the
            # registering thread, backup, prefetch (io may have read every
            # page through prefetch's parked pinsets, on their client)
            self.assertGreaterEqual(len(slots), 3, slots)
            # what backup wrote reads back
            keys = sf.page_keys("new29", 16)
            self.assertEqual(st.batch_get_v1(keys, hp.indices(range(64, 80))), [True] * 16)
            self.assertEqual([hp.page(64 + i) for i in range(16)], [hp.expect(2900 + i) for i in range(16)])
            st.close()

    def test_pinned_prefetch_survives_eviction(self):
        """Pages batch_exists counted stay until batch_get_v1 reads them,
        while the pool evicts everything unpinned around them."""
        with kvpt.Agent("--dram", "64M", "--max-value", "1M") as ag:
            hp = sf.FakeHostPool(page_size=16, layer_num=4, head_num=2, head_dim=128, n_pages=64)  # 32 KiB objects
            st = store_for(ag.pool, hp)
            pinned, control = sf.page_keys("pinned", 16), sf.page_keys("control", 16)
            for i in range(16):
                hp.fill(i, 300 + i)
            self.assertEqual(st.batch_set_v1(pinned, hp.indices(range(16))), [True] * 16)
            self.assertEqual(st.batch_set_v1(control, hp.indices(range(16))), [True] * 16)
            self.assertEqual(st.batch_exists(pinned), 16)
            self.assertEqual(st.parked_pages(), 16)
            self.assertGreaterEqual(sum(holds_by_pid(ag.pool)[os.getpid()]), 32)
            # 3x the DRAM tier of other values: the agent evicts to make room
            filler = b"f" * (1 << 20)
            deadline = time.monotonic() + 60
            with kvpool.Pool(ag.pool, namespace="filler") as p:
                i = 0
                while i < 192:
                    self.assertLess(time.monotonic(), deadline, "filling the pool")
                    try:
                        p.put(f"fill{i}", filler)
                        i += 1
                    except kvpool.Busy:
                        pass  # the put waited for room already (KVP_PUT_WAIT_MS): again
            # the unpinned control pages went (so eviction did happen) ...
            self.assertLess(st.batch_exists(control), 16)
            self.assertEqual(st.parked_pages(), 16)  # (control's pins released: nothing counted to park)
            # ... the pinned ones are all there
            self.assertEqual(st.batch_get_v1(pinned, hp.indices(range(32, 48))), [True] * 16)
            self.assertEqual([hp.page(32 + i) for i in range(16)], [hp.expect(300 + i) for i in range(16)])
            st.close()

    def test_whole_prompt_probe_then_128_page_loads(self):
        """sglang's default controller probes the whole prompt in one call
        and loads it in 128-page batches: a 16,384-page prompt probed, the
        pool then filled to 3x its size by another process, and every
        counted page loads, byte for byte; the pins go as the loads end.
        The agent runs on its defaults: they hold such a prompt."""
        self._long_prompt(16384, 256, (), 16384)

    def test_probe_past_the_hold_slots_counts_what_it_holds(self):
        """With 4,096 hold slots a 4,096-page MHA probe (8,192 objects)
        stops where pinning stops: it counts the pages it holds (not the
        rest unpinned), and every one of them loads."""
        self._long_prompt(4096, 64, ("--holds-per-client", "4096"), 2048)

    def _long_prompt(self, n, dram_mb, agent_args, want):
        dram = dram_mb << 20
        with kvpt.Agent("--dram", f"{dram_mb}M", "--dram-unit", "4K", *agent_args) as ag:
            hp = sf.FakeHostPool(page_size=1, n_pages=n, layer_num=1, head_num=2, head_dim=16)
            st = store_for(ag.pool, hp)
            keys, control = sf.page_keys("long", n), sf.page_keys("long-control", 64)
            for i in range(n):
                hp.fill(i, i)
            self.assertEqual(st.batch_set_v1(keys, hp.indices(range(n))), [True] * n)
            self.assertEqual(st.batch_set_v1(control, hp.indices(range(64))), [True] * 64)
            counted = st.batch_exists(keys + sf.page_keys("long-absent", 3))
            self.assertEqual(counted, want)  # and each one held:
            self.assertGreaterEqual(sum(holds_by_pid(ag.pool)[os.getpid()]), 2 * counted)
            filled, _ = run_spawned(_w_fill, ag.pool, 3 * dram, timeout=150)
            self.assertEqual(filled, 3 * dram)
            self.assertLess(st.pool.batch_exists_prefix(st._expand(control)), 128)  # eviction did happen
            ok = []
            for b in range(0, counted, 128):  # sglang's STORAGE_BATCH_SIZE
                slots = range(b, min(counted, b + 128))
                for s in slots:
                    hp.clear(s)
                ok += st.batch_get_v1(keys[b : b + len(slots)], hp.indices(slots))
            self.assertEqual(ok.count(False), 0)
            bad = [i for i in range(counted) if hp.page(i) != hp.expect(i)]
            self.assertEqual(bad, [])
            self.assertEqual(st.parked_pages(), 0)
            self.assertEqual(sum(holds_by_pid(ag.pool).get(os.getpid(), [0])), 0)
            st.close()

    def test_thread_restarts_keep_client_slots_flat(self):
        """sglang's reset() stops the storage threads and starts new ones,
        whose calls open new client handles; the pins a dead prefetch
        thread parked are released with it, so 1,000 resets (each probing
        and parking, none loading) leave the client slots flat."""
        with kvpt.Agent("--dram", "64M") as ag:
            hp = sf.FakeHostPool()
            st = store_for(ag.pool, hp)
            keys = sf.page_keys("reset", 4)
            self.assertEqual(st.batch_set_v1(keys, hp.indices(range(4))), [True] * 4)
            got = []
            most = 0
            for i in range(1000):
                t = threading.Thread(target=lambda: got.append(st.batch_exists(keys)))
                t.start()
                t.join()
                if i % 100 == 99:
                    most = max(most, len(holds_by_pid(ag.pool)[os.getpid()]))
            self.assertEqual(got, [4] * 1000)
            self.assertLessEqual(most, 4)
            st.close()

    def test_interface_v1_on_by_default(self):
        """sglang reads interface_v1 from the storage config it built the
        store with: left out, it is 1 there after the store is built; an
        explicit 0 stays 0 (the copy path)."""
        cfg = sf.StorageConfig(extra_config={"pool": "unused"})
        st = ks.KVPoolStore(cfg, {})
        self.assertEqual(cfg.extra_config.get("interface_v1"), 1)
        self.assertTrue(st.interface_v1)
        cfg = sf.StorageConfig(extra_config={"pool": "unused", "interface_v1": 0})
        st = ks.KVPoolStore(cfg, {})
        self.assertEqual(cfg.extra_config.get("interface_v1"), 0)
        self.assertFalse(st.interface_v1)

    def test_heterogeneous_tp_split_heads(self):
        """tp_lcm_size, as sglang's Mooncake backend serves it: a TP 2
        engine (tp_lcm_size 4) stores each rank's heads as 2 shards keyed
        by the TP 4 rank holding them; a TP 4 engine reads them, every head
        byte in place, and writes shards the TP 2 engine reads back."""
        H, n = 8, 6
        with kvpt.Agent("--dram", "64M") as ag:
            def engine(tp):
                out = []
                for r in range(tp):
                    hp = sf.FakeHostPool(layout="page_head", head_num=H // tp, head_dim=16, n_pages=16)
                    cfg = dict(tp_rank=r, tp_size=tp, tp_lcm_size=4, should_split_heads=True)
                    out.append((store_for(ag.pool, hp, **cfg), hp))
                return out

            tp2, tp4 = engine(2), engine(4)
            self.assertEqual(tp2[0][0].namespace, tp4[0][0].namespace)
            keys, back = sf.page_keys("htp", n), sf.page_keys("htp-back", n)
            for q, (st, hp) in enumerate(tp2):
                for i in range(n):
                    hp.fill_heads(i, q * H // 2, i)
                self.assertEqual(st.batch_set_v1(keys, hp.indices(range(n))), [True] * n)
            for r, (st, hp) in enumerate(tp4):
                self.assertEqual(st.batch_exists(keys), n, r)
                self.assertEqual(st.batch_get_v1(keys, hp.indices(range(8, 8 + n))), [True] * n, r)
                for i in range(n):
                    self.assertEqual(hp.heads(8 + i), hp.expect_heads(r * H // 4, i), (r, i))
                for i in range(n):
                    hp.fill_heads(i, r * H // 4, 50 + i)
                self.assertEqual(st.batch_set_v1(back, hp.indices(range(n))), [True] * n)
            for q, (st, hp) in enumerate(tp2):
                self.assertEqual(st.batch_get_v1(back, hp.indices(range(8, 8 + n))), [True] * n, q)
                for i in range(n):
                    self.assertEqual(hp.heads(8 + i), hp.expect_heads(q * H // 2, 50 + i), (q, i))
            # refused at registration: a TP size that does not divide
            # tp_lcm_size, a layout whose head groups are not contiguous
            bad = sf.StorageConfig(tp_size=3, tp_lcm_size=4, should_split_heads=True, extra_config={"pool": ag.pool})
            with self.assertRaisesRegex(ValueError, "tp_lcm_size"):
                ks.KVPoolStore(bad, {}).register_mem_pool_host(sf.FakeHostPool(layout="page_head"))
            with self.assertRaisesRegex(ValueError, "page_head"):
                store_for(ag.pool, sf.FakeHostPool(), tp_size=2, tp_lcm_size=4, should_split_heads=True)
            for st, _ in tp2 + tp4:
                st.close()

    def test_mla_target_sidecar_kinds(self):
        """On an MLA target sglang backs up sidecars other than Mamba on TP
        rank 0 only: a pool of no known kind (a DSA indexer or compressed
        pool class) is replicated, rank free; Mamba and MHA-like pools
        (a v_buffer) are per rank."""

        class IndexerPoolHost:  # no v_buffer, no mla flag: sglang's own classes
            page_size = 1

            def get_page_buffer_meta(self, indices):
                return [4096 * int(i) for i in indices], [64] * len(indices)

        class MHAPool(IndexerPoolHost):
            v_buffer = None

        with kvpt.Agent("--dram", "64M") as ag:
            st = store_for(ag.pool, sf.FakeHostPool(mla=True), is_mla_model=True, tp_rank=1, tp_size=2)
            for name, host in (("indexer", IndexerPoolHost()), ("mamba", IndexerPoolHost()), ("draft", MHAPool())):
                st.register_mem_host_pool_v2(host, name)
            self.assertEqual([st._v2[k].shared for k in ("indexer", "mamba", "draft")], [True, False, False])
            self.assertEqual(st._v2["indexer"].sfx, ("_indexer_0",))
            self.assertEqual(st._v2["mamba"].sfx, ("_1of2_mamba_0",))
            st.close()

    def test_abandoned_pin_released_after_age(self):
        with kvpt.Agent("--dram", "64M") as ag:
            hp = sf.FakeHostPool()
            st = store_for(ag.pool, hp, extra={"pin_max_age_s": 0.2, "pin_max_pages": 12})
            keys = sf.page_keys("aban", 8)
            self.assertEqual(st.batch_set_v1(keys, hp.indices(range(8))), [True] * 8)
            self.assertEqual(st.batch_exists(keys), 8)
            self.assertEqual(st.parked_pages(), 8)
            self.assertGreaterEqual(sum(holds_by_pid(ag.pool)[os.getpid()]), 16)
            # the page cap: a second probe pushes the first out
            more = sf.page_keys("aban2", 8)
            self.assertEqual(st.batch_set_v1(more, hp.indices(range(8))), [True] * 8)
            self.assertEqual(st.batch_exists(more), 8)
            self.assertEqual(st.parked_pages(), 8)
            self.assertEqual(st.stats().get("pins_evicted"), 1)
            # nobody loads them: any later call sweeps them out after 0.2 s
            kvpt.wait_until(lambda: st.batch_exists([]) == 0 and st.parked_pages() == 0, 10, "pins aged out")
            self.assertEqual(sum(holds_by_pid(ag.pool).get(os.getpid(), [0])), 0)
            self.assertEqual(st.stats().get("pins_expired"), 1)
            # a load after the pin went still reads (unpinned)
            self.assertEqual(st.batch_get_v1(keys, hp.indices(range(8, 16))), [True] * 8)
            st.close()


class TestProcesses(unittest.TestCase):
    def test_mla_rank0_writes_rank1_reads(self):
        with kvpt.Agent("--dram", "64M") as ag:
            kw = {"mla": True}
            # rank 1 "writes" first: True without writing (rank 0 does)
            ok, ns1 = run_spawned(_w_set, ag.pool, {"is_mla_model": True, "tp_rank": 1, "tp_size": 2}, kw, "m", 8, 0)
            self.assertEqual(ok, [True] * 8)
            with kvpool.Pool(ag.pool, namespace=ns1) as p:
                self.assertFalse(p.exists(sf.page_keys("m", 1)[0] + "_k"))
            ok, ns0 = run_spawned(_w_set, ag.pool, {"is_mla_model": True, "tp_rank": 0, "tp_size": 2}, kw, "m", 8, 0)
            self.assertEqual(ok, [True] * 8)
            self.assertEqual(ns0, ns1)  # MLA namespaces and keys are rank free
            (have, got, good), _ = run_spawned(
                _w_get, ag.pool, {"is_mla_model": True, "tp_rank": 1, "tp_size": 2}, kw, "m", 8, 0
            )
            self.assertEqual((have, got, good), (8, [True] * 8, [True] * 8))

    def test_mha_two_engines_share(self):
        with kvpt.Agent("--dram", "64M") as ag:
            ok, ns_a = run_spawned(_w_set, ag.pool, {"tp_rank": 0, "tp_size": 1}, {}, "e", 10, 500)
            self.assertEqual(ok, [True] * 10)
            (have, got, good), ns_b = run_spawned(_w_get, ag.pool, {"tp_rank": 0, "tp_size": 1}, {}, "e", 10, 500)
            self.assertEqual(ns_a, ns_b)
            self.assertEqual((have, got, good), (10, [True] * 10, [True] * 10))

    def test_killed_worker_leaves_nothing_held(self):
        with kvpt.Agent("--dram", "64M") as ag:
            hp = sf.FakeHostPool()
            st = store_for(ag.pool, hp)
            keys = sf.page_keys("k9", 32)
            self.assertEqual(st.batch_set_v1(keys, hp.indices(range(32))), [True] * 32)
            q = _spawn.Queue()
            p = _spawn.Process(target=_w_pin_and_spin, args=(ag.pool, "k9", 32, q))
            p.start()
            try:
                kind, n, pid = q.get(timeout=60)
                self.assertEqual((kind, n), ("pinned", 32))
                kvpt.wait_until(lambda: sum(holds_by_pid(ag.pool).get(pid, [0])) >= 64, 10, "the worker's pins")
                os.kill(pid, signal.SIGKILL)
                p.join(30)
            finally:
                if p.is_alive():
                    p.kill()
                    p.join()
            self.assertEqual(p.exitcode, -signal.SIGKILL)
            kvpt.wait_until(lambda: pid not in holds_by_pid(ag.pool), 20, "the killed worker's slot reaped")
            self.assertEqual(sum(sum(v) for v in holds_by_pid(ag.pool).values()), 0)
            # and its pages are still there for the living
            self.assertEqual(st.batch_get_v1(keys, hp.indices(range(32, 64))), [True] * 32)
            st.close()


FACTORY = textwrap.dedent(
    """
    import abc, dataclasses, importlib, sys, types
    from typing import Optional

    # a stand-in sglang: only the module the dynamic factory imports from
    hs = types.ModuleType("sglang.srt.mem_cache.hicache_storage")

    class HiCacheStorage(abc.ABC):
        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host
        @abc.abstractmethod
        def get(self, key, target_location=None, target_sizes=None): ...
        @abc.abstractmethod
        def batch_get(self, keys, target_locations=None, target_sizes=None): ...
        @abc.abstractmethod
        def set(self, key, value=None, target_location=None, target_sizes=None): ...
        @abc.abstractmethod
        def batch_set(self, keys, values=None, target_locations=None, target_sizes=None): ...
        @abc.abstractmethod
        def exists(self, key): ...

    @dataclasses.dataclass
    class HiCacheStorageConfig:
        tp_rank: int
        tp_size: int
        pp_rank: int
        pp_size: int
        attn_cp_rank: int
        attn_cp_size: int
        is_mla_model: bool
        enable_storage_metrics: bool
        is_page_first_layout: bool
        model_name: Optional[str]
        dp_rank: int = 0
        dp_size: int = 1
        tp_lcm_size: Optional[int] = None
        should_split_heads: bool = False
        extra_config: Optional[dict] = None

    hs.HiCacheStorage = HiCacheStorage
    hs.HiCacheStorageConfig = HiCacheStorageConfig
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["sglang.srt.mem_cache.hicache_storage"] = hs
    sa = types.ModuleType("sglang.srt.server_args")  # set before the cache is built
    sa.get_global_server_args = lambda: types.SimpleNamespace(
        model_path="org/model", revision=None, quantization=None, dtype="auto", kv_cache_dtype="auto")
    sys.modules["sglang.srt.server_args"] = sa

    # StorageBackendFactory._create_dynamic_backend, step by step
    extra = {"backend_name": "kvpool", "module_path": "kvpool.sglang", "class_name": "KVPoolStore",
             "interface_v1": 1, "pool": sys.argv[1]}
    cfg = HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, "org/model", extra_config=extra)
    for field in ("backend_name", "module_path", "class_name"):
        assert field in extra, field
    module = importlib.import_module(extra["module_path"])
    backend_class = getattr(module, extra["class_name"])
    if not issubclass(backend_class, HiCacheStorage):
        raise TypeError("Backend class KVPoolStore must inherit from HiCacheStorage")
    backend = backend_class(cfg, {})
    # HiCacheController.attach_storage_backend then registers the host pool
    import sglang_fake
    hp = sglang_fake.FakeHostPool(use_torch=False)
    backend.register_mem_pool_host(hp)
    keys = sglang_fake.page_keys("factory", 4)
    for i in range(4):
        hp.fill(i, i)
    assert backend.batch_set_v1(keys, hp.indices(range(4))) == [True] * 4
    assert backend.batch_exists(keys) == 4
    assert backend.batch_get_v1(keys, hp.indices(range(8, 12))) == [True] * 4
    assert [hp.page(8 + i) for i in range(4)] == [hp.expect(i) for i in range(4)]
    backend.close()
    print("FACTORY-OK", module.HiCacheStorage is HiCacheStorage)
    """
)


@unittest.skipIf(sf.torch is None, "torch is not importable (gloo ranks)")
class TestHybrid(unittest.TestCase):
    """sglang's default controller (HybridCacheController) with sidecar
    pools, two TP ranks agreeing over gloo, writer and reader in other
    processes: the v2 calls round-trip every byte and the storage threads
    outlive misses and pool errors."""

    def test_sidecars_two_ranks(self):
        """SWA, Mamba, DSA indexer (MLA target) and draft sidecars."""
        with kvpt.Agent("--dram", "256M") as ag:
            w = run_ranks(_w_hybrid_rank, ag.pool, "write")
            self.assertEqual(w, [[True] * len(HYB_KINDS)] * 2)
            r = run_ranks(_w_hybrid_rank, ag.pool, "read")
            for rank in range(2):
                for (kind, _), (hit, done, got, kv_ok, side_ok, alive) in zip(HYB_KINDS, r[rank]):
                    self.assertEqual((hit, done), (HYB_PAGES, HYB_PAGES), (kind, rank))
                    if HYB_WIN[kind]:
                        self.assertEqual(got, {kind: HYB_WIN[kind]}, (kind, rank))
                    self.assertTrue(kv_ok, (kind, rank, "KV bytes"))
                    self.assertTrue(side_ok, (kind, rank, "sidecar bytes"))
                    self.assertTrue(alive, (kind, rank, "storage thread died"))

    def test_refuses_unservable_pool_at_registration(self):
        """A pool kind whose pages are not whole objects is refused when it
        is registered, with its name; nothing is refused later."""

        class LayerFirst(sf.SidecarHostPool):
            def get_page_buffer_meta(self, indices):
                raise ValueError("layer_first has no page buffers")

        with kvpt.Agent("--dram", "64M") as ag:
            st = store_for(ag.pool)
            with self.assertRaisesRegex(ValueError, "'deepseek_v4_c4'.*LayerFirst"):
                st.register_mem_host_pool_v2(LayerFirst([8]), "deepseek_v4_c4")
            with self.assertRaisesRegex(ValueError, "'swa'"):
                st.register_mem_host_pool_v2(sf.SidecarHostPool([0, 0]), "swa")
            st.close()

    def test_counters_in_get_stats_and_the_pools_metrics(self):
        """The store's counters (lookups, hits, pages and bytes loaded and
        stored, refused pool kinds, errors) are in get_stats() and in the
        pool's per-namespace counters, which the agent exports with the
        namespace as a label; what a probe holds shows as pinned there."""

        class LayerFirst(sf.SidecarHostPool):
            def get_page_buffer_meta(self, indices):
                raise ValueError("layer_first has no page buffers")

        with kvpt.Agent("--dram", "64M") as ag:
            kv = sf.FakeHostPool(page_size=1, n_pages=32)
            st = store_for(ag.pool, kv)
            side = sf.SidecarHostPool([40], 32)
            st.register_mem_host_pool_v2(kv, "kv")
            st.register_mem_host_pool_v2(side, "swa")
            with self.assertRaises(ValueError):
                st.register_mem_host_pool_v2(LayerFirst([8]), "deepseek_v4_c4")
            keys = sf.page_keys("ctr", 6)
            for i in range(4):
                kv.fill(i, 40 + i)
            self.assertEqual(st.batch_set_v1(keys[:4], kv.indices(range(4))), [True] * 4)
            self.assertEqual(st.batch_exists(keys), 4)  # 6 asked, 4 held
            row = {r["ns"]: r for r in kvpt.stat_json(ag.pool)["namespaces"]}[st.namespace[:47]]
            self.assertEqual(row["pinned"], 4 * st._per)
            self.assertEqual(st.batch_get_v1(keys[:4], kv.indices(range(8, 12))), [True] * 4)
            self.assertEqual(st.batch_get_v1(keys[4:5], kv.indices(range(12, 13))), [False])  # a miss
            st.batch_get_v1(keys[:1], kv.indices(range(3)))  # 3 indices for 1 page: an error, logged
            page = st._per * st.object_bytes
            want = {"lookup_keys": 6, "hit_keys": 4, "store_pages": 4, "store_bytes": 4 * page, "load_pages": 4,
                    "load_bytes": 4 * page, "load_failed": 1, "refused": 1, "errors": 1}
            stats = st.get_stats()  # sglang is not importable here: a dict with stats(); and a flush
            self.assertEqual({k: stats[k] for k in want}, want)
            self.assertEqual(stats["refused_pools"], ["deepseek_v4_c4"])
            row = {r["ns"]: r for r in kvpt.stat_json(ag.pool)["namespaces"]}[st.namespace[:47]]
            self.assertEqual({k: row[k] for k in want}, want)
            self.assertEqual(row["pinned"], 0)  # loaded: released
            # a second store of the same deployment (another process's, here
            # another handle) adds to the same row
            st2 = store_for(ag.pool, sf.FakeHostPool(page_size=1, n_pages=32))
            self.assertEqual(st2.namespace, st.namespace)
            self.assertEqual(st2.batch_exists(keys), 4)
            st2.close()
            row = {r["ns"]: r for r in kvpt.stat_json(ag.pool)["namespaces"]}[st.namespace[:47]]
            self.assertEqual((row["lookup_keys"], row["hit_keys"]), (12, 8))
            st.close()

    def test_hit_policies_and_logical_anchor(self):
        """HiCacheFile's policies: all pages stops at the first missing
        page; trailing pages takes the longest prefix whose last N pages
        are present (holes before them do not matter); a logical anchor
        (kv_buffer None) is present; the MIN over pools wins."""
        with kvpt.Agent("--dram", "64M") as ag:
            kv = sf.FakeHostPool(page_size=1, n_pages=32)
            side = sf.SidecarHostPool([40], 32)
            st = store_for(ag.pool, kv)
            st.register_mem_host_pool_v2(kv, "kv")
            st.register_mem_host_pool_v2(side, "swa")
            keys = sf.page_keys("pol", 10)
            self.assertEqual(st.batch_set_v1(keys, kv.indices(range(10))), [True] * 10)
            have = [0, 1, 2, 5, 6]  # sidecar pages present: holes at 3, 4 and 7..9
            t = sf.PoolTransfer("swa", host_indices=side.indices(have), keys=[keys[i] for i in have])
            self.assertEqual(st.batch_set_v2([t]), {"swa": [True] * 5})
            probe = lambda policy, n: sf.PoolTransfer("swa", keys=["?"] * n, hit_policy=policy)  # noqa: E731
            r = st.batch_exists_v2(keys, [probe(sf.PoolHitPolicy.ALL_PAGES, 1)])
            self.assertEqual((r.kv_hit_pages, r.extra_pool_hit_pages), (3, {"kv": 10, "swa": 3}))
            r = st.batch_exists_v2(keys, [probe(sf.PoolHitPolicy.TRAILING_PAGES, 2)])
            self.assertEqual((r.kv_hit_pages, r.restorable), (7, [1, 2, 3, 7]))
            r = st.batch_exists_v2(keys, [probe(sf.PoolHitPolicy.TRAILING_PAGES, 3)])
            self.assertEqual(r.kv_hit_pages, 3)
            unregistered = sf.PoolTransfer("nonesuch", keys=["?"])
            r = st.batch_exists_v2(keys, [probe(sf.PoolHitPolicy.ALL_PAGES, 1), unregistered])
            self.assertEqual(r.kv_hit_pages, 0)
            st.close()
            # a logical anchor: no KV bytes, the sidecar alone decides
            kv.kv_buffer = None
            st = store_for(ag.pool, kv)
            st.register_mem_host_pool_v2(kv, "kv")
            st.register_mem_host_pool_v2(side, "swa")
            r = st.batch_exists_v2(sf.page_keys("pol-other", 3) + keys[:1], [probe(sf.PoolHitPolicy.TRAILING_PAGES, 1)])
            self.assertEqual(r.kv_hit_pages, 4)
            t = sf.PoolTransfer("kv", host_indices=kv.indices([0]), keys=keys[:1])
            self.assertEqual(st.batch_get_v2([t]), {"kv": [True]})
            st.close()

def _w_probe_identity(pool, cases, tag, n, q):
    """Probe and load tag's pages under each (server args, storage config,
    host pool) of cases, in this other process: plain host pool and
    HostPoolGroup (sglang's default path) each."""
    try:
        out = []
        for sa, cfg, host_kw in cases:
            SERVER_ARGS[0] = sa
            hp = sf.FakeHostPool(**host_kw)
            keys = sf.page_keys(tag, n)
            group = sf.HostPoolGroup([sf.PoolEntry("kv", hp, hp.device_pool, is_primary_index_anchor=True)])
            got = []
            for host in (hp, group):
                st = store_for(pool, host, **cfg)
                got += [st.batch_exists(keys), sum(st.batch_get_v1(keys, hp.indices(range(n))))]
                st.close()
            out.append((tuple(got), st.namespace))
        q.put(("ok", out, None))
    except BaseException as e:
        q.put(("error", repr(e), None))


class TestIdentity(unittest.TestCase):
    """Two engines share pages only if every byte would be the same."""

    BASE_SA = dict(model_path="org/m", revision="r1", quantization=None, dtype="bfloat16", kv_cache_dtype="fp8_e4m3")
    BASE_HOST = dict(kv_dtype="float8_e4m3fn", page_size=4, head_num=2, head_dim=16)

    def test_neighbouring_identities_share_nothing(self):
        """Written under one identity (through a HostPoolGroup, sglang's
        default path), probed under every neighbour: 0 pages each time;
        under the same identity: all of them."""
        n = 6
        with kvpt.Agent("--dram", "64M") as ag:
            SERVER_ARGS[0] = sf.ServerArgs(**self.BASE_SA)
            hp = sf.FakeHostPool(**self.BASE_HOST)
            group = sf.HostPoolGroup([sf.PoolEntry("kv", hp, hp.device_pool, is_primary_index_anchor=True)])
            st = store_for(ag.pool, group, tp_size=2)
            for i in range(n):
                hp.fill(i, i)
            self.assertEqual(st.batch_set_v1(sf.page_keys("id", n), hp.indices(range(n))), [True] * n)
            st.close()
            sa, host, tp2 = self.BASE_SA, self.BASE_HOST, {"tp_size": 2}
            same = (sa, host, tp2)
            neighbours = {
                "e5m2": (dict(sa, kv_cache_dtype="fp8_e5m2"), dict(host, kv_dtype="float8_e5m2"), tp2),
                "e5m2 device pool only": (sa, dict(host, kv_dtype="float8_e5m2"), tp2),
                "e5m2 server args only": (dict(sa, kv_cache_dtype="fp8_e5m2"), host, tp2),
                "fp8 weights": (dict(sa, quantization="fp8"), host, tp2),
                "awq weights": (dict(sa, quantization="awq"), host, tp2),
                "fp16 weights": (dict(sa, dtype="float16"), host, tp2),
                "revision": (dict(sa, revision="r2"), host, tp2),
                "model path": (dict(sa, model_path="org/m-finetune"), host, tp2),
                "tp size": (sa, host, {"tp_size": 4}),
                "page size": (sa, dict(host, page_size=8), tp2),
                "heads": (sa, dict(host, head_num=1, head_dim=32), tp2),
                "mla": (sa, dict(host, mla=True), {"tp_size": 2, "is_mla_model": True}),
            }
            cases = [same] + list(neighbours.values())
            out, _ = run_spawned(_w_probe_identity, ag.pool, [(sf.ServerArgs(**a), c, h) for a, h, c in cases], "id", n)
            self.assertEqual(out[0][0], (n, n, n, n), out[0][1])
            for what, (got, ns) in zip(neighbours, out[1:]):
                self.assertEqual(got, (0, 0, 0, 0), (what, ns))
        SERVER_ARGS[0] = sf.ServerArgs()

    def test_unknown_identity_refuses_to_share(self):
        """No server args, or a 1-byte KV with no device pool: the store
        stays off with one error line, unless extra_config names a
        namespace."""
        with kvpt.Agent("--dram", "64M") as ag:
            try:
                SERVER_ARGS[0] = None
                with self.assertLogs("kvpool.sglang", "ERROR") as logs:
                    st = store_for(ag.pool)
                self.assertEqual(len(logs.output), 1)
                self.assertIn('"namespace"', logs.output[0])
                self.assertIsNone(st.pool)
                self.assertEqual(st.batch_exists(sf.page_keys("u", 2)), 0)
                st = store_for(ag.pool, extra={"namespace": "deploy-a"})
                self.assertIsNotNone(st.pool)
                st.close()
                SERVER_ARGS[0] = sf.ServerArgs()
                hp = sf.FakeHostPool(kv_dtype="float8_e5m2")
                hp.device_pool = None
                with self.assertLogs("kvpool.sglang", "ERROR") as logs:
                    st = store_for(ag.pool, hp)
                self.assertIn("fp8", logs.output[0])
                self.assertIsNone(st.pool)
            finally:
                SERVER_ARGS[0] = sf.ServerArgs()

class TestFactory(unittest.TestCase):
    def test_dynamic_factory_with_sglang_base(self):
        """In a process where sglang's HiCacheStorage is importable (a
        stand-in module), KVPoolStore subclasses it and the factory's
        steps build and register it."""
        with kvpt.Agent("--dram", "64M") as ag:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), HERE])
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            r = subprocess.run(
                [sys.executable, "-c", FACTORY, ag.pool], env=env, capture_output=True, text=True, timeout=120
            )
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("FACTORY-OK True", r.stdout)

    def test_stand_in_without_sglang(self):
        if "sglang" in sys.modules and not hasattr(sys.modules["sglang"], "__file__"):
            self.skipTest("a stand-in sglang is loaded")
        try:
            import sglang  # noqa: F401

            self.skipTest("sglang is installed")
        except ImportError:
            pass
        self.assertIs(ks.HiCacheStorage, ks._StandInHiCacheStorage)
        self.assertTrue(issubclass(ks.KVPoolStore, ks.HiCacheStorage))
        for m in ("get", "set", "batch_get", "batch_set", "exists"):
            self.assertIn(m, ks._StandInHiCacheStorage.__abstractmethods__)
        self.assertEqual(ks.KVPoolStore.__abstractmethods__, frozenset())


if __name__ == "__main__":
    unittest.main()
