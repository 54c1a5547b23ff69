# SPDX-License-Identifier: MIT
"""kvpool as a secondary tier of vLLM's tiered KV offloading: KVPoolTier,
loaded by vLLM's SecondaryTierFactory with no patch to vLLM
(docs/vllm.md):

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": 8589934592, "block_size": 256,
            "secondary_tiers": [{"type": "KVPoolTier", "module_path": "kvpool.vllm",
                                 "pool": "default"}]}}'

vLLM (PR #51007 and later) imports module_path, takes the class named by
"type", asserts it subclasses its SecondaryTierManager and builds
KVPoolTier(offloading_spec=, primary_kv_view=, tier_type=, **the other
keys) once per EngineCore (one per instance and per DP replica).  Older
vLLM without module_path loading: "spec_name": "KVPoolTieringSpec",
"spec_module_path": "kvpool.vllm" and "type": "kvpool" (this module
registers the tier when the spec class is first asked for).  The module
is also imported by vLLM's API server for build_metric_definitions:
importing it opens no pool and starts no thread.

What vLLM hands a secondary tier: its CPU primary tier as one memoryview
of rows (a row is one offloaded block for all TP workers, row_stride
bytes); lookups of single keys; batched store jobs (primary -> tier, the
cascade of every stored block) and load jobs (tier -> primary, the
promotion of a hit); get_finished_jobs() polled every step.  Every call
runs on the scheduler thread and must not block it:

- lookup() answers from the request's verdicts, dict lookups.  A key not
  decided yet is queued and answered RETRY (vLLM then defers the request a
  step and keeps scanning its keys); at the end of the step (on_schedule_end) the
  step's keys are probed in one kvp_batch_lookup_pin per request, so the
  next step answers HIT or MISS.  A HIT is pinned: it is neither evicted
  nor freed until its load completes, or its request finishes (with no
  load of it in flight), or pin_max_age_s passes (a hit vLLM never
  promoted).
- submit_store()/submit_load() queue the job for io_threads worker threads
  (loads first), which copy whole rows between the primary rows and the
  pool with kvp_batch_put / kvp_batch_get on client handles of their own.
  A row larger than the pool's --max-value is stored as equal parts
  (key suffix "/{j}of{n}"); a row is a hit only when every part is.
- a load that fails (the row was evicted anyway, a bad byte on SSD, the
  agent gone while it read SSD) ends as a failed job (with the rows that
  did load as successful_keys), and those keys answer MISS until they are
  really back (re-stored, or after retry_failed_s with the agent up), so
  vLLM never loops promoting a row that cannot load (vllm#49176).

Namespace (what makes two instances' rows interchangeable): the fields
vLLM's FileMapper hashes (model, KV cache dtype, tokens per hash, blocks
per chunk, TP/PP/PCP/DCP sizes, KV cache groups, replicated/canonical
layout), the row bytes and the prefix-cache hash identity (the algorithm
vLLM's NONE_HASH was derived with), plus extra_config "namespace" when
given.  When the model or the cache dtype cannot be established the tier
stays off (fails closed, one error line).  When vLLM's block hashes are
random per process (PYTHONHASHSEED unset with xxhash, or any algorithm on
vLLM before PR #51875) no other process can ever hit this instance's rows:
the tier says so once.

Contract: no method raises into vLLM (a failure is MISS, or a failed job);
every job is reported exactly once; drain_jobs() waits for every job.

Tier config keys (all optional): pool ("default"), namespace (appended),
io_threads (2), pin_max_age_s (30), busy_retry_ms (200), retry_failed_s
(10), reopen_s (2), max_part_bytes (the pool's --max-value), task_bytes
(64 MiB: rows per worker task), parallel_agnostic (false), enable_kv_events
(false), hash_algo (when vLLM's hashing module cannot be read).
"""

import collections
import enum
import hashlib
import json
import logging
import os
import sys
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

import kvpool

logger = logging.getLogger(__name__)

__all__ = ["KVPoolTier", "namespace_for", "NoIdentity", "METRICS"]


# ---- vLLM's types when vLLM is importable, stand-ins otherwise ----


class _StandInLookupResult(enum.Enum):
    """vLLM's LookupResult (vllm/v1/kv_offload/base.py)."""

    MISS = enum.auto()
    HIT = enum.auto()
    HIT_PENDING = enum.auto()
    RETRY = enum.auto()


@dataclass
class _StandInJobResult:
    """vLLM's JobResult (vllm/v1/kv_offload/tiering/base.py)."""

    job_id: int
    success: bool
    successful_keys: object = None
    transfer_time: object = None


@dataclass
class _StandInRequestOffloadingContext:
    policy: object = None


@dataclass(frozen=True)
class _StandInMetricMetadata:
    documentation: str
    labelnames: tuple = ()


class _StandInSecondaryTierManager(ABC):
    """The abstract interface of vLLM's SecondaryTierManager
    (vllm/v1/kv_offload/tiering/base.py), for use without vLLM."""

    medium = None

    def __init__(self, offloading_spec, primary_kv_view, tier_type):
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        self.locality = None

    @abstractmethod
    def lookup(self, key, req_context):
        pass

    @abstractmethod
    def submit_store(self, job_metadata):
        pass

    @abstractmethod
    def submit_load(self, job_metadata):
        pass

    @abstractmethod
    def get_finished_jobs(self):
        pass

    @abstractmethod
    def on_new_request(self, req_context):
        pass

    @abstractmethod
    def drain_jobs(self):
        pass

    def has_pending_work(self):
        return False

    def take_events(self):
        return ()

    def touch(self, keys, req_context):
        return

    def on_request_finished(self, req_context):
        return

    def serve_external_requests(self, parent):
        return

    def on_schedule_end(self, context):
        return

    def shutdown(self):
        return

    @classmethod
    def build_metric_definitions(cls, extra_config):
        return {}

    def get_stats(self):
        return None


def _vllm(module, name, default):
    """name from vLLM's module, or default (no vLLM here, or an older one)."""
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except Exception:  # ImportError, or a vLLM that fails to import here
        return default


