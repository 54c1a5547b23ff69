# SPDX-License-Identifier: MIT
"""libkvpool.so.1 through ctypes: finding it, the prototypes of its calls,
the statuses and the exceptions that carry them.

ctypes.CDLL releases the GIL for the length of every foreign call, so a
thread copying a value out of the pool never stops the interpreter's other
threads.  Nothing here builds Python objects per key: the batch calls in
__init__ fill struct kvp_op arrays through typed memoryviews.
"""

import ctypes
import errno
import os

__all__ = ["lib", "library_path", "agent_path", "Op", "Lease", "Stat"]


class Op(ctypes.Structure):
    """struct kvp_op (kvpool.h): 48 bytes, six 8-byte words."""

    _fields_ = [
        ("key", ctypes.c_void_p),
        ("klen", ctypes.c_uint32),
        ("buf", ctypes.c_void_p),
        ("off", ctypes.c_uint64),
        ("len", ctypes.c_uint64),
        ("status", ctypes.c_int),
    ]


OP_WORDS = 6  # 8-byte words per struct kvp_op
OP_STATUS_INT = 10  # struct kvp_op.status as the 10th of 12 4-byte ints
assert ctypes.sizeof(Op) == OP_WORDS * 8
assert Op.status.offset == OP_STATUS_INT * 4


class Lease(ctypes.Structure):
    """struct kvp_lease (kvpool.h)."""

    _fields_ = [
        ("idx", ctypes.c_uint32),
        ("gen", ctypes.c_uint32),
        ("len", ctypes.c_uint64),
        ("tier", ctypes.c_int),
        ("seg_off", ctypes.c_uint64),
    ]


class Stat(ctypes.Structure):
    """struct kvp_stat (kvpool.h, KVPOOL_1.2)."""

    _fields_ = [
        ("size", ctypes.c_uint64),
        ("dram_bytes", ctypes.c_uint64),
        ("dram_total_bytes", ctypes.c_uint64),
        ("dram_used_bytes", ctypes.c_uint64),
        ("entries", ctypes.c_uint64),
        ("entries_max", ctypes.c_uint64),
        ("ssd_bytes", ctypes.c_uint64),
        ("ssd_used_bytes", ctypes.c_uint64),
        ("max_value", ctypes.c_uint64),
        ("clients", ctypes.c_uint32),
        ("max_clients", ctypes.c_uint32),
        ("agent_up", ctypes.c_int),
        ("pad_", ctypes.c_int),
        ("puts", ctypes.c_uint64),
        ("put_bytes", ctypes.c_uint64),
        ("gets", ctypes.c_uint64),
        ("get_hits", ctypes.c_uint64),
        ("get_misses", ctypes.c_uint64),
        ("get_bytes", ctypes.c_uint64),
        ("exists", ctypes.c_uint64),
        ("exists_hits", ctypes.c_uint64),
        ("pool_puts", ctypes.c_uint64),
        ("pool_gets", ctypes.c_uint64),
        ("pool_get_hits", ctypes.c_uint64),
    ]


class DevInfo(ctypes.Structure):
    """struct kvp_dev_info (kvpool.h, KVPOOL_1.3)."""

    _fields_ = [
        ("size", ctypes.c_uint64),
        ("status", ctypes.c_int),
        ("devices", ctypes.c_int),
        ("runtime_version", ctypes.c_int),
        ("driver_version", ctypes.c_int),
        ("batch_copy", ctypes.c_int),
        ("reg_failed", ctypes.c_int),
        ("reg_bytes", ctypes.c_uint64),
        ("reg_total_bytes", ctypes.c_uint64),
        ("h2d_keys", ctypes.c_uint64),
        ("h2d_bytes", ctypes.c_uint64),
        ("d2h_keys", ctypes.c_uint64),
        ("d2h_bytes", ctypes.c_uint64),
        ("bounce_bytes", ctypes.c_uint64),
        ("hbm_hits", ctypes.c_uint64),
    ]


_SONAME = "libkvpool.so.1"
_HERE = os.path.dirname(os.path.abspath(__file__))
# the source tree: python/kvpool/ next to build/release/
_TREE_BUILD = os.path.normpath(os.path.join(_HERE, "..", "..", "build", "release"))


def _installed(name):
    try:
        from . import _installed as inst  # written by 'ninja install'
    except ImportError:
        return None
    return getattr(inst, name, None)


