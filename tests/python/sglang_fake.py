# SPDX-License-Identifier: MIT
"""sglang's side of kvpool.sglang, faked for the tests and the benchmark:
a host KV pool whose get_page_buffer_meta answers as sglang's
MHATokenToKVPoolHost and MLATokenToKVPoolHost do (page_first: per page a K
pointer and a V pointer V_offset further, both page_size * per-token bytes
long; MLA: one pointer per page), a HiCacheStorageConfig look-alike, and
host_indices as a torch tensor when torch is importable (a plain list
otherwise, or when asked)."""

import ctypes
import dataclasses
import mmap
from typing import Optional

try:
    import torch
except ImportError:
    torch = None

_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


@dataclasses.dataclass
class StorageConfig:
    """The fields of sglang's HiCacheStorageConfig that the store reads."""

    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    enable_storage_metrics: bool = False
    is_page_first_layout: bool = True
    model_name: Optional[str] = "test-org/test-model"
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


class _DevicePool:
    def __init__(self, dtype):
        self.dtype = dtype


def _torch_dtype(name):
    if torch is None:
        return name
    return getattr(torch, name, torch.uint8)


class FakeHostPool:
    """A host KV pool of n_pages pages over one anonymous mapping.

    kv_dtype: the KV cache dtype (device pool); fp8 is stored as uint8 in
    the host pool, as sglang's store_dtype is."""

    def __init__(
        self,
        mla=False,
        layout="page_first",
        page_size=4,
        n_pages=64,
        layer_num=2,
        head_num=2,
        head_dim=16,
        kv_lora_rank=32,
        qk_rope_head_dim=8,
        kv_dtype="bfloat16",
        use_torch=True,
    ):
        self.mla = mla
        self.layout = layout
        self.page_size = page_size
        self.page_num = n_pages
        self.size = n_pages * page_size
        self.layer_num = layer_num
        self.head_num = head_num
        self.head_dim = head_dim
        self.kv_lora_rank = kv_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim
        self.use_torch = use_torch and torch is not None
        store = "uint8" if kv_dtype.startswith("float8") else kv_dtype
        self.itemsize = _ITEMSIZE[store]
        self.dtype = _torch_dtype(store) if self.use_torch else store
        self.device_pool = _DevicePool(_torch_dtype(kv_dtype) if self.use_torch and kv_dtype == store else kv_dtype)
        if mla:
            self.per_token = (kv_lora_rank + qk_rope_head_dim) * layer_num * self.itemsize
            nbytes = self.size * self.per_token
        else:
            self.per_token = layer_num * head_num * head_dim * self.itemsize  # K (or V) bytes
            nbytes = 2 * self.size * self.per_token
        self.obj_bytes = self.page_size * self.per_token
        self._map = mmap.mmap(-1, nbytes)
        self._cbuf = (ctypes.c_char * nbytes).from_buffer(self._map)
        self.base = ctypes.addressof(self._cbuf)
        self.nbytes = nbytes
        self.kv_buffer = self._map  # not None: a real (non-logical) KV pool

    # sglang's HostKVCache calls
    def get_size_per_token(self):
        return self.per_token if self.mla else 2 * self.per_token

    def get_ksize_per_token(self):
        return self.per_token

    def get_page_buffer_meta(self, indices):
        idx = indices.tolist() if hasattr(indices, "tolist") else list(indices)
        ptrs = []
        sizes = []
        ps = self.page_size
        if self.mla:
            for i in range(0, len(idx), ps):
                ptrs.append(self.base + idx[i] * self.per_token)
                sizes.append(self.obj_bytes)
            return ptrs, sizes
        v_off = self.size * self.per_token
        for i in range(0, len(idx), ps):
            if self.layout == "page_first":
                k = self.base + idx[i] * self.per_token
            else:  # page_first_direct, page_head: (2, page_num, ...) page blocks
                k = self.base + (idx[i] // ps) * self.obj_bytes
            ptrs.append(k)
            ptrs.append(k + v_off)
            sizes.append(self.obj_bytes)
            sizes.append(self.obj_bytes)
        return ptrs, sizes

    # test helpers: page slots <-> token indices, content
    def indices(self, slots):
        """host_indices of page slots: page_size token slots per page."""
        ps = self.page_size
        out = [s * ps + j for s in slots for j in range(ps)]
        if self.use_torch:
            return torch.tensor(out, dtype=torch.int64)
        return out

    def _objs(self, slot):
        ptrs, _ = self.get_page_buffer_meta(list(range(slot * self.page_size, (slot + 1) * self.page_size)))
        return ptrs

    def fill(self, slot, seed):
        """Write page slot's objects with bytes derived from seed."""
        for j, p in enumerate(self._objs(slot)):
            ctypes.memmove(p, pattern(seed * 2 + j, self.obj_bytes), self.obj_bytes)

    def clear(self, slot):
        for p in self._objs(slot):
            ctypes.memset(p, 0, self.obj_bytes)

    def page(self, slot):
        """The bytes of page slot's objects (a tuple, K then V)."""
        return tuple(ctypes.string_at(p, self.obj_bytes) for p in self._objs(slot))

    def expect(self, seed):
        n = 1 if self.mla else 2
        return tuple(pattern(seed * 2 + j, self.obj_bytes) for j in range(n))


def pattern(seed, n):
    """n bytes that name their seed and position (a misplaced copy shows)."""
    head = f"<{seed}>".encode()
    block = (head * (64 // len(head) + 1))[:64]
    body = bytearray(block * (n // 64 + 1))[:n]
    body[0:8] = seed.to_bytes(8, "little")
    return bytes(body)


def page_keys(tag, n, start=0):
    """sglang-like page hashes (64 hex characters), distinct per tag."""
    import hashlib

    return [hashlib.sha256(f"{tag}/{i}".encode()).hexdigest() for i in range(start, start + n)]
