# SPDX-License-Identifier: MIT
"""vLLM's side of kvpool.vllm, modelled for the tests and the benchmark.

Written from reading vLLM's source, not copied: vLLM main at commit
7cfb97e337 (2026-08-20, after PR #51875), the paths
  vllm/v1/kv_offload/base.py            LookupResult, ReqContext, Medium, OffloadingSpec
  vllm/v1/kv_offload/config.py          OffloadingConfig (what a tier's spec carries)
  vllm/v1/kv_offload/tiering/base.py    SecondaryTierManager, TransferJob, JobResult
  vllm/v1/kv_offload/tiering/manager.py TieringOffloadingManager, the CPU primary tier
  vllm/v1/kv_offload/tiering/factory.py SecondaryTierFactory (module_path, PR #51007)
  vllm/v1/kv_offload/tiering/spec.py    TieringOffloadingSpec (build_metric_definitions)
  vllm/v1/kv_offload/factory.py         OffloadingSpecFactory (spec_name, spec_module_path)
  vllm/v1/kv_offload/cpu/manager.py     the primary tier's blocks and ref counts
  vllm/v1/kv_offload/cpu/shared_offload_region.py   the rows as one memoryview
  vllm/v1/kv_offload/tiering/fs/manager.py, async_lookup.py, file_mapper.py   the reference tier
  vllm/distributed/kv_transfer/kv_connector/v1/offloading/{config,scheduler,metrics}.py
  vllm/v1/core/kv_cache_utils.py        NONE_HASH and its seed
install() puts these under vLLM's module names in sys.modules, so that
kvpool.vllm, imported after it, binds to them as it binds to vLLM's own
classes in a vLLM process.

What the model keeps of vLLM's behaviour (each one can make a test fail):
- the tiering manager asks a secondary tier only about keys its CPU
  primary tier misses; a tier HIT allocates a primary row at once
  (in flight: HIT_PENDING), or answers MISS when the primary tier is full;
  the step's promotions go to submit_load() as one job per (tier,
  request) at the end of the step (on_schedule_end), before the tier's own
  on_schedule_end;
- a block stored into the primary tier is cascaded to every tier with
  submit_store(), its keys as a set paired with block_ids by iteration
  order, its primary rows held until the tier reports the job;
- get_finished_jobs() results are asserted: a job reported twice, by
  another tier, or with successful keys not among its keys, raises; a
  failed load frees its primary rows, and the next lookup asks the tier
  again (a tier that answers HIT again livelocks, vllm#49176);
- reset_cache() drains every tier and asserts no job is left;
- metrics: get_stats() may only carry names build_metric_definitions
  declared (vLLM's OffloadPromMetrics asserts it);
- the factory imports module_path, takes getattr(module, type) and
  asserts issubclass(cls, SecondaryTierManager).
The connector side (Engine) scans a request's keys as vLLM's
_maximal_prefix_lookup does: HIT counts, HIT_PENDING and RETRY defer the
request (and the scan goes on), MISS ends it.
"""

import abc
import collections
import dataclasses
import enum
import hashlib
import importlib
import mmap
import os
import pickle
import sys
import time
import types
from typing import Any, NamedTuple, Optional

try:
    import numpy as np
except ImportError:  # block_ids are numpy arrays in vLLM; lists without numpy
    np = None

# ---- vllm/v1/kv_offload/base.py ----


def make_offload_key(block_hash, group_idx):
    return bytes(block_hash) + int(group_idx).to_bytes(4, "big", signed=False)


class Medium(enum.Enum):
    CPU = "CPU"
    STORAGE = "STORAGE"


class Locality(enum.Enum):
    LOCAL = "LOCAL"
    REMOTE = "REMOTE"


@dataclasses.dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: Optional[dict] = None


class LookupResult(enum.Enum):
    MISS = enum.auto()
    HIT = enum.auto()
    HIT_PENDING = enum.auto()
    RETRY = enum.auto()


class OffloadPolicy(enum.Enum):
    BLOCK_LEVEL = "block_level"
    REQUEST_LEVEL = "request_level"


@dataclasses.dataclass
class RequestOffloadingContext:
    policy: OffloadPolicy = OffloadPolicy.BLOCK_LEVEL


class ScheduleEndContext(NamedTuple):
    new_req_ids: Any
    preempted_req_ids: Any


@dataclasses.dataclass
class OffloadingEvent:
    keys: list
    medium: Medium
    removed: bool
    locality: Optional[Locality] = None


