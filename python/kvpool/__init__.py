# SPDX-License-Identifier: MIT
"""kvpool: the node-local KV-cache pool from Python (standard library only).

    import kvpool
    pool = kvpool.Pool("default", namespace="llama3-70b|bf16|page16")
    pool.put("page-0", page)                  # any buffer (bytes, bytearray, ...)
    n = pool.get("page-0", buf)               # into a caller buffer: bytes copied
    have = pool.batch_exists_prefix(keys)     # leading keys present
    res = pool.batch_get(keys, addrs, lens)   # per key: bytes copied or a status
    with pool.lookup_pin(keys) as ps:         # a probe that promises
        ps.get(addrs, lens)
    pool.close()

Errors raise exceptions carrying the status (kvpool.Busy, kvpool.Miss,
kvpool.Unavailable, ...: every one a kvpool.KVPoolError with .status and
.name); batch calls answer per key instead of raising.

Threads: one Pool may be shared by any number of threads.  Each thread
gets a client handle (a client slot of the pool) of its own on its first
call, so threads never wait for each other in the pool; the handle is
closed when the thread ends or the Pool closes.  A pinset or lease
belongs to the thread's client that made it; using it from another thread
takes that client's lock for the call.  Every C call runs without the GIL.

fork(): a Pool opened before a fork is refused in the child (kvpool.Forked):
its client slots are the parent's, whose liveness the agent checks by
process.  Open a new Pool in the child.
"""

import array
import ctypes
import operator
import os
import threading
import weakref

from . import _native
from ._native import (  # noqa: F401  (the public names)
    ACCES,
    BADMSG,
    BUSY,
    EXISTS,
    FAILED,
    INPROGRESS,
    INVAL,
    MISS,
    MSGSIZE,
    NODEV,
    UCLEAN,
    STATUSES,
    NOMEM,
    NOTSUP,
    NOSPC,
    OK,
    PROTO,
    STALE,
    TIER_DRAM,
    TIER_SSD,
    TOO_LARGE,
    UNAVAILABLE,
    USERS,
    BufferTooSmall,
    Busy,
    Closed,
    Exists,
    Failed,
    Forked,
    InvalidArgument,
    KVPoolError,
    Miss,
    NoDevice,
    Damaged,
    NoSpace,
    NotSupported,
    OutOfMemory,
    PermissionDenied,
    ProtocolMismatch,
    Stale,
    TooLarge,
    TooManyClients,
    Unavailable,
    agent_path,
    describe,
    error,
    library_path,
    status_name,
)

__all__ = [
    "Pool",
    "Pinset",
    "Lease",
    "KVPoolError",
    "Miss",
    "Exists",
    "Busy",
    "TooLarge",
    "NoSpace",
    "BufferTooSmall",
    "Failed",
    "Unavailable",
    "Stale",
    "ProtocolMismatch",
    "TooManyClients",
    "PermissionDenied",
    "OutOfMemory",
    "InvalidArgument",
    "Forked",
    "Closed",
    "NotSupported",
    "NoDevice",
    "Damaged",
    "STATUSES",
    "version",
    "status_name",
    "describe",
    "error",
    "buffer_address",
    "Keys",
    "KEY_MAX",
    "TIER_DRAM",
    "TIER_SSD",
    "TIER_REMOTE",
    "NS_EVENTS",
]

_lib = _native.lib
_memmove = ctypes.memmove
TIER_DRAM = _native.TIER_DRAM
TIER_SSD = _native.TIER_SSD
TIER_REMOTE = _native.TIER_REMOTE
# what an engine adapter counts for its namespace (Pool.count; kvpool.h
# KVP_NS_EVENTS, in its order): the agent exports each as
# kvpool_namespace_events_total{namespace="...",event="..."}
NS_EVENTS = (
    "lookup_keys",
    "hit_keys",
    "load_pages",
    "load_bytes",
    "load_failed",
    "store_pages",
    "store_bytes",
    "store_failed",
    "refused",
    "errors",
)
KEY_MAX = 255
_OPW = _native.OP_WORDS
_OPS = _native.OP_STATUS_INT



def version():
    """The library's version (kvp_version), as a string ("1.5.0"); an
    older library without kvp_version answers "<1.5"."""
    fn = getattr(_lib, "kvp_version", None)
    if fn is None or fn.argtypes is None:
        return "<1.5"
    return fn(None, None, None).decode()


# fork: pools record the epoch they were opened in; the child bumps it
_fork_epoch = 0


def _after_fork_in_child():
    global _fork_epoch
    _fork_epoch += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


# ---- buffers ----


class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.py_object),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_GetBuffer = ctypes.pythonapi.PyObject_GetBuffer
_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_GetBuffer.restype = ctypes.c_int
_ReleaseBuffer = ctypes.pythonapi.PyBuffer_Release
_ReleaseBuffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_ReleaseBuffer.restype = None
_PyBUF_SIMPLE, _PyBUF_WRITABLE = 0, 1