def library_path():
    """Where libkvpool.so.1 is loaded from, in this order: $KVPOOL_LIBRARY
    (a file), the libdir of the install this package came from, the source
    tree's build/release/ (a package run from the tree), the loader's own
    search (ld.so.cache, LD_LIBRARY_PATH)."""
    env = os.environ.get("KVPOOL_LIBRARY")
    if env:
        return env
    libdir = _installed("LIBDIR")
    if libdir and os.path.exists(os.path.join(libdir, _SONAME)):
        return os.path.join(libdir, _SONAME)
    tree = os.path.join(_TREE_BUILD, _SONAME)
    if os.path.exists(tree):
        return tree
    return _SONAME


def agent_path():
    """kvpoold, found as libkvpool is: $KVPOOLD, the install's bindir, the
    source tree's build/release/, then "kvpoold" (PATH)."""
    env = os.environ.get("KVPOOLD")
    if env:
        return env
    for d in (_installed("BINDIR"), _TREE_BUILD):
        if d and os.path.exists(os.path.join(d, "kvpoold")):
            return os.path.join(d, "kvpoold")
    return "kvpoold"


def _load():
    path = library_path()
    try:
        so = ctypes.CDLL(path, use_errno=False)
    except OSError as e:
        raise ImportError(
            f"kvpool: cannot load {path} ({e}); build it (./configure && ninja), "
            "install it (ninja install), or set KVPOOL_LIBRARY to its path"
        ) from None
    vp, u32, u64, sz, ssz = (
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_uint64,
        ctypes.c_size_t,
        ctypes.c_ssize_t,
    )
    c_int = ctypes.c_int
    protos = {
        "kvp_open": (c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(vp)]),
        "kvp_close": (None, [vp]),
        "kvp_put": (c_int, [vp, vp, u32, vp, u64]),
        "kvp_get": (ssz, [vp, vp, u32, vp, u64]),
        "kvp_get_range": (ssz, [vp, vp, u32, u64, vp, u64]),
        "kvp_exists": (c_int, [vp, vp, u32]),
        "kvp_batch_exists_prefix": (ssz, [vp, vp, sz]),
        "kvp_delete": (c_int, [vp, vp, u32]),
        "kvp_batch_put": (ssz, [vp, vp, sz]),
        "kvp_batch_put_chain": (ssz, [vp, vp, sz, u32]),
        "kvp_batch_get": (ssz, [vp, vp, sz]),
        "kvp_batch_lookup_pin": (ssz, [vp, vp, sz, ctypes.POINTER(vp)]),
        "kvp_pinset_get": (ssz, [vp, vp, vp, sz]),
        "kvp_pinset_count": (sz, [vp]),
        "kvp_pinset_len": (u64, [vp, sz]),
        "kvp_pinset_tier": (c_int, [vp, vp, sz]),
        "kvp_pinset_release": (None, [vp, vp]),
        "kvp_pinset_free": (None, [vp, vp]),
        "kvp_lease_acquire": (c_int, [vp, vp, u32, u32, ctypes.POINTER(Lease)]),
        "kvp_lease_release": (c_int, [vp, ctypes.POINTER(Lease)]),
        "kvp_stat": (c_int, [vp, ctypes.POINTER(Stat), sz]),
        "kvp_strerror": (ctypes.c_char_p, [c_int]),
    }
    # the GPU endpoints (KVPOOL_1.3), the remote tier (KVPOOL_1.4) and the
    # namespace counters (KVPOOL_1.5):
    # optional, so an older library still serves everything else (those
    # calls then raise NotSupported)
    dev_protos = {
        "kvp_batch_get_dev": (ssz, [vp, c_int, vp, vp, sz, ctypes.POINTER(vp)]),
        "kvp_dev_wait": (ssz, [vp, vp]),
        "kvp_dev_done": (c_int, [vp, vp]),
        "kvp_batch_put_dev": (ssz, [vp, c_int, vp, vp, sz]),
        "kvp_get_dev": (ssz, [vp, c_int, vp, vp, u32, vp, u64]),
        "kvp_put_dev": (c_int, [vp, c_int, vp, vp, u32, vp, u64]),
        "kvp_dev_register": (c_int, [vp, u32]),
        "kvp_dev_info": (c_int, [vp, ctypes.POINTER(DevInfo), sz]),
        # the remote tier (KVPOOL_1.4)
        "kvp_remote": (c_int, [vp, ctypes.c_uint]),
        "kvp_batch_locate": (ssz, [vp, vp, sz, ctypes.POINTER(c_int)]),
        # an engine adapter's counters, per namespace (KVPOOL_1.5)
        "kvp_ns_count": (c_int, [vp, ctypes.c_uint, u64]),
        "kvp_ns_event_name": (ctypes.c_char_p, [ctypes.c_uint]),
        # statuses declared once (kvpool.h KVP_STATUSES) and the version
        "kvp_status_name": (ctypes.c_char_p, [c_int]),
        "kvp_statuses": (ctypes.c_uint, [ctypes.POINTER(c_int), ctypes.c_uint]),
        "kvp_version": (ctypes.c_char_p, [ctypes.POINTER(c_int)] * 3),
    }
    for name, (res, args) in dev_protos.items():
        fn = getattr(so, name, None)
        if fn is not None:
            fn.restype = res
            fn.argtypes = args
    for name, (res, args) in protos.items():
        try:
            fn = getattr(so, name)
        except AttributeError:
            raise ImportError(
                f"kvpool: {path} has no {name}: it is older than this package "
                "(libkvpool.so.1.2 or later is needed)"
            ) from None
        fn.restype = res
        fn.argtypes = args
    return so, path