@dataclasses.dataclass(frozen=True)
class OffloadingMetricMetadata:
    documentation: str
    labelnames: tuple = ()


@dataclasses.dataclass(frozen=True)
class OffloadingCounterMetadata(OffloadingMetricMetadata):
    pass


@dataclasses.dataclass(frozen=True)
class OffloadingGaugeMetadata(OffloadingMetricMetadata):
    pass


@dataclasses.dataclass(frozen=True)
class OffloadingKVEventsConfig:
    enable_kv_cache_events: bool
    self_describing_kv_events: bool = False


class OffloadingSpec(abc.ABC):
    @classmethod
    def build_metric_definitions(cls, extra_config):
        return {}

    def __init__(self, config):
        self.config = config
        self.extra_config = config.extra_config
        self.kv_events_config = OffloadingKVEventsConfig(enable_kv_cache_events=config.enable_kv_cache_events)
        self.tokens_per_hash = config.cache.tokens_per_hash
        self.blocks_per_chunk = config.cache.blocks_per_chunk


# ---- vllm/v1/kv_offload/config.py ----


@dataclasses.dataclass(frozen=True)
class OffloadingGroupConfig:
    tokens_per_block: int
    layer_names: tuple


@dataclasses.dataclass(frozen=True)
class OffloadingModelConfig:
    name: str
    dtype: str


@dataclasses.dataclass(frozen=True)
class OffloadingCacheConfig:
    tokens_per_hash: int
    blocks_per_chunk: int


@dataclasses.dataclass(frozen=True)
class OffloadingParallelConfig:
    rank: int = 0
    world_size: int = 1
    tp_size: int = 1
    pp_size: int = 1
    pcp_size: int = 1
    dcp_size: int = 1
    data_parallel_index: int = 0
    data_parallel_size: int = 1
    data_parallel_rank_local: Optional[int] = None
    is_parallelism_agnostic: bool = False


@dataclasses.dataclass(frozen=True)
class OffloadingConfig:
    groups: tuple
    worker_kv_bytes_per_block: int
    enable_kv_cache_events: bool
    extra_config: dict
    engine_id: str
    model: OffloadingModelConfig
    cache: OffloadingCacheConfig
    parallel: OffloadingParallelConfig
    replicated_layout: bool = False
    canonical_layout: bool = False


def make_config(
    tiers,
    model="org/model",
    dtype="bfloat16",
    tokens_per_block=16,
    layers=2,
    tp=1,
    pp=1,
    pcp=1,
    dcp=1,
    dp_index=0,
    dp_size=1,
    row_bytes=64 << 10,
    num_blocks=32,
    engine_id=None,
    groups=None,
    replicated_layout=False,
    **extra,
):
    """An OffloadingConfig as vLLM's build_offloading_config makes it, for
    TieringOffloadingSpec with the given secondary tier configs; each
    worker's share of a row so that a row is row_bytes."""
    world = tp * pp
    copies = 1 if replicated_layout else world
    extra_config = {
        "spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": num_blocks * row_bytes,
        "secondary_tiers": list(tiers),
    }
    extra_config.update(extra)
    if groups is None:
        groups = (OffloadingGroupConfig(tokens_per_block, tuple(f"model.layers.{i}.attn" for i in range(layers))),)
    return OffloadingConfig(
        groups=tuple(groups),
        worker_kv_bytes_per_block=row_bytes // copies,
        enable_kv_cache_events=False,
        extra_config=extra_config,
        engine_id=engine_id or f"engine-{os.getpid()}-{dp_index}-{time.monotonic_ns()}",
        model=OffloadingModelConfig(model, dtype),
        cache=OffloadingCacheConfig(tokens_per_block, 1),
        parallel=OffloadingParallelConfig(
            world_size=world, tp_size=tp, pp_size=pp, pcp_size=pcp, dcp_size=dcp,
            data_parallel_index=dp_index, data_parallel_size=dp_size,
        ),
        replicated_layout=replicated_layout,
    )


# ---- vllm/v1/kv_offload/tiering/base.py ----


@dataclasses.dataclass
class TransferJob:
    job_id: int
    keys: Any
    block_ids: Any
    is_promotion: bool
    req_context: ReqContext


@dataclasses.dataclass
class JobResult:
    job_id: int
    success: bool
    successful_keys: Any = None
    transfer_time: Optional[float] = None