SecondaryTierManager = _vllm("vllm.v1.kv_offload.tiering.base", "SecondaryTierManager", _StandInSecondaryTierManager)
JobResult = _vllm("vllm.v1.kv_offload.tiering.base", "JobResult", _StandInJobResult)
LookupResult = _vllm("vllm.v1.kv_offload.base", "LookupResult", _StandInLookupResult)
RequestOffloadingContext = _vllm(
    "vllm.v1.kv_offload.base", "RequestOffloadingContext", _StandInRequestOffloadingContext
)
_CounterMetadata = _vllm("vllm.v1.kv_offload.base", "OffloadingCounterMetadata", _StandInMetricMetadata)
_GaugeMetadata = _vllm("vllm.v1.kv_offload.base", "OffloadingGaugeMetadata", _StandInMetricMetadata)
_Medium = _vllm("vllm.v1.kv_offload.base", "Medium", None)
_Locality = _vllm("vllm.v1.kv_offload.base", "Locality", None)
_OffloadingEvent = _vllm("vllm.v1.kv_offload.base", "OffloadingEvent", None)
_STATS_CLASS = []
QUARANTINE_MAX = 1 << 16  # failed rows remembered at once (a row forgotten may fail one more load)
NS_FLUSH_S = 1.0  # the tier's events reach the pool's per-namespace counters this often (and at shutdown)

_HIT = LookupResult.HIT
_MISS = LookupResult.MISS
_RETRY = LookupResult.RETRY
_JR_FIELDS = frozenset(getattr(JobResult, "__dataclass_fields__", None) or ())


def _stats_class():
    """vLLM's OffloadingConnectorStats, or None; looked up once."""
    if not _STATS_CLASS:
        _STATS_CLASS.append(
            _vllm("vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics", "OffloadingConnectorStats", None)
        )
    return _STATS_CLASS[0]


# ---- metrics: what vLLM exports for this tier, and the pool's own ----

# vLLM metric name -> (the tier's counter, kind, documentation); declared
# by build_metric_definitions (vLLM asserts every name get_stats emits was)
METRICS = {
    "vllm:kv_offload_kvpool_lookup_keys": ("lookup_keys", "counter", "Keys the kvpool tier probed in the pool."),
    "vllm:kv_offload_kvpool_hit_keys": ("hit_keys", "counter", "Keys the kvpool tier answered HIT (pinned)."),
    "vllm:kv_offload_kvpool_promoted_bytes": (
        "load_bytes",
        "counter",
        "Bytes the kvpool tier copied from the pool into the CPU primary tier.",
    ),
    "vllm:kv_offload_kvpool_stored_bytes": (
        "store_bytes",
        "counter",
        "Bytes the kvpool tier copied from the CPU primary tier into the pool (rows already there excluded).",
    ),
    "vllm:kv_offload_kvpool_failed_loads": (
        "load_failed",
        "counter",
        "Rows a kvpool load job could not read (the job ended failed).",
    ),
    "vllm:kv_offload_kvpool_failed_stores": ("store_failed", "counter", "Rows a kvpool store job could not write."),
    "vllm:kv_offload_kvpool_refused_keys": (
        "refused",
        "counter",
        "Keys answered MISS because the pool could not pin them now (hold slots or pinned bytes).",
    ),
    "vllm:kv_offload_kvpool_pinned_rows": ("pinned_rows", "gauge", "Rows the kvpool tier holds pinned for loads."),
}



# ---- identity ----


class NoIdentity(ValueError):
    """What makes rows interchangeable cannot be established."""


def _get(obj, *path):
    for p in path:
        obj = getattr(obj, p, None)
        if obj is None:
            return None
    return obj


def _identity_fields(offloading_spec, row_bytes, parallel_agnostic=False):
    """The fields vLLM's FileMapper hashes (vllm/v1/kv_offload/file_mapper.py),
    from the spec's OffloadingConfig, plus the row bytes.  Returns (fields,
    what could not be established).  TP/PP/PCP/DCP collapse to 1 only for a
    replicated layout (one MLA latent for every rank) or, with
    parallel_agnostic, where vLLM certifies the bytes portable."""
    cfg = getattr(offloading_spec, "config", None)
    unknown = []
    model = _get(cfg, "model", "name")
    dtype = _get(cfg, "model", "dtype")
    if not model:
        unknown.append("the model (the offloading spec has no config.model.name)")
    if not dtype:
        unknown.append("the KV cache dtype (no config.model.dtype)")
    par = _get(cfg, "parallel")
    sizes = {k: int(getattr(par, k, 1) or 1) for k in ("tp_size", "pp_size", "pcp_size", "dcp_size")}
    replicated = bool(getattr(cfg, "replicated_layout", False))
    canonical = bool(getattr(cfg, "canonical_layout", False))
    agnostic = replicated or (parallel_agnostic and bool(getattr(par, "is_parallelism_agnostic", False)))
    if agnostic:
        sizes = dict.fromkeys(sizes, 1)
    groups = [
        {
            "tokens_per_block": int(getattr(g, "tokens_per_block", 0) or 0),
            "layer_names": list(getattr(g, "layer_names", ())),
        }
        for g in (getattr(cfg, "groups", None) or ())
    ]
    fields = {
        "model_name": str(model or "unknown-model"),
        "dtype": str(dtype or "unknown-dtype"),
        "tokens_per_hash": int(_get(cfg, "cache", "tokens_per_hash") or 0),
        "blocks_per_file": int(_get(cfg, "cache", "blocks_per_chunk") or 1),
        **sizes,
        "kv_cache_groups": groups,
        "inference_engine": "vllm",
        "parallel_agnostic": agnostic,
        "replicated_layout": replicated,
        "canonical_layout": canonical,
        "row_bytes": int(row_bytes),
    }
    if canonical:
        mod = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.canonical_mapping"
        fid = _vllm(mod, "canonical_format_id", None)
        try:
            fields["canonical_format"] = str(fid()) if fid is not None else None
        except Exception:
            fields["canonical_format"] = None
        if fields["canonical_format"] is None:
            unknown.append("the canonical layout's format id")
    # the weights behind the model path, where vLLM's current config says
    vc = _vllm("vllm.config", "get_current_vllm_config_or_none", None)
    try:
        mc = getattr(vc(), "model_config", None) if vc is not None else None
    except Exception:
        mc = None
    if mc is not None:
        fields["revision"] = str(getattr(mc, "revision", None) or "-")
        fields["quantization"] = str(getattr(mc, "quantization", None) or "-")
    return fields, unknown


