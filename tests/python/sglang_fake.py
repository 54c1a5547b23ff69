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


@dataclasses.dataclass
class ServerArgs:
    """The fields of sglang's ServerArgs (server_args.py) that name what a
    page's bytes depend on; sglang sets them in the scheduler process
    before the cache is built (get_global_server_args())."""

    model_path: str = "test-org/test-model"
    served_model_name: Optional[str] = None
    revision: Optional[str] = None
    quantization: Optional[str] = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    tp_size: int = 1
    page_size: int = 4


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

    def get_split_heads_page_buffer_meta(self, indices, split_factor):
        """sglang's MHA host pool in the page_head layout: per page, per
        group of head_num / split_factor heads (contiguous in page_head),
        a K pointer and a V pointer, each 1/split_factor of the page's K."""
        assert self.layout == "page_head" and not self.mla
        assert self.head_num % split_factor == 0
        idx = indices.tolist() if hasattr(indices, "tolist") else list(indices)
        part = self.obj_bytes // split_factor
        v_off = self.size * self.per_token
        ptrs = []
        for i in range(0, len(idx), self.page_size):
            k = self.base + (idx[i] // self.page_size) * self.obj_bytes
            for j in range(split_factor):
                ptrs += [k + j * part, k + j * part + v_off]
        return ptrs, [part] * len(ptrs)

    def head_bytes(self):
        return self.obj_bytes // self.head_num

    def fill_heads(self, slot, head0, seed):
        """page_head: write each local head h of page slot (K and V) with
        bytes that name seed and the global head head0 + h."""
        hb = self.head_bytes()
        k, v = self._objs(slot)
        for h in range(self.head_num):
            for base, kv in ((k, 0), (v, 1)):
                ctypes.memmove(base + h * hb, pattern((seed * 1000 + head0 + h) * 2 + kv, hb), hb)

    def heads(self, slot):
        """[(K bytes, V bytes)] per local head of page slot (page_head)."""
        hb = self.head_bytes()
        k, v = self._objs(slot)
        return [(ctypes.string_at(k + h * hb, hb), ctypes.string_at(v + h * hb, hb)) for h in range(self.head_num)]

    def expect_heads(self, head0, seed):
        hb = self.head_bytes()
        return [(pattern((seed * 1000 + head0 + h) * 2, hb), pattern((seed * 1000 + head0 + h) * 2 + 1, hb))
                for h in range(self.head_num)]

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


# ---- sglang's hybrid path: HostPoolGroup, sidecar pools, the v2 calls ----
#
# A model of what sglang's HybridCacheController does with a storage backend
# (mem_cache/hybrid_cache/hybrid_cache_controller.py, managers/
# cache_controller.py; written from reading them, not copied): the store is
# built, register_mem_pool_host(group) then register_mem_host_pool_v2(entry
# host pool, entry name) for every entry; a prefetch probes the whole prompt
# in ONE call (batch_exists_v2 with the request's sidecar transfers, or
# batch_exists without), agrees on the MIN across the TP ranks, then loads in
# 128-page batches: batch_get_v1 for the KV pages plus batch_get_v2 for the
# sidecars whose indices come from the KV pool, and after the last batch
# batch_get_v2 for the other sidecars with their keys moved to the last
# pages of the hit; a backup calls batch_set_v2 for the sidecars then
# batch_set_v1 in 128-page batches.  The storage threads die on any
# exception out of the store, as sglang's do (nobody restarts them).

import queue
import threading

STORAGE_BATCH_SIZE = 128


class PoolHitPolicy:
    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"


@dataclasses.dataclass
class PoolTransfer:
    name: str
    host_indices: object = None
    device_indices: object = None
    keys: Optional[list] = None
    hit_policy: str = PoolHitPolicy.ALL_PAGES
    nodes_to_load: object = None
    indices_from_pool: Optional[str] = None


@dataclasses.dataclass
class PoolEntry:
    name: str
    host_pool: object
    device_pool: object
    layer_mapper: object = None
    is_primary_index_anchor: bool = False


class HostPoolGroup:
    """sglang's HostPoolGroup as a backend sees it: layout, page_size, size
    and the anchor's data calls, but no device_pool of its own (the anchor
    entry has it); dtype is the anchor host pool's store dtype."""

    def __init__(self, entries):
        self.entries = list(entries)
        self.entry_map = {e.name: e for e in entries}
        self.anchor_entry = next((e for e in entries if e.is_primary_index_anchor), entries[0])
        a = self.anchor_entry.host_pool
        self.layout = a.layout
        self.page_size = a.page_size
        self.size = a.size

    def __getattr__(self, name):
        if name in ("device_pool", "entries", "anchor_entry", "entry_map"):
            raise AttributeError(name)
        return getattr(self.anchor_entry.host_pool, name)


class SidecarHostPool:
    """A sidecar host pool (SWA, Mamba, DSA indexer, draft ...): per page
    slot, objects of obj_sizes bytes (get_page_buffer_meta gives them in
    order, per page of page_size indices).  mla: replicated across TP ranks
    (no v_buffer), else per-head (has v_buffer)."""

    def __init__(self, obj_sizes, n_pages=64, page_size=1, mla=False, multi=False):
        self.obj_sizes = list(obj_sizes)
        self.page_bytes = sum(self.obj_sizes)
        self.page_size = page_size
        self.page_num = n_pages
        self.size = n_pages * page_size
        self.layout = "page_first"
        self.mla = mla
        self.multi = multi  # several buffers per object, as a list (Mamba conv states)
        self._map = mmap.mmap(-1, max(1, n_pages * self.page_bytes))
        self._cbuf = (ctypes.c_char * len(self._map)).from_buffer(self._map)
        self.base = ctypes.addressof(self._cbuf)
        self.kv_buffer = self._map
        if not mla:
            self.v_buffer = self._map

    def get_page_buffer_meta(self, indices):
        idx = indices.tolist() if hasattr(indices, "tolist") else list(indices)
        ptrs, sizes = [], []
        for i in range(0, len(idx), self.page_size):
            p = self.base + (idx[i] // self.page_size) * self.page_bytes
            offs = [p]
            for s in self.obj_sizes[:-1]:
                offs.append(offs[-1] + s)
            if self.multi:  # first object alone, the rest as one multi-buffer object
                ptrs += [offs[0], offs[1:]]
                sizes += [self.obj_sizes[0], self.obj_sizes[1:]]
            else:
                ptrs += offs
                sizes += self.obj_sizes
        return ptrs, sizes

    def indices(self, slots):
        out = [s * self.page_size + j for s in slots for j in range(self.page_size)]
        return torch.tensor(out, dtype=torch.int64) if torch is not None else out

    def fill(self, slot, seed):
        ctypes.memmove(self.base + slot * self.page_bytes, pattern(seed, self.page_bytes), self.page_bytes)

    def page(self, slot):
        return ctypes.string_at(self.base + slot * self.page_bytes, self.page_bytes)

    def expect(self, seed):
        return pattern(seed, self.page_bytes)


def sidecar(kind, n_pages):
    """(entry name, SidecarHostPool, hit policy, indices_from_pool) of a kind."""
    if kind == "swa":  # MHA sliding window K/V: its own indices, trailing pages
        return "swa", SidecarHostPool([96, 96], n_pages), PoolHitPolicy.TRAILING_PAGES, None
    if kind == "mamba":  # one state slot per request end: trailing page, several buffers
        return "mamba", SidecarHostPool([256, 64, 64], n_pages, multi=True), PoolHitPolicy.TRAILING_PAGES, None
    if kind == "indexer":  # DSA indexer keys: every page, indices of the KV pool, MLA-like
        return "indexer", SidecarHostPool([72], n_pages, mla=True), PoolHitPolicy.ALL_PAGES, "kv"
    if kind == "draft":  # separate-pool speculative draft KV: every page, KV indices
        return "draft", SidecarHostPool([48, 48], n_pages), PoolHitPolicy.ALL_PAGES, "kv"
    raise ValueError(kind)


class HybridController:
    """sglang's HybridCacheController around one store, with its storage
    threads (prefetch probe, prefetch I/O, backup) as real threads that die
    on an exception.  all_reduce_min: the TP agreement (a function of an
    int), identity with one rank."""

    def __init__(self, store, group, all_reduce_min=None, backup_skip=False):
        self.store = store
        self.group = group
        self.page_size = group.page_size
        self.all_reduce_min = all_reduce_min or (lambda x: x)
        self.backup_skip = backup_skip
        # sglang picks the zero-copy calls for a dynamic backend from the
        # storage config's extra_config, after it built the backend
        extra = getattr(store.storage_config, "extra_config", None) or {}
        if not extra.get("interface_v1", 0):
            raise AssertionError("sglang would drive the generic copy path (interface_v1 off)")
        store.register_mem_pool_host(group)
        for e in group.entries:
            store.register_mem_host_pool_v2(e.host_pool, e.name)
        self._q = queue.Queue()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            fn, args, done = self._q.get()
            if fn is None:
                return
            try:
                done.put(("ok", fn(*args)))
            except BaseException:
                done.put(("dead", None))
                raise  # the thread dies, as sglang's do

    def _call(self, fn, *args):
        done = queue.Queue()
        self._q.put((fn, args, done))
        while True:  # a dead thread never answers: check it while waiting
            try:
                kind, val = done.get(timeout=0.05)
            except queue.Empty:
                if not self.thread.is_alive():
                    raise AssertionError("the storage thread died")
                continue
            if kind != "ok":
                self.thread.join()
                raise AssertionError("the storage thread died")
            return val

    def stop(self):
        self._q.put((None, None, None))
        self.thread.join()

    # what the threads run
    def _backup(self, hashes, kv_slots, transfers):
        for t in transfers:
            if t.indices_from_pool == "kv":
                t.host_indices = self.group.anchor_entry.host_pool.indices(kv_slots)
                t.keys = t.keys or list(hashes)
        todo = [t for t in transfers if not self.backup_skip or t.name == "mamba"]
        if todo:
            res = self.store.batch_set_v2(todo)
            for t in todo:
                r = res[t.name]
                assert isinstance(r, list) and len(r) == len(t.keys), (t.name, r)
        if self.backup_skip:
            return True
        ok = True
        kvp = self.group.anchor_entry.host_pool
        for i in range(0, len(hashes), STORAGE_BATCH_SIZE):
            b = hashes[i : i + STORAGE_BATCH_SIZE]
            r = self.store.batch_set_v1(b, kvp.indices(kv_slots[i : i + len(b)]))
            ok = ok and all(r)
        return ok

    def _probe(self, hashes, transfers):
        if transfers:
            res = self.store.batch_exists_v2(hashes, transfers, None)
            hit = res.kv_hit_pages
        else:
            hit = self.store.batch_exists(hashes, None)
        return self.all_reduce_min(int(hit))

    def _load(self, hashes, kv_slots, transfers):
        kvp = self.group.anchor_entry.host_pool
        derived = [t for t in transfers if t.indices_from_pool == "kv"]
        done = 0
        for i in range(0, len(hashes), STORAGE_BATCH_SIZE):
            b = hashes[i : i + STORAGE_BATCH_SIZE]
            hi = kvp.indices(kv_slots[i : i + len(b)])
            r = self.store.batch_get_v1(b, hi)
            hits = [r.index(False) if False in r else len(r)]
            if derived:
                cur = [PoolTransfer(name=t.name, host_indices=hi, keys=b) for t in derived]
                res = self.store.batch_get_v2(cur)
                hits += [(x.index(False) if False in x else len(x)) for x in res.values()]
            h = min(hits)
            done += h
            if h != len(b):
                break
        done = self.all_reduce_min(done)
        side = {}
        if done == len(hashes):
            rest = [t for t in transfers if t.indices_from_pool != "kv"]
            for t in rest:  # keys: the last pages of the hit
                t.keys = list(hashes[max(0, done - len(t.keys)) : done])
            if rest:
                res = self.store.batch_get_v2(rest)
                side = {k: (v.index(False) if False in v else len(v)) for k, v in res.items()}
        return done, side

    # the scheduler's calls
    def backup(self, hashes, kv_slots, transfers=()):
        return self._call(self._backup, list(hashes), list(kv_slots), list(transfers))

    def prefetch(self, hashes, kv_slots, transfers=()):
        """Probe the whole prompt, then load the agreed hit: (hit pages,
        loaded pages, {sidecar: pages loaded})."""
        hit = self._call(self._probe, list(hashes), list(transfers))
        if hit == 0:
            return 0, 0, {}
        done, side = self._call(self._load, list(hashes[:hit]), list(kv_slots[:hit]), list(transfers))
        return hit, done, side