class TieringOffloadingMetrics:
    BLOCK_QUERIES = "vllm:kv_offload_tiering_chunk_queries"
    BLOCK_HITS = "vllm:kv_offload_tiering_chunk_hits"
    READ_BYTES = "vllm:kv_offload_tiering_read_bytes"
    WRITE_BYTES = "vllm:kv_offload_tiering_write_bytes"
    PROMOTION_JOB_FAILURES = "vllm:kv_offload_tiering_promotion_job_failures"
    CASCADE_JOB_FAILURES = "vllm:kv_offload_tiering_cascade_job_failures"
    PROMOTION_ALLOCATION_FAILURES = "vllm:kv_offload_tiering_promotion_allocation_failures"


class SecondaryTierManager(abc.ABC):
    medium = None

    def __init__(self, offloading_spec, primary_kv_view, tier_type):
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        self.locality = None

    @abc.abstractmethod
    def lookup(self, key, req_context): ...

    @abc.abstractmethod
    def submit_store(self, job_metadata): ...

    @abc.abstractmethod
    def submit_load(self, job_metadata): ...

    @abc.abstractmethod
    def get_finished_jobs(self): ...

    def has_pending_work(self):
        return False

    def take_events(self):
        return ()

    def touch(self, keys, req_context):
        return

    @abc.abstractmethod
    def on_new_request(self, req_context): ...

    def on_request_finished(self, req_context):
        return

    def serve_external_requests(self, parent):
        return

    def on_schedule_end(self, context):
        return

    @abc.abstractmethod
    def drain_jobs(self): ...

    def shutdown(self):
        return

    @classmethod
    def build_metric_definitions(cls, extra_config):
        return {}

    def get_stats(self):
        return None


# ---- .../offloading/metrics.py: the stats a tier hands vLLM ----


class OffloadingConnectorStats:
    def __init__(self):
        self.types = {}
        self.values = {}

    def is_empty(self):
        return not self.values

    def increase_counter(self, name, value=1, labelvalues=()):
        self.types.setdefault(name, "counter")
        d = self.values.setdefault(name, {})
        d[labelvalues] = d.get(labelvalues, 0) + value

    def set_gauge(self, name, value, labelvalues=()):
        self.types.setdefault(name, "gauge")
        self.values.setdefault(name, {})[labelvalues] = value

    def aggregate(self, other):
        for name, vals in other.values.items():
            kind = other.types[name]
            for lv, v in vals.items():
                if kind == "counter":
                    self.increase_counter(name, v, lv)
                else:
                    self.set_gauge(name, v, lv)
        return self


class PromMetrics:
    """What vLLM's OffloadPromMetrics does with the stats: every name must
    have been declared by the spec's build_metric_definitions (asserted);
    counters add up, gauges keep the last value."""

    def __init__(self, extra_config):
        spec_cls = OffloadingSpecFactory.get_spec_cls(extra_config)
        self.defs = spec_cls.build_metric_definitions(extra_config)
        self.totals = collections.Counter()
        self.gauges = {}

    def observe(self, stats):
        if stats is None:
            return
        for name, vals in stats.values.items():
            assert name in self.defs, f"metric {name} was never declared"
            for lv, v in vals.items():
                if stats.types[name] == "counter":
                    self.totals[name] += v
                else:
                    self.gauges[name] = v


# ---- vllm/v1/kv_offload/tiering/manager.py: the CPU primary tier ----


