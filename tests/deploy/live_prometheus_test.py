#!/usr/bin/env python3
"""Live test of the metrics against the shipped dashboards.

Starts, on loopback with ports chosen by the OS: a real tagi-coordinator
(--http), two real tagi-workers (--metrics) and Debian's prometheus, scraping
them every second with the label handling of deploy/prometheus/prometheus.yml
(honor_labels). Submits a small data-parallel job on generated IDX data,
waits until Prometheus reaches every target, then evaluates every PromQL
expression of every panel (and every template-variable query) of every
dashboard in deploy/grafana/dashboards through /api/v1/query, with the
template variables set to "All". Fails on any expression that returns no
series. Every process it starts is stopped when it ends, also on failure
(and, through PR_SET_PDEATHSIG, if the test itself is killed).
Exit 77 (skipped) when prometheus is not installed.
"""
import argparse
import ctypes
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SKIP = 77
DEADLINE_S = 90  # for the whole test; it takes about 20-30 s


class Failure(Exception):
    pass


def die_with_parent():
    # Runs in the child before exec: SIGTERM when this test process dies.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Processes:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []
        self.killed = set()  # names the test killed on purpose

    def start(self, name, argv):
        log = open(os.path.join(self.tmp, name + ".log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self.procs.append((name, p))
        return p

    def log(self, name, tail=3000):
        try:
            with open(os.path.join(self.tmp, name + ".log"), "rb") as f:
                text = f.read().decode(errors="replace")
                return text[-tail:] if tail else text
        except OSError:
            return ""

    def check_alive(self):
        for name, p in self.procs:
            if name not in self.killed and p.poll() is not None:
                raise Failure(f"{name} exited with {p.returncode}:\n{self.log(name)}")

    def stop_all(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        end = time.monotonic() + 10
        for name, p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"{name} did not stop on SIGTERM; killing it")
                p.kill()
                p.wait()


def wait_for(what, predicate, timeout, procs, interval=0.1):
    end = time.monotonic() + timeout
    while True:
        procs.check_alive()
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise Failure(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def read_port(path):
    try:
        with open(path) as f:
            text = f.read().strip()
        return int(text) if text else 0
    except (OSError, ValueError):
        return 0


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_idx(path, magic_dims, payload):
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 0x08, len(magic_dims)))
        for d in magic_dims:
            f.write(struct.pack(">I", d))
        f.write(payload)


def make_data(tmp, n_train=2000, n_test=500):
    """IDX images whose class is written as a bright stripe, with noise."""
    rng = random.Random(7)
    paths = {}
    for split, n in (("train", n_train), ("test", n_test)):
        labels = bytes(rng.randrange(10) for _ in range(n))
        images = bytearray()
        for label in labels:
            img = bytearray(rng.randrange(64) for _ in range(784))
            for col in range(28):
                img[(2 + 2 * label) * 28 + col] = 255
            images += img
        paths[split + "Images"] = os.path.join(tmp, f"{split}-images.idx")
        paths[split + "Labels"] = os.path.join(tmp, f"{split}-labels.idx")
        write_idx(paths[split + "Images"], (n, 28, 28), bytes(images))
        write_idx(paths[split + "Labels"], (n,), labels)
    return paths


def job_spec(data):
    return {
        "name": "metrics-live",
        "layers": [{"kind": "LINEAR", "inFeatures": 784, "outFeatures": 32}, {"kind": "RELU"},
                   {"kind": "LINEAR", "inFeatures": 32, "outFeatures": 11}],
        "head": {"classification": {"numClasses": 10}},
        "data": dict({"kind": "MNIST"}, **data),
        "noise": {"sigmaV": 1.0},
        # Long enough to be running while Prometheus scrapes; the test stops
        # it. Finished would do too: the series of the last job stay.
        "batchSize": 16, "epochs": 500, "seed": 1, "reduction": "SUM", "worldSize": 2,
        "snapshotInterval": 20, "device": "cpu",
    }


def http_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def substitute(expr):
    values = {"job": ".*", "rank": ".*", "__rate_interval": "30s", "__interval": "5s",
              "__range": "5m"}
    return re.sub(r"\$\{?(__rate_interval|__interval|__range|job|rank)\}?",
                  lambda m: values[m.group(1)], expr)


def dashboard_queries(src):
    """(dashboard, what, expr, label) for every panel query and variable."""
    out = []
    for path in sorted(glob.glob(os.path.join(src, "deploy/grafana/dashboards/*.json"))):
        d = json.load(open(path))
        name = os.path.basename(path)
        panels = []
        for p in d.get("panels", []):
            panels.append(p)
            panels.extend(p.get("panels", []))
        for p in panels:
            for t in p.get("targets", []):
                out.append((name, f"panel '{p.get('title')}' {t.get('refId')}",
                            substitute(t["expr"]), None))
        for v in d.get("templating", {}).get("list", []):
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else (q or "")
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q, re.S)
            if m:
                out.append((name, f"variable ${v['name']}", substitute(m.group(1)), m.group(2)))
    return out


