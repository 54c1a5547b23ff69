# SPDX-License-Identifier: MIT
"""kvpool.vllm.KVPoolTier as vLLM drives it, against vllm_fake (a model of
vLLM's tiering manager, factory and CPU primary tier, written from vLLM's
source: see its docstring).  vllm_fake.install() puts the model under
vLLM's module names before kvpool.vllm is imported, so the tier binds to
it as it binds to vLLM's classes in a vLLM process.  Every test starts its
own agent (kvpt.Agent); other processes are started with "spawn" (a Pool
is never forked)."""

import logging
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
import unittest

import vllm_fake as vf

vf.install()

import kvpool  # noqa: E402
import kvpool.vllm as kv  # noqa: E402
import kvpt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_spawn = multiprocessing.get_context("spawn")
ROW = 64 << 10  # the tests' row: small, the machine has 2 cores


def tier_cfg(pool, **kw):
    """A secondary tier entry as a vLLM launch names it (module_path)."""
    cfg = {"type": "KVPoolTier", "module_path": "kvpool.vllm", "pool": pool}
    cfg.update(kw)
    return cfg


def engine(pool, tier=None, **cfg):
    return vf.Engine(vf.make_config([tier_cfg(pool, **(tier or {}))], **cfg))


def rows_for(tag, n, size=ROW):
    return [vf.row_bytes_for(tag, i, size) for i in range(n)]


def check_rows(tc, got, want):
    """got are want's rows, byte for byte; a failure names the rows that
    differ (unittest's diff of megabytes of bytes would take minutes)."""
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    tc.assertEqual((len(got), bad), (len(want), []))


def holds_by_pid(pool):
    """{pid: [holds per client slot]} from `kvpool clients`."""
    out = {}
    for ln in kvpt.clients_of(pool).splitlines()[1:]:
        f = ln.split()
        if len(f) >= 6 and f[0].isdigit():
            out.setdefault(int(f[1]), []).append(int(f[4]))
    return out


def run_spawned(fn, *args, timeout=90):
    q = _spawn.Queue()
    p = _spawn.Process(target=fn, args=args + (q,))
    p.start()
    try:
        kind, val = q.get(timeout=timeout)
    finally:
        p.join(timeout=timeout)
        if p.is_alive():
            p.kill()
            p.join()
    if kind != "ok":
        raise AssertionError(f"{fn.__name__}: {val}")
    return val


# ---- other processes (spawned: they import this module, so the model) ----


def _w_store(pool, tag, n, cfg, q):
    """An instance stores the rows of prompt tag."""
    try:
        e = engine(pool, **cfg)
        r = e.request(vf.request_keys(tag, n))
        stored = e.store(r, rows_for(tag, n, e.primary.row_bytes))
        e.finish(r)
        e.step()
        q.put(("ok", (len(stored), e.manager.failed_jobs, e.tier.namespace, e.tier.stats())))
        e.shutdown()
    except BaseException as ex:  # report, never hang the parent
        q.put(("error", repr(ex)))


def _w_fetch(pool, tag, n, extra, cfg, q):
    """An instance looks up prompt tag (plus extra absent blocks), promotes
    the hits and reads them: (rows hit, rows right, namespace, stats)."""
    try:
        e = engine(pool, **cfg)
        r = e.request(vf.request_keys(tag, n) + vf.request_keys(tag + "-absent", extra))
        got = e.fetch(r)
        right = [g == w for g, w in zip(got, rows_for(tag, n, e.primary.row_bytes))]
        e.finish(r)
        e.step()
        st = e.tier.stats()
        st["slots"] = len(holds_by_pid(pool).get(os.getpid(), []))
        q.put(("ok", (len(got), right, e.tier.namespace, st, dict(e.prom.totals))))
        e.shutdown()
    except BaseException as ex:
        q.put(("error", repr(ex)))


def _w_delete(pool, ns, names, q):
    """Another client of the pool deletes keys (a row leaving the pool
    while it is pinned: pins keep eviction off, not a delete)."""
    try:
        with kvpool.Pool(pool, namespace=ns) as p:
            for k in names:
                p.delete(k)
        q.put(("ok", len(names)))
    except BaseException as ex:
        q.put(("error", repr(ex)))


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
        q.put(("ok", i << 20))
    except BaseException as ex:
        q.put(("error", repr(ex)))


