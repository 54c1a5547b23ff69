# SPDX-License-Identifier: MIT
"""Every public entry point of the binding refuses what C would misread
(issue 25, item 10): a pool or namespace name with a NUL byte (C reads it
up to the NUL: another name), an integer where a key or name is expected
(bytes(5) is five NUL bytes), offsets, lengths, addresses and indices
outside 0 .. 2**64-1 (ctypes wraps 2**64 to 0 and -1 to 2**64-1), and
bools and floats where an integer is meant.  Each is a ValueError
(kvpool.InvalidArgument) or a TypeError, and none reaches the pool."""

import ctypes
import unittest

import kvpool
import kvpt

BIG = 2**64


class Inputs(unittest.TestCase):
    def setUp(self):
        self.a = kvpt.Agent("--dram", "32M", "--max-value", "1M")
        self.p = kvpool.Pool(self.a.pool, namespace="a")
        self.p.put("k", b"value of k in namespace a")

    def tearDown(self):
        self.p.close()
        self.a.stop()

    def refused(self, fn, *args, **kw):
        with self.assertRaises((ValueError, TypeError)) as cm:
            fn(*args, **kw)
        return cm.exception

    def test_names_with_nul(self):
        # namespace "a\0b" is not namespace "a": refused, never opened
        for ns in ("a\0b", b"a\0b", "a\0"):
            e = self.refused(kvpool.Pool, self.a.pool, namespace=ns)
            self.assertIsInstance(e, ValueError, ns)
            self.assertIn("NUL", str(e))
        e = self.refused(kvpool.Pool, self.a.pool + "\0other", namespace="a")
        self.assertIsInstance(e, ValueError)
        # an integer is no name (bytes(1) would be "\0")
        for bad in (1, True, 2.0):
            self.assertIsInstance(self.refused(kvpool.Pool, self.a.pool, namespace=bad), TypeError)
            self.assertIsInstance(self.refused(kvpool.Pool, bad, namespace="a"), TypeError)
        # the same names without the NUL still work
        with kvpool.Pool(self.a.pool.encode(), namespace=bytearray(b"a")) as q:
            self.assertEqual(q.get_bytes("k"), b"value of k in namespace a")

    def test_integer_keys(self):
        p = self.p
        buf = bytearray(64)
        p.put(b"\0\0\0", b"three NULs")  # a real key of NUL bytes is fine
        for key in (3, True, 0):
            self.assertIsInstance(self.refused(p.put, key, b"v"), TypeError)
            self.assertIsInstance(self.refused(p.get, key, buf), TypeError)
            self.assertIsInstance(self.refused(p.get_bytes, key), TypeError)
            self.assertIsInstance(self.refused(p.exists, key), TypeError)
            self.assertIsInstance(self.refused(p.delete, key), TypeError)
            self.assertIsInstance(self.refused(p.lease, key, 1000), TypeError)
        self.assertEqual(p.get_bytes(b"\0\0\0"), b"three NULs")  # untouched
        for keys in ([3], ["k", 3], [b"k", 3], "k", b"k"):
            self.assertIsInstance(self.refused(p.batch_exists_prefix, keys), TypeError, keys)
            self.assertIsInstance(self.refused(p.lookup_pin, keys), TypeError, keys)
        self.assertIsInstance(self.refused(kvpool.Keys, ["k"], (2,)), TypeError)
        self.assertIsInstance(self.refused(kvpool.Keys, [3, 4]), TypeError)
        self.assertIsInstance(self.refused(kvpool.Keys, ["ab", 3]), TypeError)
        # unequal names take the plain path: still no integer
        self.assertIsInstance(self.refused(kvpool.Keys, [b"a", b"bc", 3]), TypeError)

    def test_offsets_lengths_addresses(self):
        p = self.p
        buf = bytearray(64)
        raw = ctypes.create_string_buffer(64)
        addr = ctypes.addressof(raw)
        # get(offset=2**64) read from offset 0 (wrapped)
        for off in (BIG, BIG + 2, -1):
            self.assertIsInstance(self.refused(p.get, "k", buf, offset=off), ValueError, off)
        for off in (True, 1.0, "2"):
            self.assertIsInstance(self.refused(p.get, "k", buf, offset=off), TypeError, off)
        for kw in ({"addr": BIG, "length": 8}, {"addr": -1, "length": 8}, {"addr": addr, "length": -1},
                   {"addr": addr, "length": BIG}):
            self.assertIsInstance(self.refused(p.get, "k", **kw), ValueError, kw)
            self.assertIsInstance(self.refused(p.put, "k2", **kw), ValueError, kw)
        self.assertIsInstance(self.refused(p.put, "k2", addr=addr, length=True), TypeError)
        self.assertFalse(p.exists("k2"))
        # batches: addresses, lengths and offsets are 0 .. 2**64-1
        for bad in ([BIG], [-1]):
            self.refused(p.batch_get, ["k"], bad, [8])
            self.refused(p.batch_get, ["k"], [addr], bad)
            self.refused(p.batch_get, ["k"], [addr], [8], bad)
            self.refused(p.batch_put, ["k3"], [addr], bad)
        for depth0 in (-1, 2**32):
            self.assertIsInstance(self.refused(p.batch_put, ["k3"], [addr], [8], depth0=depth0), ValueError)
        self.assertIsInstance(self.refused(p.batch_put, ["k3"], [addr], [8], depth0=True), TypeError)
        self.assertFalse(p.exists("k3"))
        # what is in range still works
        self.assertEqual(p.get("k", buf, offset=6), len(b"value of k in namespace a") - 6)
        self.assertEqual(bytes(buf[:2]), b"of")

    def test_lease_and_device_arguments(self):
        p = self.p
        # a ttl of 2**32 + 5 ms was 5 ms
        for ttl in (2**32 + 5, -1):
            self.assertIsInstance(self.refused(p.lease, "k", ttl), ValueError, ttl)
        for ttl in (1000.7, True):
            self.assertIsInstance(self.refused(p.lease, "k", ttl), TypeError, ttl)
        with p.lease("k", 1000) as le:
            self.assertGreater(le.length, 0)
        # checked before any device call (no CUDA needed to refuse them)
        for dev in (2**32, -1):
            self.assertIsInstance(self.refused(p.batch_get_dev, ["k"], [0], [8], device=dev), ValueError)
            self.assertIsInstance(self.refused(p.batch_put_dev, ["k"], [0], [8], device=dev), ValueError)
        self.assertIsInstance(self.refused(p.batch_get_dev, ["k"], [0], [8], device=True), TypeError)
        self.assertIsInstance(self.refused(p.batch_get_dev, ["k"], [0], [8], stream=BIG), ValueError)
        self.assertIsInstance(self.refused(p.dev_register, 2**32), ValueError)
        self.assertIsInstance(self.refused(p.dev_register, -1), ValueError)

    def test_pinset_indices(self):
        p = self.p
        p.put("k2", b"v2")
        with p.lookup_pin(["k2", "k"]) as ps:
            self.assertEqual(ps.count, 2)
            self.assertEqual(ps.length(0), 2)
            # Pinset.length(2**64) was key 0's length
            for k in (BIG, BIG + 1, -1, 2, 2**63):
                self.assertIsInstance(self.refused(ps.length, k), ValueError, k)
                self.assertIsInstance(self.refused(ps.tier, k), ValueError, k)
            for k in (True, 1.0, "0"):
                self.assertIsInstance(self.refused(ps.length, k), TypeError, k)
                self.assertIsInstance(self.refused(ps.tier, k), TypeError, k)
            self.assertEqual(ps.length(1), len(b"value of k in namespace a"))
            self.assertEqual(ps.tier(1), kvpool.TIER_DRAM)


if __name__ == "__main__":
    unittest.main()