class PrimaryTier:
    """The CPU primary tier: rows of one mapping (SharedOffloadRegion's
    /dev/shm file in vLLM), seen by secondary tiers as one memoryview of
    shape (num_blocks, row bytes); blocks with vLLM's ref counts (-1: a
    write in flight, not readable) and LRU eviction of idle blocks."""

    def __init__(self, num_blocks, row_bytes):
        self.num_blocks = num_blocks
        self.row_bytes = row_bytes
        self._map = mmap.mmap(-1, num_blocks * row_bytes)
        self.view = memoryview(self._map).cast("b", (num_blocks, row_bytes))
        self.blocks = collections.OrderedDict()  # key -> [block id, ref count], LRU first
        self.free = list(range(num_blocks - 1, -1, -1))

    def lookup(self, key):
        b = self.blocks.get(key)
        if b is None:
            return LookupResult.MISS
        return LookupResult.HIT_PENDING if b[1] < 0 else LookupResult.HIT

    def prepare_write(self, keys):
        """Rows for the keys not here (allocated, ref -1); None when the
        idle blocks cannot make room (nothing is allocated then)."""
        todo = [k for k in keys if k not in self.blocks]
        need = len(todo) - len(self.free)
        if need > 0:
            protected = set(keys)
            idle = [k for k, b in self.blocks.items() if b[1] == 0 and k not in protected]
            if len(idle) < need:
                return None
            for k in idle[:need]:
                self.free.append(self.blocks.pop(k)[0])
        bids = []
        for k in todo:
            bid = self.free.pop()
            self.blocks[k] = [bid, -1]
            bids.append(bid)
        return todo, bids

    def complete_write(self, keys, success):
        for k in keys:
            b = self.blocks.get(k)
            if b is None or b[1] >= 0:
                continue
            if success:
                b[1] = 0
            else:
                self.free.append(self.blocks.pop(k)[0])

    def prepare_read(self, keys):
        """Ref each key's row (ready rows only); their ids, in the keys'
        iteration order."""
        bids = []
        for k in keys:
            b = self.blocks[k]
            assert b[1] >= 0, "reading a row not ready"
            b[1] += 1
            self.blocks.move_to_end(k)
            bids.append(b[0])
        return bids

    def complete_read(self, keys):
        for k in keys:
            b = self.blocks[k]
            assert b[1] > 0, "ref count already 0"
            b[1] -= 1

    def row(self, bid):
        return bytes(self._map[bid * self.row_bytes : (bid + 1) * self.row_bytes])

    def write_row(self, bid, data):
        self._map[bid * self.row_bytes : (bid + 1) * self.row_bytes] = data

    def reset(self):
        self.blocks.clear()
        self.free = list(range(self.num_blocks - 1, -1, -1))


