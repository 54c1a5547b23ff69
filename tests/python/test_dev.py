# SPDX-License-Identifier: MIT
"""The binding's GPU calls (Pool.batch_get_dev, batch_put_dev, dev_register,
dev_info) against real agents and the emulated CUDA runtime of
tests/gpu/fakecudart.c ($KVPT_FAKECUDA: tests/run.sh builds it where the
CUDA headers are; without it those tests are skipped), and, in a child
interpreter, without any CUDA runtime (NotSupported).  The runtime is
loaded once per process: this module names it before any device call."""

import ctypes
import os
import subprocess
import sys
import unittest

import kvpool
import kvpt

FAKE = os.environ.get("KVPT_FAKECUDA")
if FAKE and os.path.exists(FAKE):
    os.environ["KVPOOL_CUDART"] = FAKE
else:
    FAKE = None

H2D, D2H = 1, 2


def val(i, size, ver=1):
    head = f"{i}:{ver}:".encode()
    return (head * (size // len(head) + 1))[:size]


@unittest.skipUnless(FAKE, "no CUDA: the emulated runtime is not built ($KVPT_FAKECUDA)")
class DeviceCalls(unittest.TestCase):
    def setUp(self):
        self.cu = ctypes.CDLL(FAKE)
        self.cu.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self.cu.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self.cu.cudaFree.argtypes = [ctypes.c_void_p]
        self.a = kvpt.Agent("--dram", "64M", "--max-value", "8M")
        self.p = kvpool.Pool(self.a.pool, namespace="dev")
        self.bufs = []

    def tearDown(self):
        for b in self.bufs:
            self.cu.cudaFree(b)
        self.p.close()
        self.a.stop()

    def dev(self, n):
        p = ctypes.c_void_p()
        self.assertEqual(self.cu.cudaMalloc(ctypes.byref(p), n), 0)
        self.bufs.append(p.value)
        return p.value

    def to_dev(self, d, data):
        b = ctypes.create_string_buffer(data, len(data))
        self.assertEqual(self.cu.cudaMemcpy(d, b, len(data), H2D), 0)

    def from_dev(self, d, n):
        b = ctypes.create_string_buffer(n)
        self.assertEqual(self.cu.cudaMemcpy(b, d, n, D2H), 0)
        return b.raw

    def test_round_trip(self):
        p = self.p
        sizes = [65536, 1 << 20, (1 << 20) + 4097]
        keys = [f"k{i}" for i in range(len(sizes))]
        src = [self.dev(n) for n in sizes]
        for i, n in enumerate(sizes):
            self.to_dev(src[i], val(i, n))
        self.assertEqual(p.batch_put_dev(keys, src, sizes, device=0), [0, 0, 0])
        dst = [self.dev(n) for n in sizes]
        got = p.batch_get_dev(keys + ["absent"], dst + [dst[0]], sizes + [10])
        self.assertEqual(got[:3], sizes)
        self.assertEqual(got[3], kvpool.MISS)
        for i, n in enumerate(sizes):
            self.assertEqual(self.from_dev(dst[i], n), val(i, n))
        # the host path sees the same bytes
        self.assertEqual(p.get_bytes("k1"), val(1, sizes[1]))
        # and a stream object (anything with .cuda_stream) is accepted
        class S:
            cuda_stream = 0

        self.assertEqual(p.batch_get_dev(["k0"], [dst[0]], [sizes[0]], stream=S()), [sizes[0]])

    def test_register_and_info(self):
        p = self.p
        self.assertTrue(p.dev_register(20000))
        info = p.dev_info()
        self.assertEqual(info["status"], 0)
        self.assertEqual(info["devices"], 1)
        self.assertEqual(info["reg_bytes"], info["reg_total_bytes"])
        d = self.dev(4096)
        self.to_dev(d, val(7, 4096))
        self.assertEqual(p.batch_put_dev(["x"], [d], [4096]), [0])
        after = p.dev_info()
        self.assertEqual(after["d2h_keys"], info["d2h_keys"] + 1)
        self.assertEqual(after["bounce_bytes"], 0)

    def test_bad_device(self):
        with self.assertRaises(kvpool.NoDevice):
            self.p.batch_get_dev(["k"], [1], [1], device=5)


class NoRuntime(unittest.TestCase):
    def test_not_supported(self):
        """No CUDA runtime at all: the device calls raise NotSupported and
        the host calls work (a child interpreter: the runtime is loaded once
        per process)."""
        with kvpt.Agent("--dram", "16M") as a:
            code = (
                "import kvpool\n"
                f"p = kvpool.Pool({a.pool!r}, namespace='n')\n"
                "p.put('k', b'v')\n"
                "assert p.get_bytes('k') == b'v'\n"
                "try:\n"
                "    p.batch_get_dev(['k'], [1], [1])\n"
                "except kvpool.NotSupported as e:\n"
                "    print('NotSupported', e.status)\n"
                "assert p.dev_info()['status'] == kvpool.NOTSUP\n"
                "p.close()\n"
            )
            env = dict(os.environ, KVPOOL_CUDART="/nonexistent/libcudart.so.13")
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("NotSupported", r.stdout)


if __name__ == "__main__":
    unittest.main()
