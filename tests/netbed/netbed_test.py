#!/usr/bin/python3
"""A 3-rank job across network namespaces gives the loopback checksum.

The same small job (the Fashion-MNIST MLP on 3,000 samples, or the generated
cubic toy where Debian's dataset-fashion-mnist is missing) runs twice through
the real binaries, once per all-reduce backend (TCP_RING, then GLOO):

  1. a coordinator and 3 workers on 127.0.0.1 (the reference);
  2. a bed of tools/netbed.py: the coordinator and each worker in a network
     namespace of its own, joined by a bridge in another, every link shaped
     at 1 Gbit/s each way with htb; each worker binds and advertises its own
     bed address for the collective (found on its own: no --host).

Both runs must SUCCEED with the same parameter checksum, for each backend.
The bed's run must also have carried the ring's traffic over the shaped
links (the htb counters of every worker's veth) with the workers seen by
the coordinator at their bed addresses. Afterwards no namespace of the bed
and no process of either run may be left.

Skips (exit 77, with the reason) where network namespaces cannot be built:
not root, no `ip`/`tc`, or the kernel refusing them.

  netbed_test.py --source SRC --bin BUILD/bin [--rate 1gbit] [--keep-logs]
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

SKIP = 77
FMNIST = "/usr/share/datasets/fashion-mnist"


def job_spec(backend, seed=1):
    if os.path.exists(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")):
        return {
            "name": "netbed-fmnist-" + backend.lower(),
            "layers": [
                {"kind": "LINEAR", "inFeatures": 784, "outFeatures": 100}, {"kind": "RELU"},
                {"kind": "LINEAR", "inFeatures": 100, "outFeatures": 100}, {"kind": "RELU"},
                {"kind": "LINEAR", "inFeatures": 100, "outFeatures": 11}],
            "head": {"classification": {"numClasses": 10}},
            "data": {"kind": "FASHION_MNIST", "trainLimit": 3000, "testLimit": 1000},
            "init": {"method": "HE"}, "noise": {"sigmaV": 1.0},
            "batchSize": 16, "epochs": 2, "seed": seed, "reduction": "SUM",
            "worldSize": 3, "snapshotInterval": 50, "backend": backend, "device": "cpu"}
    return {
        "name": "netbed-toy-" + backend.lower(),
        "layers": [{"kind": "LINEAR", "inFeatures": 1, "outFeatures": 50}, {"kind": "RELU"},
                   {"kind": "LINEAR", "inFeatures": 50, "outFeatures": 1}],
        "head": {"regression": {}},
        "data": {"kind": "TOY_CUBIC", "toyTrainSize": 600, "toyTestSize": 100},
        "noise": {"sigmaV": 0.06}, "batchSize": 10, "epochs": 5, "seed": seed,
        "reduction": "SUM", "worldSize": 3, "snapshotInterval": 10, "backend": backend,
        "device": "cpu"}


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def run_all(netbed, bed, bin_dir, jobs, deadline):
    """Start a cluster on the bed, run every job on it in turn; the results."""
    cluster = netbed.Cluster(bed, bin_dir)
    results = {}
    for backend, path in jobs:
        before = bed.link_counters()
        r = netbed.run_job(cluster, path, deadline_s=deadline)
        r["links_before"] = before
        results[backend] = r
        where = "loopback" if bed.loopback else f"bed {bed.prefix}"
        print(f"netbed_test: {backend} on {where}: {r['state']} checksum "
              f"{r['parameter_checksum']} accuracy {r['test_accuracy']} rmse {r['test_rmse']} "
              f"train {r['train_seconds']} s, all-reduce "
              f"{[round(x['allreduce_seconds_per_step'] * 1e3, 2) for x in r['per_rank']]} "
              f"ms/step/rank", flush=True)
        check(r["state"] == "SUCCEEDED",
              f"{backend} on {where} ended {r['state']}: {r['reason']}\n{bed.logs()}")
        check(re.fullmatch(r"[0-9a-f]{16}", r["parameter_checksum"] or ""),
              f"{backend} on {where}: no parameter checksum in the job record")
    return results


def check_bed_traffic(bed, results):
    """The workers were registered from their bed addresses, and every worker's
    shaped veth, both ways, carried at least the ring's share of the job's
    all-reduce traffic: the collective crossed the bridge."""
    n = bed.workers
    for backend, r in results.items():
        seen = re.findall(r"ipv4:([\d.]+):\d+", r["workers_table"])
        check(sorted(seen) == sorted(bed.worker_addr),
              f"{backend}: the coordinator saw the workers at {seen}, not at their bed "
              f"addresses {bed.worker_addr}")
        ranks = r["per_rank"]
        check(len(ranks) == n and all(x["steps"] > 0 for x in ranks),
              f"{backend}: per-rank metrics of {len(ranks)} ranks: {ranks}")
        steps = ranks[0]["steps"]
        arena = r["timings"]["allreduce_bytes_per_step"]
        # A ring all-reduce sends (and receives) 2 (n - 1) / n of the arena per step.
        expected = steps * arena * 2 * (n - 1) / n
        for i in range(n):
            w = f"w{i + 1}"
            for way in ("upload", "download"):
                moved = (r["links"][w][way]["bytes"]
                         - r["links_before"].get(w, {}).get(way, {}).get("bytes", 0))
                check(moved >= 0.95 * expected,
                      f"{backend}: {w}'s {way} link carried {moved} bytes, less than the "
                      f"{expected:.0f} bytes of the ring's share of {steps} steps of {arena} "
                      f"bytes: the collective did not cross the bed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, help="the repository (for tools/netbed.py)")
    ap.add_argument("--bin", required=True, help="tagi-coordinator, tagi-worker, tagictl")
    ap.add_argument("--rate", default="1gbit", help="htb rate of every bed link, or none")
    ap.add_argument("--deadline", type=float, default=60, help="seconds per job")
    ap.add_argument("--keep-logs", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(a.source), "tools"))
    import netbed  # noqa: E402

    for name in ("tagi-coordinator", "tagi-worker", "tagictl"):
        path = os.path.join(a.bin, name)
        if not os.access(path, os.X_OK):
            print(f"netbed_test: {path} is missing (build first)", file=sys.stderr)
            return 1
    why = netbed.probe()
    if why:
        print(f"netbed_test: SKIPPED: {why}", file=sys.stderr)
        return SKIP
    netbed.install_signal_handlers()
    netbed.clean(quiet=True)  # beds left by a killed earlier run (their owner is gone)

    tmp = tempfile.mkdtemp(prefix="netbed_test.")
    jobs = []
    for backend in ("TCP_RING", "GLOO"):
        path = os.path.join(tmp, backend.lower() + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(job_spec(backend), f)
        jobs.append((backend, path))
    print(f"netbed_test: job {job_spec('TCP_RING')['name']}, 3 ranks, bed links "
          f"{a.rate}", flush=True)

    beds, status = [], 0
    started = time.monotonic()
    try:
        with netbed.Bed(workers=3, loopback=True) as lo:
            beds.append(lo)
            reference = run_all(netbed, lo, a.bin, jobs, a.deadline)
        with netbed.Bed(workers=3, rate=a.rate) as bed:
            beds.append(bed)
            shaped = run_all(netbed, bed, a.bin, jobs, a.deadline)
            if bed.rate:
                check_bed_traffic(bed, shaped)
        for backend, _ in jobs:
            x, y = reference[backend]["parameter_checksum"], shaped[backend]["parameter_checksum"]
            check(x == y, f"{backend}: the bed's run ended with checksum {y}, loopback's "
                          f"with {x}")
    except Failure as e:
        print(f"netbed_test: FAILED: {e}", file=sys.stderr)
        status = 1
    except BaseException as e:  # an error, or SIGINT / SIGTERM (SystemExit): clean up, re-raise
        print(f"netbed_test: stopped by {type(e).__name__}: {e}; removing the beds",
              file=sys.stderr)
        status = 1
        raise
    finally:
        for b in beds:
            b.close()
            ns_left, procs_left = b.leftovers()
            if ns_left or procs_left:
                print(f"netbed_test: FAILED: left behind: namespaces {ns_left}, processes "
                      f"{procs_left}", file=sys.stderr)
                status = 1
            if status == 0 and not a.keep_logs:
                b.remove_tmp()
            else:
                print(f"netbed_test: logs of {b.prefix} in {b.tmp}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    if status == 0:
        print(f"netbed_test: passed in {time.monotonic() - started:.1f} s: the same checksums "
              f"on loopback and across namespaces; nothing left behind")
    return status


if __name__ == "__main__":
    sys.exit(main())