class TieringManager:
    """vLLM's TieringOffloadingManager around a PrimaryTier and the secondary
    tiers (see the module docstring for what is kept)."""

    def __init__(self, primary, tiers):
        self.primary = primary
        self.tiers = list(tiers)
        self.jobs = {}  # job id -> (TransferJob, tier index)
        self.next_job = 0
        self.pending = {}  # tier index -> {req id: [ctx, keys, block ids]}
        self.processed = False
        self.req_state = {}  # req id -> [ctx, pending primary stores, finished]
        self.stats = OffloadingConnectorStats()
        self.promotions = collections.Counter()  # key -> promotions started (livelock check)
        self.failed_jobs = []  # (kind, job id) of failed jobs

    def _process_finished(self):
        for i, tier in enumerate(self.tiers):
            for r in tier.get_finished_jobs():
                meta = self.jobs.pop(r.job_id, None)
                assert meta is not None, f"job {r.job_id} reported twice or never submitted (tier {i})"
                job, idx = meta
                assert idx == i, f"job {r.job_id} of tier {idx} reported by tier {i}"
                if not r.success:
                    self.failed_jobs.append(("load" if job.is_promotion else "store", r.job_id))
                    name = (
                        TieringOffloadingMetrics.PROMOTION_JOB_FAILURES
                        if job.is_promotion
                        else TieringOffloadingMetrics.CASCADE_JOB_FAILURES
                    )
                    self.stats.increase_counter(name, 1, (f"{i + 1}:{tier.tier_type}",))
                if not job.is_promotion:
                    self.primary.complete_read(job.keys)
                    continue
                if r.success:
                    self.primary.complete_write(job.keys, True)
                    continue
                good = set(r.successful_keys or ())
                assert good <= set(job.keys), f"job {r.job_id} reported successful keys it never had"
                self.primary.complete_write([k for k in job.keys if k in good], True)
                self.primary.complete_write([k for k in job.keys if k not in good], False)

    def _maybe_process(self):
        if not self.processed:
            self.processed = True
            self._process_finished()

    def lookup(self, key, ctx):
        self._maybe_process()
        r = self.primary.lookup(key)
        if r is not LookupResult.MISS:
            return r
        any_retry = False
        for i, tier in enumerate(self.tiers):
            label = (f"{i + 1}:{tier.tier_type}",)
            res = tier.lookup(key, ctx)
            if res is LookupResult.HIT:
                self.stats.increase_counter(TieringOffloadingMetrics.BLOCK_QUERIES, 1, label)
                self.stats.increase_counter(TieringOffloadingMetrics.BLOCK_HITS, 1, label)
                return LookupResult.HIT_PENDING if self._initiate_promotion(i, key, ctx) else LookupResult.MISS
            if res is LookupResult.RETRY:
                any_retry = True
            else:
                self.stats.increase_counter(TieringOffloadingMetrics.BLOCK_QUERIES, 1, label)
        return LookupResult.RETRY if any_retry else LookupResult.MISS

    def _initiate_promotion(self, idx, key, ctx):
        out = self.primary.prepare_write([key])
        if out is None:
            self.stats.increase_counter(TieringOffloadingMetrics.PROMOTION_ALLOCATION_FAILURES)
            return False
        keys, bids = out
        ent = self.pending.setdefault(idx, {}).setdefault(ctx.req_id, [ctx, [], []])
        ent[1].extend(keys)
        ent[2].extend(bids)
        self.promotions[key] += 1
        return True

    def _new_job(self, keys, bids, promotion, ctx, idx):
        job = TransferJob(self.next_job, keys, _ids(bids), promotion, ctx)
        self.next_job += 1
        self.jobs[job.job_id] = (job, idx)
        return job

    def _flush_pending(self):
        for idx, by_req in self.pending.items():
            for ctx, keys, bids in by_req.values():
                self.tiers[idx].submit_load(self._new_job(keys, bids, True, ctx, idx))
        self.pending.clear()

    def prepare_load(self, keys, ctx):
        return self.primary.prepare_read(keys)

    def complete_load(self, keys, ctx):
        self.primary.complete_read(keys)

    def prepare_store(self, keys, ctx):
        self._maybe_process()
        out = self.primary.prepare_write(keys)
        if out is None:
            return None
        if out[0]:
            self.req_state[ctx.req_id][1] += 1
        return out

    def complete_store(self, keys, ctx, success=True):
        self.primary.complete_write(keys, success)
        if success:
            for idx, tier in enumerate(self.tiers):
                tier.submit_store(self._new_job(keys, self.primary.prepare_read(keys), False, ctx, idx))
        st = self.req_state[ctx.req_id]
        st[1] -= 1
        self._maybe_finalize(ctx.req_id)

    def on_new_request(self, ctx):
        self.req_state[ctx.req_id] = [ctx, 0, False]
        for tier in self.tiers:
            tier.on_new_request(ctx)

    def on_request_finished(self, ctx):
        self.req_state[ctx.req_id][2] = True
        self._maybe_finalize(ctx.req_id)

    def _maybe_finalize(self, rid):
        ctx, pending, finished = self.req_state[rid]
        if finished and pending == 0:
            for tier in self.tiers:
                tier.on_request_finished(ctx)
            del self.req_state[rid]

    def on_schedule_end(self, context):
        self._maybe_process()
        self.processed = False
        self._flush_pending()
        for tier in self.tiers:
            tier.on_schedule_end(context)

    def has_pending_work(self):
        return bool(self.jobs) or any(t.has_pending_work() for t in self.tiers)

    def reset_cache(self):
        for tier in self.tiers:
            tier.drain_jobs()
        self._process_finished()
        assert not self.jobs, f"jobs left after drain_jobs: {sorted(self.jobs)}"
        self.pending.clear()
        self.primary.reset()
        self.processed = False

    def get_stats(self):
        stats, self.stats = self.stats, OffloadingConnectorStats()
        for tier in self.tiers:
            s = tier.get_stats()
            if s is not None and not s.is_empty():
                stats.aggregate(s)
        return None if stats.is_empty() else stats

    def take_events(self):
        for tier in self.tiers:
            yield from tier.take_events()

    def shutdown(self):
        for tier in self.tiers:
            tier.shutdown()


def _ids(bids):
    return np.array(bids, dtype=np.int64) if np is not None else list(bids)


# ---- vllm/v1/kv_offload/tiering/factory.py and spec.py, factory.py ----


class SecondaryTierFactory:
    _registry = {}

    @classmethod
    def register_tier(cls, tier_type, module_path, class_name):
        if tier_type in cls._registry:
            raise ValueError(f"Tier '{tier_type}' is already registered.")
        cls._registry[tier_type] = lambda: getattr(importlib.import_module(module_path), class_name)

    @classmethod
    def get_tier_class(cls, tier_config):
        tier_type = tier_config.get("type")
        if not tier_type:
            raise ValueError("Secondary tier configuration must include 'type'")
        if tier_type in cls._registry:
            return cls._registry[tier_type]()
        module_path = tier_config.get("module_path")
        if module_path is None:
            raise ValueError(f"Unknown secondary tier type: {tier_type!r}")
        tier_cls = getattr(importlib.import_module(module_path), tier_type)
        assert issubclass(tier_cls, SecondaryTierManager)
        return tier_cls

    @classmethod
    def create_secondary_tier(cls, tier_config, primary_kv_view, offloading_spec):
        tier_cls = cls.get_tier_class(tier_config)
        config = dict(tier_config)
        tier_type = config.pop("type")
        config.pop("module_path", None)
        return tier_cls(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view, tier_type=tier_type, **config)