class TestShare(unittest.TestCase):
    def test_two_instances_share_rows(self):
        """Instance A stores rows; instance B, in another process, looks them
        up, promotes them into its CPU tier and reads every byte."""
        with kvpt.Agent("--dram", "64M") as ag:
            n, failed, ns_a, st = run_spawned(_w_store, ag.pool, "share", 12, {})
            self.assertEqual((n, failed, st["store_rows"], st["store_failed"]), (12, [], 12, 0))
            hit, right, ns_b, st, prom = run_spawned(_w_fetch, ag.pool, "share", 12, 3, {})
            self.assertEqual(ns_a, ns_b)
            self.assertEqual((hit, right), (12, [True] * 12))
            self.assertEqual((st["hit_keys"], st["load_rows"], st["load_failed"]), (12, 12, 0))
            self.assertEqual(st["pinned_rows"], 0)  # released once loaded
            # its client slots: the scheduler thread's and at most one per io thread
            self.assertTrue(2 <= st["slots"] <= 3, st["slots"])
            # vLLM's metrics for this tier: declared names only (the model asserts)
            self.assertEqual(prom["vllm:kv_offload_kvpool_promoted_bytes"], 12 * ROW)
            self.assertEqual(prom["vllm:kv_offload_kvpool_hit_keys"], 12)

    def test_dp_replicas_share_hits(self):
        """DP replicas are EngineCores of one deployment (engine ids and DP
        indices differ): each hits what the other stored."""
        with kvpt.Agent("--dram", "64M") as ag:
            r0 = {"dp_index": 0, "dp_size": 2, "engine_id": "dep_dp0"}
            r1 = {"dp_index": 1, "dp_size": 2, "engine_id": "dep_dp1"}
            self.assertEqual(run_spawned(_w_store, ag.pool, "dp-a", 8, r0)[0], 8)
            hit, right, ns1, _, _ = run_spawned(_w_fetch, ag.pool, "dp-a", 8, 0, r1)
            self.assertEqual((hit, right), (8, [True] * 8))
            self.assertEqual(run_spawned(_w_store, ag.pool, "dp-b", 8, r1)[0], 8)
            hit, right, ns0, _, _ = run_spawned(_w_fetch, ag.pool, "dp-b", 8, 0, r0)
            self.assertEqual((hit, right), (8, [True] * 8))
            self.assertEqual(ns0, ns1)

    def test_miss(self):
        """Absent blocks: RETRY for a step, then MISS; nothing is loaded."""
        with kvpt.Agent("--dram", "64M") as ag:
            e = engine(ag.pool)
            r = e.request(vf.request_keys("nothing", 5))
            self.assertEqual(e.manager.lookup(r.keys[0], r.ctx), vf.LookupResult.RETRY)
            self.assertEqual(e.fetch(r), [])
            self.assertEqual(e.tier.lookup(r.keys[3], r.ctx), vf.LookupResult.MISS)
            e.finish(r)
            e.step()
            st = e.tier.stats()
            self.assertEqual((st["lookup_keys"], st.get("hit_keys", 0), st.get("load_jobs", 0)), (5, 0, 0))
            self.assertEqual(e.tier._reqs, {})  # forgotten with the request
            e.shutdown()

    def test_first_writer_wins(self):
        """A store of rows already there succeeds without writing: the bytes
        of the first writer stay; the key set of a cascade pairs with its
        block ids by iteration order."""
        with kvpt.Agent("--dram", "64M") as ag:
            a, c = engine(ag.pool), engine(ag.pool)
            keys = vf.request_keys("fww", 10)
            self.assertNotEqual(list(set(keys)), keys)  # the set's order is not the prompt's
            ra, rc = a.request(keys), c.request(keys)
            a.store(ra, rows_for("first", 10))
            c.store(rc, rows_for("second", 10))
            self.assertEqual(c.manager.failed_jobs, [])
            st = c.tier.stats()
            self.assertEqual((st.get("store_rows", 0), st["store_exists"]), (0, 10))
            a.finish(ra)
            c.finish(rc)
            c.evict_primary()  # c's CPU tier forgets its own copy
            rc2 = c.request(keys)
            check_rows(self, c.fetch(rc2), rows_for("first", 10))
            c.finish(rc2)
            a.shutdown()
            c.shutdown()


