# SPDX-License-Identifier: MIT
"""kvpool as sglang's HiCache L3 storage: KVPoolStore, loaded by sglang's
dynamic backend factory with no patch to sglang (docs/sglang.md):

    --enable-hierarchical-cache --hicache-mem-layout page_first
    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvpool",
        "module_path": "kvpool.sglang", "class_name": "KVPoolStore",
        "interface_v1": 1, "pool": "default"}'

The factory imports this module, checks issubclass(KVPoolStore,
HiCacheStorage), builds KVPoolStore(storage_config, kwargs) and the cache
controller then calls register_mem_pool_host(host_pool): the pool is opened
there, because the namespace is derived from the host pool.

Namespace (what makes two engines' pages interchangeable; sglang's keys are
token-prefix hashes only):
    sglang|{model}|{kv dtype}|{layout}|p{page size}|{object bytes}B|{geometry}|mla
    sglang|{model}|{kv dtype}|{layout}|p{page size}|{object bytes}B|{geometry}|mha|tp{tp size}
where model is the model path, revision, quantization, weights dtype and
--kv-cache-dtype from sglang's server args, and kv dtype the device pool's
(the anchor entry's for a HostPoolGroup); when either cannot be
established and extra_config names no namespace the store stays off
(fails closed, one error line),
plus |pp{size} and |cp{size} when those are > 1 and |{namespace} when
extra_config names one.  Object keys, as sglang's own backends name them:
MHA K "{hash}_{tp rank}_k" and V "{hash}_{tp rank}_v" (the rank's heads),
MLA "{hash}_k" (rank free: rank 0 writes, every rank reads); with PP
"_{pp rank}" and with attention CP "_cp{cp rank}" follow the TP rank.  A
batch's keys go to the binding packed (kvpool.Keys: one join per suffix).  The copy path (interface_v1 off) stores
one flat page per key under "{hash}_{tp rank}" (MHA) or "{hash}" (MLA).

Threads (sglang's HiCacheController): the prefetch thread probes
(batch_exists, 128 pages a call), the prefetch I/O thread loads
(batch_get_v1), the backup thread writes (batch_set_v1), each through its
own client handle of the one Pool.  batch_exists counts only what it
pins (kvp_batch_lookup_pin) and parks the pinset under every probed key;
each batch_get_v1 (sglang loads 128 pages a call) reads its pages through
the pinset at their offset, which is released once all its pages were
loaded, so a page counted is still there when it is loaded.  Parked pins
are bounded (pin_max_pages) and aged out (pin_max_age_s), swept on every
call.

Contract of the data path (batch_exists, batch_get_v1, batch_set_v1, get,
set, batch_get, batch_set, exists): never raises, never returns None where
sglang indexes the result; a miss is False, backpressure (BUSY) is retried
for busy_retry_ms and is then False; an unexpected error is logged once per
kind and answered False (sglang's prefetch thread dies on an exception and
storage then goes silently dead).

extra_config keys read here (all optional):
    pool            the kvpoold pool name (default "default")
    namespace       appended to the derived namespace (tenants, versions)
    interface_v1    sglang's switch for the zero-copy path (read by sglang too);
                    default 1: the store sets it in sglang's extra_config
    pin_prefetch    pin in batch_exists for batch_get_v1 (default true)
    pin_max_pages   pages parked in pinsets at once (default 16384)
    pin_max_age_s   a parked pinset's age limit in seconds (default 10)
    busy_retry_ms   the retry budget for BUSY per call (default 50)
    clear_track_max object keys remembered for clear() (default 1,000,000)
    remote_probe    with a cluster (kvpoold --cluster): batch_exists counts
                    pages other nodes hold, fetching them into this node's
                    pool (and pinning them with pin_prefetch); default false
                    (gets fetch what they miss either way)
"""

import collections
import hashlib
import itertools
import logging
import os
import threading
import time
from abc import ABC, abstractmethod

import kvpool

try:
    import torch
except ImportError:  # the package imports without torch; so does this module
    torch = None

logger = logging.getLogger(__name__)

__all__ = ["KVPoolStore", "HiCacheStorage", "namespace_for"]


# ---- sglang's base class when sglang is importable, a stand-in otherwise ----


class _StandInHiCacheStorage(ABC):
    """The abstract interface of sglang's HiCacheStorage
    (sglang/srt/mem_cache/hicache_storage.py), for use without sglang."""

    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host

    @abstractmethod
    def get(self, key, target_location=None, target_sizes=None):
        pass

    @abstractmethod
    def batch_get(self, keys, target_locations=None, target_sizes=None):
        pass

    @abstractmethod
    def set(self, key, value=None, target_location=None, target_sizes=None):
        pass

    @abstractmethod
    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        pass

    @abstractmethod
    def exists(self, key):
        pass

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
        raise NotImplementedError()

    def batch_get_v2(self, transfers, extra_info=None):
        raise NotImplementedError()

    def batch_set_v2(self, transfers, extra_info=None):
        raise NotImplementedError()

    def batch_exists(self, keys, extra_info=None):
        for i, k in enumerate(keys):
            if not self.exists(k):
                return i
        return len(keys)

    def clear(self):
        pass

    def get_stats(self):
        return None


try:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
except Exception:  # ImportError, or an sglang that fails to import here
    HiCacheStorage = _StandInHiCacheStorage


_METRICS_CLASS = []


def _storage_metrics_class():
    """sglang's StorageMetrics (its module moved between versions), or
    None; looked up once (sglang asks for stats every scheduler step)."""
    if not _METRICS_CLASS:
        cls = None
        for mod in ("sglang.srt.observability.metrics_collector", "sglang.srt.metrics.collector"):
            try:
                cls = getattr(__import__(mod, fromlist=["StorageMetrics"]), "StorageMetrics")
                break
            except Exception:
                continue
        _METRICS_CLASS.append(cls)
    return _METRICS_CLASS[0]


# ---- host pool description ----

_ITEMSIZE = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "uint8": 1,
    "int8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "float64": 8,
}

SUPPORTED_LAYOUTS = ("page_first", "page_first_direct", "page_head")
NS_FLUSH_S = 1.0  # the store's events reach the pool's counters this often (and on get_stats, close)


def _dtype_name(d):
    return str(d).replace("torch.", "")


def _itemsize(d):
    n = getattr(d, "itemsize", None)
    if isinstance(n, int):
        return n
    if torch is not None and isinstance(d, torch.dtype):
        return torch.empty(0, dtype=d).element_size()
    name = _dtype_name(d)
    if name in _ITEMSIZE:
        return _ITEMSIZE[name]
    raise ValueError(f"kvpool.sglang: unknown KV dtype {d!r}")


