#!/usr/bin/env python3
"""Fault-tolerance figures of tagi-ddp: a rank killed (or hung) mid-job, with a spare ready.

For each run: a fresh tagi-coordinator (--world 2, default heartbeats 1 s / 3 s) and three
tagi-workers (two ranks and a spare) on loopback; a job training 784-100-100-11 ReLU on
Fashion-MNIST (batch 128 per rank, snapshot every --snapshot-every steps, the same network,
batch and checkpoint interval as bench/torchrun_elastic.py). Once rank 0 reports a global step
drawn from --kill-range, the driver sends SIGKILL (or SIGSTOP with --mode stop) to the worker
of rank 1 and reads the job's Recovery record (tagictl status --json) to measure
  * kill -> failure detected (the coordinator ended the generation: Recovery.detectedMs),
  * kill -> first step of the new generation (rank 0 of the new generation: firstStepMs),
  * steps redone (the survivors' last step - the snapshot step resumed from).
It then cancels the job and stops every process. Prints a table and a final "JSON {...}" line
(median/min/max of each figure), written to --out too.

  bench/recovery_bench.py [--build build] [--runs 5] [--mode kill|stop] [--seed 0]
                          [--snapshot-every 50] [--kill-range 100:400] [--out F]
Needs a build (make build) and dataset-fashion-mnist. Timestamps are wall clock on this host.
"""
import argparse, json, os, random, signal, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def job_spec(snapshot_every):
    return {
        "name": "recovery-bench",
        "layers": [{"kind": "LINEAR", "inFeatures": 784, "outFeatures": 100}, {"kind": "RELU"},
                   {"kind": "LINEAR", "inFeatures": 100, "outFeatures": 100}, {"kind": "RELU"},
                   {"kind": "LINEAR", "inFeatures": 100, "outFeatures": 11}],
        "head": {"classification": {"numClasses": 10}},
        "data": {"kind": "FASHION_MNIST"},
        "init": {"method": "HE"}, "noise": {"sigmaV": 1.0},
        "batchSize": 128, "epochs": 50, "seed": 1, "reduction": "SUM", "worldSize": 2,
        "snapshotInterval": snapshot_every, "device": "cpu",
    }


def wait_for(what, predicate, timeout, interval=0.02):
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


class Cluster:
    def __init__(self, bindir, tmp):
        self.bindir, self.tmp, self.procs = bindir, tmp, {}

    def start(self, name, argv):
        log = open(os.path.join(self.tmp, name + ".log"), "wb")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def ctl(self, *args):
        r = subprocess.run([f"{self.bindir}/tagictl", "--coord", self.address, *args],
                           capture_output=True, text=True, timeout=30)
        return r.stdout if r.returncode == 0 else None

    def job(self, job_id):
        out = self.ctl("status", job_id, "--json")
        return json.loads(out) if out else None

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGCONT)
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs.values():
            p.wait()


def one_run(bindir, args, rng):
    with tempfile.TemporaryDirectory(prefix="tagi-recovery-") as tmp:
        c = Cluster(bindir, tmp)
        try:
            c.start("coordinator", [f"{bindir}/tagi-coordinator", "--world", "2", "--listen",
                                    "127.0.0.1:0", "--port-file", f"{tmp}/port"])
            port = wait_for("the coordinator", lambda: read(f"{tmp}/port").strip(), 20)
            c.address = f"127.0.0.1:{port}"
            for i in range(3):
                c.start(f"worker{i}", [f"{bindir}/tagi-worker", "--coord", c.address,
                                       "--threads", "1"])
            wait_for("three workers", lambda: (c.ctl("workers") or "").count("IDLE") == 3, 20)
            with open(f"{tmp}/job.json", "w") as f:
                json.dump(job_spec(args.snapshot_every), f)
            job_id = c.ctl("submit", f"{tmp}/job.json").split()[0]
            lo, hi = (int(x) for x in args.kill_range.split(":"))
            target = rng.randint(lo, hi)
            job = wait_for(f"global step {target}", lambda: (lambda j: j if j and int(
                j.get("progress", {}).get("globalStep", "0")) >= target else None)(
                c.job(job_id)), 120, interval=0.005)
            victim = job["workers"][1]
            name = next(n for n in c.procs if n.startswith("worker")
                        and f" as {victim}\n" in read(os.path.join(tmp, n + ".log")))
            kill_ms = time.time() * 1000
            os.kill(c.procs[name].pid, signal.SIGKILL if args.mode == "kill" else signal.SIGSTOP)

            def recovered():
                j = c.job(job_id)
                recs = (j or {}).get("recoveries", [])
                if recs and int(recs[-1].get("firstStepMs", "0")) > 0:
                    return recs[-1]
                return None
            rec = wait_for("the first step of the new generation", recovered, 60, 0.05)
            time.sleep(0.3)  # the survivors' own report of the step they reached
            rec = recovered() or rec
            c.ctl("cancel", job_id)
            return {
                "kill_at_step": int(job["progress"]["globalStep"]),
                "detect_s": (int(rec["detectedMs"]) - kill_ms) / 1000,
                "kill_to_first_step_s": (int(rec["firstStepMs"]) - kill_ms) / 1000,
                "detect_to_first_step_s": (int(rec["firstStepMs"]) - int(rec["detectedMs"])) / 1000,
                "steps_redone": int(rec.get("stepsRedone", "0")),
                "resumed_from": int(rec.get("resumedFromStep", "0")),
                "reason": rec.get("reason", ""),
            }
        finally:
            c.stop()
            if os.environ.get("KEEP_LOGS"):
                os.system(f"cat {tmp}/coordinator.log; grep -h failed {tmp}/worker*.log")


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mode", choices=["kill", "stop"], default="kill")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--snapshot-every", type=int, default=50)
    ap.add_argument("--kill-range", default="100:400")
    ap.add_argument("--out")
    args = ap.parse_args()
    bindir = os.path.join(os.path.abspath(args.build), "bin")
    rng = random.Random(args.seed)
    load = [os.getloadavg()[0]]
    runs = []
    print(f"{'run':>3} {'kill@':>6} {'detect s':>9} {'kill->step s':>13} {'redone':>7}  reason")
    for i in range(args.runs):
        r = one_run(bindir, args, rng)
        runs.append(r)
        print(f"{i + 1:>3} {r['kill_at_step']:>6} {r['detect_s']:>9.3f} "
              f"{r['kill_to_first_step_s']:>13.3f} {r['steps_redone']:>7}  {r['reason'][:60]}")
    load.append(os.getloadavg()[0])
    result = {"mode": args.mode, "runs": runs, "load_avg_1m": load,
              "snapshot_every": args.snapshot_every}
    for key in ("detect_s", "kill_to_first_step_s", "detect_to_first_step_s", "steps_redone"):
        result[key] = summary([r[key] for r in runs])
    line = json.dumps(result)
    print("JSON " + line)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