class TestFailures(unittest.TestCase):
    def test_row_gone_between_lookup_and_load(self):
        """A row answered HIT that leaves the pool before its load: the load
        ends as a failed job within a bound, the rows that did load are its
        successful keys (byte-identical), and the gone keys answer MISS,
        never HIT again (no livelock) until they are stored again."""
        with kvpt.Agent("--dram", "64M") as ag:
            a, b = engine(ag.pool), engine(ag.pool)
            keys = vf.request_keys("gone", 6)
            ra = a.request(keys)
            a.store(ra, rows_for("gone", 6))
            a.finish(ra)
            rb = b.request(keys)
            self.assertTrue(all(b.manager.lookup(k, rb.ctx) is vf.LookupResult.RETRY for k in keys))
            b.step()  # the tier probes and pins
            self.assertEqual([b.manager.lookup(k, rb.ctx) for k in keys], [vf.LookupResult.HIT_PENDING] * 6)
            run_spawned(_w_delete, ag.pool, b.tier.namespace, [keys[i].hex() for i in (2, 4)])
            t0 = time.monotonic()
            b.run(lambda: b.manager.failed_jobs, 10, "the failed load job")
            self.assertLess(time.monotonic() - t0, 5.0)
            self.assertEqual([k for k, _ in b.manager.failed_jobs], ["load"])
            for i in (0, 1, 3, 5):  # kept: in the primary tier, right bytes
                self.assertEqual(b.primary.lookup(keys[i]), vf.LookupResult.HIT)
                self.assertTrue(b.primary.row(b.primary.blocks[keys[i]][0]) == rows_for("gone", 6)[i], i)
            for _ in range(20):  # the engine keeps asking: no new promotion of a gone key
                for i in (2, 4):
                    self.assertIn(b.manager.lookup(keys[i], rb.ctx), (vf.LookupResult.RETRY, vf.LookupResult.MISS))
                b.step()
            self.assertEqual(b.tier.lookup(keys[2], rb.ctx), vf.LookupResult.MISS)
            self.assertEqual((b.manager.promotions[keys[2]], b.manager.promotions[keys[4]]), (1, 1))
            b.finish(rb)
            # stored again: really back, HIT again
            ra2 = a.request(keys)
            a.evict_primary()
            a.store(ra2, rows_for("gone", 6))
            a.finish(ra2)
            b.evict_primary()
            rb2 = b.request(keys)
            check_rows(self, b.fetch(rb2), rows_for("gone", 6))
            b.finish(rb2)
            a.shutdown()
            b.shutdown()

    def test_agent_killed_and_restarted_mid_load(self):
        """Rows spread over DRAM and SSD; the agent is killed by the load's
        own first read (so it is mid-load) and restarted: the job is reported
        within a bound, every row it reports is byte-identical, the rows it
        could not read answer MISS until the agent is back, then load."""
        d = kvpt.ssd_dir("vllm")
        ag = kvpt.Agent("--dram", "32M", "--ssd-dir", d, "--ssd-size", "512M", "--max-value", "1M")
        try:
            n, size = 48, 1 << 20
            tier = {"retry_failed_s": 0, "task_bytes": size, "busy_retry_ms": 5000}
            a, b = (engine(ag.pool, tier, row_bytes=size, num_blocks=64) for _ in range(2))
            keys = vf.request_keys("kill", n)
            want = rows_for("kill", n, size)
            ra = a.request(keys)
            a.store(ra, want)
            a.finish(ra)
            self.assertEqual(a.manager.failed_jobs, [])
            # the agent demotes what is past --dram-high to SSD
            with kvpool.Pool(ag.pool, namespace=a.tier.namespace) as p:
                on_ssd = lambda: p.batch_locate([k.hex() for k in keys]).count(kvpool.TIER_SSD) >= 8  # noqa: E731
                kvpt.wait_until(on_ssd, 30, "rows demoted to SSD")
            pool = b.tier._pool()
            real_get = pool.batch_get
            killed = []

            def get_then_kill(*args, **kw):
                out = real_get(*args, **kw)
                if not killed:
                    killed.append(True)
                    ag.kill()
                return out

            pool.batch_get = get_then_kill
            rb = b.request(keys)
            t0 = time.monotonic()
            b.run(lambda: b._prefix(rb) is not None or b.manager.failed_jobs, 30, "the load to end")
            self.assertLess(time.monotonic() - t0, 15.0)
            self.assertEqual(killed, [True])
            del pool.batch_get
            for i, k in enumerate(keys):  # whatever loaded is right
                if b.primary.lookup(k) is vf.LookupResult.HIT:
                    self.assertTrue(b.primary.row(b.primary.blocks[k][0]) == want[i], i)
            failed = [k for k in keys if b.primary.lookup(k) is vf.LookupResult.MISS]
            self.assertTrue(failed, "no SSD row failed with the agent gone")
            self.assertIn(b.tier.lookup(failed[0], rb.ctx), (vf.LookupResult.RETRY, vf.LookupResult.MISS))
            b.step()
            self.assertEqual(b.tier.lookup(failed[0], rb.ctx), vf.LookupResult.MISS)  # the agent is away
            b.finish(rb)
            ag.start()
            rb2 = b.request(keys)
            check_rows(self, b.fetch(rb2), want)
            self.assertLessEqual(max(b.manager.promotions[k] for k in keys), 2)
            b.finish(rb2)
            a.shutdown()
            b.shutdown()
        finally:
            ag.stop()
            import shutil

            shutil.rmtree(d, ignore_errors=True)

    def test_bad_byte_on_ssd(self):
        """A row that exists but does not read back (a byte flipped in its SSD
        record): its load fails, the tier deletes the row, and it answers
        MISS (never HIT: no livelock) until an instance stores it again."""
        d = kvpt.ssd_dir("vllmbad")
        args = ["--dram", "16M", "--dram-unit", "4K", "--dram-high", "0", "--dram-low", "0"]
        args += ["--no-promote", "--ssd-dir", d, "--ssd-segment", "8M", "--staging", "8M"]
        try:
            with kvpt.Agent(*args) as ag:
                a, b = engine(ag.pool), engine(ag.pool)
                keys, want = vf.request_keys("bad", 4), rows_for("bad", 4)
                ra = a.request(keys)
                a.store(ra, want)
                a.finish(ra)
                with kvpool.Pool(ag.pool, namespace=a.tier.namespace) as p:
                    kvpt.wait_until(lambda: p.stat()["dram_used_bytes"] == 0, 60, "the rows demoted to SSD")
                flip_on_disk(d, want[1][4096:4160])
                rb = b.request(keys)
                check_rows(self, b.fetch(rb), want[:1])
                self.assertEqual([k for k, _ in b.manager.failed_jobs], ["load"])
                for _ in range(10):
                    self.assertIn(b.manager.lookup(keys[1], rb.ctx), (vf.LookupResult.RETRY, vf.LookupResult.MISS))
                    b.step()
                self.assertEqual(b.manager.promotions[keys[1]], 1)
                b.finish(rb)
                ra = a.request(keys)
                a.evict_primary()
                a.store(ra, want)  # row 1 again (the others are there: first writer wins)
                a.finish(ra)
                b.evict_primary()
                rb = b.request(keys)
                check_rows(self, b.fetch(rb), want)
                b.finish(rb)
                a.shutdown()
                b.shutdown()
        finally:
            import shutil

            shutil.rmtree(d, ignore_errors=True)

    def test_agent_down_at_start(self):
        """No agent: vLLM runs on its CPU tier alone (every lookup a miss,
        every cascade a failed job, one warning); once the agent is up the
        tier opens the pool by itself."""
        pool = kvpt.new_pool_name()
        e = engine(pool, {"reopen_s": 0.05})
        try:
            keys = vf.request_keys("down", 4)
            r = e.request(keys)
            with self.assertLogs("kvpool.vllm", "WARNING") as logs:
                e.store(r, rows_for("down", 4))
                e.evict_primary()
                r2 = e.request(keys)
                self.assertEqual(e.fetch(r2), [])
            self.assertEqual(len([m for m in logs.output if "cannot open pool" in m]), 1)
            self.assertEqual(e.manager.failed_jobs, [("store", 0)])
            e.finish(r)
            e.finish(r2)
            with kvpt.Agent("--dram", "64M", pool=pool):
                kvpt.wait_until(lambda: e.tier._pool() is not None, 10, "the tier to open the pool")
                r3 = e.request(keys)
                e.store(r3, rows_for("down", 4))
                self.assertEqual(e.manager.failed_jobs, [("store", 0)])
                e.finish(r3)
                e.evict_primary()
                r4 = e.request(keys)
                check_rows(self, e.fetch(r4), rows_for("down", 4))
                e.finish(r4)
                e.shutdown()
        finally:
            e.shutdown()

    def test_never_raises(self):
        """A pool that fails every call (closed under the tier): lookups are
        MISS, jobs fail and are each reported once, errors are logged once
        per kind."""
        with kvpt.Agent("--dram", "64M") as ag:
            e = engine(ag.pool, {"reopen_s": 3600})
            keys = vf.request_keys("broken", 4)
            r = e.request(keys)
            e.store(r, rows_for("broken", 4))
            e.finish(r)
            e.tier.pool.close()
            e.evict_primary()
            with self.assertLogs("kvpool.vllm", "ERROR") as logs:
                r2 = e.request(keys)
                self.assertEqual(e.fetch(r2), [])
                r3 = e.request(vf.request_keys("broken2", 3))
                e.store(r3, rows_for("b2", 3))
            self.assertEqual(e.manager.failed_jobs, [("store", 1)])
            self.assertEqual(len(logs.output), len(set(logs.output)))
            self.assertGreaterEqual(e.tier.stats()["errors"], 1)
            e.tier.get_stats()  # answers (vLLM asks every step)
            e.finish(r2)
            e.finish(r3)
            e.shutdown()