def query(prom, expr):
    url = f"http://127.0.0.1:{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = http_json(url)
    except urllib.error.HTTPError as e:
        return None, e.read().decode(errors="replace")
    if body.get("status") != "success":
        return None, json.dumps(body)
    return body["data"]["result"], None


def job_status(bindir, grpc, job_id="job-1"):
    r = subprocess.run([f"{bindir}/tagictl", "--coord", f"127.0.0.1:{grpc}", "status", job_id,
                        "--json"], capture_output=True, text=True, timeout=30)
    return json.loads(r.stdout) if r.returncode == 0 else None


def kill_a_rank_and_wait_for_recovery(bindir, grpc, procs):
    """SIGKILLs the worker of rank 1 so that the recovery panels have data."""
    job = wait_for("the job to run", lambda: (lambda j: j if j and j.get("state") == "RUNNING"
                                              and j.get("workers") else None)(
        job_status(bindir, grpc)), 30, procs)
    victim = job["workers"][1]
    for name, p in procs.procs:
        if name.startswith("worker") and f" as {victim}\n" in procs.log(name, tail=None):
            procs.killed.add(name)
            p.kill()
            p.wait()
            break
    else:
        raise Failure(f"no worker process logged that it is {victim}")
    def recovered():
        j = job_status(bindir, grpc)
        recs = (j or {}).get("recoveries", [])
        return recs and int(recs[-1].get("firstStepMs", "0")) > 0
    wait_for("the job to resume on the spare", recovered, 30, procs, interval=0.2)
    print(f"killed {victim} (rank 1); the job resumed on the spare")


