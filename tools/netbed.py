#!/usr/bin/python3
"""A multi-host network test bed made of Linux network namespaces.

A bed is one coordinator namespace and N worker namespaces, each joined by a
veth pair to a bridge that lives in a namespace of its own; nothing is
created in, or changed in, the host's root namespace (every `ip` and `tc`
call names its namespace with -n). The nodes share a private /24
(10.231.X.0/24; the coordinator is .1, worker i is .(10 + i)), and loopback
is up in every namespace. Every link can be shaped with htb in both
directions: egress of the node-side veth (eth0) shapes the node's upload,
egress of the bridge-side veth shapes its download. The kernel here has htb
but neither netem nor tbf, so a bed shapes bandwidth only: it adds no delay,
jitter or loss.

Names are unique per bed: netbed-<pid>-<n>-{c,w1..wN,br}, and X is chosen
from the pid, away from the X of every live bed (the beds are isolated from
each other anyway). The namespaces of a bed are removed when it is closed,
whatever the way: a `with Bed(...)` block ends (exception included), SIGINT,
SIGTERM or SIGHUP arrives (the handlers this module installs raise
SystemExit so that the block unwinds), or the interpreter exits (atexit).
Processes started in the bed (Bed.popen) are stopped and reaped first, and
so is anything else still running inside its namespaces. Only a SIGKILL of
the owner can leave a bed behind: `netbed.py clean` removes every bed whose
owner is gone (an owner holds a flock on /run/netbed/<prefix>.lock for the
life of its bed), `clean --all` every bed.

Library:
    with Bed(workers=3, rate="1gbit") as bed:
        bed.popen(bed.coord_ns, [...])  # runs `ip netns exec NS ...`
        run_job(bed, bin_dir, job_path)
    Bed(workers=3, loopback=True) is the same interface on 127.0.0.1 with no
    namespaces (the reference a bed run is compared with).

CLI (as root; Python 3 standard library only):
    netbed.py run --workers 3 --rate 1gbit --bin-dir build/bin JOB.json [--out result.json]
    netbed.py run --loopback --workers 3 --bin-dir build/bin JOB.json
    netbed.py rate --rate none|1gbit [--seconds 4] [--streams 1]
    netbed.py clean [--all]
    netbed.py probe          # exit 0 if beds can be built here, 77 (with the reason) if not
"""
import argparse
import atexit
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PREFIX = "netbed-"
LOCK_DIR = "/run/netbed"
SUBNET_BASE = "10.231"
SKIP = 77

_live_beds = []
_seq = 0
_handlers_installed = False


class BedError(RuntimeError):
    pass


def _ip(*args, check=True, timeout=30):
    r = subprocess.run(["ip", *args], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise BedError(f"ip {' '.join(args)}: {r.stderr.strip() or r.returncode}")
    return r


def _tc(*args, check=True):
    r = subprocess.run(["tc", *args], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=30)
    if check and r.returncode != 0:
        raise BedError(f"tc {' '.join(args)}: {r.stderr.strip() or r.returncode}")
    return r


def _die_with_parent():
    # PR_SET_PDEATHSIG survives the exec of `ip netns exec` and of the program
    # it execs: a child is killed even if its owner is SIGKILLed.
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


def _signal_exit(signum, _frame):
    # Unwind through every `with Bed` (and finally blocks); atexit is the
    # backstop. A second signal while unwinding is ignored: teardown blocks it.
    raise SystemExit(128 + signum)


def install_signal_handlers():
    """SIGINT, SIGTERM, SIGHUP end the program through SystemExit, so every
    bed's teardown runs. Called by Bed(); main thread only."""
    global _handlers_installed
    if _handlers_installed or threading.current_thread() is not threading.main_thread():
        return
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(s) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(s, _signal_exit)
    atexit.register(_close_all)
    _handlers_installed = True


def _close_all():
    for bed in list(_live_beds):
        bed.close()


def _pids_in_ns(ns):
    r = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split() if p.isdigit()] if r.returncode == 0 else []