class TestPins(unittest.TestCase):
    def test_pins_hold_through_eviction(self):
        """Rows answered HIT stay until loaded while another process fills
        the pool to 3x its size; abandoned pins go with the request or after
        pin_max_age_s; one instance uses 1 + io_threads client slots."""
        with kvpt.Agent("--dram", "64M", "--max-value", "1M") as ag:
            a, b = engine(ag.pool), engine(ag.pool)
            keys, other = vf.request_keys("pin", 16), vf.request_keys("unpinned", 16)
            for tag, ks in (("pin", keys), ("unpinned", other)):
                r = a.request(ks)
                a.store(r, rows_for(tag, 16))
                a.finish(r)
            rb = b.request(keys)
            for k in keys:
                b.tier.lookup(k, rb.ctx)
            b.tier.on_schedule_end()
            self.assertEqual(b.tier.pinned_rows(), 16)
            self.assertGreaterEqual(sum(holds_by_pid(ag.pool)[os.getpid()]), 16)
            filled = run_spawned(_w_fill, ag.pool, 3 * (64 << 20), timeout=150)
            self.assertEqual(filled, 3 * (64 << 20))
            with kvpool.Pool(ag.pool, namespace=a.tier.namespace) as p:
                self.assertLess(p.batch_exists_prefix([k.hex() for k in other]), 16)  # eviction happened
            check_rows(self, b.fetch(rb), rows_for("pin", 16))
            self.assertEqual(b.tier.pinned_rows(), 0)
            b.finish(rb)
            # pinned, never promoted: released when the request finishes ...
            rb2 = b.request(keys)
            for k in keys:
                b.tier.lookup(k, rb2.ctx)
            b.tier.on_schedule_end()
            self.assertEqual(b.tier.pinned_rows(), 16)
            b.finish(rb2)
            self.assertEqual(b.tier.pinned_rows(), 0)
            # ... or, the request still alive, after pin_max_age_s
            b.tier.pin_max_age_s = 0.2
            rb3 = b.request(keys)
            for k in keys:
                b.tier.lookup(k, rb3.ctx)
            b.tier.on_schedule_end()
            self.assertEqual(b.tier.pinned_rows(), 16)
            kvpt.wait_until(lambda: b.tier.on_schedule_end() or not b.tier.pinned_rows(), 10, "the pins to age out")
            self.assertEqual(b.tier.lookup(keys[0], rb3.ctx), vf.LookupResult.RETRY)  # probed again
            b.finish(rb3)
            b.step()
            self.assertEqual(sum(holds_by_pid(ag.pool).get(os.getpid(), [0])), 0)
            a.shutdown()
            b.shutdown()

    def test_pins_outlive_their_request_while_loading(self):
        """A request that finishes (aborted) while its load is in flight:
        the rows being loaded stay pinned until the load ends, then go."""
        import threading

        with kvpt.Agent("--dram", "64M") as ag:
            a, b = engine(ag.pool), engine(ag.pool)
            keys = vf.request_keys("abort", 8)
            ra = a.request(keys)
            a.store(ra, rows_for("abort", 8))
            a.finish(ra)
            pool = b.tier._pool()
            real, entered, gate = pool.batch_get, threading.Event(), threading.Event()

            def gated(*args, **kw):  # the load waits here, in its io thread
                entered.set()
                gate.wait(30)
                return real(*args, **kw)

            pool.batch_get = gated
            try:
                rb = b.request(keys)
                for k in keys:
                    b.manager.lookup(k, rb.ctx)
                b.step()  # probed and pinned
                self.assertEqual([b.manager.lookup(k, rb.ctx) for k in keys], [vf.LookupResult.HIT_PENDING] * 8)
                b.step()  # the promotion's load is submitted
                kvpt.wait_until(entered.is_set, 10, "the load in its io thread")
                b.tier.on_request_finished(rb.ctx)
                self.assertEqual(b.tier.pinned_rows(), 8)
                self.assertGreaterEqual(sum(holds_by_pid(ag.pool)[os.getpid()]), 8)
            finally:
                gate.set()
            b.run(lambda: not b.manager.jobs, 10, "the load to end")
            self.assertEqual(b.tier.pinned_rows(), 0)
            self.assertEqual(sum(holds_by_pid(ag.pool).get(os.getpid(), [0])), 0)
            del pool.batch_get
            b.finish(rb)
            a.shutdown()
            b.shutdown()

    def test_finished_mid_load_then_aged(self):
        """Driven as vLLM's manager would, without it: a request pins 8
        rows, 4 of them are being loaded when it finishes; the other 4 are
        released but the pinset stays (it holds the 4 in flight) through an
        age sweep, and goes when the load ends, the rows read back."""
        import threading

        with kvpt.Agent("--dram", "64M") as ag:
            a = engine(ag.pool)
            keys, want = vf.request_keys("aged", 8), rows_for("aged", 8)
            ra = a.request(keys)
            a.store(ra, want)
            a.finish(ra)
            cfg = tier_cfg(ag.pool)
            spec = vf.TieringOffloadingSpec(vf.make_config([cfg]))
            primary = vf.PrimaryTier(16, ROW)
            tier = vf.SecondaryTierFactory.create_secondary_tier(cfg, primary.view, spec)
            ctx = vf.ReqContext("aged")
            self.assertEqual({tier.lookup(k, ctx) for k in keys}, {vf.LookupResult.RETRY})
            tier.on_schedule_end()
            self.assertEqual({tier.lookup(k, ctx) for k in keys}, {vf.LookupResult.HIT})
            pool = tier.pool
            real, entered, gate = pool.batch_get, threading.Event(), threading.Event()

            def gated(*args, **kw):
                entered.set()
                gate.wait(30)
                return real(*args, **kw)

            pool.batch_get = gated
            try:
                tier.submit_load(vf.TransferJob(7, keys[:4], vf._ids([3, 2, 1, 0]), True, ctx))
                kvpt.wait_until(entered.is_set, 10, "the load in its io thread")
                tier.on_request_finished(ctx)
                self.assertEqual(tier.pinned_rows(), 4)
                tier.pin_max_age_s = 0.0
                tier.on_schedule_end()  # an age sweep
                self.assertEqual(tier.pinned_rows(), 4)
                self.assertGreaterEqual(sum(holds_by_pid(ag.pool)[os.getpid()]), 4)
            finally:
                gate.set()
            tier.drain_jobs()
            res = list(tier.get_finished_jobs())
            self.assertEqual([(r.job_id, r.success) for r in res], [(7, True)])
            self.assertEqual([primary.row(3 - i) == want[i] for i in range(4)], [True] * 4)
            self.assertEqual(tier.pinned_rows(), 0)
            self.assertEqual(sum(holds_by_pid(ag.pool).get(os.getpid(), [0])), 0)
            del pool.batch_get
            tier.shutdown()
            a.shutdown()

    def test_rows_larger_than_max_value_in_parts(self):
        """Rows of 1 MiB with --max-value 256K: four parts each, read back
        whole; a row missing one part is a miss."""
        with kvpt.Agent("--dram", "64M", "--max-value", "256K") as ag:
            size = 1 << 20
            a, b = engine(ag.pool, row_bytes=size), engine(ag.pool, row_bytes=size)
            keys = vf.request_keys("parts", 6)
            ra = a.request(keys)
            a.store(ra, rows_for("parts", 6, size))
            a.finish(ra)
            self.assertEqual((a.tier.stats()["parts_per_row"], a.manager.failed_jobs), (4, []))
            run_spawned(_w_delete, ag.pool, a.tier.namespace, [keys[3].hex() + "/2of4"])
            rb = b.request(keys)
            check_rows(self, b.fetch(rb), rows_for("parts", 6, size)[:3])
            b.finish(rb)
            a.shutdown()
            b.shutdown()

    def test_reset_cache_drains(self):
        """vLLM's reset_cache() drains every tier and asserts no job is left:
        jobs in flight are all reported."""
        with kvpt.Agent("--dram", "64M") as ag:
            e = engine(ag.pool, {"task_bytes": ROW}, num_blocks=64)
            keys = vf.request_keys("drain", 48)
            r = e.request(keys)
            out = e.manager.prepare_store(keys, r.ctx)
            for k, bid in zip(*out):
                e.primary.write_row(bid, rows_for("drain", 48)[keys.index(k)])
            e.manager.complete_store(set(out[0]), r.ctx)
            self.assertTrue(e.manager.jobs)
            e.manager.reset_cache()  # asserts no job is left
            self.assertFalse(e.tier.has_pending_work())
            e.finish(r)
            e.shutdown()