lib, loaded_from = _load()

# ---- statuses: 0 or a negative errno, one meaning everywhere (kvpool.h) ----

# A library older than 1.5 has no table to read: the statuses it knew.
_STATUSES_1_4 = {
    "OK": 0,
    "MISS": -errno.ENOENT,
    "EXISTS": -errno.EEXIST,
    "BUSY": -errno.EBUSY,
    "TOO_LARGE": -errno.E2BIG,
    "NOSPC": -errno.ENOSPC,
    "MSGSIZE": -errno.EMSGSIZE,
    "FAILED": -errno.EIO,
    "BADMSG": -errno.EBADMSG,
    "UNAVAILABLE": -errno.ENOTCONN,
    "STALE": -errno.ESTALE,
    "PROTO": -errno.EPROTO,
    "USERS": -errno.EUSERS,
    "ACCES": -errno.EACCES,
    "NOMEM": -errno.ENOMEM,
    "INVAL": -errno.EINVAL,
    "NOTSUP": -errno.EOPNOTSUPP,
    "NODEV": -errno.ENODEV,
    "INPROGRESS": -errno.EINPROGRESS,
    "UCLEAN": -errno.EUCLEAN,
}


def _read_statuses():
    """{NAME: status} of kvpool.h's KVP_STATUSES, read from the library
    (declared there once), and where they came from."""
    fn = getattr(lib, "kvp_statuses", None)
    if fn is None or fn.argtypes is None:
        return dict(_STATUSES_1_4), "built in (libkvpool.so older than 1.5)"
    n = fn(None, 0)
    vals = (ctypes.c_int * n)()
    fn(vals, n)
    return {lib.kvp_status_name(v).decode(): v for v in vals}, "libkvpool.so (KVP_STATUSES)"


STATUSES, STATUSES_FROM = _read_statuses()
OK = STATUSES["OK"]
MISS = STATUSES["MISS"]
EXISTS = STATUSES["EXISTS"]
BUSY = STATUSES["BUSY"]
TOO_LARGE = STATUSES["TOO_LARGE"]
NOSPC = STATUSES["NOSPC"]
MSGSIZE = STATUSES["MSGSIZE"]
FAILED = STATUSES["FAILED"]
BADMSG = STATUSES["BADMSG"]
UNAVAILABLE = STATUSES["UNAVAILABLE"]
STALE = STATUSES["STALE"]
PROTO = STATUSES["PROTO"]
USERS = STATUSES["USERS"]
ACCES = STATUSES["ACCES"]
NOMEM = STATUSES["NOMEM"]
INVAL = STATUSES["INVAL"]
NOTSUP = STATUSES["NOTSUP"]  # no CUDA runtime
NODEV = STATUSES["NODEV"]  # no CUDA device or driver
INPROGRESS = STATUSES["INPROGRESS"]
UCLEAN = STATUSES["UCLEAN"]  # the pool's structure is damaged

TIER_DRAM = 1
TIER_SSD = 2
TIER_REMOTE = 4  # kvp_batch_locate: another node of the cluster holds it
REMOTE_GET = 1  # kvp_remote flags
REMOTE_PROBE = 2


class KVPoolError(Exception):
    """A kvpool status other than OK.  status: the negative errno the C
    call returned; name: its name (BUSY, MISS, ...); key: the key it was
    about, when one was."""

    status = None
    name = "ERROR"

    def __init__(self, status=None, key=None, message=None):
        if status is not None:
            self.status = status
        self.key = key
        text = message or describe(self.status)
        if key is not None:
            text = f"{text} (key {key!r})"
        if not text.startswith(self.name + ":"):
            text = f"{self.name}: {text}"
        super().__init__(text)

    @property
    def errno(self):
        return -self.status if self.status is not None else None