class TieringOffloadingSpec(OffloadingSpec):
    @classmethod
    def build_metric_definitions(cls, extra_config):
        m = {
            getattr(TieringOffloadingMetrics, n): OffloadingCounterMetadata(n)
            for n in vars(TieringOffloadingMetrics)
            if n.isupper()
        }
        factory = sys.modules["vllm.v1.kv_offload.tiering.factory"].SecondaryTierFactory
        for tc in extra_config.get("secondary_tiers", []):
            m.update(factory.get_tier_class(tc).build_metric_definitions(tc))
        return m

    def __init__(self, config):
        super().__init__(config)
        self.secondary_tier_configs = self.extra_config.get("secondary_tiers", [])
        copies = 1 if config.replicated_layout else config.parallel.world_size
        row = config.worker_kv_bytes_per_block * copies * config.cache.blocks_per_chunk
        row = -(-row // mmap.PAGESIZE) * mmap.PAGESIZE
        self.row_bytes = row
        self.num_blocks = int(self.extra_config["cpu_bytes_to_use"]) // row
        self._manager = None

    def get_manager(self):
        if self._manager is None:
            primary = PrimaryTier(self.num_blocks, self.row_bytes)
            tiers = []
            factory = sys.modules["vllm.v1.kv_offload.tiering.factory"].SecondaryTierFactory
            try:
                for tc in self.secondary_tier_configs:
                    tiers.append(factory.create_secondary_tier(tc, primary.view, self))
            except Exception:
                for t in tiers:
                    t.shutdown()
                raise
            self._manager = TieringManager(primary, tiers)
        return self._manager


class OffloadingSpecFactory:
    _registry = {"TieringOffloadingSpec": lambda: TieringOffloadingSpec}

    @classmethod
    def get_spec_cls(cls, extra_config):
        name = extra_config.get("spec_name", "CPUOffloadingSpec")
        if name in cls._registry:
            spec_cls = cls._registry[name]()
        else:
            path = extra_config.get("spec_module_path")
            if path is None:
                raise ValueError(f"Unsupported spec type: {name}")
            spec_cls = getattr(importlib.import_module(path), name)
        assert issubclass(spec_cls, OffloadingSpec)
        return spec_cls

    @classmethod
    def create_spec(cls, config):
        return cls.get_spec_cls(config.extra_config)(config)


# ---- vllm/utils/hashing.py and vllm/v1/core/kv_cache_utils.py ----


def sha256(x):
    return hashlib.sha256(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(x):  # vLLM serializes with CBOR; any other stable encoding models it
    return hashlib.sha256(repr(x).encode()).digest()


def xxhash(x):  # xxh3_128 in vLLM: 16 bytes, not collision resistant
    return hashlib.blake2b(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL), digest_size=16).digest()


def xxhash_cbor(x):
    return hashlib.blake2b(repr(x).encode(), digest_size=16).digest()


def get_hash_fn_by_name(name):
    return {"sha256": sha256, "sha256_cbor": sha256_cbor, "xxhash": xxhash, "xxhash_cbor": xxhash_cbor}[name]


DEFAULT_NONE_HASH_SEED = "vllm-none-hash"


def _kcu():
    return sys.modules["vllm.v1.core.kv_cache_utils"]


def init_none_hash(hash_fn):
    """PR #51875's: PYTHONHASHSEED, else the fixed default seed for the
    cryptographic algorithms, else random; before it (install(new_hash=
    False)): PYTHONHASHSEED, else random."""
    m = _kcu()
    seed = os.environ.get("PYTHONHASHSEED")
    if seed is None:
        if m.NEW_HASH and hash_fn not in (xxhash, xxhash_cbor):
            seed = DEFAULT_NONE_HASH_SEED
        else:
            seed = os.urandom(32).hex()
    m._NONE_HASH_SEED = seed
    m.NONE_HASH = hash_fn(seed)


def get_none_hash_seed():
    s = _kcu()._NONE_HASH_SEED
    return DEFAULT_NONE_HASH_SEED if s is None else s


def block_hashes(token_ids, block_size, hash_fn=None):
    """vLLM's chained block hashes of a token sequence (full blocks)."""
    hash_fn = hash_fn or _kcu().HASH_FN
    parent = _kcu().NONE_HASH
    assert parent is not None, "init_none_hash has not run"
    out = []
    for i in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_fn((parent, tuple(token_ids[i : i + block_size]), None))
        out.append(parent)
    return out


# ---- the modules ----


def install(new_hash=True, hash_algo="sha256", module_path_loading=True):
    """Put the model under vLLM's module names (idempotent; the hashing
    state is reset: init_none_hash(hash_algo) as EngineCore runs it)."""
    mods = {
        "vllm.v1.kv_offload.base": dict(
            LookupResult=LookupResult, ReqContext=ReqContext, Medium=Medium, Locality=Locality,
            RequestOffloadingContext=RequestOffloadingContext, OffloadPolicy=OffloadPolicy,
            ScheduleEndContext=ScheduleEndContext, OffloadingEvent=OffloadingEvent,
            OffloadingMetricMetadata=OffloadingMetricMetadata, OffloadingCounterMetadata=OffloadingCounterMetadata,
            OffloadingGaugeMetadata=OffloadingGaugeMetadata, OffloadingSpec=OffloadingSpec,
            make_offload_key=make_offload_key,
        ),
        "vllm.v1.kv_offload.config": dict(
            OffloadingConfig=OffloadingConfig, OffloadingGroupConfig=OffloadingGroupConfig,
            OffloadingModelConfig=OffloadingModelConfig, OffloadingCacheConfig=OffloadingCacheConfig,
            OffloadingParallelConfig=OffloadingParallelConfig,
        ),
        "vllm.v1.kv_offload.tiering.base": dict(
            SecondaryTierManager=SecondaryTierManager, TransferJob=TransferJob, JobResult=JobResult,
            TieringOffloadingMetrics=TieringOffloadingMetrics,
        ),
        "vllm.v1.kv_offload.tiering.factory": dict(SecondaryTierFactory=SecondaryTierFactory),
        "vllm.v1.kv_offload.tiering.spec": dict(TieringOffloadingSpec=TieringOffloadingSpec),
        "vllm.v1.kv_offload.tiering.manager": dict(TieringOffloadingManager=TieringManager),
        "vllm.v1.kv_offload.factory": dict(OffloadingSpecFactory=OffloadingSpecFactory),
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics": dict(
            OffloadingConnectorStats=OffloadingConnectorStats
        ),
        "vllm.utils.hashing": dict(
            sha256=sha256, sha256_cbor=sha256_cbor, xxhash=xxhash, xxhash_cbor=xxhash_cbor,
            get_hash_fn_by_name=get_hash_fn_by_name,
        ),
        "vllm.config": dict(get_current_vllm_config_or_none=lambda: None),
        "vllm.v1.core.kv_cache_utils": dict(init_none_hash=init_none_hash, NEW_HASH=new_hash, _NONE_HASH_SEED=None),
    }
    if new_hash:
        mods["vllm.v1.core.kv_cache_utils"].update(
            get_none_hash_seed=get_none_hash_seed, DEFAULT_NONE_HASH_SEED=DEFAULT_NONE_HASH_SEED
        )
    for name, attrs in mods.items():
        parts = name.split(".")
        for i in range(1, len(parts)):
            pkg = ".".join(parts[:i])
            if pkg not in sys.modules:
                m = types.ModuleType(pkg)
                m.__path__ = []
                sys.modules[pkg] = m
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        setattr(sys.modules[".".join(parts[:-1])], parts[-1], m)
    if not module_path_loading:  # vLLM before PR #51007: registered types only
        def get_tier_class(cls, tier_config):
            t = tier_config.get("type")
            if t not in cls._registry:
                raise ValueError(f"Unknown secondary tier type: {t!r}")
            return cls._registry[t]()

        class OldFactory(SecondaryTierFactory):
            _registry = {}

        OldFactory.get_tier_class = classmethod(get_tier_class)
        sys.modules["vllm.v1.kv_offload.tiering.factory"].SecondaryTierFactory = OldFactory
    kcu = sys.modules["vllm.v1.core.kv_cache_utils"]
    kcu.HASH_FN = get_hash_fn_by_name(hash_algo)
    init_none_hash(kcu.HASH_FN)