class TestMetrics(unittest.TestCase):
    def test_namespace_counters_in_prometheus(self):
        """The tier's lookups, hits, rows and bytes loaded and stored, and
        failed loads reach the agent's /metrics as
        kvpool_namespace_events_total with the tier's namespace as a label,
        and equal the tier's own counters; two instances of one deployment
        add to one series."""
        if not hasattr(kvpool.Pool, "count"):
            self.skipTest("this binding has no Pool.count")
        import re
        import urllib.request

        with kvpt.Agent("--dram", "64M", "--metrics-addr", "127.0.0.1:0") as ag:
            a, b = engine(ag.pool), engine(ag.pool)
            keys = vf.request_keys("prom", 6)
            ra = a.request(keys)
            a.store(ra, rows_for("prom", 6))
            a.finish(ra)
            rb = b.request(keys + vf.request_keys("prom-absent", 2))
            self.assertEqual(len(b.fetch(rb)), 6)
            b.finish(rb)
            rb = b.request(keys[:2])  # already in b's CPU tier: b's tier is not asked
            b.fetch(rb)
            b.finish(rb)
            ns = a.tier.namespace
            self.assertEqual(ns, b.tier.namespace)
            sa, sb = a.tier.stats(), b.tier.stats()
            a.shutdown()  # adds what is pending to the pool's counters
            b.shutdown()
            port = kvpt.stat_json(ag.pool)["metrics_port"]
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
            label = ns.encode()[:47].decode(errors="ignore").replace("\\", "\\\\").replace('"', '\\"')
            got = {}
            for m in re.finditer(r'^kvpool_namespace_events_total\{([^}]*)\} (\d+)$', text, re.M):
                lab = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))
                if lab.get("namespace") == label:
                    got[lab["event"]] = int(m.group(2))
            want = {
                "lookup_keys": sb["lookup_keys"],
                "hit_keys": sb["hit_keys"],
                "load_pages": sb["load_rows"],
                "load_bytes": sb["load_bytes"],
                "store_pages": sa["store_rows"],
                "store_bytes": sa["store_bytes"],
            }
            self.assertEqual(want, {"lookup_keys": 8, "hit_keys": 6, "load_pages": 6, "load_bytes": 6 * ROW,
                                    "store_pages": 6, "store_bytes": 6 * ROW})
            self.assertEqual({k: got.get(k) for k in want}, want, text[-2000:])


