# SPDX-License-Identifier: MIT
"""The Python binding against real agents: round trips of every call,
buffers of every kind, batch answers per key, SSD batches served in parts
through a small staging arena, namespaces, every status as its exception
(each raised by a real pool where one can be made to), threads sharing one
Pool, fork refused in the child, a killed worker leaving nothing held, and
the GIL released while C copies."""

import array
import ctypes
import errno
import glob
import mmap
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import kvpool
import kvpt


def val(i, size, ver=1):
    """A value whose bytes depend on its key and version."""
    head = f"{i}:{ver}:".encode()
    body = (head * (size // len(head) + 1))[:size]
    return body


class Basics(unittest.TestCase):
    def setUp(self):
        self.a = kvpt.Agent("--dram", "64M", "--max-value", "8M")
        self.p = kvpool.Pool(self.a.pool, namespace="basics")

    def tearDown(self):
        self.p.close()
        self.a.stop()

    def test_put_get_every_buffer_kind(self):
        p = self.p
        v = os.urandom(100_000)
        p.put("bytes", v)
        p.put("bytearray", bytearray(v))
        p.put("memoryview", memoryview(v)[1000:2000])
        p.put("array", array.array("d", range(1000)))
        raw = ctypes.create_string_buffer(v[:5000], 5000)
        p.put("addr", addr=ctypes.addressof(raw), length=5000)
        # into a bytearray, a memoryview slice, an mmap, an array, an address
        out = bytearray(100_000)
        self.assertEqual(p.get("bytes", out), 100_000)
        self.assertEqual(bytes(out), v)
        big = bytearray(200_000)
        self.assertEqual(p.get("bytearray", memoryview(big)[50_000:150_000]), 100_000)
        self.assertEqual(bytes(big[50_000:150_000]), v)
        m = mmap.mmap(-1, 4096)
        self.assertEqual(p.get("memoryview", m), 1000)
        self.assertEqual(m[:1000], v[1000:2000])
        a = array.array("d", bytes(8000))
        self.assertEqual(p.get("array", a), 8000)
        self.assertEqual(list(a), [float(x) for x in range(1000)])
        dst = ctypes.create_string_buffer(5000)
        self.assertEqual(p.get("addr", addr=ctypes.addressof(dst), length=5000), 5000)
        self.assertEqual(dst.raw, v[:5000])
        # ranges, clipped at the end; get_bytes
        part = bytearray(10)
        self.assertEqual(p.get("bytes", part, offset=99_995), 5)
        self.assertEqual(bytes(part[:5]), v[-5:])
        self.assertEqual(p.get_bytes("bytes"), v)
        # bytes keys and str keys are the same key
        self.assertEqual(p.get_bytes(b"bytes"), v)

    def test_buffers_refused(self):
        p = self.p
        p.put("k", b"x" * 100)
        with self.assertRaises(kvpool.InvalidArgument):
            p.get("k", b"read-only bytes" * 10)  # not writable
        with self.assertRaises(kvpool.InvalidArgument):
            p.put("k2", memoryview(b"abcdef")[::2])  # not contiguous
        with self.assertRaises(kvpool.InvalidArgument):
            p.put("k3", 12345)  # no buffer
        with self.assertRaises(kvpool.InvalidArgument):
            p.put("", b"x")  # empty key
        with self.assertRaises(kvpool.InvalidArgument):
            p.put("x" * 256, b"x")  # key too long
        with self.assertRaises(kvpool.InvalidArgument):
            p.put("k4", b"")  # a value of 0 bytes (the C call's -EINVAL)
        with self.assertRaises(kvpool.InvalidArgument):
            kvpool.Pool(self.a.pool)  # no namespace

    def test_exists_delete_lease_stat(self):
        p = self.p
        self.assertFalse(p.exists("k"))
        p.put("k", b"v" * 3000)
        self.assertTrue(p.exists("k"))
        with p.lease("k", 5000) as le:
            self.assertEqual(le.length, 3000)
            self.assertEqual(le.tier, kvpool.TIER_DRAM)
            self.assertGreater(le.seg_offset, 0)
        le.release()  # twice: harmless
        st = p.stat()
        self.assertTrue(st["agent_up"])
        self.assertEqual(st["dram_total_bytes"], 64 << 20)
        self.assertEqual(st["max_value"], 8 << 20)
        self.assertEqual(st["entries"], 1)
        self.assertEqual(st["puts"], 1)
        self.assertEqual(st["exists"], 2)
        self.assertEqual(st["exists_hits"], 1)
        p.delete("k")
        self.assertFalse(p.exists("k"))
        with self.assertRaises(kvpool.Miss):
            p.delete("k")
        with self.assertRaises(kvpool.Miss):
            p.lease("k", 1000)

    def test_batches_answer_per_key(self):
        p = self.p
        n = 300
        keys = [f"page-{i:04d}-{'x' * (i % 7)}" for i in range(n)]  # lengths differ
        vals = [val(i, 1000 + 37 * i) for i in range(n)]
        addrs = [kvpool.buffer_address(v)[0] for v in vals]
        lens = [len(v) for v in vals]
        # a third exist already: EXISTS for those, 0 for the rest
        for i in range(0, n, 3):
            p.put(keys[i], vals[i])
        st = p.batch_put(keys, addrs, lens)
        self.assertEqual(st, [kvpool.EXISTS if i % 3 == 0 else 0 for i in range(n)])
        # gets: present, absent, a buffer too small for the whole value
        # (clipped: a batch get copies [off, off+len))
        q = keys[:100] + ["absent-1", "absent-2"] + keys[100:]
        outs = [bytearray(20_000) for _ in q]
        oaddr = [kvpool.buffer_address(o, True)[0] for o in outs]
        olen = [20_000] * len(q)
        olen[5] = 10  # clipped to 10 bytes
        res = p.batch_get(q, oaddr, olen)
        self.assertEqual(res[100], kvpool.MISS)
        self.assertEqual(res[101], kvpool.MISS)
        self.assertEqual(res[5], 10)
        self.assertEqual(bytes(outs[5][:10]), vals[5][:10])
        for j, k in enumerate(q):
            if j in (5, 100, 101):
                continue
            i = j if j < 100 else j - 2
            self.assertEqual(res[j], lens[i], k)
            self.assertEqual(bytes(outs[j][: lens[i]]), vals[i], k)
        # offsets
        res = p.batch_get(keys[:3], oaddr[:3], [4, 4, 4], offsets=[0, 10, 1000])
        self.assertEqual(res, [4, 4, 4])
        self.assertEqual(bytes(outs[1][:4]), vals[1][10:14])
        # the prefix
        self.assertEqual(p.batch_exists_prefix(keys), n)
        self.assertEqual(p.batch_exists_prefix(keys[:50] + ["absent"] + keys[50:]), 50)
        self.assertEqual(p.batch_exists_prefix([]), 0)
        # non-ASCII keys: lengths in bytes
        uk = ["ключ-1", "ключ-2"]
        self.assertEqual(p.batch_put(uk, addrs[:2], lens[:2]), [0, 0])
        self.assertEqual(p.get_bytes("ключ-2"), vals[1])
        # a bad key answers for itself; arrays of the wrong length are refused
        with self.assertRaises(kvpool.InvalidArgument):
            p.batch_get(keys[:2], oaddr[:1], olen[:2])
        with self.assertRaises(kvpool.InvalidArgument):
            p.batch_exists_prefix(["ok", ""])
        # arrays may be array('Q') and tuples
        res = p.batch_get(tuple(keys[:2]), array.array("Q", oaddr[:2]), (20_000, 20_000))
        self.assertEqual(res, lens[:2])

    def test_packed_keys(self):
        """kvpool.Keys: names x suffixes, name-major, the same keys as the
        plain list; unequal names, non-ASCII ones and names holding the
        suffix's last char take the plain path, never wrong keys."""
        p = self.p
        names = [f"{i * 7919:064x}" for i in range(128)]
        sfx = ("_0_k", "_0_v")
        plain = [n + x for n in names for x in sfx]
        vals = [val(i, 3000) for i in range(256)]
        addrs = [kvpool.buffer_address(v)[0] for v in vals]
        K = kvpool.Keys(names, sfx)
        self.assertEqual(len(K), 256)
        self.assertIsNone(K.plain)
        self.assertEqual([K[j] for j in range(256)], [k.encode() for k in plain])
        self.assertEqual(kvpool.Keys([n.encode() for n in names], (b"_0_k", "_0_v")).blob, K.blob)
        self.assertEqual(p.batch_put(K, addrs, [3000] * 256), [0] * 256)
        self.assertEqual(p.get_bytes(plain[77]), vals[77])  # the same key as a str
        self.assertEqual(p.batch_exists_prefix(K), 256)
        # twice (the cached layout), with another shape between
        self.assertEqual(p.batch_exists_prefix(kvpool.Keys(names[:3], sfx)), 6)
        self.assertEqual(p.batch_exists_prefix(K), 256)
        outs = bytearray(256 * 3000)
        b = kvpool.buffer_address(outs, True)[0]
        self.assertEqual(p.batch_get(K, [b + j * 3000 for j in range(256)], [3000] * 256), [3000] * 256)
        self.assertEqual(bytes(outs[5 * 3000 : 6 * 3000]), vals[5])
        with p.lookup_pin(kvpool.Keys(names[:10] + ["f" * 64] + names[10:], sfx)) as ps:
            self.assertEqual((ps.count, ps.stop_status), (20, kvpool.MISS))
        # the plain path: the answers are the same
        for names2, sfx2 in (
            (["abc", "d", "ef"], ("_k", "_v")),  # unequal, same total as 3 x 2
            (["ab", "cdef", "gh", "ij"], ("_k",)),
            (["ak", "bb"], ("_k",)),  # a name holds the check char
            (["é1", "é2"], ("_k",)),  # non-ASCII
            (["aa", "bb"], ("",)),  # no check char: lengths compared
            ([b"aa", b"bb"], (b"_k", b"_v")),
        ):
            Kp = kvpool.Keys(names2, sfx2)
            want = [(n.encode() if isinstance(n, str) else n) + (x.encode() if isinstance(x, str) else x)
                    for n in names2 for x in sfx2]
            self.assertEqual([Kp[j] for j in range(len(Kp))], want, names2)
            self.assertEqual(p.batch_exists_prefix(Kp), 0)
        self.assertEqual(len(kvpool.Keys([], sfx)), 0)
        self.assertEqual(p.batch_exists_prefix(kvpool.Keys([], sfx)), 0)

    def test_chain_put(self):
        p = self.p
        keys = [f"chain-{i}" for i in range(8)]
        vals = [val(i, 4096) for i in range(8)]
        st = p.batch_put(keys, [kvpool.buffer_address(v)[0] for v in vals], [4096] * 8, depth0=4)
        self.assertEqual(st, [0] * 8)
        self.assertEqual(p.get_bytes("chain-7"), vals[7])

    def test_pinset(self):
        p = self.p
        keys = [f"pin-{i}" for i in range(20)]
        vals = [val(i, 5000 + i) for i in range(20)]
        p.batch_put(keys, [kvpool.buffer_address(v)[0] for v in vals], [len(v) for v in vals])
        outs = [bytearray(6000) for _ in range(20)]
        oaddr = [kvpool.buffer_address(o, True)[0] for o in outs]
        with p.lookup_pin(keys[:10] + ["absent"] + keys[10:]) as ps:
            self.assertEqual(ps.count, 10)
            self.assertEqual(len(ps), 10)
            self.assertEqual(ps.stop_status, kvpool.MISS)
            self.assertEqual(ps.lengths(), [5000 + i for i in range(10)])
            self.assertEqual(ps.tier(3), kvpool.TIER_DRAM)
            # a pinned key deleted meanwhile is still read whole
            p.delete(keys[2])
            self.assertEqual(ps.get(oaddr[:10], [6000] * 10), [5000 + i for i in range(10)])
            for i in range(10):
                self.assertEqual(bytes(outs[i][: 5000 + i]), vals[i])
            with self.assertRaises(kvpool.InvalidArgument):
                ps.get(oaddr[:11], [6000] * 11)  # more than pinned
        with self.assertRaises(kvpool.Closed):
            ps.get(oaddr[:1], [6000])
        ps.release()  # twice: harmless
        with p.lookup_pin(keys[3:5]) as ps:
            self.assertEqual((ps.count, ps.stop_status), (2, kvpool.OK))
        # a pinset still open when its Pool closes: freed with it
        ps = p.lookup_pin(keys[3:5])
        p.close()
        with self.assertRaises(kvpool.Closed):
            ps.get(oaddr[:1], [6000])
        ps.release()
        self.assertNotIn(f" {os.getpid()} ", kvpt.clients_of(self.a.pool))


class Statuses(unittest.TestCase):
    """Each status raised as its exception by a pool made to return it."""

    def test_table(self):
        table = {
            kvpool.MISS: (kvpool.Miss, "MISS"),
            kvpool.EXISTS: (kvpool.Exists, "EXISTS"),
            kvpool.BUSY: (kvpool.Busy, "BUSY"),
            kvpool.TOO_LARGE: (kvpool.TooLarge, "TOO_LARGE"),
            kvpool.NOSPC: (kvpool.NoSpace, "NOSPC"),
            kvpool.MSGSIZE: (kvpool.BufferTooSmall, "MSGSIZE"),
            kvpool.FAILED: (kvpool.Failed, "FAILED"),
            kvpool.BADMSG: (kvpool.Failed, "FAILED"),
            kvpool.UNAVAILABLE: (kvpool.Unavailable, "UNAVAILABLE"),
            kvpool.STALE: (kvpool.Stale, "STALE"),
            kvpool.PROTO: (kvpool.ProtocolMismatch, "PROTO"),
            kvpool.USERS: (kvpool.TooManyClients, "USERS"),
            kvpool.ACCES: (kvpool.PermissionDenied, "ACCES"),
            kvpool.NOMEM: (kvpool.OutOfMemory, "NOMEM"),
            kvpool.INVAL: (kvpool.InvalidArgument, "INVAL"),
        }
        for status, (cls, name) in table.items():
            e = kvpool.error(status, "k")
            self.assertIsInstance(e, cls)
            self.assertIsInstance(e, kvpool.KVPoolError)
            self.assertEqual(e.status, status)
            self.assertEqual(e.errno, -status)
            self.assertEqual(e.name, name)
            self.assertEqual(kvpool.status_name(status), name)
            self.assertIn(name, str(e))
            self.assertIn("'k'", str(e))
        self.assertEqual(kvpool.status_name(0), "OK")
        self.assertEqual(kvpool.status_name(-9999), "UNKNOWN")
        self.assertEqual(kvpool.error(-9999).name, "UNKNOWN")
        # the standard hierarchies an engine may already catch
        self.assertTrue(issubclass(kvpool.Miss, KeyError))
        self.assertTrue(issubclass(kvpool.InvalidArgument, ValueError))
        self.assertTrue(issubclass(kvpool.PermissionDenied, PermissionError))
        self.assertTrue(issubclass(kvpool.OutOfMemory, MemoryError))
        self.assertEqual(kvpool.MISS, -errno.ENOENT)

    def test_ctypes_structs_match_c(self):
        """Each ctypes struct of the binding has C's field offsets and sizes
        and the struct's size (offsetof, compiled from kvpool.h now)."""
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            self.skipTest("no C compiler")
        structs = {"kvp_op": kvpool._native.Op, "kvp_lease": kvpool._native.Lease, "kvp_stat": kvpool._native.Stat,
                   "kvp_dev_info": kvpool._native.DevInfo}
        lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "kvpool.h"', "int main(void) {"]
        for cname, py in structs.items():
            lines.append(f'printf("{cname} . %zu %zu\\n", sizeof(struct {cname}), sizeof(struct {cname}));')
            for f, _ in py._fields_:
                lines.append(f'printf("{cname} {f} %zu %zu\\n", offsetof(struct {cname}, {f}), '
                             f'sizeof(((struct {cname} *)0)->{f}));')
        lines.append("return 0; }")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with tempfile.TemporaryDirectory() as d:
            src, exe = os.path.join(d, "off.c"), os.path.join(d, "off")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            subprocess.run([cc, "-std=c11", "-D_GNU_SOURCE", "-I", root, src, "-o", exe], check=True, timeout=120)
            out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
        for ln in out.splitlines():
            cname, field, off, size = ln.split()
            py = structs[cname]
            if field == ".":
                self.assertEqual(ctypes.sizeof(py), int(off), cname)
            else:
                d = getattr(py, field)
                self.assertEqual((d.offset, d.size), (int(off), int(size)), f"{cname}.{field}")

    def test_declared_once_in_c(self):
        """The statuses come from kvpool.h's KVP_STATUSES through the
        library (kvp_statuses, kvp_status_name): every one has a name here,
        its exception (but OK and INPROGRESS, never raised), kvp_strerror's
        text; the table a pre-1.5 library falls back to says the same."""
        self.assertEqual(kvpool._native.STATUSES_FROM, "libkvpool.so (KVP_STATUSES)")
        self.assertEqual(kvpool.STATUSES, kvpool._native._STATUSES_1_4)
        self.assertEqual(len(set(kvpool.STATUSES.values())), len(kvpool.STATUSES))
        for name, status in kvpool.STATUSES.items():
            self.assertEqual(getattr(kvpool, name), status)
            self.assertEqual(kvpool._native.lib.kvp_status_name(status).decode(), name)
            self.assertNotEqual(kvpool.describe(status), "unknown status")
            if name in ("OK", "INPROGRESS"):
                continue
            e = kvpool.error(status)
            self.assertNotEqual(e.name, "UNKNOWN", name)
            self.assertEqual(kvpool.status_name(status), "FAILED" if name == "BADMSG" else name)
        self.assertIsNone(kvpool._native.lib.kvp_status_name(-9999))
        self.assertEqual(kvpool.version().split(".")[0], "1")
        self.assertGreaterEqual(tuple(int(x) for x in kvpool.version().split(".")), (1, 5, 0))

    def test_raised_by_a_pool(self):
        with kvpt.Agent(
            "--dram", "4M", "--max-value", "1M", "--holds-per-client", "16", "--max-clients", "3"
        ) as a, kvpool.Pool(a.pool, namespace="st") as p:
            mb = b"m" * (1 << 20)
            p.put("v0", mb)
            with self.assertRaises(kvpool.Exists):
                p.put("v0", mb)
            with self.assertRaises(kvpool.Miss):
                p.get("nope", bytearray(10))
            with self.assertRaises(kvpool.BufferTooSmall):
                p.get("v0", bytearray(10))
            with self.assertRaises(kvpool.TooLarge):
                p.put("big", b"b" * ((1 << 20) + 1))
            with self.assertRaises(kvpool.InvalidArgument):
                p.get("v0", bytearray(10), offset=(1 << 20) + 1)
            # everything held and the arena full: NOSPC.  Pin each value
            # put; the agent evicts only what is not held
            pins = []
            try:
                for i in range(1, 12):
                    try:
                        p.put(f"v{i}", mb)
                    except kvpool.NoSpace:
                        break
                    ps = p.lookup_pin([f"v{i}"])
                    pins.append(ps)
                else:
                    self.fail("a 4 MiB arena took 11 held 1 MiB values")
                self.assertGreaterEqual(len(pins), 3)
            finally:
                for ps in pins:
                    ps.release()
            # this client's pinsets hold every hold slot: BUSY (not a miss)
            for i in range(16):
                p.put(f"s{i}", b"s" * 100)
            p.put("t", b"t" * 100)
            with p.lookup_pin([f"s{i}" for i in range(16)]) as ps:
                self.assertEqual(ps.count, 16)
                with self.assertRaises(kvpool.Busy):
                    p.get("t", bytearray(100))
            self.assertEqual(p.get("s0", bytearray(100)), 100)
            # every client slot taken: USERS (this thread holds one; the
            # agent's readiness probe is gone)
            extra = [kvpool.Pool(a.pool, namespace="st") for _ in range(2)]
            with self.assertRaises(kvpool.TooManyClients):
                kvpool.Pool(a.pool, namespace="st")
            for e in extra:
                e.close()
        # no segment: UNAVAILABLE
        with self.assertRaises(kvpool.Unavailable):
            kvpool.Pool(kvpt.new_pool_name(), namespace="x")
        with self.assertRaises(kvpool.InvalidArgument):
            kvpool.Pool("bad/name", namespace="x")

    def test_acces(self):
        with kvpt.Agent("--dram", "4M") as a:
            path = f"/dev/shm/kvpool.{a.pool}"
            os.chmod(path, 0o666)  # writable by everyone: never trusted
            try:
                r = subprocess.run(
                    [sys.executable, "-c", f"import kvpool; kvpool.Pool({a.pool!r}, namespace='x')"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
            finally:
                os.chmod(path, 0o600)
            self.assertIn("kvpool.PermissionDenied: ACCES", r.stderr)

    def test_failed_and_unavailable_off_ssd(self):
        d = kvpt.ssd_dir("pyfail")
        try:
            args = ["--dram", "16M", "--dram-unit", "4K", "--dram-high", "0", "--dram-low", "0"]
            args += ["--no-promote", "--ssd-dir", d, "--ssd-segment", "8M", "--staging", "8M"]
            with kvpt.Agent(*args) as a, kvpool.Pool(a.pool, namespace="f") as p:
                vals = [os.urandom(64 << 10) for _ in range(4)]
                for i, v in enumerate(vals):
                    p.put(f"f{i}", v)
                wait_on_ssd(p, [f"f{i}" for i in range(4)])
                # flip a byte of f1's value on disk: FAILED, never a miss
                flip_on_disk(d, vals[1][4096:4160])
                out = bytearray(64 << 10)
                self.assertEqual(p.get("f0", out), 64 << 10)
                self.assertEqual(bytes(out), vals[0])
                with self.assertRaises(kvpool.Failed) as cm:
                    p.get("f1", out)
                self.assertIn(cm.exception.status, (kvpool.FAILED, kvpool.BADMSG))
                # the agent gone: an SSD read is UNAVAILABLE, a probe still works
                a.kill()
                with self.assertRaises(kvpool.Unavailable):
                    p.get("f2", out)
                self.assertTrue(p.exists("f2"))
                self.assertFalse(p.stat()["agent_up"])
        finally:
            shutil.rmtree(d, ignore_errors=True)


def wait_on_ssd(p, keys):
    """Every value demoted and out of DRAM (--dram-high 0 --dram-low 0),
    watched without holding anything (a hold would keep the DRAM copy)."""
    kvpt.wait_until(lambda: p.stat()["dram_used_bytes"] == 0, 60.0, "values demoted to SSD")
    with p.lookup_pin(keys) as ps:
        assert ps.count == len(keys), ps.count
        assert all(ps.tier(k) == kvpool.TIER_SSD for k in range(ps.count))


def flip_on_disk(d, pattern):
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
    raise AssertionError("the value's bytes are on no segment file")


class SsdInParts(unittest.TestCase):
    def test_batch_through_small_arena(self):
        """200 SSD-resident 256 KiB values through a 4-slot staging arena
        in one batch_get: served in parts, every key whole."""
        d = kvpt.ssd_dir("pyparts")
        try:
            args = ["--dram", "64M", "--dram-unit", "4K", "--dram-high", "0", "--dram-low", "0", "--no-promote"]
            args += ["--ssd-dir", d, "--ssd-segment", "16M", "--staging", "4M", "--staging-slot", "1M"]
            with kvpt.Agent(*args) as a, kvpool.Pool(a.pool, namespace="parts") as p:
                n, size = 200, 256 << 10
                keys = [f"p{i:04d}" for i in range(n)]
                vals = [val(i, size, 7) for i in range(n)]
                st = p.batch_put(keys, [kvpool.buffer_address(v)[0] for v in vals], [size] * n)
                self.assertEqual(st, [0] * n)
                wait_on_ssd(p, keys)
                out = bytearray(n * size)
                base = kvpool.buffer_address(out, True)[0]
                res = p.batch_get(keys, [base + i * size for i in range(n)], [size] * n)
                self.assertEqual(res, [size] * n)
                for i in range(n):
                    self.assertEqual(bytes(out[i * size : (i + 1) * size]), vals[i])
                # the pinned path too: never a miss, in parts
                with p.lookup_pin(keys) as ps:
                    self.assertEqual(ps.count, n)
                    out2 = bytearray(n * size)
                    b2 = kvpool.buffer_address(out2, True)[0]
                    self.assertEqual(ps.get([b2 + i * size for i in range(n)], [size] * n), [size] * n)
                    self.assertEqual(out2, out)
        finally:
            shutil.rmtree(d, ignore_errors=True)


class Namespaces(unittest.TestCase):
    def test_isolated(self):
        with kvpt.Agent("--dram", "16M") as a:
            with kvpool.Pool(a.pool, namespace="model|bf16") as bf, kvpool.Pool(a.pool, namespace="model|fp8") as f8:
                bf.put("page", b"B" * 4096)
                self.assertFalse(f8.exists("page"))
                with self.assertRaises(kvpool.Miss):
                    f8.get("page", bytearray(4096))
                f8.put("page", b"F" * 4096)  # the same key, its own value
                self.assertEqual(bf.get_bytes("page"), b"B" * 4096)
                self.assertEqual(f8.get_bytes("page"), b"F" * 4096)
                self.assertEqual(f8.batch_exists_prefix(["page", "page"]), 2)
                f8.delete("page")
                self.assertTrue(bf.exists("page"))

    def test_counters_per_namespace(self):
        """Pool.count adds to its namespace's row in the segment, summed over
        processes and kept after they exit; another namespace has its own
        row; what its live clients pin is counted by the agent; the
        Python list of events is C's (kvp_ns_event_name)."""
        lib = kvpool._native.lib
        self.assertEqual(tuple(lib.kvp_ns_event_name(i).decode() for i in range(len(kvpool.NS_EVENTS))), kvpool.NS_EVENTS)
        self.assertIsNone(lib.kvp_ns_event_name(len(kvpool.NS_EVENTS)))
        with kvpt.Agent("--dram", "16M") as a:
            with kvpool.Pool(a.pool, namespace="model-a|bf16") as pa, kvpool.Pool(a.pool, namespace="model-b") as pb:
                self.assertTrue(pa.count("hit_keys", 5))
                self.assertTrue(pa.count("lookup_keys"))
                self.assertTrue(pb.count("store_bytes", 1 << 40))
                with self.assertRaises(kvpool.InvalidArgument):
                    pa.count("hits")
                with self.assertRaises((kvpool.InvalidArgument, TypeError)):
                    pa.count("hit_keys", -1)
                # another process of namespace a adds to the same row, and exits
                code = (
                    "import kvpool, sys\n"
                    "with kvpool.Pool(sys.argv[1], namespace='model-a|bf16') as p:\n"
                    "    assert p.count('hit_keys', 7)\n"
                )
                subprocess.run([sys.executable, "-c", code, a.pool], check=True, timeout=60)
                for i in range(3):
                    pa.put(f"k{i}", b"x" * 4096)
                ps = pa.lookup_pin([f"k{i}" for i in range(3)])
                rows = {r["ns"]: r for r in kvpt.stat_json(a.pool)["namespaces"]}
                self.assertEqual(set(rows), {"model-a|bf16", "model-b"})
                self.assertEqual(rows["model-a|bf16"]["hit_keys"], 12)
                self.assertEqual(rows["model-a|bf16"]["lookup_keys"], 1)
                self.assertEqual(rows["model-a|bf16"]["store_bytes"], 0)
                self.assertEqual(rows["model-a|bf16"]["pinned"], 3)
                self.assertEqual(rows["model-b"]["store_bytes"], 1 << 40)
                self.assertEqual(rows["model-b"]["pinned"], 0)
                ps.release()
                self.assertEqual({r["ns"]: r["pinned"] for r in kvpt.stat_json(a.pool)["namespaces"]}["model-a|bf16"], 0)


class Remote(unittest.TestCase):
    """The remote tier's calls on one node (tests/cluster/test_cluster.sh
    runs them across nodes): flags per Pool, in every thread; locate."""

    def test_flags_and_locate(self):
        with kvpt.Agent("--dram", "16M") as a:
            with kvpool.Pool(a.pool, namespace="remote") as p:
                self.assertEqual(p.remote(), (True, False))
                p.put("here", b"x" * 4096)
                self.assertEqual(p.batch_locate(["here", "absent"]), [kvpool.TIER_DRAM, 0])
                self.assertEqual(p.remote(probe=True, get=False), (False, True))
                seen = []
                t = threading.Thread(target=lambda: seen.append(p.batch_locate(["here"])))
                t.start()
                t.join()
                self.assertEqual(seen, [[kvpool.TIER_DRAM]])
                # no cluster: a miss is a miss, at once
                self.assertEqual(p.batch_exists_prefix(["here", "absent"]), 1)
                with self.assertRaises(kvpool.Miss):
                    p.get("absent", bytearray(16))


class Threads(unittest.TestCase):
    def test_one_pool_many_threads(self):
        """Eight threads share one Pool: each gets a client slot of its own
        (the pool counts them), every byte verified, slots freed when the
        threads end and the Pool closes."""
        with kvpt.Agent("--dram", "128M") as a:
            p = kvpool.Pool(a.pool, namespace="thr")
            errors = []

            def work(t):
                try:
                    for r in range(30):
                        keys = [f"t{t}-r{r}-{i}" for i in range(32)]
                        vals = [val(i + 1000 * t, 8192, r) for i in range(32)]
                        st = p.batch_put(keys, [kvpool.buffer_address(v)[0] for v in vals], [8192] * 32)
                        assert st == [0] * 32, st
                        outs = bytearray(32 * 8192)
                        b = kvpool.buffer_address(outs, True)[0]
                        got = p.batch_get(keys, [b + i * 8192 for i in range(32)], [8192] * 32)
                        assert got == [8192] * 32, got
                        for i in range(32):
                            assert outs[i * 8192 : (i + 1) * 8192] == vals[i]
                        with p.lookup_pin(keys[:8]) as ps:
                            assert ps.count == 8
                        assert p.get_bytes(keys[31]) == vals[31]
                    seen.append(p.stat()["clients"])
                except Exception as e:  # reported by the main thread
                    errors.append(repr(e))

            seen = []
            threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            self.assertGreaterEqual(max(seen), 2)  # more than one slot in use
            # the threads ended: their clients are closed (slots freed)
            kvpt.wait_until(lambda: p.stat()["clients"] == 1, 10.0, "thread clients closed")
            # a pinset made on one thread, released on another
            ps = p.lookup_pin(["t0-r0-0"])
            th = threading.Thread(target=ps.release)
            th.start()
            th.join()
            self.assertEqual(ps.count, 1)
            p.close()
            with self.assertRaises(kvpool.Closed):
                p.exists("x")

    def test_gil_released(self):
        """A Python thread keeps running while another copies 256 MiB in
        one C call: ctypes.CDLL drops the GIL for every call."""
        self.assertIsInstance(kvpool._native.lib, ctypes.CDLL)
        self.assertNotIsInstance(kvpool._native.lib, ctypes.PyDLL)
        with kvpt.Agent("--dram", "320M", "--max-value", "64M") as a, kvpool.Pool(a.pool, namespace="gil") as p:
            v = b"g" * (32 << 20)
            keys = [f"g{i}" for i in range(8)]
            for k in keys:
                p.put(k, v)
            out = bytearray(8 * (32 << 20))
            b = kvpool.buffer_address(out, True)[0]
            ticks = []
            inside = threading.Event()
            done = threading.Event()

            def spin():
                while not done.is_set():
                    if inside.is_set():
                        ticks.append(1)

            t = threading.Thread(target=spin)
            t.start()
            # the spinning thread must get the GIL while C copies: with the
            # GIL held it would not run at all between these two lines
            sys.setswitchinterval(0.0005)
            inside.set()
            for _ in range(3):
                res = p.batch_get(keys, [b + i * (32 << 20) for i in range(8)], [32 << 20] * 8)
                self.assertEqual(res, [32 << 20] * 8)
            inside.clear()
            done.set()
            t.join()
            self.assertGreater(len(ticks), 1000)


CHILD = r"""
import os, sys, kvpool
pool = sys.argv[1]
p = kvpool.Pool(pool, namespace="kill")
keys = [f"k{i}" for i in range(64)]
ps = p.lookup_pin(keys)                 # holds
assert ps.count == 64, ps.count
out = bytearray(64 * 65536)
b = kvpool.buffer_address(out, True)[0]
print("pinned", ps.count, flush=True)
while True:                              # batches in flight when killed
    r = p.batch_get(keys, [b + i * 65536 for i in range(64)], [65536] * 64)
    assert r == [65536] * 64, r
"""


class Processes(unittest.TestCase):
    def test_fork_refused_in_child(self):
        with kvpt.Agent("--dram", "16M") as a:
            p = kvpool.Pool(a.pool, namespace="fork")
            p.put("k", b"parent")
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report, never raise out of here
                code = 1
                try:
                    try:
                        p.get_bytes("k")
                        code = 2
                    except kvpool.Forked as e:
                        if "fork" in str(e):
                            q = kvpool.Pool(a.pool, namespace="fork")  # a new Pool works
                            code = 0 if q.get_bytes("k") == b"parent" else 3
                            q.close()
                    p.close()  # must not close the parent's slot
                    os.write(w, b"%d" % code)
                finally:
                    os._exit(0)
            os.close(w)
            os.waitpid(pid, 0)
            self.assertEqual(os.read(r, 10), b"0")
            os.close(r)
            # the parent's client is untouched
            self.assertEqual(p.get_bytes("k"), b"parent")
            self.assertIn(f" {os.getpid()} ", kvpt.clients_of(a.pool))
            p.close()

    def test_fork_while_threads_hold_clients(self):
        """A child forked while other threads hold clients (subprocess with
        preexec_fn, os.fork): Python drops those threads' states in the child,
        and with them their thread-local clients, before the at-fork hook
        runs; the child must not close them (it freed the parent's slots, and
        crashed on the second: found by the vLLM tier's io threads)."""
        with kvpt.Agent("--dram", "16M") as a, kvpool.Pool(a.pool, namespace="fork-threads") as p:
            p.put("k", b"parent")
            ready, done = threading.Barrier(4), threading.Event()
            got = []

            def hold():
                p.get_bytes("k")  # this thread's client
                ready.wait(30)
                done.wait(30)
                got.append(p.get_bytes("k"))

            ts = [threading.Thread(target=hold) for _ in range(3)]
            for t in ts:
                t.start()
            try:
                ready.wait(30)
                before = kvpt.clients_of(a.pool).count(f" {os.getpid()} ")
                self.assertEqual(before, 4)
                r = subprocess.run(["true"], preexec_fn=lambda: None)
                self.assertEqual(r.returncode, 0)  # a child that touched the clients died of it
                self.assertEqual(kvpt.clients_of(a.pool).count(f" {os.getpid()} "), before)
            finally:
                done.set()
                for t in ts:
                    t.join()
            self.assertEqual(got, [b"parent"] * 3)

    def test_killed_worker_leaves_nothing_held(self):
        with kvpt.Agent("--dram", "64M") as a, kvpool.Pool(a.pool, namespace="kill") as p:
            keys = [f"k{i}" for i in range(64)]
            vals = [os.urandom(65536) for _ in keys]
            p.batch_put(keys, [kvpool.buffer_address(v)[0] for v in vals], [65536] * 64)
            env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, a.pool], stdout=subprocess.PIPE, env=env, text=True
            )
            self.assertEqual(child.stdout.readline().strip(), "pinned 64")
            self.assertIn(f" {child.pid} ", kvpt.clients_of(a.pool))
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()

            def reaped():
                return f" {child.pid} " not in kvpt.clients_of(a.pool)

            kvpt.wait_until(reaped, 5.0, "the killed worker's slot reaped")
            # nothing it held is left: every value can go (delete frees
            # once no hold remains) and the pool's holds are ours only
            rows = [ln.split() for ln in kvpt.clients_of(a.pool).splitlines()[1:] if ln.strip()]
            self.assertEqual([r[1] for r in rows], [str(os.getpid())])
            self.assertEqual(rows[0][4], "0")  # holds
            for k in keys:
                p.delete(k)
            kvpt.wait_until(lambda: p.stat()["dram_used_bytes"] == 0, 10.0, "the values' bytes freed")


if __name__ == "__main__":
    unittest.main()