def run(args, tmp, procs):
    bindir = os.path.abspath(args.bin)
    for exe in ("tagi-coordinator", "tagi-worker", "tagictl"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            raise Failure(f"{bindir}/{exe} is missing; build the project first")
    started = time.monotonic()

    procs.start("coordinator", [
        f"{bindir}/tagi-coordinator", "--world", "2", "--listen", "127.0.0.1:0",
        "--port-file", f"{tmp}/grpc.port", "--http", "127.0.0.1:0",
        "--http-port-file", f"{tmp}/http.port"])
    grpc = wait_for("the coordinator's port file", lambda: read_port(f"{tmp}/grpc.port"), 20, procs)
    http = wait_for("the coordinator's HTTP port file",
                    lambda: read_port(f"{tmp}/http.port"), 20, procs)
    workers = []
    for i in range(3):  # two ranks and a spare for the recovery panels
        procs.start(f"worker{i}", [
            f"{bindir}/tagi-worker", "--coord", f"127.0.0.1:{grpc}", "--threads", "1",
            "--metrics", "127.0.0.1:0", "--metrics-port-file", f"{tmp}/worker{i}.port",
            "--data-root", tmp])  # the generated data set lives there
    for i in range(3):
        workers.append(wait_for(f"worker {i}'s metrics port file",
                                lambda: read_port(f"{tmp}/worker{i}.port"), 20, procs))

    def ready(port):  # /readyz: 200 once the worker's session is open
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False
    for i, port in enumerate(workers):
        wait_for(f"worker {i}'s /readyz", lambda: ready(port), 20, procs)

    with open(f"{tmp}/job.json", "w") as f:
        json.dump(job_spec(make_data(tmp)), f)
    submit = subprocess.run([f"{bindir}/tagictl", "--coord", f"127.0.0.1:{grpc}", "submit",
                             f"{tmp}/job.json"], capture_output=True, text=True, timeout=30)
    if submit.returncode != 0:
        raise Failure(f"tagictl submit failed: {submit.stdout}{submit.stderr}")
    print(f"submitted {submit.stdout.strip()}; coordinator :{grpc} (http :{http}), "
          f"worker metrics :{workers[0]} :{workers[1]} :{workers[2]}")

    prom = free_port()
    config = f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tagi-coordinator
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:{http}"]
  - job_name: tagi-worker
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:{workers[0]}", "127.0.0.1:{workers[1]}", "127.0.0.1:{workers[2]}"]
"""
    with open(f"{tmp}/prometheus.yml", "w") as f:
        f.write(config)
    procs.start("prometheus", [
        "prometheus", f"--config.file={tmp}/prometheus.yml",
        f"--storage.tsdb.path={tmp}/tsdb", f"--web.listen-address=127.0.0.1:{prom}",
        "--log.level=warn"])

    def all_up():
        try:
            targets = http_json(f"http://127.0.0.1:{prom}/api/v1/targets")["data"]["activeTargets"]
        except (OSError, ValueError, KeyError):
            return False
        return len(targets) == 4 and all(t["health"] == "up" for t in targets)
    wait_for("every Prometheus target to be up", all_up, 40, procs, interval=0.5)
    print(f"all 4 targets up after {time.monotonic() - started:.1f} s")
    kill_a_rank_and_wait_for_recovery(bindir, grpc, procs)

    # Rates need two samples in their window and epoch gauges a finished
    # epoch: poll each expression for a while before calling it empty.
    pending = dashboard_queries(args.source)
    if not pending:
        raise Failure("no dashboard queries found")
    total = len(pending)
    errors = []
    end = time.monotonic() + 30
    while pending:
        procs.check_alive()
        still = []
        for dash, what, expr, label in pending:
            result, error = query(prom, expr)
            if error is not None:
                errors.append(f"{dash}: {what}: {expr}\n  Prometheus refused it: {error}")
            elif result and (label is None or any(label in r["metric"] for r in result)):
                continue
            else:
                still.append((dash, what, expr, label))
        pending = still
        if not pending or time.monotonic() > end:
            break
        time.sleep(1)
    for dash, what, expr, label in pending:
        errors.append(f"{dash}: {what} returned no series"
                      + (f" with label {label}" if label else "") + f":\n  {expr}")
    if errors:
        raise Failure(f"{len(errors)} of {total} dashboard queries failed:\n" + "\n".join(errors))
    print(f"all {total} dashboard queries returned series "
          f"({time.monotonic() - started:.1f} s in all)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    if shutil.which("prometheus") is None:
        print("SKIP: prometheus is not installed (Debian package prometheus)")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="tagi_live_prometheus_")
    procs = Processes(tmp)
    def on_alarm(*_):
        raise Failure(f"the test ran past {DEADLINE_S} s")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # still runs the finally
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(DEADLINE_S)
    try:
        run(args, tmp, procs)
        print("PASS")
        return 0
    except Failure as e:
        print(f"FAIL: {e}")
        for name, _ in procs.procs:
            print(f"--- last lines of {name}'s log:\n{procs.log(name)}")
        return 1
    finally:
        signal.alarm(0)
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