class TestIdentity(unittest.TestCase):
    NEIGHBOURS = {
        "model": dict(model="org/model-ft"),
        "cache dtype": dict(dtype="fp8_e4m3"),
        "block size": dict(tokens_per_block=32),
        "tp": dict(tp=2),
        "pp": dict(pp=2),
        "pcp": dict(pcp=2),
        "dcp": dict(dcp=2),
        "kv cache groups": dict(layers=3),
        "row bytes": dict(row_bytes=2 * ROW),
        "replicated layout": dict(replicated_layout=True),
    }

    def test_namespace_separates_each_field(self):
        """Rows written under one identity; probed under each neighbour (one
        FileMapper field, the row bytes, the hash algorithm or the tier's
        namespace changed; the same keys): no hit; under the same: all."""
        with kvpt.Agent("--dram", "64M") as ag:
            keys = vf.request_keys("ns", 4)
            a = engine(ag.pool)
            ra = a.request(keys)
            a.store(ra, rows_for("ns", 4))
            a.finish(ra)
            base_ns = a.tier.namespace
            a.shutdown()

            def hits(tier=None, **cfg):
                e = engine(ag.pool, tier, **cfg)
                r = e.request(keys)
                n = len(e.fetch(r))
                e.finish(r)
                ns = e.tier.namespace
                e.shutdown()
                return n, ns

            self.assertEqual(hits(), (4, base_ns))
            seen = {base_ns}
            cases = dict(self.NEIGHBOURS)
            cases["tier namespace"] = dict(tier={"namespace": "tenant-b"})
            for what, cfg in cases.items():
                n, ns = hits(**cfg)
                self.assertEqual(n, 0, (what, ns))
                self.assertNotIn(ns, seen, what)
                seen.add(ns)
            try:
                vf.install(hash_algo="sha256_cbor")  # vLLM --prefix-caching-hash-algo
                n, ns = hits()
                self.assertEqual(n, 0)
                self.assertIn("h=sha256_cbor", ns)
            finally:
                vf.install()

    def test_parallel_agnostic_is_opt_in(self):
        """TP sizes collapse only where vLLM certifies the row portable and
        the tier config opts in (parallel_agnostic), or for a replicated
        (MLA) layout."""
        spec = vf.TieringOffloadingSpec(vf.make_config([], tp=2))
        spec4 = vf.TieringOffloadingSpec(vf.make_config([], tp=4))
        ns = lambda s, **kw: kv.namespace_for(s, ROW, "sha256", **kw)  # noqa: E731
        self.assertNotEqual(ns(spec), ns(spec4))
        cert = lambda tp: vf.TieringOffloadingSpec(_with_parallel(vf.make_config([], tp=tp), True))  # noqa: E731
        self.assertNotEqual(ns(cert(2)), ns(cert(4)))
        self.assertEqual(ns(cert(2), parallel_agnostic=True), ns(cert(4), parallel_agnostic=True))
        rep = lambda tp: vf.TieringOffloadingSpec(vf.make_config([], tp=tp, replicated_layout=True))  # noqa: E731
        self.assertEqual(ns(rep(2)), ns(rep(4)))

    def test_unknown_identity_stays_off(self):
        """No model in the spec: the tier stays off (one error line) unless
        the tier config names a namespace."""
        with kvpt.Agent("--dram", "64M") as ag:
            with self.assertLogs("kvpool.vllm", "ERROR") as logs:
                e = engine(ag.pool, model="")
            self.assertEqual(len([m for m in logs.output if "cannot establish" in m]), 1)
            r = e.request(vf.request_keys("u", 2))
            e.store(r, rows_for("u", 2))
            self.assertEqual(e.manager.failed_jobs, [("store", 0)])
            self.assertIsNone(e.tier.pool)
            e.finish(r)
            e.shutdown()
            e = engine(ag.pool, {"namespace": "deploy-a"}, model="")
            r = e.request(vf.request_keys("u", 2))
            e.store(r, rows_for("u", 2))
            self.assertEqual((e.manager.failed_jobs, e.tier.namespace.endswith("|deploy-a")), ([], True))
            e.finish(r)
            e.shutdown()

    def test_random_block_hashes_said_once(self):
        """vLLM's block hashes random per process (xxhash without
        PYTHONHASHSEED; any algorithm before vLLM PR #51875): one warning that
        names PYTHONHASHSEED; sha256 on a vLLM with #51875: none."""
        saved = os.environ.pop("PYTHONHASHSEED", None)
        with kvpt.Agent("--dram", "64M") as ag:
            try:
                for new, algo, warns in ((True, "sha256", False), (True, "xxhash", True), (False, "sha256", True)):
                    vf.install(new_hash=new, hash_algo=algo)
                    logger = logging.getLogger("kvpool.vllm")
                    with self.assertLogs(logger, "INFO") as logs:
                        e = engine(ag.pool)
                        for _ in range(3):
                            r = e.request(vf.request_keys("h", 2))
                            e.store(r, rows_for("h", 2))
                            e.finish(r)
                    said = [m for m in logs.output if "PYTHONHASHSEED" in m]
                    self.assertEqual(len(said), 1 if warns else 0, (new, algo, said))
                    self.assertEqual(e.tier.shareable, not warns)
                    self.assertIn(f"h={algo if new else 'unknown'}", e.tier.namespace)  # no seed to match before #51875
                    e.shutdown()
            finally:
                if saved is not None:
                    os.environ["PYTHONHASHSEED"] = saved
                vf.install()