def _proc_start(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _kill_ns_processes(namespaces, grace=5.0):
    """SIGTERM every process in the namespaces, SIGKILL what is left after
    grace seconds. Returns the (pid, start time) pairs that were found."""
    seen = set()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        pids = [p for ns in namespaces for p in _pids_in_ns(ns)]
        if not pids:
            break
        for p in pids:
            seen.add((p, _proc_start(p)))
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait
        while time.monotonic() < end and any(_pids_in_ns(ns) for ns in namespaces):
            time.sleep(0.05)
    return seen


def list_namespaces():
    r = _ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _bed_prefix(ns):
    m = re.match(r"^(netbed-\d+-\d+)-(c|br|w\d+)$", ns)
    return m.group(1) if m else None


def _used_octets():
    used = set()
    try:
        names = os.listdir(LOCK_DIR)
    except FileNotFoundError:
        return used
    for name in names:
        try:
            with open(os.path.join(LOCK_DIR, name), encoding="ascii") as f:
                used.add(int(f.read().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    return used


def _lock_is_free(prefix):
    """True if no live process holds this bed's lock (its owner is gone)."""
    path = os.path.join(LOCK_DIR, prefix + ".lock")
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def clean(all_beds=False, quiet=False):
    """Remove the namespaces of stale beds (owner gone), or of every bed."""
    groups = {}
    for ns in list_namespaces():
        p = _bed_prefix(ns)
        if p:
            groups.setdefault(p, []).append(ns)
    removed = []
    for prefix, namespaces in sorted(groups.items()):
        if not all_beds and not _lock_is_free(prefix):
            if not quiet:
                print(f"netbed: {prefix} is in use (its owner is alive); kept", file=sys.stderr)
            continue
        _kill_ns_processes(namespaces, grace=2.0)
        for ns in namespaces:
            _ip("netns", "del", ns, check=False)
        try:
            os.unlink(os.path.join(LOCK_DIR, prefix + ".lock"))
        except FileNotFoundError:
            pass
        removed.append(prefix)
        if not quiet:
            print(f"netbed: removed {prefix} ({len(namespaces)} namespaces)", file=sys.stderr)
    # Lock files of beds whose namespaces are already gone.
    try:
        for name in os.listdir(LOCK_DIR):
            prefix = name[:-len(".lock")]
            if name.endswith(".lock") and prefix not in groups and _lock_is_free(prefix):
                os.unlink(os.path.join(LOCK_DIR, name))
    except FileNotFoundError:
        pass
    return removed


def probe():
    """None if beds can be built here, else why not (for a skip message)."""
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            return f"`{tool}` (iproute2) is not installed"
    try:
        with Bed(workers=1, rate="10mbit", install_handlers=False) as bed:
            bed.remove_tmp()
    except (BedError, OSError, subprocess.SubprocessError) as e:
        return f"a network namespace bed cannot be built here: {e}"
    return None


def _rate_arg(rate):
    if rate in (None, "", "none", "0"):
        return None
    if not re.fullmatch(r"\d+(\.\d+)?([kmgt]?bit|[kmgt]?bps)", rate):
        raise ValueError(f"rate {rate!r}: expected e.g. 100mbit, 1gbit, 10gbit or none")
    return rate


def _rate_bits(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)", rate)
    value = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return value * (8 if m.group(3) == "bps" else 1)


class Bed:
    """One coordinator namespace, `workers` worker namespaces, a bridge namespace.

    coord_ns, worker_ns[i]: namespace names (None in loopback mode);
    coord_addr, worker_addr[i]: their bed addresses. rate: htb rate of every
    link in both directions (e.g. "1gbit"), or None for unshaped links.
    """

    def __init__(self, workers=3, rate=None, loopback=False, install_handlers=True):
        global _seq
        self.workers = workers
        self.rate = _rate_arg(rate)
        self.loopback = loopback
        self.namespaces = []      # created (or being created), in creation order
        self.procs = []           # (name, Popen)
        self.seen_pids = set()    # (pid, start time) of everything stopped at teardown
        self.closed = False
        self._lock_fd = None
        self.tmp = tempfile.mkdtemp(prefix="netbed.")
        _seq += 1
        self.prefix = f"{PREFIX}{os.getpid()}-{_seq}"
        if install_handlers:
            install_signal_handlers()
        _live_beds.append(self)
        if loopback:
            self.octet = None
            self.bridge_ns = self.coord_ns = None
            self.worker_ns = [None] * workers
            self.coord_addr = "127.0.0.1"
            self.worker_addr = ["127.0.0.1"] * workers
            return
        self.bridge_ns = self.prefix + "-br"
        self.coord_ns = self.prefix + "-c"
        self.worker_ns = [f"{self.prefix}-w{i + 1}" for i in range(workers)]
        try:
            self._lock()
            self.coord_addr = self._addr(1)
            self.worker_addr = [self._addr(11 + i) for i in range(workers)]
            self._build()
        except BaseException:
            self.close()
            self.remove_tmp()
            raise

    def _addr(self, host):
        return f"{SUBNET_BASE}.{self.octet}.{host}"

    def _lock(self):
        os.makedirs(LOCK_DIR, exist_ok=True)
        used = _used_octets()
        start = os.getpid() * 7 + _seq
        self.octet = next((1 + (start + k) % 254 for k in range(254)
                           if 1 + (start + k) % 254 not in used), 1 + start % 254)
        self._lock_fd = os.open(os.path.join(LOCK_DIR, self.prefix + ".lock"),
                                os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        os.write(self._lock_fd, f"{self.octet} {os.getpid()}\n".encode())

    def _add_ns(self, ns):
        self.namespaces.append(ns)  # before creating: a failure half-way is still removed
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _shape(self, ns, dev):
        if not self.rate:
            return
        # One htb class that every packet falls into (default 1). The burst is
        # what the rate sends in ~1 ms, at least the 64 KiB of a GSO packet
        # (at 1gbit htb's own default, 1375 bytes, measured 0.915 Gbit/s here
        # against 0.923 with this one).
        burst = max(65536, int(_rate_bits(self.rate) / 8 / 1000))
        _tc("-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
        _tc("-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
            "rate", self.rate, "ceil", self.rate, "burst", str(burst), "cburst", str(burst))

    def _build(self):
        self._add_ns(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        nodes = [("c", self.coord_ns, self.coord_addr)]
        nodes += [(f"w{i + 1}", ns, a)
                  for i, (ns, a) in enumerate(zip(self.worker_ns, self.worker_addr))]
        for short, ns, addr in nodes:
            self._add_ns(ns)
            port = "v" + short  # the bridge-side end, in the bridge namespace
            _ip("-n", self.bridge_ns, "link", "add", port, "type", "veth",
                "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.bridge_ns, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            self._shape(ns, "eth0")                # upload of the node
            self._shape(self.bridge_ns, port)      # download of the node

    # ---- processes -------------------------------------------------------
    def command(self, ns, argv):
        return list(argv) if ns is None else ["ip", "netns", "exec", ns, *argv]

    def popen(self, ns, argv, name, cwd=None):
        """Start argv inside ns (None: here), output to <tmp>/<name>.log; it is
        stopped and reaped at teardown."""
        if self.closed:
            raise BedError("the bed is closed")
        with open(os.path.join(self.tmp, name + ".log"), "wb") as log:
            p = subprocess.Popen(self.command(ns, argv), stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
                                 preexec_fn=_die_with_parent)
        self.procs.append((name, p))
        return p

    def run(self, ns, argv, timeout=30, check=True):
        """Run argv inside ns to completion; its CompletedProcess (text)."""
        r = subprocess.run(self.command(ns, argv), stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=timeout, preexec_fn=_die_with_parent)
        if check and r.returncode != 0:
            raise BedError(f"{' '.join(argv)} (in {ns or 'the host'}) exited {r.returncode}: "
                           f"{(r.stderr or r.stdout).strip()[-2000:]}")
        return r

    def log(self, name, tail=4000):
        try:
            with open(os.path.join(self.tmp, name + ".log"), encoding="utf-8",
                      errors="replace") as f:
                return f.read()[-tail:]
        except FileNotFoundError:
            return ""

    def logs(self):
        return "\n".join(f"---- {n}:\n{self.log(n)}" for n, _ in self.procs)

    def link_counters(self):
        """Bytes and packets each htb class sent: {node: {"upload": ..., "download": ...}}."""
        out = {}
        if self.loopback or not self.rate:
            return out
        nodes = [("c", self.coord_ns)] + [(f"w{i + 1}", ns) for i, ns in enumerate(self.worker_ns)]
        for short, ns in nodes:
            entry = {}
            for way, n, dev in (("upload", ns, "eth0"), ("download", self.bridge_ns, "v" + short)):
                r = _tc("-s", "-n", n, "class", "show", "dev", dev, check=False)
                m = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)",
                              r.stdout)
                if m:
                    entry[way] = {"bytes": int(m.group(1)), "packets": int(m.group(2)),
                                  "dropped": int(m.group(3)), "overlimits": int(m.group(4))}
            out[short] = entry
        return out

    # ---- teardown --------------------------------------------------------
    def stop_processes(self, grace=8.0):
        for _, p in self.procs:
            if p.poll() is None:
                self.seen_pids.add((p.pid, _proc_start(p.pid)))
                try:
                    p.terminate()
                except ProcessLookupError:
                    pass
        end = time.monotonic() + grace
        for _, p in self.procs:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def close(self):
        """Stop every process, remove every namespace. Idempotent; SIGINT,
        SIGTERM and SIGHUP are held off until it is done."""
        if self.closed:
            return
        blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            self.closed = True
            self.stop_processes()
            if self.namespaces:
                # Anything else running in the bed (children of children).
                self.seen_pids |= _kill_ns_processes(self.namespaces, grace=3.0)
            for ns in reversed(self.namespaces):
                for _ in range(3):
                    r = _ip("netns", "del", ns, check=False)
                    if r.returncode == 0 or ns not in list_namespaces():
                        break
                    time.sleep(0.2)
            if self._lock_fd is not None:
                try:
                    os.unlink(os.path.join(LOCK_DIR, self.prefix + ".lock"))
                except FileNotFoundError:
                    pass
                os.close(self._lock_fd)
                self._lock_fd = None
            if self in _live_beds:
                _live_beds.remove(self)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def leftovers(self):
        """After close(): namespaces of this bed that still exist, and processes
        it stopped that are still alive (same pid and start time)."""
        ns_left = [ns for ns in list_namespaces() if ns.startswith(self.prefix + "-")]
        procs_left = [pid for pid, start in self.seen_pids
                      if start is not None and _proc_start(pid) == start]
        procs_left += [p.pid for _, p in self.procs if p.returncode is None]
        return ns_left, sorted(set(procs_left))

    def remove_tmp(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# ---- a cluster and a job on a bed -----------------------------------------
def _wait_file(path, proc, what, bed, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise BedError(f"{what} exited {proc.returncode}:\n{bed.logs()}")
        try:
            with open(path, encoding="ascii") as f:
                text = f.read()
            if text.endswith("\n"):
                return int(text)
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.02)
    raise BedError(f"{what} wrote no {os.path.basename(path)} in {timeout} s:\n{bed.logs()}")


class Cluster:
    """A tagi-coordinator in bed.coord_ns and a tagi-worker in each worker
    namespace, each worker serving metrics on its bed address and binding
    and advertising for the collective the address it finds towards the
    coordinator (no --host: what a user gets by default; the test checks it
    is the bed address)."""

    def __init__(self, bed, bin_dir, threads=1, worker_flags=()):
        self.bed = bed
        self.bin_dir = os.path.abspath(bin_dir)
        world = bed.workers
        port_file = os.path.join(bed.tmp, "coordinator.port")
        coord = bed.popen(bed.coord_ns, [
            self._bin("tagi-coordinator"), "--world", str(world),
            "--listen", f"{bed.coord_addr}:0", "--port-file", port_file,
            "--state-dir", os.path.join(bed.tmp, "state"),
            # Plaintext off loopback is refused without --insecure; a bed's
            # links exist only inside its namespaces.
            *([] if bed.loopback else ["--insecure"])], "coordinator")
        self.port = _wait_file(port_file, coord, "tagi-coordinator", bed)
        self.address = f"{bed.coord_addr}:{self.port}"
        self.metrics_ports = []
        for i in range(world):
            mfile = os.path.join(bed.tmp, f"worker{i + 1}.metrics-port")
            w = bed.popen(bed.worker_ns[i], [
                self._bin("tagi-worker"), "--coord", self.address,
                "--threads", str(threads),
                "--metrics", f"{bed.worker_addr[i]}:0", "--metrics-port-file", mfile,
                "--connect-timeout", "20s", "--collective-timeout", "30s", *worker_flags],
                f"worker{i + 1}")
            self.metrics_ports.append(_wait_file(mfile, w, f"tagi-worker {i + 1}", bed))

    def _bin(self, name):
        path = os.path.join(self.bin_dir, name)
        if not os.access(path, os.X_OK):
            raise BedError(f"{path} is not an executable (--bin-dir)")
        return path

    def ctl(self, *args, timeout=30, check=True):
        return self.bed.run(self.bed.coord_ns, [self._bin("tagictl"), "--coord", self.address,
                                                *args], timeout=timeout, check=check)

    def wait_workers(self, timeout=20):
        """Until every worker is registered and idle; the `tagictl workers` rows."""
        end = time.monotonic() + timeout
        rows = []
        while time.monotonic() < end:
            out = self.ctl("workers").stdout
            rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
            if sum(1 for r in rows if len(r) > 1 and r[1] == "IDLE") >= self.bed.workers:
                return rows
            time.sleep(0.1)
        raise BedError(f"{self.bed.workers} workers did not register in {timeout} s: {rows}\n"
                       f"{self.bed.logs()}")

    def scrape(self, i):
        """Worker i's Prometheus metrics (text), fetched from the coordinator's
        namespace, i.e. across the bed."""
        url = f"http://{self.bed.worker_addr[i]}:{self.metrics_ports[i]}/metrics"
        code = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
                "sys.argv[1], timeout=10).read().decode())")
        return self.bed.run(self.bed.coord_ns, [sys.executable, "-c", code, url]).stdout


def _metric_sums(text, job_id):
    """{(name, rank): value} of this job's per-rank worker metrics."""
    out = {}
    pat = re.compile(r'^(tagi_worker_\w+)\{([^}]*)\}\s+(\S+)$')
    for line in text.splitlines():
        m = pat.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("job") != job_id:
            continue
        out[(m.group(1), labels.get("rank"), labels.get("worker"))] = float(m.group(3))
    return out


TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def submit_and_wait(cluster, job_path, deadline_s, on_record=None):
    """Submit job_path and poll its record until it ends, or cancel it at
    the deadline; on_record(job_id, record) sees every record polled. Returns
    (job_id, last record, timed_out, wall seconds)."""
    started = time.monotonic()
    job_id = cluster.ctl("submit", os.path.abspath(job_path)).stdout.strip()
    record, timed_out = {}, False
    while True:
        r = cluster.ctl("status", job_id, "--json", check=False)
        if r.returncode == 0:
            record = json.loads(r.stdout)
            if record.get("state") in TERMINAL:
                break
            if on_record is not None:
                on_record(job_id, record)
        if time.monotonic() - started > deadline_s:
            timed_out = True
            cluster.ctl("cancel", job_id, check=False)
            break
        time.sleep(0.1)
    return job_id, record, timed_out, time.monotonic() - started


def run_job(cluster, job_path, deadline_s=120):
    """Submit job_path, wait for it (cancel it at the deadline), return a
    result dict: state, parameter checksum, accuracy, timings."""
    bed = cluster.bed
    cluster.wait_workers()
    job_id, record, timed_out, wall = submit_and_wait(cluster, job_path, deadline_s)
    progress = record.get("progress", {})
    epochs = progress.get("epochs", [])
    last = epochs[-1] if epochs else {}
    workers = cluster.ctl("workers", check=False).stdout
    per_rank = []
    for i in range(bed.workers):
        try:
            sums = _metric_sums(cluster.scrape(i), job_id)
        except (BedError, subprocess.SubprocessError):
            continue
        for (name, rank, worker), value in sums.items():
            if name != "tagi_worker_steps_total":
                continue
            def get(metric):
                return sums.get((metric, rank, worker), 0.0)
            steps = value or 1.0
            per_rank.append({
                "rank": int(rank), "worker": worker, "address": bed.worker_addr[i],
                "steps": int(value),
                "compute_seconds_per_step": get("tagi_worker_step_compute_seconds_sum") / steps,
                "allreduce_seconds_per_step":
                    get("tagi_worker_step_allreduce_seconds_sum") / steps,
                "allreduce_bytes_per_step": get("tagi_worker_allreduce_bytes_total") / steps,
            })
    per_rank.sort(key=lambda r: r["rank"])
    first, end = int(progress.get("firstStepMs", 0)), int(record.get("endTimeMs", 0))
    return {
        "job_id": job_id,
        "state": "TIMEOUT" if timed_out else record.get("state", "UNKNOWN"),
        "reason": record.get("reason", ""),
        "parameter_checksum": record.get("modelChecksum", ""),
        "test_accuracy": last.get("testAccuracy"),
        "test_rmse": last.get("testRmse"),
        "epochs": epochs,
        "wall_seconds": wall,
        "train_seconds": (end - first) / 1000.0 if first and end else None,
        "timings": {
            "samples_per_second": progress.get("samplesPerSecond"),
            "last_step_seconds": progress.get("stepSeconds"),
            "last_allreduce_seconds": progress.get("allreduceSeconds"),
            "allreduce_bytes_per_step": int(progress.get("allreduceBytes", 0)),
            "rendezvous_seconds": progress.get("rendezvousSeconds"),
            "data_seconds": progress.get("dataSeconds"),
            "group_seconds": progress.get("groupSeconds"),
            "model_seconds": progress.get("modelSeconds"),
        },
        "per_rank": per_rank,
        "workers_table": workers,
        "bed": describe(bed),
        "links": bed.link_counters(),
    }


def describe(bed):
    return {"loopback": bed.loopback, "workers": bed.workers, "rate": bed.rate,
            "prefix": None if bed.loopback else bed.prefix,
            "coordinator": bed.coord_addr, "worker_addresses": bed.worker_addr}


# ---- throughput ------------------------------------------------------------
def _sink(bind, port_file, streams):
    """Accept `streams` connections, count what arrives until every one ends;
    print JSON: bytes, seconds, and samples (t, total bytes) every 0.1 s."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, 0))
    srv.listen(streams)
    with open(port_file + ".tmp", "w", encoding="ascii") as f:
        f.write(f"{srv.getsockname()[1]}\n")
    os.rename(port_file + ".tmp", port_file)
    total = [0]
    lock = threading.Lock()
    t0 = [None]

    def drain(conn):
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while True:
            n = conn.recv_into(view)
            if not n:
                break
            with lock:
                if t0[0] is None:
                    t0[0] = time.monotonic()
                total[0] += n
        conn.close()

    threads = []
    for _ in range(streams):
        conn, _ = srv.accept()
        t = threading.Thread(target=drain, args=(conn,))
        t.start()
        threads.append(t)
    samples = []
    while any(t.is_alive() for t in threads):
        time.sleep(0.1)
        with lock:
            if t0[0] is not None:
                samples.append((time.monotonic() - t0[0], total[0]))
    for t in threads:
        t.join()
    print(json.dumps({"bytes": total[0], "samples": samples}))


def _source(to, port, seconds, streams):
    payload = memoryview(b"\0" * (1 << 20))
    end = time.monotonic() + seconds

    def pump():
        s = socket.create_connection((to, port), timeout=10)
        while time.monotonic() < end:
            s.sendall(payload)
        s.close()

    threads = [threading.Thread(target=pump) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def measure_rate(bed, seconds=4.0, streams=1, src=1, dst=0):
    """TCP throughput from worker src to worker dst across the bridge, in
    bit/s: the rate after the first 0.5 s (`steady`), and over the whole run."""
    me = os.path.abspath(__file__)
    port_file = os.path.join(bed.tmp, f"sink-{time.monotonic_ns()}.port")
    sink = subprocess.Popen(
        bed.command(bed.worker_ns[dst], [sys.executable, me, "_sink", "--bind",
                                         bed.worker_addr[dst], "--port-file", port_file,
                                         "--streams", str(streams)]),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_die_with_parent)
    bed.procs.append(("sink", sink))
    port = _wait_file(port_file, sink, "the sink", bed)
    bed.run(bed.worker_ns[src], [sys.executable, me, "_source", "--to", bed.worker_addr[dst],
                                 "--port", str(port), "--seconds", str(seconds),
                                 "--streams", str(streams)], timeout=seconds + 30)
    out, err = sink.communicate(timeout=30)
    if sink.returncode != 0:
        raise BedError(f"the sink failed: {err}")
    data = json.loads(out)
    samples = data["samples"]
    whole = data["bytes"] * 8 / samples[-1][0] if samples and samples[-1][0] > 0 else 0.0
    steady = whole
    after = [s for s in samples if s[0] >= 0.5]
    if len(after) >= 2 and after[-1][0] > after[0][0]:
        steady = (after[-1][1] - after[0][1]) * 8 / (after[-1][0] - after[0][0])
    return {"from": bed.worker_addr[src], "to": bed.worker_addr[dst], "streams": streams,
            "seconds": seconds, "bytes": data["bytes"], "bits_per_second": steady,
            "bits_per_second_whole_run": whole}


# ---- CLI -------------------------------------------------------------------
def _cmd_run(a):
    if not a.loopback:
        why = None if os.geteuid() == 0 else "not root"
        if why:
            print(f"netbed: {why}: network namespaces need root", file=sys.stderr)
            return SKIP
    keep = False
    with Bed(workers=a.workers, rate=a.rate, loopback=a.loopback) as bed:
        print(f"netbed: {'loopback' if a.loopback else bed.prefix}: coordinator "
              f"{bed.coord_addr}, workers {', '.join(bed.worker_addr)}, rate "
              f"{bed.rate or 'unshaped'} (logs in {bed.tmp})", file=sys.stderr)
        try:
            cluster = Cluster(bed, a.bin_dir, threads=a.threads)
            result = run_job(cluster, a.job, deadline_s=a.deadline)
        except BaseException:
            keep = True
            print(f"netbed: failed; the logs are kept in {bed.tmp}", file=sys.stderr)
            raise
        text = json.dumps(result, indent=1)
        if a.out:
            with open(a.out, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        print(text)
        ok = result["state"] == "SUCCEEDED"
        if not ok:
            keep = True
            print(f"netbed: the job ended {result['state']}: {result['reason']}; logs in "
                  f"{bed.tmp}\n{bed.logs()}", file=sys.stderr)
    if not keep:
        bed.remove_tmp()
    return 0 if ok else 1


def _cmd_rate(a):
    if os.geteuid() != 0:
        print("netbed: not root: network namespaces need root", file=sys.stderr)
        return SKIP
    with Bed(workers=2, rate=a.rate) as bed:
        result = measure_rate(bed, seconds=a.seconds, streams=a.streams)
        result["rate"] = bed.rate or "none"
        print(json.dumps(result))
        print(f"netbed: {result['bits_per_second'] / 1e9:.3f} Gbit/s from "
              f"{result['from']} to {result['to']} (shaped at {bed.rate or 'none'})",
              file=sys.stderr)
    bed.remove_tmp()
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train a job on a coordinator and N workers in a bed")
    r.add_argument("job")
    r.add_argument("--workers", type=int, default=3)
    r.add_argument("--rate", default="none", help="htb rate of every link, each way: "
                   "e.g. 100mbit, 1gbit; none: unshaped")
    r.add_argument("--bin-dir", default="build/bin")
    r.add_argument("--threads", type=int, default=1, help="BLAS threads per worker")
    r.add_argument("--deadline", type=float, default=300, help="seconds; then cancel")
    r.add_argument("--loopback", action="store_true",
                   help="no namespaces: everything on 127.0.0.1 (the reference)")
    r.add_argument("--out", help="also write the result JSON here")
    t = sub.add_parser("rate", help="TCP throughput between two worker namespaces")
    t.add_argument("--rate", default="none")
    t.add_argument("--seconds", type=float, default=4.0)
    t.add_argument("--streams", type=int, default=1)
    c = sub.add_parser("clean", help="remove stale beds (their owner is gone)")
    c.add_argument("--all", action="store_true", help="every bed, live ones too")
    sub.add_parser("probe", help="exit 0 if a bed can be built here, else 77 and why")
    s = sub.add_parser("_sink")
    s.add_argument("--bind", required=True)
    s.add_argument("--port-file", required=True)
    s.add_argument("--streams", type=int, default=1)
    o = sub.add_parser("_source")
    o.add_argument("--to", required=True)
    o.add_argument("--port", type=int, required=True)
    o.add_argument("--seconds", type=float, required=True)
    o.add_argument("--streams", type=int, default=1)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        return _cmd_run(a)
    if a.cmd == "rate":
        return _cmd_rate(a)
    if a.cmd == "clean":
        if os.geteuid() != 0:
            print("netbed: clean needs root", file=sys.stderr)
            return 1
        clean(all_beds=a.all)
        return 0
    if a.cmd == "probe":
        why = probe()
        if why:
            print(f"netbed: {why}", file=sys.stderr)
            return SKIP
        print("netbed: network namespace beds work here", file=sys.stderr)
        return 0
    if a.cmd == "_sink":
        _sink(a.bind, a.port_file, a.streams)
        return 0
    if a.cmd == "_source":
        _source(a.to, a.port, a.seconds, a.streams)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