# ---- the engine: one EngineCore's scheduler side ----


class Request:
    def __init__(self, req_id, keys):
        self.ctx = ReqContext(req_id)
        self.keys = list(keys)


def request_keys(tag, n, block_size=16, group=0):
    """The offload keys of a prompt of n full blocks: vLLM's chained block
    hashes (of tokens derived from tag) with the KV cache group index."""
    seed = hashlib.sha256(str(tag).encode()).digest()
    toks = [int.from_bytes(hashlib.blake2b(seed + i.to_bytes(4, "big"), digest_size=2).digest(), "big")
            for i in range(n * block_size)]
    return [make_offload_key(h, group) for h in block_hashes(toks, block_size)]


class Engine:
    """The scheduler side of one vLLM instance (or DP replica) with the
    OffloadingConnector and TieringOffloadingSpec: the spec built by
    OffloadingSpecFactory from config, its manager, and the connector's
    request flow: lookups per step (vLLM's _maximal_prefix_lookup), GPU
    stores into the primary tier (cascaded to the tiers), GPU loads of
    hits out of it.  step() is one engine step's end."""

    def __init__(self, config):
        self.config = config
        self.spec = OffloadingSpecFactory.create_spec(config)
        self.manager = self.spec.get_manager()
        self.primary = self.manager.primary
        self.tier = self.manager.tiers[0] if self.manager.tiers else None
        self.prom = PromMetrics(config.extra_config)
        self._seq = 0

    def request(self, keys):
        self._seq += 1
        r = Request(f"{self.config.engine_id}-r{self._seq}", keys)
        self.manager.on_new_request(r.ctx)
        return r

    def step(self):
        self.manager.on_schedule_end(ScheduleEndContext((), ()))
        self.prom.observe(self.manager.get_stats())

    def _prefix(self, req):
        hits, defer = 0, False
        for key in req.keys:
            r = self.manager.lookup(key, req.ctx)
            if r is LookupResult.HIT:
                hits += 1
            elif r is LookupResult.HIT_PENDING:
                hits += 1
                defer = True
            elif r is LookupResult.RETRY:
                defer = True
            else:
                break
        return None if defer else hits

    def run(self, cond, timeout_s=30.0, what="the engine"):
        """Step until cond() is true (polling, bounded: kvpt.wait_until)."""
        import kvpt

        def once():
            v = cond()
            if not v:
                self.step()
            return v

        return kvpt.wait_until(once, timeout_s, what)

    def fetch(self, req, timeout_s=30.0):
        """Resolve req's prefix (steps until no lookup is deferred), then
        read the hit rows out of the primary tier as the GPU load would:
        a list of row bytes."""
        out = []

        def resolved():
            n = self._prefix(req)
            if n is None:
                return False
            out.append(n)
            return True

        self.run(resolved, timeout_s, "a prefix lookup to resolve")
        n = out[0]
        keys = req.keys[:n]
        bids = self.manager.prepare_load(keys, req.ctx)
        rows = [self.primary.row(b) for b in bids]
        self.manager.complete_load(keys, req.ctx)
        return rows

    def store(self, req, rows, as_set=True):
        """The GPU's blocks of req into the primary tier (prepare_store,
        the copy, complete_store: cascaded to the tiers, the keys as a set);
        steps until the tiers reported the store jobs.  Returns the keys
        stored into the primary tier."""
        out = self.manager.prepare_store(req.keys, req.ctx)
        assert out is not None, "the primary tier is full"
        keys, bids = out
        data = dict(zip(req.keys, rows))
        for k, b in zip(keys, bids):
            self.primary.write_row(b, data[k])
        if keys:
            self.manager.complete_store(set(keys) if as_set else keys, req.ctx)
        self.run(lambda: not self.manager.jobs, 30.0, "the store jobs")
        return keys

    def finish(self, req):
        self.manager.on_request_finished(req.ctx)

    def evict_primary(self):
        """Drop every idle primary row (the CPU tier's own LRU would, in
        time): later lookups must go to the secondary tier."""
        for k in [k for k, b in self.primary.blocks.items() if b[1] == 0]:
            self.primary.free.append(self.primary.blocks.pop(k)[0])

    def shutdown(self):
        self.manager.shutdown()


def row_bytes_for(tag, i, n):
    """n bytes that name tag and row i (a misplaced or stale copy shows)."""
    head = f"<{tag}:{i}>".encode()
    return (head * (n // len(head) + 1))[:n]