def flip_on_disk(d, pattern):
    """Flip a byte of the record holding pattern in the SSD segment files."""
    import glob

    for f in glob.glob(os.path.join(d, "seg-*.kvs")):
        with open(f, "r+b") as fh:
            data = fh.read()
            at = data.find(pattern)
            if at >= 0:
                fh.seek(at + 7)
                fh.write(bytes([data[at + 7] ^ 0x40]))
                fh.flush()
                os.fsync(fh.fileno())
                return
    raise AssertionError("the row's bytes are on no segment file")


def _with_parallel(cfg, agnostic):
    import dataclasses

    return dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, is_parallelism_agnostic=agnostic))


LOADER = textwrap.dedent(
    """
    import sys, threading
    import vllm_fake as vf
    vf.install(module_path_loading=sys.argv[2] == "module_path")

    # vLLM's API server: the metric definitions, no pool, no thread
    before = threading.active_count()
    if sys.argv[2] == "module_path":
        tier = {"type": "KVPoolTier", "module_path": "kvpool.vllm", "pool": sys.argv[1]}
        extra = {"spec_name": "TieringOffloadingSpec", "secondary_tiers": [tier]}
    else:  # vLLM before module_path loading: the spec registers the tier
        tier = {"type": "kvpool", "pool": sys.argv[1]}
        extra = {"spec_name": "KVPoolTieringSpec", "spec_module_path": "kvpool.vllm", "secondary_tiers": [tier]}
    spec_cls = vf.OffloadingSpecFactory.get_spec_cls(extra)
    defs = spec_cls.build_metric_definitions(extra)
    assert "vllm:kv_offload_kvpool_promoted_bytes" in defs, sorted(defs)
    assert threading.active_count() == before
    assert "kvpool.vllm" in sys.modules and sys.modules["kvpool.vllm"].KVPoolTier.__mro__[1] is vf.SecondaryTierManager

    # the EngineCore: the spec's manager builds the tier through the factory
    cfg = vf.make_config([tier], spec_name=extra["spec_name"], **({} if "spec_module_path" not in extra
                         else {"spec_module_path": "kvpool.vllm"}))
    e = vf.Engine(cfg)
    keys = vf.request_keys("loader", 4)
    rows = [vf.row_bytes_for("loader", i, e.primary.row_bytes) for i in range(4)]
    r = e.request(keys)
    e.store(r, rows)
    e.finish(r)
    e.evict_primary()
    r = e.request(keys)
    assert e.fetch(r) == rows
    e.finish(r)
    e.shutdown()
    print("LOADER-OK", type(e.tier).__name__, e.tier.tier_type)
    """
)