def _object_bytes(host_pool, mla):
    """Bytes of one object (a page's K, or V, or its MLA latent)."""
    ps = int(host_pool.page_size)
    if mla:
        if hasattr(host_pool, "get_size_per_token"):
            return int(host_pool.get_size_per_token()) * ps
        per = (int(host_pool.kv_lora_rank) + int(host_pool.qk_rope_head_dim)) * int(host_pool.layer_num)
        return per * _itemsize(host_pool.dtype) * ps
    if hasattr(host_pool, "get_ksize_per_token"):
        return int(host_pool.get_ksize_per_token()) * ps
    per = int(host_pool.layer_num) * int(host_pool.head_num) * int(host_pool.head_dim)
    return per * _itemsize(host_pool.dtype) * ps


def _server_args():
    """sglang's ServerArgs of this (scheduler) process, or None: set before
    the cache is built.  Tests replace this function (no sglang here)."""
    try:
        from sglang.srt.server_args import get_global_server_args

        return get_global_server_args()
    except Exception:
        return None


def _device_pool(host_pool):
    """The device KV pool behind a host pool: its own, or (HostPoolGroup,
    sglang's default path) the anchor entry's."""
    dev = getattr(host_pool, "device_pool", None)
    if dev is None:
        anchor = getattr(host_pool, "anchor_entry", None)
        dev = getattr(anchor, "device_pool", None)
    return dev


def _geometry(host_pool, mla, heads_times=1):
    """The attention geometry of a page (object bytes alone cannot tell 2
    heads of 16 from 1 of 32), from whichever fields the pool has;
    heads_times: the head count of all ranks (split heads)."""
    if mla:
        names = ("layer_num", "kv_lora_rank", "qk_rope_head_dim")
        tags = ("L", "r", "+")
    else:
        names = ("layer_num", "head_num", "head_dim")
        tags = ("L", "h", "d")
    out = ""
    for n, t in zip(names, tags):
        v = getattr(host_pool, n, None)
        if isinstance(v, int):
            out += f"{t}{v * heads_times if n == 'head_num' else v}"
    return out or "g?"


class NoIdentity(ValueError):
    """What makes pages interchangeable cannot be established."""


def namespace_for(storage_config, host_pool):
    """The pool namespace of this engine's pages (see the module docstring):
    what two engines must share to read each other's pages.  Fails closed:
    NoIdentity when the model or the KV dtype cannot be established (no
    sglang server args, no device pool) and extra_config names no
    namespace."""
    extra = getattr(storage_config, "extra_config", None) or {}
    mla = bool(getattr(storage_config, "is_mla_model", False))
    sa = _server_args()
    dev = _device_pool(host_pool)
    # the host pool keeps the store dtype (uint8 for every fp8 format): only
    # the device pool's dtype tells e4m3 from e5m2
    dev_dtype = getattr(dev, "dtype", None)
    kv_dtype = _dtype_name(dev_dtype if dev_dtype is not None else host_pool.dtype)
    unknown = []
    if dev_dtype is None and _itemsize(host_pool.dtype) == 1:
        unknown.append("the KV dtype (a 1-byte store dtype and no device pool: which fp8 format?)")
    if sa is not None and getattr(sa, "model_path", None):
        model = "|".join(
            [
                str(sa.model_path),
                f"rev={getattr(sa, 'revision', None) or '-'}",
                f"q={getattr(sa, 'quantization', None) or '-'}",
                f"w={getattr(sa, 'dtype', None) or '-'}",
                f"kvd={getattr(sa, 'kv_cache_dtype', None) or '-'}",
            ]
        )
    else:
        model = getattr(storage_config, "model_name", None) or "unknown-model"
        unknown.append("the model (no sglang server args: weights, revision, quantization)")
    layout = getattr(host_pool, "layout", "page_first")
    anchor = getattr(getattr(host_pool, "anchor_entry", None), "host_pool", host_pool)
    parts = [
        "sglang",
        str(model),
        kv_dtype,
        layout,
        f"p{int(host_pool.page_size)}",
        f"{_object_bytes(host_pool, mla)}B",
        _geometry(anchor, mla),
        "mla" if mla else "mha",
    ]
    tp = int(getattr(storage_config, "tp_size", 1) or 1)
    lcm = int(getattr(storage_config, "tp_lcm_size", None) or 0)
    if not mla and getattr(storage_config, "should_split_heads", False) and lcm and lcm % tp == 0:
        # shards of TP lcm: the same for every TP size that divides it
        parts[5] = f"{_object_bytes(host_pool, mla) // (lcm // tp)}B"
        parts[6] = _geometry(anchor, mla, tp)
        parts.append(f"tpl{lcm}")
    elif not mla:
        parts.append(f"tp{tp}")
    pp_size = int(getattr(storage_config, "pp_size", 1) or 1)
    cp_size = int(getattr(storage_config, "attn_cp_size", 1) or 1)
    if pp_size > 1:
        parts.append(f"pp{pp_size}")
    if cp_size > 1:
        parts.append(f"cp{cp_size}")
    if extra.get("namespace"):
        parts.append(str(extra["namespace"]))
    elif unknown:
        raise NoIdentity(
            "kvpool.sglang: cannot establish "
            + " and ".join(unknown)
            + "; not sharing pages with anyone: this store stays off (every probe a miss). Set "
            'extra_config "namespace" to one name per identical deployment to use the pool'
        )
    ns = "|".join(parts)
    if len(ns.encode()) > 255:  # KVP_NS_NAME_MAX: keep it readable, make it unique
        ns = ns.encode()[:200].decode(errors="ignore") + "#" + hashlib.sha256(ns.encode()).hexdigest()[:24]
    return ns


# ---- the v2 interface's pieces (sglang's types when importable) ----


class _StandInPoolTransferResult:
    """sglang's PoolTransferResult (hicache_storage.py) without sglang."""

    def __init__(self, kv_hit_pages, extra_pool_hit_pages, restorable=None):
        self.kv_hit_pages = kv_hit_pages
        self.extra_pool_hit_pages = extra_pool_hit_pages
        self.restorable = restorable


try:
    from sglang.srt.mem_cache.hicache_storage import PoolTransferResult
except Exception:
    PoolTransferResult = _StandInPoolTransferResult


def _transfer_result(final, hits, restorable):
    """A PoolTransferResult; with the stop points when this sglang's has
    that field (newer sglang intersects them across ranks)."""
    try:
        return PoolTransferResult(final, hits, restorable)
    except TypeError:
        return PoolTransferResult(final, hits)