class _Buf:
    """A contiguous buffer's address and size, exported (pinned) by the
    object until release(): zero-copy for bytes, bytearray, memoryview,
    array, mmap, numpy arrays and anything with the buffer protocol."""

    __slots__ = ("view", "addr", "nbytes")

    def __init__(self, obj, writable):
        self.view = _PyBuffer()
        try:
            _GetBuffer(obj, ctypes.byref(self.view), _PyBUF_WRITABLE if writable else _PyBUF_SIMPLE)
        except BufferError as e:
            self.view = None
            need = "a writable, contiguous buffer" if writable else "a contiguous buffer"
            raise InvalidArgument(INVAL, None, f"need {need} ({e})") from None
        except TypeError:
            self.view = None
            raise InvalidArgument(
                INVAL, None, f"{type(obj).__name__} has no buffer protocol: pass addr= and length="
            ) from None
        self.addr = self.view.buf or 0
        self.nbytes = self.view.len

    def release(self):
        if self.view is not None:
            _ReleaseBuffer(ctypes.byref(self.view))
            self.view = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def buffer_address(obj, writable=False):
    """(address, nbytes) of a contiguous buffer.  The address stays valid
    only while obj is alive and not resized."""
    with _Buf(obj, writable) as b:
        return b.addr, b.nbytes


# ---- arguments: every one checked here, never wrapped or truncated by
# ctypes (which takes 2**64 as 0, -1 as 2**64-1, and a C string up to its
# first NUL) ----


def _is_int(v):
    """An integer (int, numpy's): bytes(v) would be v NUL bytes."""
    return hasattr(type(v), "__index__")


def _bytes(v, what):
    """str (UTF-8) or a bytes-like object as bytes; an integer (bool
    included) is refused: bytes(5) is five NUL bytes, not a name."""
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bytes):
        return v
    if _is_int(v):
        raise TypeError(f"kvpool: {what} must be str or bytes, not {type(v).__name__}")
    try:
        return bytes(memoryview(v))
    except TypeError:
        raise TypeError(f"kvpool: {what} must be str or bytes, not {type(v).__name__}") from None


def _cname(v, what):
    """A name C reads as a string (pool, namespace): no NUL byte, which
    would end it early (another pool's or namespace's name)."""
    b = _bytes(v, what)
    if b"\0" in b:
        raise InvalidArgument(INVAL, None, f"{what} {v!r} holds a NUL byte")
    return b


def _uint(v, what, limit=1 << 64):
    """v as an int in [0, limit): an integer, not a bool (True is no count
    or address) nor a float (never truncated)."""
    if isinstance(v, bool):
        raise TypeError(f"kvpool: {what} must be an integer, not bool")
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError(f"kvpool: {what} must be an integer, not {type(v).__name__}") from None
    if not 0 <= i < limit:
        raise InvalidArgument(INVAL, None, f"{what} {i} is out of range (0 .. {limit - 1})")
    return i


def _key(key):
    key = _bytes(key, "a key")
    if not 1 <= len(key) <= KEY_MAX:
        raise InvalidArgument(INVAL, key, f"a key is 1..{KEY_MAX} bytes")
    return key