_HASH_ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")


def hash_identity(configured=None):
    """(algorithm, shareable, why) of vLLM's prefix-cache block hashing in
    this process, read after vLLM's init_none_hash ran: the algorithm
    NONE_HASH was derived with (matched against each of vLLM's), and
    whether another process can derive the same NONE_HASH (PYTHONHASHSEED
    set, or vLLM's fixed default seed: PR #51875 with a cryptographic
    algorithm).  configured: the tier config's hash_algo, used when vLLM's
    hashing module cannot be read."""
    env_seed = os.environ.get("PYTHONHASHSEED")
    kcu = sys.modules.get("vllm.v1.core.kv_cache_utils")
    if kcu is None:
        try:
            import vllm.v1.core.kv_cache_utils as kcu  # noqa: F811
        except Exception:
            kcu = None
    none_hash = getattr(kcu, "NONE_HASH", None) if kcu is not None else None
    if none_hash is None:
        return (configured or "unknown"), True, "vLLM's NONE_HASH is not readable here"
    get_seed = getattr(kcu, "get_none_hash_seed", None)
    if get_seed is not None:
        seed = get_seed()
        shareable = env_seed is not None or seed == getattr(kcu, "DEFAULT_NONE_HASH_SEED", object())
        why = "" if shareable else "PYTHONHASHSEED is unset and the hash algorithm seeds NONE_HASH randomly"
    else:  # before PR #51875: random unless PYTHONHASHSEED is set
        seed = env_seed
        shareable = env_seed is not None
        why = "" if shareable else "PYTHONHASHSEED is unset (this vLLM seeds NONE_HASH randomly: before PR #51875)"
    algo = configured or "unknown"
    by_name = _vllm("vllm.utils.hashing", "get_hash_fn_by_name", None)
    if seed is not None and by_name is not None:
        for name in _HASH_ALGOS:
            try:
                if by_name(name)(seed) == none_hash:
                    algo = name
                    break
            except Exception:
                continue
    return algo, shareable, why


def _no_identity(unknown):
    return (
        "kvpool.vllm: cannot establish "
        + " and ".join(unknown)
        + "; not sharing rows with anyone: the kvpool tier stays off (every lookup a miss). Set the tier "
        'config\'s "namespace" to one name per identical deployment to use the pool'
    )


def namespace_for(offloading_spec, row_bytes, hash_algo, namespace=None, parallel_agnostic=False):
    """The pool namespace of this instance's rows: a readable head (model,
    KV dtype, row bytes, hash algorithm) and a digest of every identity
    field, plus the tier config's namespace.  Raises NoIdentity when the
    model or the KV dtype cannot be established and no namespace is
    configured."""
    fields, unknown = _identity_fields(offloading_spec, row_bytes, parallel_agnostic)
    fields["hash_algo"] = str(hash_algo)
    if unknown and not namespace:
        raise NoIdentity(_no_identity(unknown))
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:24]
    tail = f"|{row_bytes}B|h={hash_algo}|{digest}" + (f"|{namespace}" if namespace else "")
    head = f"vllm|{fields['model_name']}|{fields['dtype']}"
    room = 255 - len(tail.encode())
    if len(head.encode()) > room:  # KVP_NS_NAME_MAX: the digest keeps it unique
        head = head.encode()[: max(0, room)].decode(errors="ignore")
    return head + tail


# ---- the tier ----


class _Pin:
    """A pinset of one request's probe: the rows it pins (released as
    their loads end, their requests finish, or they age out)."""

    __slots__ = ("ps", "rows", "live", "t0", "req")

    def __init__(self, ps, rows, t0, req):
        self.ps = ps
        self.rows = rows
        self.live = len(rows)  # rows still pinned (the pinset goes with the last)
        self.t0 = t0
        self.req = req  # the _Req whose probe made it


class _Req:
    """What the tier keeps of one request (scheduler thread): its keys'
    verdicts, the keys it asked this step, its pins.  Per request: a
    request's verdicts live and die with it, and its tables stay small
    (one table for every request, filled and emptied each step, cost
    twice as much a key)."""

    __slots__ = ("rid", "verdict", "queue", "pinmap", "pins")

    def __init__(self, rid):
        self.rid = rid
        self.verdict = {}  # key -> HIT (pinned) or MISS
        self.queue = []  # keys asked this step, not decided
        self.pinmap = {}  # pinned key -> its _Pin
        self.pins = []  # its _Pins


class _Job:
    """A store or load job in the workers' hands."""

    __slots__ = (
        "job_id", "load", "keys", "bids", "ok", "new", "failed_status", "deleted", "tasks", "t0", "t1", "nbytes", "rid",
    )

    def __init__(self, job_id, load, keys, bids, t0, rid=None):
        self.job_id = job_id
        self.rid = rid  # the request whose job it is (loads: its pins)
        self.load = load
        self.keys = keys
        self.bids = bids
        self.ok = [False] * len(keys)
        self.new = [False] * len(keys)  # stores: written now (not there already)
        self.failed_status = {}  # loads: row index -> the status that failed it
        self.deleted = set()  # loads: rows deleted as unreadable
        self.tasks = 0
        self.t0 = t0
        self.t1 = t0  # when its last task ended
        self.nbytes = 0


