# SPDX-License-Identifier: MIT
"""Agents for the Python tests, as tests/agent/harness.c runs them: one
kvpoold per test (--foreground, killed with the test's process), its pool
named "$KVPT_RUN.py<pid>_<n>" under tests/run.sh (the run judges and
removes only its own segments) or "t<pid>_<n>" by hand, its log in
$KVPT_LOG_DIR/kvpt.<pool>.log.  No fixed sleeps: every wait polls a
condition with a deadline (wait_until)."""

import ctypes
import glob
import os
import signal
import subprocess
import tempfile
import time

import kvpool

_seq = 0
_PR_SET_PDEATHSIG = 1


def wait_until(cond, timeout_s=20.0, what="condition"):
    """Poll cond() every millisecond (backing off to 10 ms) until true;
    AssertionError after timeout_s."""
    t0 = time.monotonic()
    pause = 0.001
    while True:
        r = cond()
        if r:
            return r
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _pdeathsig():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def log_dir():
    d = os.environ.get("KVPT_LOG_DIR")
    if not d:
        d = os.path.join(tempfile.gettempdir(), f"kvpt-py-{os.getuid()}")
        os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def new_pool_name():
    global _seq
    _seq += 1
    tag = os.environ.get("KVPT_RUN", "")
    name = f"py{os.getpid()}_{_seq}" if tag else f"t{os.getpid()}_{_seq}"
    return f"{tag}.{name}" if tag else name


def remove_pool(name):
    for d in ["/dev/shm"] + [m for m in _hugetlbfs_mounts()]:
        try:
            os.unlink(os.path.join(d, f"kvpool.{name}"))
        except FileNotFoundError:
            pass


def _hugetlbfs_mounts():
    try:
        with open("/proc/self/mounts") as f:
            return [ln.split()[1] for ln in f if ln.split()[2] == "hugetlbfs"]
    except OSError:
        return []


class Agent:
    """kvpoold on a pool of its own: Agent("--dram", "64M")."""

    def __init__(self, *args, pool=None):
        self.pool = pool or new_pool_name()
        self.args = list(args)
        self.proc = None
        remove_pool(self.pool)
        self.start()

    @property
    def log(self):
        return os.path.join(log_dir(), f"kvpt.{self.pool}.log")

    def start(self, wait_populated=True):
        argv = [
            kvpool.agent_path(),
            "--foreground",
            "--pool",
            self.pool,
            "--reap-ms",
            "50",
            "--metrics-addr",
            "off",
            # on a host with a hugetlbfs mount that has room, "auto" puts
            # the segment there; the tests look for it in /dev/shm (the C
            # harness does the same); a test's own flags come after and win
            "--hugepages",
            "off",
        ] + self.args
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=logf, stdin=subprocess.DEVNULL, preexec_fn=_pdeathsig
        )
        logf.close()

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"kvpoold exited {self.proc.returncode}: see {self.log}")
            try:
                with kvpool.Pool(self.pool, namespace="kvpt-probe") as p:
                    st = p.stat()
            except (kvpool.Unavailable, kvpool.ProtocolMismatch):
                return False
            return st["agent_up"] and (not wait_populated or st["dram_bytes"] == st["dram_total_bytes"])

        wait_until(ready, 30.0, f"kvpoold {self.pool} ready")
        return self

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait()
        self.proc = None

    def stop(self):
        """SIGTERM (a clean stop) and the pool's segment removed; the exit
        status."""
        rc = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.proc.wait(timeout=60)
        self.proc = None
        remove_pool(self.pool)
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def ssd_dir(tag):
    """A fresh SSD directory under /var/tmp (O_DIRECT needs a real file
    system), named so tests/run.sh removes it if the test is killed."""
    d = tempfile.mkdtemp(prefix=f"kvpt-{tag}-{os.getpid()}-", dir="/var/tmp")
    os.chmod(d, 0o700)
    return d


def clients_of(pool):
    """`kvpool clients` of pool: the client slots in use, as the CLI sees
    them (the pids it lists)."""
    cli = os.path.join(os.path.dirname(kvpool.agent_path()), "kvpool")
    if not os.path.exists(cli):
        cli = "kvpool"
    out = subprocess.run([cli, "--pool", pool, "clients"], capture_output=True, text=True, timeout=30)
    return out.stdout


def stat_json(pool):
    """`kvpool stat --json` of pool, parsed."""
    import json

    cli = os.path.join(os.path.dirname(kvpool.agent_path()), "kvpool")
    if not os.path.exists(cli):
        cli = "kvpool"
    out = subprocess.run([cli, "--pool", pool, "stat", "--json"], capture_output=True, text=True, timeout=30)
    if out.returncode:
        raise RuntimeError(f"kvpool stat --json: {out.stderr.strip()}")
    return json.loads(out.stdout)


def leftover_segments():
    return glob.glob("/dev/shm/kvpool.*")