class Keys:
    """Keys packed for the batch calls' fast path: every name of names
    (equal-length str or bytes) with each suffix appended, name-major:
    names[0]+suffixes[0], names[0]+suffixes[1], ..., names[1]+suffixes[0], ...
    (the object keys of a page, e.g. suffixes ("_0_k", "_0_v")).  Built with
    one join per suffix; a batch call fills its struct kvp_op array from a
    layout cached per (count, lengths), so no work is done per key in
    Python.  len(Keys) is the number of keys.  Names of unequal lengths
    (or non-ASCII str) fall back to a plain list of keys."""

    __slots__ = ("blob", "n", "nl", "slens", "plain")

    def __init__(self, names, suffixes=("",)):
        sx = _SUFFIXES.get(suffixes)
        if sx is None:
            sx = _suffixes(suffixes)
        strs, raw, self.slens = sx[:3]
        n = len(names)
        self.n = n * len(raw)
        self.plain = None
        if n == 0 or not raw:
            self.plain, self.blob, self.nl = [], b"", 0
            return
        nl = len(names[0])
        if names[0].__class__ is str:
            parts = None if strs is None else [x.join(names) + x for x in strs]
            blob = None if parts is None else "".join(parts)
            blob = blob.encode() if blob is not None and blob.isascii() else None
        else:
            parts = [x.join(names) + x for x in raw]
            blob = b"".join(parts)
        ok = blob is not None and len(blob) == n * (len(raw) * nl + sum(self.slens))
        if ok and sx[3] is not None:
            # names of nl bytes each, proved in C-speed passes: the total
            # is n names of nl; no name holds suffix x's last char c (once
            # in x), so x's part has exactly n of them, and each is where
            # the suffix of a name of nl must end
            x = parts[sx[3]]
            c = x[-1:]
            stride = nl + self.slens[sx[3]]
            # the names hold no c: seen in another suffix's part that has
            # none of its own (the names are all there), or in the names
            other = parts[sx[4]] if sx[4] is not None else names[0][:0].join(names)
            ok = c not in other and x[stride - 1 :: stride] == c * n
        elif ok:
            lens = list(map(len, names))
            ok = lens.count(nl) == n
        if not ok or nl + min(self.slens) < 1 or nl + max(self.slens) > KEY_MAX:
            enc = [_bytes(k, "a key name") for k in names]
            self.plain = [k + x for k in enc for x in raw]
            self.blob, self.nl = b"", 0
            return
        self.blob = blob
        self.nl = nl

    def __len__(self):
        return self.n

    def __iter__(self):
        return (self[j] for j in range(self.n))

    def __getitem__(self, j):
        """Key j as bytes (for retries, messages and tests; not on the fast
        path)."""
        if self.plain is not None:
            return self.plain[j]
        if j < 0:
            j += self.n
        if not 0 <= j < self.n:
            raise IndexError("kvpool.Keys index out of range")
        m = len(self.slens)
        i, r = divmod(j, m)
        off = sum((self.nl + sl) * (self.n // m) for sl in self.slens[:r])
        start = off + i * (self.nl + self.slens[r])
        return self.blob[start : start + self.nl + self.slens[r]]


_SUFFIXES = {}  # suffixes as given -> (as str, as bytes, their lengths)


def _suffixes(suffixes):
    raw = tuple(_bytes(x, "a key suffix") for x in suffixes)
    try:
        strs = tuple(x.decode("ascii") for x in raw)
    except UnicodeDecodeError:
        strs = None
    # a suffix whose last char occurs once in it proves the names' lengths
    check = next((j for j, x in enumerate(raw) if x and x.count(x[-1:]) == 1), None)
    # a suffix without that char: its part shows whether a name holds it
    other = None if check is None else next((j for j, x in enumerate(raw) if raw[check][-1:] not in x), None)
    sx = (strs, raw, tuple(len(x) for x in raw), check, other)  # strs None: not ASCII
    if len(_SUFFIXES) < 256:
        _SUFFIXES[tuple(suffixes)] = sx
    return sx


class _Layout:
    """An op array whose key words point into its own key buffer, laid
    out for one shape of Keys: a call copies the blob in and is ready."""

    __slots__ = ("ops", "mvq", "mvi", "kbuf", "kaddr", "klen")

    def __init__(self, keys):
        n, m, nl = keys.n, len(keys.slens), keys.nl
        pages = n // m
        self.ops = (_native.Op * max(n, 1))()
        raw = memoryview(self.ops).cast("B")
        self.mvq = raw.cast("Q")
        self.mvi = raw.cast("i")
        self.kbuf = ctypes.create_string_buffer(max(len(keys.blob), 1))
        base = self.kaddr = ctypes.addressof(self.kbuf)
        ptrs = array.array("Q", bytes(8 * n))
        klens = array.array("Q", bytes(8 * n))
        off = 0
        for r, sl in enumerate(keys.slens):
            stride = nl + sl
            ptrs[r::m] = array.array("Q", range(base + off, base + off + pages * stride, stride))
            klens[r::m] = array.array("Q", [stride]) * pages
            off += pages * stride
        end = n * _OPW
        self.mvq[0:end:_OPW] = ptrs
        self.mvq[1:end:_OPW] = klens


_LAYOUTS_MAX = 64  # per client: shapes of Keys kept (LRU)


# ---- one client handle (a client slot): used under its lock ----


class _Client:
    __slots__ = (
        "h",
        "lock",
        "epoch",
        "ops",
        "opn",
        "mvq",
        "mvi",
        "kbuf",
        "kcap",
        "layouts",
        "pinsets",
        "remote",
        "pid",
        "__weakref__",
    )

    def __init__(self, pool):
        h = ctypes.c_void_p()
        rc = _lib.kvp_open(pool._pool_b, pool._ns_b, ctypes.byref(h))
        if rc:
            raise error(rc)
        self.h = h.value
        self.lock = threading.Lock()
        self.epoch = _fork_epoch
        self.pid = os.getpid()
        self.ops = None
        self.opn = 0
        self.kbuf = None
        self.kcap = 0
        self.layouts = {}
        self.pinsets = weakref.WeakSet()  # live pinsets, freed before close
        self.remote = _native.REMOTE_GET  # kvp_remote's default

    def layout(self, keys, io):
        """The cached layout for keys' shape, its key buffer filled.  Probes
        (io False) and reads/writes have layouts apart: a probe's buffer
        words stay zero without being cleared."""
        shape = (keys.n, keys.nl, keys.slens, io)
        lay = self.layouts.get(shape)
        if lay is None:
            if len(self.layouts) >= _LAYOUTS_MAX:  # the oldest made goes
                del self.layouts[next(iter(self.layouts))]
            lay = self.layouts[shape] = _Layout(keys)
        _memmove(lay.kaddr, keys.blob, len(keys.blob))
        return lay

    def scratch(self, n, keybytes):
        """The op array for n keys (reused: the client's lock is held)."""
        if n > self.opn:
            cap = max(n, 2 * self.opn, 64)
            self.ops = (_native.Op * cap)()
            raw = memoryview(self.ops).cast("B")
            self.mvq = raw.cast("Q")
            self.mvi = raw.cast("i")
            self.opn = cap
        if keybytes > self.kcap:
            self.kcap = max(keybytes, 2 * self.kcap, 4096)
            self.kbuf = ctypes.create_string_buffer(self.kcap)
        return self.ops

    def ours(self):
        """Made by this process.  The fork epoch alone is late: in a child
        forked while other threads held clients, Python drops those threads'
        states (and so their thread-local clients, whose finalizers run
        here) before the at-fork hook that bumps it; the pid is never late."""
        return self.epoch == _fork_epoch and self.pid == os.getpid()

    def close(self):
        """Free the live pinsets (kvp_close drops their holds, not their
        memory), then the handle.  Called with the lock held, or when no
        one else can reach the client."""
        h, self.h = self.h, None
        if h and self.ours():
            for ps in list(self.pinsets):
                ps._free_locked(h)
            _lib.kvp_close(h)

    def __del__(self):
        # a thread that ended, or the Pool's last reference gone; never in a
        # forked child (the slot is the parent's)
        try:
            self.close()
        except Exception:
            pass


def _u64s(seq, n, what):
    if isinstance(seq, array.array) and seq.typecode == "Q":
        a = seq
    else:
        try:
            a = array.array("Q", seq)
        except (TypeError, OverflowError) as e:
            raise InvalidArgument(INVAL, None, f"{what}: non-negative integers ({e})") from None
    if len(a) != n:
        raise InvalidArgument(INVAL, None, f"{what}: {len(a)} values for {n} keys")
    return a


class Pool:
    """A pool (kvpoold --pool NAME) in one namespace: keys of different
    namespaces never meet.  namespace: what makes pages interchangeable,
    e.g. model, KV dtype, layout and page size."""

    def __init__(self, pool="default", namespace=None, *, remote_get=True, remote_probe=False):
        """remote_get, remote_probe: what this Pool asks other nodes of a
        cluster for (kvp_remote; see Pool.remote)."""
        if namespace is None:
            raise InvalidArgument(INVAL, None, "a namespace is required (model + KV layout)")
        self.pool = pool
        self.namespace = namespace
        self._pool_b = _cname(pool, "the pool name")
        self._ns_b = _cname(namespace, "the namespace")
        self._epoch = _fork_epoch
        self._pid = os.getpid()
        self._local = threading.local()
        self._clients = weakref.WeakSet()
        self._reg = threading.Lock()
        self._closed = False
        self._remote = (_native.REMOTE_GET if remote_get else 0) | (_native.REMOTE_PROBE if remote_probe else 0)
        # open the first client now: a bad name or a missing agent is an
        # error here, not at the first call
        self._client()

    # -- client handles --

    def _client(self):
        if self._epoch != _fork_epoch:
            raise Forked(
                None, None, f"this Pool was opened by process {self._pid} before fork(); open a new Pool in the child"
            )
        c = getattr(self._local, "c", None)
        if c is not None and c.h is not None:
            if c.remote != self._remote:
                self._set_remote(c)
            return c
        with self._reg:
            if self._closed:
                raise Closed(None, None, "the Pool is closed")
            c = _Client(self)
            self._clients.add(c)
        self._local.c = c
        if c.remote != self._remote:
            self._set_remote(c)
        return c

    def _set_remote(self, c):
        fn = getattr(_lib, "kvp_remote", None)
        if fn is None or fn.argtypes is None:
            raise NotSupported(NOTSUP, None, f"{_native.loaded_from} has no kvp_remote (libkvpool.so.1.4 or later)")
        with c.lock:
            fn(c.h, self._remote)
            c.remote = self._remote

    def remote(self, *, get=None, probe=None):
        """What this Pool asks the other nodes of a cluster (kvpoold
        --cluster) for, in every thread: get (default True) makes gets
        fetch keys this node misses from the node that holds them; probe
        (default False: a remote hit costs a transfer) makes
        batch_exists_prefix count them, lookup_pin fetch and pin them, and
        batch_locate report them.  Returns the flags as (get, probe)."""
        if get is not None:
            self._remote = (self._remote & ~_native.REMOTE_GET) | (_native.REMOTE_GET if get else 0)
        if probe is not None:
            self._remote = (self._remote & ~_native.REMOTE_PROBE) | (_native.REMOTE_PROBE if probe else 0)
        self._client()
        return (bool(self._remote & _native.REMOTE_GET), bool(self._remote & _native.REMOTE_PROBE))

    def batch_locate(self, keys):
        """Where each key lives: TIER_DRAM, TIER_SSD, TIER_REMOTE (another
        node holds it; only with remote probe on) or 0 (absent).  A probe:
        holds, stages and copies nothing."""
        fn = getattr(_lib, "kvp_batch_locate", None)
        if fn is None or fn.argtypes is None:
            raise NotSupported(NOTSUP, None, f"{_native.loaded_from} has no kvp_batch_locate (libkvpool.so.1.4 or later)")
        c = self._client()
        with c.lock:
            ops, n, _, _ = self._fill(c, keys)
            tiers = (ctypes.c_int * max(n, 1))()
            rc = fn(c.h, ops, n, tiers)
        if rc < 0:
            self._check(c, rc)
        return list(tiers[:n])

    def _stale(self, c):
        """This thread's client was reaped: drop it; the next call reopens."""
        with c.lock:
            c.close()
        if getattr(self._local, "c", None) is c:
            self._local.c = None

    def _check(self, c, rc, key=None):
        if rc == STALE:
            self._stale(c)
        raise error(rc, key)

    def close(self):
        """Close every thread's client handle (their holds drop); calls
        after this raise kvpool.Closed.  Idempotent."""
        with self._reg:
            self._closed = True
            clients = list(self._clients)
        if self._epoch != _fork_epoch:
            return
        for c in clients:
            with c.lock:
                c.close()
        self._local = threading.local()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"kvpool.Pool(pool={self.pool!r}, namespace={self.namespace!r})"

    # -- single keys --

    def put(self, key, value=None, *, addr=None, length=None):
        """Store value (any contiguous buffer), or length bytes at addr,
        under key if it is absent.  Raises Exists (the key is there or
        being put), Busy, NoSpace, TooLarge, Unavailable, InvalidArgument."""
        k = _key(key)
        c = self._client()
        if addr is None:
            with _Buf(value, False) as b, c.lock:
                rc = _lib.kvp_put(c.h, k, len(k), b.addr, b.nbytes)
        else:
            addr, length = _uint(addr, "addr"), _uint(length or 0, "length")
            with c.lock:
                rc = _lib.kvp_put(c.h, k, len(k), addr, length)
        if rc:
            self._check(c, rc, key)

    def get(self, key, buf=None, *, addr=None, length=None, offset=0):
        """Copy key's value into buf (a writable buffer), or into length
        bytes at addr; from offset on, clipped at the value's end, when
        offset is given.  Returns the bytes copied.  Raises Miss,
        BufferTooSmall (whole-value read into a smaller buffer: nothing
        copied), Busy, Failed, TooLarge, Unavailable, InvalidArgument."""
        k = _key(key)
        offset = _uint(offset, "offset")
        if addr is not None:
            addr, length = _uint(addr, "addr"), _uint(length or 0, "length")
        c = self._client()
        b = _Buf(buf, True) if addr is None else None
        try:
            a, n = (b.addr, b.nbytes) if b else (addr, length)
            with c.lock:
                if offset:
                    rc = _lib.kvp_get_range(c.h, k, len(k), offset, a, n)
                else:
                    rc = _lib.kvp_get(c.h, k, len(k), a, n)
        finally:
            if b:
                b.release()
        if rc < 0:
            self._check(c, rc, key)
        return rc

    def get_bytes(self, key):
        """The whole value as bytes (a hold makes the length and the copy
        one consistent read).  Raises Miss and the statuses of get."""
        with self.lookup_pin([key]) as ps:
            if ps.count == 0:
                raise error(ps.stop_status, key)
            out = bytearray(ps.length(0))
            r = ps.get([buffer_address(out, True)[0]], [len(out)])[0]
            if r < 0:
                raise error(r, key)
            return bytes(out)

    def exists(self, key):
        """True if key has a readable value in any tier.  Holds nothing."""
        k = _key(key)
        c = self._client()
        with c.lock:
            rc = _lib.kvp_exists(c.h, k, len(k))
        if rc < 0:
            self._check(c, rc, key)
        return rc == 1

    def delete(self, key):
        """Make key unreachable (readers holding it finish).  Raises Miss,
        Busy, and with --durability strict Failed or Unavailable."""
        k = _key(key)
        c = self._client()
        with c.lock:
            rc = _lib.kvp_delete(c.h, k, len(k))
        if rc:
            self._check(c, rc, key)

    # -- batches: (address, length) arrays, per-key answers --

    def _fill(self, c, keys, addrs=None, lens=None, offsets=None):
        """Fill an op array of c with keys (a list of str or bytes, or
        Keys) and the buffers; returns (ops, n, words, ints): the array, its
        keys, and views of it as 8-byte words and 4-byte ints.  No Python
        object per key but the lists the caller passed."""
        io = addrs is not None
        if isinstance(keys, Keys):
            if keys.plain is None:
                lay = c.layout(keys, io)
                n = keys.n
                if io:
                    self._bufs(lay.mvq, n, addrs, lens, offsets)
                return lay.ops, n, lay.mvq, lay.mvi
            keys = keys.plain
        elif isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError("kvpool: keys must be a list of keys (or Keys), not one key")
        n = len(keys)
        if n == 0:
            return c.scratch(1, 1), 0, c.mvq, c.mvi
        if isinstance(keys[0], str):
            joined = "".join(keys)
            if joined.isascii():
                blob = joined.encode()
                klens = list(map(len, keys))
            else:  # lengths in bytes
                enc = [k.encode() for k in keys]
                blob = b"".join(enc)
                klens = list(map(len, enc))
        else:
            blob = b"".join(keys)
            klens = list(map(len, keys))
        kmin, kmax = min(klens), max(klens)
        if kmin < 1 or kmax > KEY_MAX:
            raise InvalidArgument(INVAL, None, f"a key is 1..{KEY_MAX} bytes")
        ops = c.scratch(n, len(blob))
        ctypes.memmove(c.kbuf, blob, len(blob))
        base = ctypes.addressof(c.kbuf)
        q = c.mvq
        end = n * _OPW
        if kmin == kmax:
            q[0:end:_OPW] = array.array("Q", range(base, base + n * kmin, kmin))
            q[1:end:_OPW] = array.array("Q", [kmin]) * n
        else:
            ptrs, p = array.array("Q", bytes(8 * n)), base
            for i, kl in enumerate(klens):
                ptrs[i] = p
                p += kl
            q[0:end:_OPW] = ptrs
            q[1:end:_OPW] = array.array("Q", klens)
        if io:
            self._bufs(q, n, addrs, lens, offsets)
        else:
            zeros = array.array("Q", bytes(8 * n))
            q[2:end:_OPW] = zeros
            q[3:end:_OPW] = zeros
            q[4:end:_OPW] = zeros
            q[5:end:_OPW] = zeros
        return ops, n, q, c.mvi

    @staticmethod
    def _bufs(q, n, addrs, lens, offsets):
        end = n * _OPW
        zeros = array.array("Q", bytes(8 * n))
        q[2:end:_OPW] = _u64s(addrs, n, "addrs")
        q[3:end:_OPW] = zeros if offsets is None else _u64s(offsets, n, "offsets")
        q[4:end:_OPW] = _u64s(lens, n, "lens")
        q[5:end:_OPW] = zeros

    @staticmethod
    def _statuses(ints, n):
        return ints[_OPS : n * 12 : 12].tolist()

    def batch_put(self, keys, addrs, lens, *, depth0=None):
        """kvp_put of each key: the value is lens[k] bytes at addrs[k].
        depth0: the keys are consecutive pages of one prefix chain, the
        first at depth depth0 (kvp_batch_put_chain).  Returns a status per
        key (0, EXISTS, BUSY, NOSPC, TOO_LARGE, UNAVAILABLE, INVAL, ...)."""
        if depth0 is not None:
            depth0 = _uint(depth0, "depth0", 1 << 32)
        c = self._client()
        with c.lock:
            ops, n, q, ints = self._fill(c, keys, addrs, lens)
            if depth0 is None:
                rc = _lib.kvp_batch_put(c.h, ops, n)
            else:
                rc = _lib.kvp_batch_put_chain(c.h, ops, n, depth0)
            if rc < 0:
                self._check(c, rc)
            return self._statuses(ints, n)

    def batch_get(self, keys, addrs, lens, offsets=None):
        """Copy each key's value ([offsets[k], +lens[k]) clipped at its end;
        whole from 0 by default) to addrs[k].  Returns per key the bytes
        copied (>= 0) or a negative status (MISS, BUSY, FAILED, ...).
        SSD-resident keys are read in parts as the staging arena allows."""
        c = self._client()
        with c.lock:
            ops, n, q, ints = self._fill(c, keys, addrs, lens, offsets)
            rc = _lib.kvp_batch_get(c.h, ops, n)
            if rc < 0:
                self._check(c, rc)
            st = self._statuses(ints, n)
            got = q[4 : n * _OPW : _OPW].tolist()
        return [g if s == 0 else s for s, g in zip(st, got)]

    def batch_exists_prefix(self, keys):
        """How many of keys, from the start, are present.  Holds nothing,
        stages nothing: lookup_pin promises, this does not."""
        c = self._client()
        with c.lock:
            ops, n, _, _ = self._fill(c, keys)
            rc = _lib.kvp_batch_exists_prefix(c.h, ops, n)
        if rc < 0:
            self._check(c, rc)
        return rc

    def lookup_pin(self, keys):
        """The leading keys present, each held until the Pinset is released
        (a context manager): they are neither evicted nor freed meanwhile.
        The prefix may stop at a key that cannot be pinned now (BUSY: hold
        slots or the pinned-bytes cap): Pinset.stop_status says why."""
        c = self._client()
        out = ctypes.c_void_p()
        with c.lock:
            ops, n, _, ints = self._fill(c, keys)
            rc = _lib.kvp_batch_lookup_pin(c.h, ops, n, ctypes.byref(out))
            if rc < 0:
                self._check(c, rc)
            stop = ints[_OPS + rc * 12] if rc < n else OK
        ps = Pinset(self, c, out.value, rc, n, stop)
        c.pinsets.add(ps)
        return ps

    def lease(self, key, ttl_ms):
        """A timed pin (1 ms .. 1 hour) for a reader that cannot hold (a
        NIC, another node): it outlives this process.  Returns a Lease (a
        context manager; release() ends it early).  Raises Miss, Busy,
        InvalidArgument."""
        k = _key(key)
        ttl_ms = _uint(ttl_ms, "ttl_ms", 1 << 32)
        c = self._client()
        le = _native.Lease()
        with c.lock:
            rc = _lib.kvp_lease_acquire(c.h, k, len(k), ttl_ms, ctypes.byref(le))
        if rc:
            self._check(c, rc, key)
        return Lease(self, c, le)

    def stat(self):
        """The pool's sizes and occupancy, and this thread's client's calls,
        as a dict (struct kvp_stat's fields but size and padding)."""
        c = self._client()
        st = _native.Stat()
        with c.lock:
            rc = _lib.kvp_stat(c.h, ctypes.byref(st), ctypes.sizeof(st))
        if rc:
            self._check(c, rc)
        out = {f: getattr(st, f) for f, _ in st._fields_ if f not in ("size", "pad_")}
        out["agent_up"] = bool(out["agent_up"])
        return out

    def count(self, event, n=1):
        """Add n to this namespace's counter of event (one of NS_EVENTS) in
        the pool (kvp_ns_count): the agent's /metrics and kvpool stat show
        it as kvpool_namespace_events_total{namespace=...,event=...}, summed over every
        process of the namespace, kept while the pool lives.  Returns True,
        or False when the pool has no row left for this namespace (256
        namespaces counted already).  Raises InvalidArgument for an
        unknown event or a bad n, NotSupported with an older library."""
        try:
            e = NS_EVENTS.index(event)
        except ValueError:
            raise InvalidArgument(INVAL, None, f"unknown namespace event {event!r} (one of {NS_EVENTS})") from None
        n = _uint(n, "n")
        fn = getattr(_lib, "kvp_ns_count", None)
        if fn is None or fn.argtypes is None:
            raise NotSupported(NOTSUP, None, f"{_native.loaded_from} has no kvp_ns_count (libkvpool.so.1.5 or later)")
        c = self._client()
        with c.lock:
            rc = fn(c.h, e, n)
        if rc == NOSPC:
            return False
        if rc:
            self._check(c, rc)
        return True

    # -- GPU memory (kvpool.h, "GPU endpoints") --

    @staticmethod
    def _stream(stream):
        """A cudaStream_t as an address: None (the client's own stream),
        an int, or an object with .cuda_stream (torch.cuda.Stream)."""
        if stream is None:
            return None
        return _uint(getattr(stream, "cuda_stream", stream), "stream") or None

    @staticmethod
    def _dev_fn(name):
        fn = getattr(_lib, name, None)
        if fn is None or fn.argtypes is None:
            raise NotSupported(NOTSUP, None, f"{_native.loaded_from} has no {name} (libkvpool.so.1.3 or later)")
        return fn

    def batch_get_dev(self, keys, addrs, lens, *, device=0, stream=None, offsets=None):
        """kvp_batch_get_dev: copy each key's value (as batch_get) to device
        memory of CUDA device 'device' at addrs[k] (e.g. a tensor's
        data_ptr()), on stream (None: the client's own), and wait for the
        copies (the values stay held until they are done).  Returns per key
        the bytes copied or a negative status.  Raises NotSupported (no CUDA
        runtime), NoDevice (no device or driver)."""
        get = self._dev_fn("kvp_batch_get_dev")
        device, stream = _uint(device, "device", 1 << 31), self._stream(stream)
        c = self._client()
        out = ctypes.c_void_p()
        with c.lock:
            ops, n, q, ints = self._fill(c, keys, addrs, lens, offsets)
            rc = get(c.h, device, stream, ops, n, ctypes.byref(out))
            if rc < 0:
                self._check(c, rc)
            _lib.kvp_dev_wait(c.h, out)
            st = self._statuses(ints, n)
            got = q[4 : n * _OPW : _OPW].tolist()
        return [g if s == 0 else s for s, g in zip(st, got)]

    def batch_put_dev(self, keys, addrs, lens, *, device=0, stream=None):
        """kvp_batch_put_dev: store lens[k] bytes of device memory at
        addrs[k] under each key (published once the copy landed, after the
        work already queued on stream).  Returns a status per key."""
        put = self._dev_fn("kvp_batch_put_dev")
        device, stream = _uint(device, "device", 1 << 31), self._stream(stream)
        c = self._client()
        with c.lock:
            ops, n, q, ints = self._fill(c, keys, addrs, lens)
            rc = put(c.h, device, stream, ops, n)
            if rc < 0:
                self._check(c, rc)
            return self._statuses(ints, n)

    def dev_register(self, wait_ms=0):
        """Start registering the pool's DRAM for DMA in this process and wait
        up to wait_ms: True once all of it is registered, False while it
        goes on.  Raises NotSupported, NoDevice, Failed (chunks refused)."""
        reg = self._dev_fn("kvp_dev_register")
        wait_ms = _uint(wait_ms, "wait_ms", 1 << 32)
        c = self._client()
        with c.lock:
            rc = reg(c.h, wait_ms)
        if rc == _native.INPROGRESS:
            return False
        if rc:
            self._check(c, rc)
        return True

    def dev_info(self):
        """kvp_dev_info as a dict: the runtime (status, devices, versions),
        this process's registration (reg_bytes of reg_total_bytes) and this
        thread's client's device copies."""
        info = self._dev_fn("kvp_dev_info")
        c = self._client()
        st = _native.DevInfo()
        with c.lock:
            rc = info(c.h, ctypes.byref(st), ctypes.sizeof(st))
        if rc:
            self._check(c, rc)
        return {f: getattr(st, f) for f, _ in st._fields_ if f != "size"}


class Pinset:
    """Holds on the leading keys of a lookup_pin, until release()."""

    def __init__(self, pool, client, handle, count, asked, stop_status):
        self._pool = pool
        self._c = client
        self._h = handle
        self.count = count  # keys pinned
        self.asked = asked  # keys looked up
        self.stop_status = stop_status  # why the prefix ended: OK, MISS, BUSY, INVAL
        self._epoch = _fork_epoch

    def __len__(self):
        return self.count

    def _handle(self):
        if self._epoch != _fork_epoch:
            raise Forked(None, None, "a pinset made before fork()")
        if self._h is None or self._c.h is None:
            raise Closed(None, None, "the pinset was released")
        return self._h

    def _index(self, k):
        """k as the index of a pinned key (0 .. count-1)."""
        k = _uint(k, "a pinned key's index")
        if k >= self.count:
            raise InvalidArgument(INVAL, None, f"key {k} is not pinned ({self.count} pinned)")
        return k

    def length(self, k):
        """Value length of pinned key k."""
        k = self._index(k)
        with self._c.lock:
            return _lib.kvp_pinset_len(self._handle(), k)

    def lengths(self):
        with self._c.lock:
            h = self._handle()
            return [_lib.kvp_pinset_len(h, k) for k in range(self.count)]

    def tier(self, k):
        """TIER_DRAM or TIER_SSD: where pinned key k lives now."""
        k = self._index(k)
        with self._c.lock:
            rc = _lib.kvp_pinset_tier(self._c.h, self._handle(), k)
        if rc < 0:
            raise error(rc)
        return rc

    def get(self, addrs, lens, offsets=None):
        """Load pinned keys 0..len(addrs)-1 into addrs[k] (lens[k] bytes,
        from offsets[k]).  Never a MISS.  Returns per key the bytes copied
        or a negative status (FAILED, BUSY, TOO_LARGE, UNAVAILABLE)."""
        c = self._c
        n = len(addrs)
        if n > self.count:
            raise InvalidArgument(INVAL, None, f"{n} buffers for {self.count} pinned keys")
        with c.lock:
            h = self._handle()
            ops = c.scratch(max(n, 1), 1)
            q, end = c.mvq, n * _OPW
            zeros = array.array("Q", bytes(8 * n))
            q[0:end:_OPW] = zeros
            q[1:end:_OPW] = zeros
            q[2:end:_OPW] = _u64s(addrs, n, "addrs")
            q[3:end:_OPW] = zeros if offsets is None else _u64s(offsets, n, "offsets")
            q[4:end:_OPW] = _u64s(lens, n, "lens")
            q[5:end:_OPW] = zeros
            rc = _lib.kvp_pinset_get(c.h, h, ops, n)
            if rc < 0:
                raise error(rc)
            st = c.mvi[_OPS : n * 12 : 12].tolist()
            got = q[4:end:_OPW].tolist()
        return [g if s == 0 else s for s, g in zip(st, got)]

    def release(self):
        """Drop every hold and free the pinset (idempotent)."""
        if self._h is None or not self._c.ours():
            return
        with self._c.lock:
            if self._c.h is not None:
                self._free_locked(self._c.h)
            self._h = None

    def _free_locked(self, client_handle):
        h, self._h = self._h, None
        if h is not None:
            _lib.kvp_pinset_free(client_handle, h)
            self._c.pinsets.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


class Lease:
    """A timed pin: .length, .tier, .seg_offset (DRAM, one run: the value's
    offset in the segment, for RDMA registration)."""

    def __init__(self, pool, client, le):
        self._c = client
        self._le = le
        self._live = True
        self.length = le.len
        self.tier = le.tier
        self.seg_offset = le.seg_off

    def release(self):
        """End the lease now (idempotent; harmless after it expired)."""
        if not self._live or not self._c.ours():
            return
        self._live = False
        with self._c.lock:
            if self._c.h is not None:
                _lib.kvp_lease_release(self._c.h, ctypes.byref(self._le))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