class _V2Pool:
    """A registered pool: its object-key suffixes and object sizes per
    page, whether it is the same on every TP rank, whether it is a logical
    anchor (no bytes: kv_buffer None)."""

    __slots__ = ("name", "host", "sfx", "sizes", "shared", "logical")

    def __init__(self, name, host, sfx, sizes, shared, logical):
        self.name = name
        self.host = host
        self.sfx = sfx
        self.sizes = sizes
        self.shared = shared
        self.logical = logical


def _pool_name(name):
    """sglang's PoolName (a str enum) or a str, as its value."""
    return str(getattr(name, "value", name))


def _policy(transfer):
    return str(getattr(getattr(transfer, "hit_policy", None), "value", getattr(transfer, "hit_policy", None)))


def _indices_like(idx):
    return torch.tensor(idx, dtype=torch.int64) if torch is not None else idx


def _flat_meta(ptrs, sizes):
    """(pointers, sizes) with one entry per buffer: a pool may give several
    buffers per object (a list per entry) or one size for all."""
    ptrs = list(ptrs)
    if isinstance(sizes, int):
        sizes = [sizes] * len(ptrs)
    sizes = list(sizes)
    if any(isinstance(p, (list, tuple)) for p in ptrs):
        fp, fs = [], []
        for p, s in zip(ptrs, sizes):
            p = p if isinstance(p, (list, tuple)) else [p]
            fp.extend(p)
            fs.extend(s if isinstance(s, (list, tuple)) else [s] * len(p))
        ptrs, sizes = fp, fs
    return [int(p) for p in ptrs], [int(s) for s in sizes]


def _is_mha_pool(host):
    """Whether a pool holds per-head (TP-sharded) K/V: sglang's MHA host
    pools have a v_buffer.  Asked only on an MLA target, where sglang backs
    up sidecars other than Mamba on TP rank 0 alone: a pool of no known
    kind counts as replicated (as sglang's Mooncake backend keys indexer
    and compressed pools), or ranks other than 0 would never find it."""
    if getattr(host, "mla", None) is not None:
        return not host.mla
    return hasattr(host, "v_buffer") or "MHA" in type(host).__name__


# ---- parked pinsets: batch_exists -> batch_get_v1 ----


class _Parked:
    """A parked pinset: the probed page keys it pins (pages of them), when
    it was parked, and which of its pages were loaded (it is released when
    all were, or it ages out, or the store clears)."""

    __slots__ = ("ps", "keys", "at", "pages", "t0", "loaded", "nloaded", "owner")

    def __init__(self, ps, keys, pages, t0):
        self.ps = ps
        self.keys = keys
        self.at = dict(zip(keys, range(pages)))  # page key -> its offset
        self.pages = pages
        self.t0 = t0
        self.loaded = bytearray(pages)
        self.nloaded = 0
        # the probing thread: its client handle holds the pins; when sglang
        # restarts its storage threads (reset()) the old thread's requests
        # are gone, and its pins (and with them its client slot) go too
        self.owner = threading.current_thread()