class TestLoading(unittest.TestCase):
    def _load(self, how):
        with kvpt.Agent("--dram", "64M") as ag:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), HERE])
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            return subprocess.run(
                [sys.executable, "-c", LOADER, ag.pool, how], env=env, capture_output=True, text=True, timeout=120
            )

    def test_module_path(self):
        """vLLM (PR #51007 on) imports module_path, takes the class named by
        "type", asserts it subclasses its SecondaryTierManager, builds it."""
        r = self._load("module_path")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("LOADER-OK KVPoolTier KVPoolTier", r.stdout)

    def test_spec_module_path_on_older_vllm(self):
        """A vLLM whose tier factory knows registered types only: the spec
        from spec_module_path registers "kvpool" and builds the tier."""
        r = self._load("spec_module_path")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("LOADER-OK KVPoolTier kvpool", r.stdout)

    def test_stand_in_without_vllm(self):
        """Without vLLM the module imports (a stand-in base class with vLLM's
        abstract methods); importing it opens nothing."""
        code = (
            "import threading, kvpool.vllm as kv\n"
            "assert kv.SecondaryTierManager is kv._StandInSecondaryTierManager\n"
            "assert issubclass(kv.KVPoolTier, kv.SecondaryTierManager) and not kv.KVPoolTier.__abstractmethods__\n"
            "assert {'lookup', 'submit_store', 'submit_load', 'get_finished_jobs', 'drain_jobs', 'on_new_request'}"
            " <= kv._StandInSecondaryTierManager.__abstractmethods__\n"
            "assert threading.active_count() == 1\n"
            "print('STANDIN-OK', len(kv.KVPoolTier.build_metric_definitions({})))\n"
        )
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), PYTHONDONTWRITEBYTECODE="1")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"STANDIN-OK {len(kv.METRICS)}", r.stdout)


if __name__ == "__main__":
    unittest.main()