class KVPoolTier(SecondaryTierManager):
    """vLLM secondary tier on a kvpool pool (see the module docstring).

    KVPoolTier(offloading_spec, primary_kv_view, tier_type, **tier config)
    as vLLM's SecondaryTierFactory builds it.  Opens the pool at its first
    use (after vLLM derived its block-hash seed); an agent that is down
    then, or later, costs hits, never the engine."""

    if _Medium is not None:
        medium = getattr(_Medium, "CPU", None)

    def __init__(
        self,
        offloading_spec=None,
        primary_kv_view=None,
        tier_type="KVPoolTier",
        pool="default",
        namespace=None,
        io_threads=2,
        pin_max_age_s=30.0,
        busy_retry_ms=200,
        retry_failed_s=10.0,
        reopen_s=2.0,
        max_part_bytes=None,
        task_bytes=64 << 20,
        parallel_agnostic=False,
        enable_kv_events=False,
        hash_algo=None,
        locality="LOCAL",
    ):
        super().__init__(offloading_spec, primary_kv_view, tier_type)
        if _Locality is not None and locality:
            try:
                self.locality = _Locality(locality)
            except Exception:
                self.locality = None
        self.pool_name = str(pool)
        self.user_namespace = str(namespace) if namespace else None
        self.io_threads = max(1, int(io_threads))
        self.pin_max_age_s = float(pin_max_age_s)
        self.busy_retry_s = float(busy_retry_ms) / 1000.0
        self.retry_failed_s = float(retry_failed_s)
        self.reopen_s = float(reopen_s)
        self.max_part_bytes = int(max_part_bytes) if max_part_bytes else None
        self.task_bytes = max(1, int(task_bytes))
        self.parallel_agnostic = bool(parallel_agnostic)
        self.hash_algo_cfg = hash_algo
        self._spec = offloading_spec
        self._events = None
        if enable_kv_events:
            if _get(offloading_spec, "kv_events_config", "enable_kv_cache_events") and _OffloadingEvent is not None:
                self._events = []
            else:
                logger.warning("kvpool.vllm: enable_kv_events is set but KV cache events are off: no events")

        # the primary tier's rows: one memoryview (num_blocks, row_stride)
        view = primary_kv_view
        self.row_bytes = int(view.strides[0]) if view is not None and view.strides else 0
        self.num_rows = int(view.shape[0]) if view is not None and view.shape else 0
        self._base = 0
        if view is not None and self.row_bytes > 0:
            self._base = kvpool.buffer_address(view, True)[0]
        self._parts = 1
        self._sfx = ("",)
        self._part_lens = (self.row_bytes,)
        self.namespace = None
        self.pool = None
        self.shareable = None
        self._off_reason = None  # set: the tier stays off (identity)
        self._next_open = 0.0
        self._logged = set()
        self._tl = threading.local()
        self._counters = []
        self._stat_lock = threading.Lock()
        self._reported = {}
        self._ns_ok = True  # the pool counts per namespace (Pool.count)
        self._ns_lock = threading.Lock()
        self._ns_pend = collections.Counter()  # events not yet in the pool's counters
        self._ns_t = 0.0

        # scheduler-thread state (only that thread touches it)
        self._reqs = {}  # request id -> _Req
        self._queued = []  # _Reqs with keys to probe at the step's end
        self._held = {}  # key -> _Pin: pinned for a load in flight, its request finished
        self._pin_order = collections.deque()  # _Pin, oldest first
        self._loading = collections.Counter()  # key -> load jobs in flight
        self._quarantine = {}  # key -> (retry after, gone: back once present)
        self._inflight = {}  # job id -> _Job

        # the workers' queues (loads first), and their finished jobs
        self._cv = threading.Condition()
        self._loads = collections.deque()
        self._stores = collections.deque()
        self._done = collections.deque()
        self._outstanding = 0
        self._stopping = False
        self._threads = []

        _, unknown = _identity_fields(offloading_spec, self.row_bytes, self.parallel_agnostic)
        if unknown and not self.user_namespace:
            self._off_reason = _no_identity(unknown)
            logger.error("%s", self._off_reason)
        if self.row_bytes <= 0 or self._base == 0:
            self._off_reason = "kvpool.vllm: no primary tier rows (primary_kv_view) to copy from"
            logger.error("%s", self._off_reason)
        for i in range(self.io_threads):
            t = threading.Thread(target=self._worker, name=f"kvpool_vllm_io{i}", daemon=True)
            t.start()
            self._threads.append(t)
        logger.info(
            "kvpool.vllm: tier %r on pool %r: rows of %d bytes, %d io threads%s",
            tier_type,
            self.pool_name,
            self.row_bytes,
            self.io_threads,
            f" (off: {self._off_reason})" if self._off_reason else "",
        )

    # -- metrics declared for vLLM (its API server calls this; cheap) --

    @classmethod
    def build_metric_definitions(cls, extra_config):
        out = {}
        for name, (_, kind, doc) in METRICS.items():
            meta = _GaugeMetadata if kind == "gauge" else _CounterMetadata
            out[name] = meta(documentation=doc)
        return out

    # -- helpers --

    def _once(self, kind, msg, *args, level=logging.ERROR):
        """Log once per kind (a broken pool must not flood the log)."""
        if level >= logging.ERROR:
            self._count("errors")
            self._ns_count("errors", 1)
        if kind in self._logged:
            return
        self._logged.add(kind)
        logger.log(level, "kvpool.vllm: " + msg + " (logged once)", *args)

    def _count(self, name, n=1):
        """Add to this thread's counters (no lock; stats() sums them)."""
        c = getattr(self._tl, "c", None)
        if c is None:
            c = self._tl.c = collections.Counter()
            with self._stat_lock:
                self._counters.append(c)
        c[name] += n

    def _ns_count(self, event, n):
        """Count event (kvpool.NS_EVENTS) n times in the pool's counters of
        this namespace (Pool.count, where the binding has it): the agent
        exports them as kvpool_namespace_events_total{namespace, event}.
        Kept here and added every NS_FLUSH_S from the scheduler thread (a
        call into the pool costs microseconds), and at shutdown."""
        if n > 0 and self._ns_ok:
            with self._ns_lock:
                self._ns_pend[event] += n

    def _ns_flush(self, force=False):
        now = time.monotonic()
        if not force and now - self._ns_t < NS_FLUSH_S:
            return
        self._ns_t = now
        p = self.pool
        if p is None or not self._ns_pend:
            return
        with self._ns_lock:
            pend, self._ns_pend = self._ns_pend, collections.Counter()
        fn = getattr(p, "count", None)
        if fn is None:  # a binding without Pool.count: stats() only
            self._ns_ok = False
            return
        try:
            for e, v in pend.items():
                fn(e, v)
        except kvpool.NotSupported:
            self._ns_ok = False  # a library without kvp_ns_count
        except Exception as e:
            self._once("count:" + type(e).__name__, "Pool.count failed: %r", e, level=logging.WARNING)

    def _geometry(self, pool):
        """Parts per row: a row larger than the pool's --max-value (or
        max_part_bytes) is stored as equal parts, keyed "/{j}of{n}"."""
        cap = self.max_part_bytes or 0
        try:
            mv = int(pool.stat().get("max_value") or 0)
        except Exception:
            mv = 0
        if mv and (not cap or mv < cap):
            cap = mv
        n = 1 if not cap or self.row_bytes <= cap else -(-self.row_bytes // cap)
        psz = -(-self.row_bytes // n)
        self._parts = n
        self._sfx = ("",) if n == 1 else tuple(f"/{j}of{n}" for j in range(n))
        self._part_lens = tuple([psz] * (n - 1) + [self.row_bytes - psz * (n - 1)])
        if n > 1:
            logger.info(
                "kvpool.vllm: rows of %d bytes exceed the pool's values (%d bytes): stored as %d parts",
                self.row_bytes,
                cap,
                n,
            )

    def _pool(self):
        """The pool, opened on first use (scheduler thread); None while the
        tier is off or the agent is away (retried every reopen_s)."""
        p = self.pool
        if p is not None or self._off_reason is not None:
            return p
        now = time.monotonic()
        if now < self._next_open:
            return None
        self._next_open = now + self.reopen_s
        if self.namespace is None:
            algo, shareable, why = hash_identity(self.hash_algo_cfg)
            self.shareable = shareable
            if not shareable:
                logger.warning(
                    "kvpool.vllm: vLLM's block hashes are random in this process (%s): no other instance can hit "
                    "the rows it stores, and it cannot hit theirs. Set PYTHONHASHSEED to one value on every instance "
                    "(or use --prefix-caching-hash-algo sha256 on a vLLM with PR #51875)",
                    why,
                )
            try:
                self.namespace = namespace_for(
                    self._spec, self.row_bytes, algo, self.user_namespace, self.parallel_agnostic
                )
            except NoIdentity as e:
                self._off_reason = str(e)
                logger.error("%s", e)
                return None
        try:
            p = kvpool.Pool(self.pool_name, namespace=self.namespace)
        except kvpool.KVPoolError as e:
            self._once(
                "open",
                "cannot open pool %r (%s): vLLM runs on its CPU tier alone until it can; start the agent "
                "(systemctl enable --now kvpoold@%s, or kvpoold --pool %s ...)",
                self.pool_name,
                e,
                self.pool_name,
                self.pool_name,
                level=logging.WARNING,
            )
            return None
        self._geometry(p)
        self.pool = p
        logger.info("kvpool.vllm: pool %r opened, namespace %r", self.pool_name, self.namespace)
        return p

    def _pool_broken(self, e):
        """A call failed in a way the pool object does not recover from
        (closed, another ABI): drop it (its pins go with it), reopen later."""
        if isinstance(e, (kvpool.Closed, kvpool.ProtocolMismatch, kvpool.Forked)):
            p, self.pool = self.pool, None
            for st in self._reqs.values():
                for k in st.pinmap:
                    st.verdict.pop(k, None)
                st.pinmap.clear()
                st.pins.clear()
            self._pin_order.clear()
            self._held.clear()
            if p is not None:
                try:
                    p.close()
                except Exception:
                    pass

    # -- lookups (scheduler thread) --

    def lookup(self, key, req_context):
        """HIT (pinned until loaded), MISS, or RETRY (decided at the end of
        this step).  Dict lookups; never raises."""
        try:
            st = self._reqs.get(req_context.req_id)
            if st is None:
                st = self._reqs[req_context.req_id] = _Req(req_context.req_id)
            else:
                v = st.verdict.get(key)
                if v is not None:
                    return v
            q = st.queue
            if not q:
                self._queued.append(st)
            q.append(key)
            return _RETRY
        except Exception as e:
            self._once("lookup:" + type(e).__name__, "lookup failed: %r", e)
            return _MISS

    def on_schedule_end(self, context=None):
        """End of a scheduler step: probe the keys asked this step, one
        kvp_batch_lookup_pin per request; age out pins nobody loaded."""
        try:
            self._flush()
            if self._ns_pend:
                self._ns_flush()
        except Exception as e:
            self._once("flush:" + type(e).__name__, "probing this step's keys failed: %r", e)
            queued, self._queued = self._queued, []
            for st in queued:
                st.verdict.update(dict.fromkeys([k for k in st.queue if k not in st.verdict], _MISS))
                st.queue = []

    def _flush(self):
        now = time.monotonic()
        order = self._pin_order
        while order and order[0].live == 0:  # released already
            order.popleft()
        if order and now - order[0].t0 > self.pin_max_age_s:
            self._sweep(now)
        if not self._queued:
            return
        queued, self._queued = self._queued, []
        pool = self._pool()
        asked = hits = refused = 0
        reqs = self._reqs
        for st in queued:
            keys, st.queue = st.queue, []
            if reqs.get(st.rid) is not st:  # asked, then finished in this step
                continue
            keys = list(dict.fromkeys(keys))
            verdict = st.verdict
            if not verdict.keys().isdisjoint(keys):
                keys = [k for k in keys if k not in verdict]
            if keys and pool is not None:
                probe = self._unquarantined(pool, keys, st, now) if self._quarantine else keys
                asked += len(probe)
                h, r = self._probe(pool, probe, st, now)
                hits += h
                refused += r
                if self._quarantine and h:
                    for k in probe:
                        if verdict.get(k) is _HIT:
                            self._quarantine.pop(k, None)
            elif keys:  # no pool: MISS
                verdict.update(dict.fromkeys(keys, _MISS))
        if asked:
            self._count("lookup_keys", asked)
            self._count("hit_keys", hits)
            self._count("refused", refused)
            self._ns_count("lookup_keys", asked)
            self._ns_count("hit_keys", hits)
            self._ns_count("refused", refused)

    def _probe(self, pool, keys, st, now):
        """Decide keys for st: HIT for each row pinned whole (in order, per
        key: past an absent row the next present one is found), MISS for
        the others.  Returns (hits, refused)."""
        per = self._parts
        sfx = self._sfx
        names = list(map(bytes.hex, keys))
        n = len(keys)
        hits = refused = 0
        miss = []
        i = 0
        while i < n:
            try:
                ps = pool.lookup_pin(kvpool.Keys(names[i:] if i else names, sfx))
            except Exception as e:
                self._once("pin:" + type(e).__name__, "kvp_batch_lookup_pin failed: %r", e)
                self._pool_broken(e)
                miss += keys[i:]
                break
            r = ps.count // per
            if r:
                rows = keys[i : i + r]
                e = _Pin(ps, rows, now, st)
                self._pin_order.append(e)
                st.pins.append(e)
                st.pinmap.update(dict.fromkeys(rows, e))
                st.verdict.update(dict.fromkeys(rows, _HIT))
                hits += r
            else:
                ps.release()
            i += r
            if i >= n:
                break
            if ps.stop_status != kvpool.MISS:
                # BUSY (hold slots, pinned bytes): the rest answer MISS
                # now; they are probed again when asked again
                refused = n - i
                miss += keys[i:]
                break
            # key i is absent: find the next present row, if any
            try:
                tiers = pool.batch_locate(kvpool.Keys(names[i + 1 :], sfx)) if i + 1 < n else []
            except Exception:
                tiers = []
            nxt = n
            for j in range(0, len(tiers), per):
                if all(tiers[j : j + per]):
                    nxt = i + 1 + j // per
                    break
            miss += keys[i:nxt]
            i = nxt
        if miss:
            st.verdict.update(dict.fromkeys(miss, _MISS))
        return hits, refused

    def _unquarantined(self, pool, keys, st, now):
        """keys less those still quarantined after a failed load (answered
        MISS); a quarantine ends when the row is back: present again after
        it was gone (re-stored), or retry_failed_s later with the agent up."""
        q = self._quarantine
        out = []
        agent_up = None
        for k in keys:
            ent = q.get(k)
            if ent is None:
                out.append(k)
                continue
            until, gone = ent
            if gone:
                out.append(k)  # probed: present means re-stored
                continue
            if now >= until:
                if agent_up is None:
                    try:
                        agent_up = bool(pool.stat().get("agent_up"))
                    except Exception:
                        agent_up = False
                if agent_up:
                    del q[k]
                    out.append(k)
                    continue
            st.verdict[k] = _MISS
        return out

    def _sweep(self, now):
        """Release rows pinned longer than pin_max_age_s that no load is
        reading: hits vLLM never promoted (its primary tier was full, the
        request was preempted).  Their verdicts go: asked again, they are
        probed again."""
        old = 0
        loading = self._loading
        while self._pin_order and now - self._pin_order[0].t0 > self.pin_max_age_s:
            e = self._pin_order.popleft()
            st = e.req
            for k in e.rows:
                if st.pinmap.get(k) is e and not loading.get(k):
                    del st.pinmap[k]
                    st.verdict.pop(k, None)
                    self._unpin(e)
                    old += 1
        if old:
            self._count("pins_expired", old)

    def _unpin(self, e):
        """One row of e released: the pinset goes with its last."""
        e.live -= 1
        if e.live == 0:
            try:
                e.ps.release()
            except Exception as ex:
                self._once("release:" + type(ex).__name__, "releasing a pinset failed: %r", ex)

    def pinned_rows(self):
        """Rows pinned now (each held until its load ends, its request
        finishes or pin_max_age_s passes)."""
        return sum(len(st.pinmap) for st in self._reqs.values()) + len(self._held)

    def on_new_request(self, req_context):
        return RequestOffloadingContext()

    def on_request_finished(self, req_context):
        """Forget what this request asked: its verdicts go, and its pins
        that no load is reading are released (pinset by pinset; rows being
        loaded keep theirs until their load ends)."""
        try:
            st = self._reqs.pop(req_context.req_id, None)
            if st is None:
                return
            loading, held = self._loading, self._held
            for e in st.pins:
                if e.live == 0:
                    continue
                keep = 0
                if loading:
                    for k in e.rows:
                        if loading.get(k) and st.pinmap.get(k) is e:
                            held[k] = e
                            keep += 1
                if keep:
                    e.live = keep
                else:
                    e.live = 0
                    e.ps.release()
            st.pinmap.clear()  # what is left is in _held: an age sweep must not count it twice
        except Exception as e:
            self._once("finished:" + type(e).__name__, "on_request_finished failed: %r", e)

    def touch(self, keys, req_context):
        """The pool keeps its own recency (every read counts): nothing to do."""
        return

    # -- jobs (submitted on the scheduler thread, run by the workers) --

    def _submit(self, job, load):
        j = None
        try:
            keys = list(job.keys)  # one pass: a set pairs with block_ids by iteration order
            bids = job.block_ids
            bids = bids.tolist() if hasattr(bids, "tolist") else [int(b) for b in bids]
            rid = getattr(getattr(job, "req_context", None), "req_id", None)
            j = _Job(job.job_id, load, keys, bids, time.perf_counter(), rid)
            with self._cv:
                self._outstanding += 1
            self._inflight[j.job_id] = j
            if load:
                for k in keys:
                    self._loading[k] += 1
            if len(keys) != len(bids):
                self._once("nbids", "a job of %d keys came with %d block ids", len(keys), len(bids))
                self._finish(j)
                return
            if any(b < 0 or b >= self.num_rows for b in bids):
                self._once("bid", "a job names a block id outside the primary tier's %d rows", self.num_rows)
                self._finish(j)
                return
            pool = self._pool()
            if pool is None or not keys:
                self._finish(j, ok=not keys)
                return
            step = max(1, self.task_bytes // max(1, self.row_bytes))
            tasks = [(j, a, min(len(keys), a + step)) for a in range(0, len(keys), step)]
            with self._cv:
                j.tasks = len(tasks)
                (self._loads if load else self._stores).extend(tasks)
                self._cv.notify_all()
        except Exception as e:
            self._once("submit:" + type(e).__name__, "submitting a job failed: %r", e)
            if j is None:
                j = _Job(getattr(job, "job_id", None), load, [], [], time.perf_counter())
                with self._cv:
                    self._outstanding += 1
                self._inflight[j.job_id] = j
            self._finish(j)

    def submit_store(self, job_metadata):
        """Copy the job's rows from the primary tier into the pool (in a
        worker).  A row already there counts as stored (first writer wins)."""
        self._submit(job_metadata, False)

    def submit_load(self, job_metadata):
        """Copy the job's rows from the pool into the primary tier (in a
        worker); partial results are reported per key."""
        self._submit(job_metadata, True)

    def _finish(self, j, ok=False):
        """j is done (every task ran, or it never reached a worker)."""
        if ok:
            j.ok = [True] * len(j.keys)
        j.t1 = time.perf_counter()
        self._done.append(j)
        with self._cv:
            self._outstanding -= 1
            self._cv.notify_all()

    def _worker(self):
        while True:
            with self._cv:
                while not self._loads and not self._stores and not self._stopping:
                    self._cv.wait()
                if self._loads:
                    task = self._loads.popleft()
                elif self._stores:
                    task = self._stores.popleft()
                else:
                    return
            j, a, b = task
            try:
                self._run(j, a, b)
            except Exception as e:
                self._once("io:" + type(e).__name__, "a %s task failed: %r", "load" if j.load else "store", e)
            with self._cv:
                j.tasks -= 1
                last = j.tasks == 0
            if last:
                self._finish(j)

    def _io_args(self, j, a, b):
        names = list(map(bytes.hex, j.keys[a:b]))
        base, row, per = self._base, self.row_bytes, self._parts
        if per == 1:
            addrs = [base + bid * row for bid in j.bids[a:b]]
            lens = [row] * (b - a)
        else:
            offs, pl = [], self._part_lens
            o = 0
            for x in pl:
                offs.append(o)
                o += x
            addrs = [base + bid * row + o for bid in j.bids[a:b] for o in offs]
            lens = list(pl) * (b - a)
        return kvpool.Keys(names, self._sfx), addrs, lens

    def _retry_busy(self, fn, okeys, addrs, lens, res):
        busy = [i for i, r in enumerate(res) if r == kvpool.BUSY]
        if not busy:
            return res
        deadline = time.monotonic() + self.busy_retry_s
        pause = 0.0005
        while busy and time.monotonic() < deadline:
            self._count("busy_retries")
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
            r2 = fn([okeys[i] for i in busy], [addrs[i] for i in busy], [lens[i] for i in busy])
            for i, r in zip(busy, r2):
                res[i] = r
            busy = [i for i in busy if res[i] == kvpool.BUSY]
        return res

    def _run(self, j, a, b):
        """One task: rows [a, b) of job j, in a worker thread."""
        pool = self.pool
        if pool is None:
            return
        okeys, addrs, lens = self._io_args(j, a, b)
        per = self._parts
        if j.load:
            res = pool.batch_get(okeys, addrs, lens)
            res = self._retry_busy(pool.batch_get, okeys, addrs, lens, res)
            good = [r == ln for r, ln in zip(res, lens)]
            nbad = 0
            for i in range(b - a):
                ok = all(good[i * per : (i + 1) * per])
                j.ok[a + i] = ok
                if not ok:
                    nbad += 1
                    bad = [r for r, g in zip(res[i * per : (i + 1) * per], good[i * per : (i + 1) * per]) if not g]
                    j.failed_status[a + i] = bad[0] if bad else kvpool.FAILED
            got = sum(lens) - nbad * self.row_bytes
            j.nbytes += got
            self._count("load_rows", b - a - nbad)
            self._count("load_bytes", got)
            self._count("load_failed", nbad)
            self._ns_count("load_pages", b - a - nbad)
            self._ns_count("load_bytes", got)
            self._ns_count("load_failed", nbad)
            # a row that exists but cannot be read (a bad byte, an I/O
            # error) is deleted: it is back once someone stores it again
            for i, st in list(j.failed_status.items()):
                if a <= i < b and st in (kvpool.FAILED, kvpool.BADMSG):
                    gone = True
                    for x in range(per):
                        try:
                            pool.delete(okeys[(i - a) * per + x])
                        except kvpool.Miss:
                            pass
                        except kvpool.KVPoolError:
                            gone = False
                    if gone:
                        j.deleted.add(i)
        else:
            res = pool.batch_put(okeys, addrs, lens)
            res = self._retry_busy(pool.batch_put, okeys, addrs, lens, res)
            nbad = stored = 0
            for i in range(b - a):
                rs = res[i * per : (i + 1) * per]
                ok = all(r == 0 or r == kvpool.EXISTS for r in rs)
                j.ok[a + i] = ok
                if ok and 0 in rs:
                    j.new[a + i] = True
                    stored += 1
                elif not ok:
                    nbad += 1
            nb = stored * self.row_bytes
            j.nbytes += nb
            self._count("store_rows", stored)
            self._count("store_exists", b - a - stored - nbad)
            self._count("store_bytes", nb)
            self._count("store_failed", nbad)
            # the pool's counters: rows stored or already there (docs/observability.md)
            self._ns_count("store_pages", b - a - nbad)
            self._ns_count("store_bytes", (b - a - nbad) * self.row_bytes)
            self._ns_count("store_failed", nbad)

    def get_finished_jobs(self):
        """Every job done since the last call, each exactly once: a load
        with rows that did not read is failed, with the rows that did as
        successful_keys.  Releases the loaded rows' pins; a failed row is
        answered MISS until it is back."""
        out = []
        done = self._done
        now = time.monotonic()
        while done:
            j = done.popleft()
            self._inflight.pop(j.job_id, None)
            success = all(j.ok)
            secs = j.t1 - j.t0
            try:
                self._settle(j, now)
            except Exception as e:
                self._once("settle:" + type(e).__name__, "settling a finished job failed: %r", e)
            kw = {}
            if not success and j.load and "successful_keys" in _JR_FIELDS:
                good = tuple(k for k, ok in zip(j.keys, j.ok) if ok)
                kw["successful_keys"] = good or None
            if "transfer_time" in _JR_FIELDS:
                kw["transfer_time"] = secs
            out.append(JobResult(job_id=j.job_id, success=success, **kw))
            if j.load:
                self._count("load_jobs")
                self._count("load_jobs_failed", 0 if success else 1)
            else:
                self._count("store_jobs")
                self._count("store_jobs_failed", 0 if success else 1)
        return out

    def _settle(self, j, now):
        if j.load:
            loading, held = self._loading, self._held
            st = self._reqs.get(j.rid)
            for i, (k, ok) in enumerate(zip(j.keys, j.ok)):
                c = loading[k] - 1
                if c > 0:
                    loading[k] = c
                else:
                    loading.pop(k, None)
                    e = st.pinmap.pop(k, None) if st is not None else None
                    if e is not None:  # loaded (or not): its pin and its HIT go
                        if st.verdict.get(k) is _HIT:
                            del st.verdict[k]
                        self._unpin(e)
                    else:
                        e = held.pop(k, None)
                        if e is not None:
                            self._unpin(e)
                if ok:
                    continue
                # gone (absent, or deleted as unreadable): back once present
                # again; otherwise (the agent away, BUSY) after a while
                gone = j.failed_status.get(i) == kvpool.MISS or i in j.deleted
                q = self._quarantine
                q.pop(k, None)
                q[k] = (now + self.retry_failed_s, gone)
                self._count("quarantined")
                if len(q) > QUARANTINE_MAX:  # keys never asked again: the oldest go
                    for old in list(q)[: len(q) // 2]:
                        del q[old]
            return
        stored = [k for k, new in zip(j.keys, j.new) if new]
        if self._quarantine:
            for k in stored:
                self._quarantine.pop(k, None)
        if self._events is not None and any(j.ok):
            try:
                kw = {"keys": [k for k, ok in zip(j.keys, j.ok) if ok], "medium": self.medium, "removed": False}
                if self.locality is not None:
                    kw["locality"] = self.locality
                self._events.append(_OffloadingEvent(**kw))
            except Exception as e:
                self._once("event:" + type(e).__name__, "making a KV event failed: %r", e)

    def has_pending_work(self):
        """Jobs in flight or not yet reported, or keys to probe: vLLM keeps
        stepping (and polling get_finished_jobs) while True."""
        return bool(self._inflight or self._done or self._queued)

    def drain_jobs(self):
        """Block until every submitted job has completed or failed (vLLM's
        reset_cache); their results stay for get_finished_jobs()."""
        with self._cv:
            while self._outstanding:
                self._cv.wait()

    def take_events(self):
        ev = self._events
        if not ev:
            return ()
        self._events = []
        return ev

    # -- stats --

    def stats(self):
        """The tier's counters since it was built, as a dict (lookups,
        hits, rows and bytes loaded and stored, failures, pins ...)."""
        d = collections.Counter()
        with self._stat_lock:
            counters = list(self._counters)
        for c in counters:
            d.update(c.copy())
        d = dict(d)
        d["pinned_rows"] = self.pinned_rows()
        d["quarantined_now"] = len(self._quarantine)
        d["namespace"] = self.namespace
        d["pool"] = self.pool_name
        d["parts_per_row"] = self._parts
        d["shareable"] = self.shareable
        return d

    def get_stats(self):
        """What changed since the last call, as vLLM's OffloadingConnectorStats
        (the metrics build_metric_definitions declares), or a dict when vLLM
        is not importable; None when nothing did."""
        try:
            self._ns_flush()
            s = self.stats()
            delta = {}
            for name, (key, kind, _) in METRICS.items():
                v = s.get(key, 0) or 0
                if kind == "gauge":
                    if v != self._reported.get(key):
                        delta[name] = (kind, v)
                        self._reported[key] = v
                    continue
                dv = v - self._reported.get(key, 0)
                if dv:
                    delta[name] = (kind, dv)
                    self._reported[key] = v
            if not delta:
                return None
            cls = _stats_class()
            if cls is None:
                return {name: v for name, (_, v) in delta.items()}
            st = cls()
            for name, (kind, v) in delta.items():
                if kind == "gauge":
                    st.set_gauge(name, v)
                else:
                    st.increase_counter(name, v)
            return st
        except Exception as e:
            self._once("stats:" + type(e).__name__, "get_stats failed: %r", e)
            return None

    def shutdown(self):
        """Stop the workers (after the jobs they hold), release every pin,
        close the pool (idempotent)."""
        try:
            with self._cv:
                self._stopping = True
                self._cv.notify_all()
            for t in self._threads:
                t.join()
            self._threads = []
            self._reqs.clear()  # the pool's close drops every pin
            self._held.clear()
            self._pin_order.clear()
            self._ns_flush(force=True)
            p, self.pool = self.pool, None
            if p is not None:
                p.close()
        except Exception as e:
            self._once("shutdown:" + type(e).__name__, "shutdown failed: %r", e)


# ---- older vLLM: no module_path for tiers, a spec that registers it ----


def _tiering_spec_class():
    """KVPoolTieringSpec: vLLM's TieringOffloadingSpec, with the tier type
    "kvpool" registered in its SecondaryTierFactory.  Built on first use
    (vLLM's OffloadingSpecFactory does getattr(module, spec_name)), so
    importing this module imports nothing of vLLM's spec machinery."""
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

    reg = getattr(SecondaryTierFactory, "_registry", {})
    if "kvpool" not in reg:
        SecondaryTierFactory.register_tier("kvpool", __name__, "KVPoolTier")

    class KVPoolTieringSpec(TieringOffloadingSpec):
        """vLLM's TieringOffloadingSpec with the "kvpool" tier type
        registered: "spec_name": "KVPoolTieringSpec", "spec_module_path":
        "kvpool.vllm", "secondary_tiers": [{"type": "kvpool", ...}]."""

    KVPoolTieringSpec.__module__ = __name__
    return KVPoolTieringSpec


_LAZY = {}


def __getattr__(name):
    if name == "KVPoolTieringSpec":
        if name not in _LAZY:
            _LAZY[name] = _tiering_spec_class()
        return _LAZY[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