def _exc(cls_name, status, label, *bases, doc):
    cls = type(cls_name, (KVPoolError,) + bases, {"status": status, "name": label, "__doc__": doc})
    cls.__module__ = "kvpool"
    return cls


Miss = _exc("Miss", MISS, "MISS", KeyError, doc="No such key (in this namespace).")
Exists = _exc("Exists", EXISTS, "EXISTS", doc="put: the key exists or another process is putting it.")
Busy = _exc("Busy", BUSY, "BUSY", doc="Backpressure: retry later (never a miss).")
TooLarge = _exc("TooLarge", TOO_LARGE, "TOO_LARGE", doc="Larger than --max-value, the arena or the staging arena.")
NoSpace = _exc("NoSpace", NOSPC, "NOSPC", doc="Full, and everything in it is held.")
BufferTooSmall = _exc("BufferTooSmall", MSGSIZE, "MSGSIZE", doc="get: the buffer is smaller than the value.")
Failed = _exc("Failed", FAILED, "FAILED", doc="The key exists but cannot be read (-EIO, -EBADMSG).")
Unavailable = _exc("Unavailable", UNAVAILABLE, "UNAVAILABLE", doc="No agent (or, at open, no segment).")
Stale = _exc("Stale", STALE, "STALE", doc="This client was reaped: the Pool reopens it on the next call.")
ProtocolMismatch = _exc("ProtocolMismatch", PROTO, "PROTO", doc="The segment's ABI does not match this library.")
TooManyClients = _exc("TooManyClients", USERS, "USERS", doc="open: every client slot is taken (--max-clients).")
PermissionDenied = _exc(
    "PermissionDenied", ACCES, "ACCES", PermissionError, doc="open: the segment is not safe or not permitted to use."
)
OutOfMemory = _exc("OutOfMemory", NOMEM, "NOMEM", MemoryError, doc="Out of memory, descriptors or address space.")
InvalidArgument = _exc("InvalidArgument", INVAL, "INVAL", ValueError, doc="A bad argument.")
NotSupported = _exc(
    "NotSupported", NOTSUP, "NOTSUP", doc="A device call: no CUDA runtime (or a library without the GPU endpoints)."
)
NoDevice = _exc("NoDevice", NODEV, "NODEV", doc="A device call: no CUDA device or driver.")
Damaged = _exc("Damaged", UCLEAN, "UCLEAN", doc="The pool's structure is damaged (kvpool check says where).")
Forked = _exc(
    "Forked",
    None,
    "FORKED",
    doc="A Pool opened before fork() used in the child: its client slots are the parent's; open a new Pool.",
)
Closed = _exc("Closed", None, "CLOSED", ValueError, doc="The Pool (or pinset, lease) was closed.")

_BY_STATUS = {
    MISS: Miss,
    EXISTS: Exists,
    BUSY: Busy,
    TOO_LARGE: TooLarge,
    NOSPC: NoSpace,
    MSGSIZE: BufferTooSmall,
    FAILED: Failed,
    BADMSG: Failed,
    UNAVAILABLE: Unavailable,
    STALE: Stale,
    PROTO: ProtocolMismatch,
    USERS: TooManyClients,
    ACCES: PermissionDenied,
    NOMEM: OutOfMemory,
    INVAL: InvalidArgument,
    NOTSUP: NotSupported,
    NODEV: NoDevice,
    UCLEAN: Damaged,
}

_NAMES = {OK: "OK", BADMSG: "FAILED"}
_NAMES.update({s: c.name for s, c in _BY_STATUS.items() if s not in _NAMES})
_NAMES.update({s: n for n, s in STATUSES.items() if s not in _NAMES})


def status_name(status):
    """OK, MISS, BUSY, ... for a status (UNKNOWN for anything else)."""
    return _NAMES.get(status, "UNKNOWN")


def describe(status):
    """kvp_strerror's text for a status."""
    if status is None:
        return "error"
    return lib.kvp_strerror(status).decode()


def error(status, key=None):
    """The exception for a negative status (an instance, not raised)."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        e = KVPoolError(status, key)
        e.name = "UNKNOWN"
        return e
    if status == BADMSG:
        return cls(BADMSG, key)
    return cls(None, key)