class KVPoolStore(HiCacheStorage):
    """sglang HiCache storage on a kvpool pool (see the module docstring).

    KVPoolStore(storage_config, kwargs) as sglang's dynamic factory builds
    it; register_mem_pool_host(host_pool) opens the pool (raises ValueError
    for an unsupported layout, kvpool.KVPoolError when the pool cannot be
    opened: no agent, no client slot).  Safe for any number of threads."""

    def __init__(self, storage_config=None, kwargs=None):
        cfg = storage_config
        self.storage_config = cfg
        self.extra = dict(getattr(cfg, "extra_config", None) or {})
        self.pool_name = str(self.extra.get("pool", "default"))
        self.tp_rank = int(getattr(cfg, "tp_rank", 0) or 0)
        self.tp_size = int(getattr(cfg, "tp_size", 1) or 1)
        self.pp_rank = int(getattr(cfg, "pp_rank", 0) or 0)
        self.pp_size = int(getattr(cfg, "pp_size", 1) or 1)
        self.cp_rank = int(getattr(cfg, "attn_cp_rank", 0) or 0)
        self.cp_size = int(getattr(cfg, "attn_cp_size", 1) or 1)
        self.is_mla = bool(getattr(cfg, "is_mla_model", False))
        self.should_split_heads = bool(getattr(cfg, "should_split_heads", False))
        # sglang picks its zero-copy calls for a dynamic backend when
        # storage_config.extra_config["interface_v1"] is true, reading it
        # after it built the backend: on unless the launch says 0
        if cfg is not None and isinstance(getattr(cfg, "extra_config", None), dict):
            cfg.extra_config.setdefault("interface_v1", 1)
        self.interface_v1 = bool(self.extra.get("interface_v1", 1))
        self.pin_prefetch = bool(self.extra.get("pin_prefetch", True))
        self.pin_max_pages = int(self.extra.get("pin_max_pages", 16384))
        self.pin_max_age_s = float(self.extra.get("pin_max_age_s", 10.0))
        self.busy_retry_s = float(self.extra.get("busy_retry_ms", 50)) / 1000.0
        self.clear_track_max = int(self.extra.get("clear_track_max", 1_000_000))
        self.remote_probe = bool(self.extra.get("remote_probe", False))

        # rank suffix of object keys, as sglang's backends build theirs
        rank = "" if self.is_mla else f"_{self.tp_rank}"
        if self.pp_size > 1:
            rank += f"_{self.pp_rank}"
        if self.cp_size > 1:
            rank += f"_cp{self.cp_rank}"
        self._rank_sfx = rank
        # object keys as sglang's own backends name them: "{hash}{rank}_k"
        # and (MHA) "{hash}{rank}_v"; kvpool.Keys packs a batch of them
        # with one join per suffix (the last char, k or v, occurs once in
        # its suffix: the binding proves the hashes' lengths with it)
        self._sfx = (rank + "_k",) if self.is_mla else (rank + "_k", rank + "_v")
        # heterogeneous TP (tp_lcm_size, as sglang's Mooncake backend): an
        # MHA rank stores its heads as split shards, each keyed by the rank
        # of TP tp_lcm_size that holds those heads, so engines whose TP
        # sizes divide tp_lcm_size read each other's pages
        self.tp_lcm_size = int(getattr(cfg, "tp_lcm_size", None) or 0)
        self.split = 1
        if self.should_split_heads and not self.is_mla and self.tp_lcm_size and self.tp_lcm_size % self.tp_size == 0:
            self.split = self.tp_lcm_size // self.tp_size
            pc = rank[len(f"_{self.tp_rank}") :]  # the pp / cp part
            ranks = [self.tp_rank * self.split + j for j in range(self.split)]
            self._sfx = tuple(f"_{r}{pc}_{kv}" for r in ranks for kv in ("k", "v"))
        self._per = len(self._sfx)  # objects per page
        # MLA pages are the same on every rank: rank 0 writes (sglang skips
        # the backup on other ranks too; this keeps it so without that)
        self._write_skip = self.is_mla and self.tp_rank != 0

        self.mem_pool_host = None
        self.pool = None
        self.namespace = None
        self.page_size = 1
        self.object_bytes = 0
        self._park_lock = threading.Lock()
        self._parked = {}  # every pinned page key -> the newest _Parked that pins it
        self._park_order = collections.deque()  # _Parked, oldest first
        self._parked_pages = 0
        self._owners = collections.Counter()  # probing thread -> its parked pinsets
        self._written = {}  # ordered set of object keys this store wrote
        self._written_lock = threading.Lock()
        self._logged = set()
        self._ns_pool = True  # the library counts per namespace (kvp_ns_count)
        self._ns_lock = threading.Lock()
        self._ns_pend = collections.Counter()  # events not yet in the pool's counters
        self._ns_t = 0.0
        self.refused_pools = []  # pool kinds refused at registration
        self._stat_lock = threading.Lock()
        self._tl = threading.local()
        self._counters = []  # every thread's Counter
        self._v2 = {}  # pool name -> _V2Pool (register_mem_host_pool_v2)
        self._metrics = {"prefetch_pgs": [], "backup_pgs": [], "prefetch_bandwidth": [], "backup_bandwidth": []}

    # -- set-up --

    def register_mem_pool_host(self, mem_pool_host):
        """Check the host pool's layout, derive the namespace, open the pool."""
        host = mem_pool_host
        layout = getattr(host, "layout", "page_first")
        if layout not in SUPPORTED_LAYOUTS:
            raise ValueError(
                f"kvpool.sglang: host KV layout {layout!r} is not supported (a page is not one contiguous "
                f"object per K/V); launch sglang with --hicache-mem-layout page_first "
                f"(or page_first_direct, page_head)"
            )
        if self.should_split_heads and not self.is_mla:
            why = None
            if self.split == 1 and not (self.tp_lcm_size and self.tp_lcm_size % self.tp_size == 0):
                why = f"tp_lcm_size {self.tp_lcm_size or None} is not a multiple of the TP size {self.tp_size}"
            elif not self.interface_v1:
                why = "split heads need the zero-copy calls (interface_v1)"
            elif layout != "page_head" or not hasattr(host, "get_split_heads_page_buffer_meta"):
                why = "split heads need the page_head host layout (--hicache-mem-layout page_head)"
            if why:
                raise ValueError(f"kvpool.sglang: heterogeneous TP (tp_lcm_size) refused: {why}")
        self.mem_pool_host = host
        self.page_size = int(host.page_size)
        self.object_bytes = _object_bytes(host, self.is_mla) // self.split
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        try:
            self.namespace = namespace_for(self.storage_config, host)
        except NoIdentity as e:
            logger.error("%s", e)
            self.namespace = None
            return
        try:
            self.pool = kvpool.Pool(self.pool_name, namespace=self.namespace, remote_probe=self.remote_probe)
        except kvpool.KVPoolError as e:
            raise type(e)(
                e.status,
                None,
                f"kvpool.sglang: cannot open pool {self.pool_name!r} ({e}); start its agent "
                f"(systemctl enable --now kvpoold@{self.pool_name}, or kvpoold --pool {self.pool_name} ...)",
            ) from None
        logger.info(
            "kvpool.sglang: pool %r, namespace %r, %d object(s) of %d bytes per page",
            self.pool_name,
            self.namespace,
            self._per,
            self.object_bytes,
        )

    def close(self):
        """Release every parked pin and close the pool (idempotent)."""
        self._drop_parked()
        self._ns_flush()
        p, self.pool = self.pool, None
        if p is not None:
            p.close()

    # -- helpers --

    def _once(self, kind, msg, *args):
        """Log an error once per kind (a broken store must not flood the log)."""
        self._ns("errors")
        if kind in self._logged:
            return
        self._logged.add(kind)
        logger.error("kvpool.sglang: " + msg + " (logged once)", *args)

    def _ns(self, event, n=1):
        """Count event (kvpool.NS_EVENTS) n times: in this store's stats()
        and in the pool's counters of its namespace, which the agent
        exports as kvpool_namespace_events_total{namespace=...,event=...}.
        The pool's are added every NS_FLUSH_S (a call into the pool costs
        microseconds; a probe takes ten), by get_stats() (sglang calls it
        every scheduler step) and by close().  Never raises."""
        if n <= 0:
            return
        self._count(event, n)
        if not self._ns_pool:
            return
        with self._ns_lock:
            self._ns_pend[event] += n
            now = time.monotonic()
            if now - self._ns_t < NS_FLUSH_S:
                return
            self._ns_t = now
        self._ns_flush()

    def _ns_flush(self):
        """Add the pending namespace events to the pool's counters."""
        with self._ns_lock:
            pend, self._ns_pend = self._ns_pend, collections.Counter()
        p = self.pool
        if p is None or not pend:
            return
        try:
            for e, v in pend.items():
                p.count(e, v)
        except kvpool.NotSupported:
            self._ns_pool = False  # a library without kvp_ns_count: stats() only
        except Exception:
            pass  # a reaped or closing client: the local counts stand

    def _count(self, name, n=1):
        """Add to a counter of this thread's (no lock; stats() sums them)."""
        c = getattr(self._tl, "c", None)
        if c is None:
            c = self._tl.c = collections.Counter()
            with self._stat_lock:
                self._counters.append(c)
        c[name] += n

    def _expand(self, keys):
        """Object keys of pages, K then V per page (MHA), packed
        (kvpool.Keys: no Python object per key; keys of unequal length or
        not ASCII take the binding's plain path, with the same keys)."""
        return kvpool.Keys(keys, self._sfx)

    def _meta(self, keys, host_indices):
        """(pointers, sizes) of the pages' objects, or None (logged)."""
        n = len(keys)
        ni = len(host_indices)
        if ni != n * self.page_size:
            self._once("indices", "%d host indices for %d pages of %d tokens", ni, n, self.page_size)
            return None
        if self.split > 1:
            ptrs, sizes = self.mem_pool_host.get_split_heads_page_buffer_meta(host_indices, self.split)
        else:
            ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        m = n * self._per
        if isinstance(sizes, int):
            sizes = [sizes] * len(ptrs)
        if len(ptrs) != m or len(sizes) != m:
            self._once(
                "meta",
                "the host pool gave %d pointers for %d objects (layout %r, %s)",
                len(ptrs),
                m,
                getattr(self.mem_pool_host, "layout", None),
                "mla" if self.is_mla else "mha",
            )
            return None
        return ptrs, sizes

    def _done(self, ok, n, counter, metric, t0):
        """Per page from per object (ok), counted: good pages under
        counter, the others under counter + "_failed", the call's pages
        and time under sglang's metric.  Returns the pages' bools."""
        out = self._pages(ok, n)
        good = sum(out)
        self._count(counter, good)
        self._count(counter + "_failed", n - good)
        ev = "store" if metric == "backup" else "load"
        self._ns(ev + "_pages", good)
        self._ns(ev + "_bytes", good * self._per * self.object_bytes)
        self._ns(ev + "_failed", n - good)
        self._record(metric, good, time.perf_counter() - t0)
        return out

    def _pages(self, ok, n):
        """Per page: all its objects ok (ok: a list of bools per object)."""
        per = self._per
        if per == 1:
            return ok
        if per == 2:
            return [a and b for a, b in zip(ok[0::2], ok[1::2])]
        return [all(ok[i * per : (i + 1) * per]) for i in range(n)]

    def _retry_busy(self, fn, okeys, ptrs, sizes, res):
        """Retry the objects whose answer was BUSY, within busy_retry_ms.
        okeys: the object keys, or a function that makes them."""
        busy = [i for i, r in enumerate(res) if r == kvpool.BUSY]
        if not busy:
            return res
        if callable(okeys):
            okeys = okeys()
        deadline = time.monotonic() + self.busy_retry_s
        pause = 0.0005
        while busy and time.monotonic() < deadline:
            self._count("busy_retries")
            time.sleep(pause)
            pause = min(pause * 2, 0.005)
            r2 = fn([okeys[i] for i in busy], [ptrs[i] for i in busy], [sizes[i] for i in busy])
            for i, r in zip(busy, r2):
                res[i] = r
            busy = [i for i in busy if res[i] == kvpool.BUSY]
        if busy:
            self._count("busy_gave_up", len(busy))
        return res

    # -- parked pins --

    def _sweep(self, now):
        """Release parked pinsets past their age, and those of probing
        threads that ended (every call runs this)."""
        if not self._park_order:
            return
        old = []
        with self._park_lock:
            while self._park_order and now - self._park_order[0].t0 > self.pin_max_age_s:
                old.append(self._unpark_locked(self._park_order[0]))
            dead = [t for t in self._owners if not t.is_alive()]
            if dead:
                for e in [e for e in self._park_order if e.owner in dead]:
                    old.append(self._unpark_locked(e))
        for e in old:
            e.ps.release()
        if old:
            self._count("pins_expired", len(old))

    def _unpark_locked(self, e):
        d = self._parked
        for k in e.keys:
            if d.get(k) is e:
                del d[k]
        self._park_order.remove(e)
        self._parked_pages -= e.pages
        self._owners[e.owner] -= 1
        if self._owners[e.owner] <= 0:
            del self._owners[e.owner]
        return e

    def _park(self, ps, keys, pages):
        now = time.monotonic()
        e = _Parked(ps, keys, pages, now)
        evicted = []
        with self._park_lock:
            while self._park_order and self._parked_pages + pages > self.pin_max_pages:
                evicted.append(self._unpark_locked(self._park_order[0]))
            # C-speed: a probe parks in a few microseconds (a key parked by
            # an older pinset too now names this one; _find_parked falls
            # back to the older ones)
            self._parked.update(zip(keys, itertools.repeat(e, pages)))
            self._park_order.append(e)
            self._parked_pages += pages
            self._owners[e.owner] += 1
        for x in evicted:
            x.ps.release()
        if evicted:
            self._count("pins_evicted", len(evicted))

    def _find_parked(self, keys):
        """(parked pinset, page offset, pages of keys it pins from there),
        or None: the pinset whose probed keys hold keys[0] and go on as
        keys do (a 128-page load batch of a whole-prompt probe)."""
        k0 = keys[0]
        with self._park_lock:
            first = self._parked.get(k0)
            if first is None:
                return None
            for e in [first] + [x for x in reversed(self._park_order) if x is not first and k0 in x.at]:
                o = e.at[k0]
                m = min(len(keys), e.pages - o)
                if e.keys[o : o + m] == list(keys[:m]):
                    return e, o, m
        return None

    def _loaded(self, e, o, m):
        """Pages [o, o+m) of e were loaded: release e once all were."""
        with self._park_lock:
            for i in range(o, o + m):
                if not e.loaded[i]:
                    e.loaded[i] = 1
                    e.nloaded += 1
            done = e.nloaded == e.pages and e in self._park_order
            if done:
                self._unpark_locked(e)
        if done:
            e.ps.release()

    def _drop_parked(self):
        with self._park_lock:
            es = list(self._park_order)
            self._parked.clear()
            self._park_order.clear()
            self._parked_pages = 0
            self._owners.clear()
        for e in es:
            e.ps.release()

    def parked_pages(self):
        """Pages held in parked pinsets now (for tests and stats)."""
        return self._parked_pages

    # -- the zero-copy path (interface_v1) --

    def batch_exists(self, keys, extra_info=None):
        """How many leading pages of keys are present (every object of a
        page).  With pin_prefetch, the pages counted are pinned until
        batch_get_v1 of these keys reads them, or pin_max_age_s passes.
        Never raises: 0 on any error."""
        try:
            n = len(keys)
            self._sweep(time.monotonic())
            if n == 0 or self.pool is None:
                return 0
            self._ns("lookup_keys", n)
            if not self.interface_v1:
                pages = self.pool.batch_exists_prefix([k + self._rank_sfx if self._rank_sfx else k for k in keys])
                self._ns("hit_keys", pages)
                return pages
            if not self.pin_prefetch:
                have = self.pool.batch_exists_prefix(self._expand(keys))
                pages = have // self._per
                self._count("exists_pages", pages)
                self._ns("hit_keys", pages)
                return pages
            # count only what is held: pin at most pin_max_pages pages; a
            # prefix that stops on a limit of the pool (BUSY: hold slots,
            # the pinned-bytes cap) counts what it pinned, no more
            ps = self.pool.lookup_pin(self._expand(keys[: max(0, self.pin_max_pages)]))
            pages = ps.count // self._per
            if ps.count < min(n, self.pin_max_pages) * self._per and ps.stop_status not in (kvpool.OK, kvpool.MISS):
                self._count("pins_short")
            if pages == 0:
                ps.release()
            else:
                self._park(ps, list(keys[:pages]), pages)
            self._count("exists_pages", pages)
            self._ns("hit_keys", pages)
            return pages
        except Exception as e:
            self._once("exists:" + type(e).__name__, "batch_exists failed: %r", e)
            return 0

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Load each page into the host pool at host_indices (len(keys) *
        page_size token slots).  One bool per page: True when every object
        of it was read whole.  A miss is False; never raises, never None."""
        n = len(keys)
        out = [False] * n
        try:
            self._sweep(time.monotonic())
            if n == 0 or self.pool is None:
                return out
            meta = self._meta(keys, host_indices)
            if meta is None:
                return out
            ptrs, sizes = meta
            t0 = time.perf_counter()
            f = self._find_parked(keys) if self.pin_prefetch else None
            if f is not None:
                # read this batch's pages through the pinset (its keys
                # before offset o get no buffer: skipped); the rest of the
                # pinset stays held for the batches after this one
                e, o, mp = f
                skip = o * self._per
                m = mp * self._per
                try:
                    got = e.ps.get([0] * skip + list(ptrs[:m]), [0] * skip + list(sizes[:m]))[skip:]
                finally:
                    self._loaded(e, o, mp)
                self._count("pinned_pages_read", mp)
                res = got
                if m < n * self._per:  # pages past the pinned ones
                    rest = keys[mp:]
                    res += self.pool.batch_get(self._expand(rest), ptrs[m:], sizes[m:])
            else:
                res = self.pool.batch_get(self._expand(keys), ptrs, sizes)
            res = self._retry_busy(self.pool.batch_get, lambda: self._expand(keys), ptrs, sizes, res)
            return self._done([r == s for r, s in zip(res, sizes)], n, "get_pages", "prefetch", t0)
        except Exception as e:
            self._once("get:" + type(e).__name__, "batch_get_v1 failed: %r", e)
            return [False] * n

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Store each page from the host pool at host_indices.  One bool per
        page: True when every object of it is in the pool (written now, or
        there already: the first writer wins).  MLA ranks other than 0
        answer True without writing.  Never raises, never None."""
        n = len(keys)
        try:
            self._sweep(time.monotonic())
            if n == 0:
                return []
            if self._write_skip:
                return [True] * n
            if self.pool is None:
                return [False] * n
            meta = self._meta(keys, host_indices)
            if meta is None:
                return [False] * n
            ptrs, sizes = meta
            t0 = time.perf_counter()
            res = self.pool.batch_put(self._expand(keys), ptrs, sizes)
            res = self._retry_busy(self.pool.batch_put, lambda: self._expand(keys), ptrs, sizes, res)
            ok = [r == 0 or r == kvpool.EXISTS for r in res]
            if self.clear_track_max > 0 and 0 in res:
                self._remember([k for k, r in zip(self._expand(keys), res) if r == 0])
            return self._done(ok, n, "set_pages", "backup", t0)
        except Exception as e:
            self._once("set:" + type(e).__name__, "batch_set_v1 failed: %r", e)
            return [False] * n

    # -- the v2 interface: sidecar pools (HybridCacheController) --

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        """Register one pool of sglang's HostPoolGroup (the KV anchor or a
        sidecar: SWA, Mamba, DSA indexer, DeepSeek-V4 compressed pools,
        drafts ...).  A sidecar's objects per page and their sizes are read
        once from its get_page_buffer_meta; a pool whose pages are not whole
        objects is refused here (ValueError naming it), at start-up, never
        later in a storage thread; refusals are counted (stats()
        "refused_pools", the namespace's "refused" event)."""
        try:
            return self._register_v2(host_pool, host_pool_name)
        except ValueError:
            self.refused_pools.append(_pool_name(host_pool_name))
            self._ns("refused")
            raise

    def _register_v2(self, host_pool, host_pool_name):
        name = _pool_name(host_pool_name)
        registered = getattr(self, "registered_pools", None)
        if registered is None:
            registered = self.registered_pools = {}
        if name == "kv":
            registered[host_pool_name] = host_pool
            self._v2[name] = _V2Pool(name, host_pool, (), (), False, getattr(host_pool, "kv_buffer", 1) is None)
            return
        try:
            ps = int(getattr(host_pool, "page_size", 1) or 1)
            ptrs, sizes = host_pool.get_page_buffer_meta(_indices_like(list(range(ps))))
            ptrs, sizes = _flat_meta(ptrs, sizes)
        except Exception as e:
            raise ValueError(
                f"kvpool.sglang: cannot serve host pool {name!r} ({type(host_pool).__name__}): its "
                f"get_page_buffer_meta failed for one page ({e!r}); use --hicache-mem-layout page_first "
                f"or a storage backend that serves this pool kind"
            ) from None
        if not ptrs or len(ptrs) != len(sizes) or any(s < 0 for s in sizes) or not any(sizes):
            raise ValueError(
                f"kvpool.sglang: cannot serve host pool {name!r} ({type(host_pool).__name__}): one page "
                f"is {len(ptrs)} pointer(s) of {list(sizes)[:8]} bytes, not whole objects"
            )
        shared = self.is_mla and name != "mamba" and not _is_mha_pool(host_pool)
        if shared:  # replicated on every TP rank (MLA-like): one copy, rank 0 writes
            rank = self._rank_sfx
        else:  # this rank's shard; the TP size in the key: shards of other sizes differ
            rank = f"_{self.tp_rank}of{self.tp_size}"
            if self.pp_size > 1:
                rank += f"_{self.pp_rank}"
            if self.cp_size > 1:
                rank += f"_cp{self.cp_rank}"
        sfx = tuple(f"{rank}_{name}_{j}" for j in range(len(sizes)))
        registered[host_pool_name] = host_pool
        self._v2[name] = _V2Pool(name, host_pool, sfx, tuple(sizes), shared, False)
        logger.info(
            "kvpool.sglang: sidecar pool %r: %d object(s) per page (%s bytes), %s",
            name,
            len(sizes),
            ",".join(str(s) for s in sizes),
            "replicated (rank 0 writes)" if shared else "per rank",
        )

    def _v2_pool(self, transfer):
        name = _pool_name(getattr(transfer, "name", None))
        p = self._v2.get(name)
        if p is None:
            self._once("v2unreg:" + name, "pool %r was never registered (register_mem_host_pool_v2)", name)
        return p

    def _v2_present(self, p, keys):
        """Per page of keys: every object of sidecar p is present."""
        okeys = kvpool.Keys(keys, p.sfx)
        try:
            tiers = self.pool.batch_locate(okeys)
        except kvpool.NotSupported:
            tiers = [1 if self.pool.exists(k) else 0 for k in okeys]
        per = len(p.sfx)
        live = [j for j, s in enumerate(p.sizes) if s > 0]  # 0-byte objects are never stored
        return [all(tiers[i * per + j] for j in live) for i in range(len(keys))]

    def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
        """The usable prefix over the KV pages and every sidecar transfer,
        each with its hit policy (all pages; trailing pages: the last
        len(transfer.keys) pages before a stop point).  A logical anchor
        (kv_buffer None) counts as present.  Never raises: 0 on any error."""
        try:
            n = len(keys)
            if n == 0 or self.pool is None:
                return _transfer_result(0, {}, [])
            kv = self._v2.get("kv")
            logical = (kv is not None and kv.logical) or getattr(self.mem_pool_host, "kv_buffer", 1) is None
            kv_pages = n if logical else self.batch_exists(keys, extra_info)
            hits = {"kv": kv_pages} if kv_pages else {}
            restorable = list(range(1, kv_pages + 1))
            for t in pool_transfers or []:
                if not restorable:
                    break
                p = self._v2_pool(t)
                ok = self._v2_present(p, list(keys[:kv_pages])) if p is not None and p.sfx else [False] * kv_pages
                if _policy(t) == "trailing_pages":
                    win = max(1, len(t.keys) if getattr(t, "keys", None) else 1)
                    stops = [e for e in range(kv_pages, 0, -1) if all(ok[max(0, e - win) : e])]
                else:
                    b = ok.index(False) if False in ok else kv_pages
                    stops = list(range(b, 0, -1))
                if stops:
                    hits[t.name] = stops[0]
                keep = set(stops)
                restorable = [e for e in restorable if e in keep]
            final = restorable[-1] if restorable else 0
            self._count("exists_v2_pages", final)
            return _transfer_result(final, hits, restorable)
        except Exception as e:
            self._once("exists_v2:" + type(e).__name__, "batch_exists_v2 failed: %r", e)
            return _transfer_result(0, {}, [])

    def _v2_io(self, transfers, is_set):
        out = {}
        for t in transfers or []:
            keys = list(getattr(t, "keys", None) or [])
            try:
                out[t.name] = self._v2_io_one(t, keys, is_set)
            except Exception as e:
                what = "batch_set_v2" if is_set else "batch_get_v2"
                self._once(what + ":" + type(e).__name__, "%s failed: %r", what, e)
                out[t.name] = [False] * len(keys)
        return out

    def _v2_io_one(self, t, keys, is_set):
        n = len(keys)
        p = self._v2_pool(t)
        if p is None or n == 0:
            return [False] * n
        if p.name == "kv":  # the anchor: the v1 path (a logical anchor has no bytes)
            if p.logical:
                return [True] * n
            fn = self.batch_set_v1 if is_set else self.batch_get_v1
            return fn(keys, t.host_indices)
        if is_set and p.shared and self.tp_rank != 0:
            return [True] * n
        if self.pool is None:
            return [False] * n
        ps = int(getattr(p.host, "page_size", 1) or 1)
        hi = t.host_indices
        if hi is None or len(hi) != n * ps:
            self._once("v2indices:" + p.name, "pool %r: %s host indices for %d pages of %d", p.name,
                       None if hi is None else len(hi), n, ps)
            return [False] * n
        ptrs, sizes = _flat_meta(*p.host.get_page_buffer_meta(hi))
        per = len(p.sfx)
        if len(ptrs) != n * per or list(sizes) != list(p.sizes) * n:
            self._once("v2meta:" + p.name, "pool %r: the host pool gave %d objects for %d pages of %d",
                       p.name, len(ptrs), n, per)
            return [False] * n
        okeys = kvpool.Keys(keys, p.sfx)
        live = [i for i, s in enumerate(sizes) if s > 0]
        if len(live) != len(sizes):
            okeys = [okeys[i] for i in live]
            ptrs = [ptrs[i] for i in live]
            sizes = [sizes[i] for i in live]
        if is_set:
            res = self.pool.batch_put(okeys, ptrs, sizes)
            res = self._retry_busy(self.pool.batch_put, okeys, ptrs, sizes, res)
            good = [r == 0 or r == kvpool.EXISTS for r in res]
            if self.clear_track_max > 0 and 0 in res:
                self._remember([k for k, r in zip(okeys, res) if r == 0])
        else:
            res = self.pool.batch_get(okeys, ptrs, sizes)
            res = self._retry_busy(self.pool.batch_get, okeys, ptrs, sizes, res)
            good = [r == s for r, s in zip(res, sizes)]
        ok = [True] * (n * per)
        for i, g in zip(live, good):
            ok[i] = g
        pages = [all(ok[i * per : (i + 1) * per]) for i in range(n)]
        c = "set_v2_pages" if is_set else "get_v2_pages"
        self._count(c, sum(pages))
        self._count(c + "_failed", n - sum(pages))
        ev = "store" if is_set else "load"
        self._ns(ev + "_pages", sum(pages))
        self._ns(ev + "_bytes", sum(s for i, s in zip(live, sizes) if ok[i]))
        self._ns(ev + "_failed", n - sum(pages))
        return pages

    def batch_get_v2(self, transfers, extra_info=None):
        """Load each transfer's pages into its pool.  {name: [bool per
        page]}; never raises, a failure is False."""
        try:
            return self._v2_io(transfers, False)
        except Exception as e:
            self._once("get_v2:" + type(e).__name__, "batch_get_v2 failed: %r", e)
            return {}

    def batch_set_v2(self, transfers, extra_info=None):
        """Store each transfer's pages from its pool.  {name: [bool per
        page]}; never raises, a failure is False."""
        try:
            return self._v2_io(transfers, True)
        except Exception as e:
            self._once("set_v2:" + type(e).__name__, "batch_set_v2 failed: %r", e)
            return {}

    # -- the copy path (interface_v1 off; also usable directly) --

    def _flat_key(self, key):
        return key + self._rank_sfx if self._rank_sfx else key

    @staticmethod
    def _addr_len(obj, writable):
        """(address, bytes) of a torch tensor (contiguous) or a buffer."""
        if torch is not None and isinstance(obj, torch.Tensor):
            if not obj.is_contiguous():
                raise ValueError("a non-contiguous tensor")
            return obj.data_ptr(), obj.numel() * obj.element_size()
        return kvpool.buffer_address(obj, writable)

    def set(self, key, value=None, target_location=None, target_sizes=None):
        """Store one value: value (a tensor or buffer), or target_sizes bytes
        at address target_location.  True when stored or already there."""
        try:
            if self._write_skip:
                return True
            if self.pool is None:
                return False
            if value is not None:
                addr, ln = self._addr_len(value, False)
            elif target_location is not None and target_sizes is not None:
                addr, ln = int(target_location), int(target_sizes)
            else:
                return False
            k = self._flat_key(key)
            res = self.pool.batch_put([k], [addr], [ln])
            res = self._retry_busy(self.pool.batch_put, [k], [addr], [ln], res)
            if res[0] == 0:
                self._remember([k])
            good = res[0] == 0 or res[0] == kvpool.EXISTS
            self._ns("store_pages" if good else "store_failed")
            self._ns("store_bytes", ln if good else 0)
            return good
        except Exception as e:
            self._once("cset:" + type(e).__name__, "set failed: %r", e)
            return False

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        """set() of each key; True when all succeeded."""
        try:
            if values is not None:
                return all([self.set(k, v) for k, v in zip(keys, values)]) and len(keys) == len(values)
            if target_locations is None or target_sizes is None:
                return False
            return all([self.set(k, None, a, s) for k, a, s in zip(keys, target_locations, target_sizes)])
        except Exception as e:
            self._once("cbset:" + type(e).__name__, "batch_set failed: %r", e)
            return False

    def get(self, key, target_location=None, target_sizes=None):
        """Read one value: into target_location (a tensor or buffer, returned
        on success), into target_sizes bytes at address target_location
        (True on success), or as a new uint8 tensor (bytes without torch).
        None on a miss or any failure."""
        try:
            if self.pool is None:
                return None
            k = self._flat_key(key)
            if target_location is None:
                data = self.pool.get_bytes(k)
                if torch is not None:
                    return torch.frombuffer(bytearray(data), dtype=torch.uint8)
                return data
            is_addr = isinstance(target_location, int)
            if is_addr:
                addr, ln = target_location, int(target_sizes)
            else:
                addr, ln = self._addr_len(target_location, True)
            res = self.pool.batch_get([k], [addr], [ln])
            res = self._retry_busy(self.pool.batch_get, [k], [addr], [ln], res)
            if res[0] != ln:
                self._ns("load_failed")
                return None
            self._ns("load_pages")
            self._ns("load_bytes", ln)
            return True if is_addr else target_location
        except kvpool.Miss:
            return None
        except Exception as e:
            self._once("cget:" + type(e).__name__, "get failed: %r", e)
            return None

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """get() of each key: a list of the targets (None where missed);
        with addresses (ints) and sizes, the number of leading keys read,
        as sglang's mooncake backend answers."""
        try:
            locs = target_locations if target_locations is not None else [None] * len(keys)
            if locs and isinstance(locs[0], int) and target_sizes is not None:
                for i, (k, a, s) in enumerate(zip(keys, locs, target_sizes)):
                    if self.get(k, a, s) is not True:
                        return i
                return len(keys)
            return [self.get(k, t) for k, t in zip(keys, locs)]
        except Exception as e:
            self._once("cbget:" + type(e).__name__, "batch_get failed: %r", e)
            return [None] * len(keys)

    def exists(self, key):
        """Whether the page is present (both objects for MHA on the
        zero-copy path, the flat page on the copy path)."""
        try:
            if self.pool is None:
                return False
            if self.interface_v1:
                return self.pool.batch_exists_prefix(self._expand([key])) == self._per
            return self.pool.exists(self._flat_key(key))
        except Exception as e:
            self._once("cexists:" + type(e).__name__, "exists failed: %r", e)
            return False

    # -- housekeeping --

    def _remember(self, okeys):
        if not okeys or self.clear_track_max <= 0:
            return
        with self._written_lock:
            w = self._written
            w.update(dict.fromkeys(okeys))
            extra = len(w) - self.clear_track_max
            if extra > 0:
                it = iter(w)
                for k in [next(it) for _ in range(extra)]:
                    del w[k]

    def clear(self):
        """Release parked pins and delete the objects this store wrote (the
        last clear_track_max of them), never other engines' pages: the pool
        is shared.  To empty a whole pool, restart its agent without
        --ssd-dir, or delete the namespace's keys with the kvpool CLI."""
        try:
            self._drop_parked()
            with self._written_lock:
                keys, self._written = list(self._written), {}
            gone = 0
            if self.pool is not None:
                for k in keys:
                    try:
                        self.pool.delete(k)
                        gone += 1
                    except kvpool.Miss:
                        pass
                    except kvpool.KVPoolError:
                        pass
            logger.info("kvpool.sglang: clear() deleted %d object(s) this store wrote", gone)
            return True
        except Exception as e:
            self._once("clear:" + type(e).__name__, "clear failed: %r", e)
            return False

    def _record(self, what, pages, secs):
        if pages <= 0:
            return
        gb = pages * self._per * self.object_bytes / (1 << 30)
        with self._stat_lock:
            self._metrics[what + "_pgs"].append(pages)
            self._metrics[what + "_bandwidth"].append(gb / secs if secs > 0 else 0.0)
            for k in ("prefetch_pgs", "backup_pgs", "prefetch_bandwidth", "backup_bandwidth"):
                if len(self._metrics[k]) > 10000:  # nobody collects: keep it bounded
                    del self._metrics[k][:5000]

    def stats(self):
        """Counters of this store as a dict (pages read, written, missed,
        pins parked, used, expired, errors ...)."""
        d = collections.Counter()
        with self._stat_lock:
            counters = list(self._counters)
        for c in counters:
            d.update(c.copy())
        d = dict(d)
        for e in kvpool.NS_EVENTS:
            d.setdefault(e, 0)
        d["parked_pages"] = self._parked_pages
        d["refused_pools"] = list(self.refused_pools)
        d["namespace"] = self.namespace
        d["pool"] = self.pool_name
        return d

    def get_stats(self):
        """sglang's StorageMetrics (per call pages and GB/s of prefetch and
        backup since the last call) when sglang is importable, with this
        store's counters (stats()) as its attribute "kvpool"; else a dict:
        the same lists plus stats()."""
        try:
            self._ns_flush()
            with self._stat_lock:
                m = {k: list(v) for k, v in self._metrics.items()}
                for v in self._metrics.values():
                    v.clear()
            cls = _storage_metrics_class()
            if cls is not None:
                sm = cls()
                for k, v in m.items():
                    getattr(sm, k).extend(v)
                try:
                    sm.kvpool = self.stats()
                except Exception:
                    pass  # a StorageMetrics with __slots__: the lists stand
                return sm
            m.update(self.stats())
            return m
        except Exception as e:
            self._once("stats:" + type(e).__name__, "get_stats failed: %r", e)
            return None
