#!/usr/bin/python3
"""Scaling table on the multi-host test bed: TAGI with and without all-reduce
overlap and 16-bit wires, and PyTorch DDP (gloo) on the same MLP, each rank in
a network namespace of its own behind an htb-shaped link (tools/netbed.py).

  sudo /usr/bin/python3 bench/netbed_bench.py [--worlds 2,4] [--rates none,1gbit]
      [--networks mlp20m,cnn,resnet18] [--variants before,overlap,overlap+bf16,overlap+fp16]
      [--steps 12] [--bin build/bin] [--cifar10-dir DIR | --synthetic-cifar]
      [--skip-torch] [--out result.json]

Networks (batch per rank): mlp20m = 784-4096-4096-11 LINEAR/RELU on Fashion-MNIST (64);
cnn = examples/fmnist_cnn.json (its batch, 128); resnet18 = examples/cifar10_resnet18.json
(16; needs CIFAR-10's binary files: --cifar10-dir, or --synthetic-cifar to write a small
synthetic set with tools/cifar10_synthetic.py, else the network is skipped).
Variants: before = one bucket covering the whole delta arena, FP32 (one all-reduce
after the backward); overlap = the default bucket (4096 KiB), FP32; overlap+bf16 and
overlap+fp16 = the default bucket with 16-bit deltas on the wire.

Each TAGI run: trainLimit = world * batch * steps, testLimit 256, 1 epoch, seed 1, SUM,
1 BLAS thread per worker. Times are means over ranks and over the steps after the first
(`window` in the JSON), from the workers' Prometheus histograms scraped once the job has
done a step and again at its end: compute = step time minus the all-reduce it waited
for, all-reduce = time in the collective (partly behind the backward with buckets),
step = compute + waited all-reduce. The PyTorch rows use the same bed; see torch_rows().
Python 3 standard library (the PyTorch rows need Debian's python3-torch); root.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import netbed  # noqa: E402

TORCH_PYTHON = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")
FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
VARIANTS = {  # name: (one bucket for the whole arena, wire precision)
    "before": (True, "FP32"),
    "overlap": (False, "FP32"),
    "overlap+bf16": (False, "BF16"),
    "overlap+fp16": (False, "FP16"),
}
WIRE_BYTES = {"FP32": 4, "BF16": 2, "FP16": 2}
TEST_LIMIT = 256
TORCH_PORT = 29500


def log(msg):
    print(f"netbed_bench: {msg}", file=sys.stderr, flush=True)


# ---- networks ---------------------------------------------------------------
def network_job(name, args):
    """(job dict without the per-run fields, batch), or (None, why skipped)."""
    if name == "mlp20m":
        if not os.path.exists(os.path.join(FMNIST_DIR, "train-images-idx3-ubyte.gz")):
            return None, f"Fashion-MNIST is missing ({FMNIST_DIR})"
        with open(os.path.join(ROOT, "examples/fmnist_fnn.json"), encoding="utf-8") as f:
            job = json.load(f)
        job["name"] = "bench-mlp20m"
        job["layers"] = [
            {"kind": "LINEAR", "inFeatures": 784, "outFeatures": 4096}, {"kind": "RELU"},
            {"kind": "LINEAR", "inFeatures": 4096, "outFeatures": 4096}, {"kind": "RELU"},
            {"kind": "LINEAR", "inFeatures": 4096, "outFeatures": 11}]
        return job, 64
    if name == "cnn":
        if not os.path.exists(os.path.join(FMNIST_DIR, "train-images-idx3-ubyte.gz")):
            return None, f"Fashion-MNIST is missing ({FMNIST_DIR})"
        with open(os.path.join(ROOT, "examples/fmnist_cnn.json"), encoding="utf-8") as f:
            job = json.load(f)
        return job, int(job.get("batchSize", 128))
    if name == "resnet18":
        with open(os.path.join(ROOT, "examples/cifar10_resnet18.json"), encoding="utf-8") as f:
            job = json.load(f)
        d = args.cifar10_dir
        if not d and args.synthetic_cifar:
            d = os.path.join(args.tmp, "cifar10")
            need = max(int(w) for w in args.worlds.split(",")) * 16 * args.steps
            train = max(1000, (need + 4) // 5 * 5)
            r = subprocess.run([sys.executable, os.path.join(ROOT, "tools/cifar10_synthetic.py"),
                                d, "--train", str(train), "--test", str(TEST_LIMIT)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                return None, f"tools/cifar10_synthetic.py failed: {r.stderr.strip()[-500:]}"
            log(f"resnet18: synthetic CIFAR-10 ({train} training images) in {d}")
        if not d or not os.path.exists(os.path.join(d, "data_batch_1.bin")):
            return None, ("CIFAR-10 data is missing: pass --cifar10-dir DIR (cifar-10-batches-bin) "
                          "or --synthetic-cifar (tools/cifar10_synthetic.py, the same shapes)")
        job["data"]["cifar10Dir"] = os.path.abspath(d)
        return job, 16
    return None, f"unknown network {name!r} (mlp20m, cnn, resnet18)"


def model_size(bin_dir, job, tmp):
    """(parameters, delta arena KiB): tagi-train refuses a bucketKib above the arena and
    says both numbers; nothing is trained."""
    probe = dict(job, bucketKib=4000000000)
    path = os.path.join(tmp, "size-probe.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(probe, f)
    r = subprocess.run([os.path.join(bin_dir, "tagi-train"), path], capture_output=True,
                       text=True, timeout=60)
    m = re.search(r"delta arena \((\d+) KiB for (\d+) parameters\)", r.stdout + r.stderr)
    if not m:
        raise RuntimeError(f"cannot read the model size from tagi-train: {(r.stderr or r.stdout)[-800:]}")
    return int(m.group(2)), int(m.group(1))


# ---- one TAGI run -----------------------------------------------------------
def _rank_sums(cluster, i, job_id):
    """{rank: {steps, compute, allreduce, wait, bytes}} (sums) from worker i's metrics."""
    sums = netbed._metric_sums(cluster.scrape(i), job_id)
    out = {}
    for (name, rank, worker), value in sums.items():
        if name != "tagi_worker_steps_total":
            continue
        def get(metric):
            return sums.get((metric, rank, worker), 0.0)
        out[int(rank)] = {
            "steps": value,
            "compute": get("tagi_worker_step_compute_seconds_sum"),
            "allreduce": get("tagi_worker_step_allreduce_seconds_sum"),
            "wait": get("tagi_worker_step_allreduce_wait_seconds_sum"),
            "bytes": get("tagi_worker_allreduce_bytes_total"),
        }
    return out


def _scrape_all(cluster, job_id):
    out = {}
    for i in range(cluster.bed.workers):
        try:
            out.update(_rank_sums(cluster, i, job_id))
        except (netbed.BedError, subprocess.SubprocessError) as e:
            log(f"scrape of worker {i + 1} failed: {e}")
    return out


def _uploads(bed):
    """{worker short name: bytes its eth0 sent} (shaped beds only)."""
    return {k: v["upload"]["bytes"] for k, v in bed.link_counters().items()
            if k.startswith("w") and "upload" in v}


def run_tagi(args, job, world, rate, deadline_s):
    """Run one job in a fresh bed; the measured dict."""
    tmp = tempfile.mkdtemp(prefix="job.", dir=args.tmp)
    path = os.path.join(tmp, "job.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(job, f, indent=1)
    t_bed = time.monotonic()
    with netbed.Bed(workers=world, rate=None if rate == "none" else rate) as bed:
        try:
            # A data directory outside the workers' default roots (a CIFAR-10 directory)
            # has to be allowed explicitly.
            extra = job.get("data", {}).get("cifar10Dir")
            flags = ["--data-root", f"/usr/share/datasets,/var/lib/tagi/data,{extra}"] if extra else []
            cluster = netbed.Cluster(bed, args.bin, threads=1, worker_flags=flags)
            cluster.wait_workers()
            window = {}

            def at_first_step(job_id, record):
                # After the first step: the start of the measured window.
                if not window and int(record.get("progress", {}).get("globalStep", 0)) >= 1:
                    window["snap"] = _scrape_all(cluster, job_id)
                    window["links"] = _uploads(bed)

            job_id, record, timed_out, wall = netbed.submit_and_wait(
                cluster, path, deadline_s, at_first_step)
            snap, snap_links = window.get("snap"), window.get("links")
            end = _scrape_all(cluster, job_id)
            end_links = _uploads(bed)
        except BaseException:
            log(f"the run failed; logs:\n{bed.logs()[-6000:]}")
            raise
        if timed_out or record.get("state") != "SUCCEEDED":
            log(f"job ended {'TIMEOUT' if timed_out else record.get('state')}: "
                f"{record.get('reason', '')}\n{bed.logs()[-4000:]}")
    bed.remove_tmp()
    shutil.rmtree(tmp, ignore_errors=True)
    progress = record.get("progress", {})
    epochs = progress.get("epochs", [])
    per_rank = []
    window = "steps 2..N"
    for rank in sorted(end):
        e, s = end[rank], (snap or {}).get(rank)
        if e["steps"] < 1:
            continue
        if not s or e["steps"] - s["steps"] < 1:
            s, window = {k: 0.0 for k in e}, "all steps (the job ended before the first scrape)"
        n = e["steps"] - s["steps"]
        per_rank.append({"rank": rank, "steps": int(e["steps"]), "window_steps": int(n),
                         **{f"{k}_s": (e[k] - s[k]) / n for k in ("compute", "allreduce", "wait")},
                         "allreduce_bytes_per_step": (e["bytes"] - s["bytes"]) / n})
    link_bytes = None
    if snap_links and end_links and per_rank:
        # Upload of each worker's eth0 per step over the window (the ring's traffic plus a
        # little gRPC and a metrics scrape); the least loaded worker (rank 0 also uploads
        # the model at the end).
        n = per_rank[0]["window_steps"]
        link_bytes = min((end_links[k] - snap_links.get(k, 0)) / n for k in end_links)
    return {
        "state": "TIMEOUT" if timed_out else record.get("state", "UNKNOWN"),
        "reason": record.get("reason", ""),
        "checksum": record.get("modelChecksum", ""),
        "test_accuracy": epochs[-1].get("testAccuracy") if epochs else None,
        "wall_seconds": wall, "bed_seconds": time.monotonic() - t_bed,
        "record": {k: progress.get(k) for k in (
            "samplesPerSecond", "stepSeconds", "allreduceSeconds", "allreduceWaitSeconds",
            "allreduceBuckets", "allreduceBytes", "globalStep", "rendezvousSeconds",
            "dataSeconds", "groupSeconds", "modelSeconds")},
        "window": window, "per_rank": per_rank, "link_upload_bytes_per_step": link_bytes,
    }


def tagi_row(args, net, params, arena_kib, world, rate, variant, link_bps, base, batch):
    whole, wire = VARIANTS[variant]
    job = json.loads(json.dumps(base))
    job.update(batchSize=batch, epochs=1, seed=1, reduction="SUM", worldSize=world,
               snapshotInterval=0, device="cpu", wirePrecision=wire)
    job.pop("bucketKib", None)
    if whole:
        job["bucketKib"] = arena_kib
    job.setdefault("data", {}).update(trainLimit=world * batch * args.steps, testLimit=TEST_LIMIT)
    log(f"tagi {net} world {world} rate {rate} {variant}: ...")
    m = run_tagi(args, job, world, rate, args.deadline)
    ranks = m["per_rank"]
    row = {"system": "tagi", "network": net, "world": world, "rate": rate, "variant": variant,
           "batch": batch, "parameters": params, "state": m["state"], "run": m}
    if ranks:
        mean = lambda k: sum(r[k] for r in ranks) / len(ranks)  # noqa: E731
        compute, allreduce, wait = mean("compute_s"), mean("allreduce_s"), mean("wait_s")
        step = compute + wait
        fp32_bytes = mean("allreduce_bytes_per_step") or float(m["record"].get("allreduceBytes") or 0)
        # The deltas (8 bytes a parameter in FP32) go at the wire's width; the rest (state,
        # stop vote) in FP32.
        delta = 8.0 * params
        wire_bytes = delta * WIRE_BYTES[wire] / 4 + max(0.0, fp32_bytes - delta)
        bound = 2 * (world - 1) / world * wire_bytes * 8 / link_bps
        row.update(compute_s=compute, allreduce_s=allreduce, wait_s=wait, step_s=step,
                   overlap_ratio=step / max(compute, allreduce),
                   ring_bound_s=bound, ring_ratio=allreduce / bound if bound else None,
                   samples_per_s=world * batch / step, fp32_bytes_per_step=fp32_bytes,
                   wire_bytes_per_step=wire_bytes,
                   link_upload_bytes_per_step=m["link_upload_bytes_per_step"],
                   buckets=m["record"].get("allreduceBuckets"),
                   test_accuracy=m["test_accuracy"], checksum=m["checksum"])
    log(f"  {m['state']} in {m['bed_seconds']:.1f} s: " + (
        f"step {row['step_s']:.3f} s, compute {row['compute_s']:.3f} s, all-reduce "
        f"{row['allreduce_s']:.3f} s" if ranks else "no metrics"))
    return row


# ---- PyTorch DDP ------------------------------------------------------------
TORCH_SCRIPT = r'''
import datetime, gzip, json, sys, time
import numpy as np, torch, torch.distributed as dist, torch.nn as nn
rank, world, addr, steps, batch = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="tcp://" + addr, rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=120))
torch.manual_seed(1)
d = "/usr/share/datasets/fashion-mnist/"
def idx(name, off):
    with gzip.open(d + name) as f: return np.frombuffer(f.read(), np.uint8, offset=off)
n = world * batch * (2 * steps + 2)
x = torch.tensor(idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784)[:n], dtype=torch.float32) / 255
y = torch.tensor(idx("train-labels-idx1-ubyte.gz", 8)[:n].astype(np.int64))
mean, std = x.mean(), x.std()
x = (x - mean) / std
tx = (torch.tensor(idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784)[:256], dtype=torch.float32) / 255 - mean) / std
ty = torch.tensor(idx("t10k-labels-idx1-ubyte.gz", 8)[:256].astype(np.int64))
net = nn.Sequential(nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
params = sum(p.numel() for p in net.parameters())
model = nn.parallel.DistributedDataParallel(net)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
k = [0]
def batch_xy():
    s = (k[0] * world + rank) * batch % n; k[0] += 1
    return x[s:s + batch], y[s:s + batch]
def fwd_bwd(sync):
    bx, by = batch_xy()
    opt.zero_grad(set_to_none=True)
    if sync:
        loss_fn(model(bx), by).backward()
    else:
        with model.no_sync():
            loss_fn(model(bx), by).backward()
# Warm-up (excluded): one synchronised step, one without communication.
fwd_bwd(True); opt.step(); fwd_bwd(False)
dist.barrier()
# Compute: forward + backward without communication (no_sync), no update (the
# replicas stay equal); the update is timed in the synchronised steps below.
t_nosync = []
for _ in range(steps):
    t = time.perf_counter(); fwd_bwd(False); t_nosync.append(time.perf_counter() - t)
dist.barrier()
t_step, t_opt = [], []
for _ in range(steps):
    t = time.perf_counter(); fwd_bwd(True); t1 = time.perf_counter(); opt.step(); t2 = time.perf_counter()
    t_step.append(t2 - t); t_opt.append(t2 - t1)
dist.barrier()
# The bare collective: one all-reduce of all the gradients (4 bytes a parameter).
g = torch.zeros(params)
dist.all_reduce(g)
t_ar = []
for _ in range(steps):
    t = time.perf_counter(); dist.all_reduce(g); t_ar.append(time.perf_counter() - t)
m = lambda v: sum(v) / len(v)
local = torch.tensor([m(t_nosync) + m(t_opt), m(t_step), m(t_ar), m(t_opt)], dtype=torch.float64)
dist.all_reduce(local)
local /= world
if rank == 0:
    with torch.no_grad():
        acc = (net(tx).argmax(1) == ty).float().mean().item()
    print("RESULT " + json.dumps({"compute_s": local[0].item(), "step_s": local[1].item(),
                                  "allreduce_s": local[2].item(), "optimizer_s": local[3].item(),
                                  "parameters": params, "test_accuracy": acc,
                                  "torch": torch.__version__}), flush=True)
dist.destroy_process_group()
'''


def torch_available():
    r = subprocess.run([TORCH_PYTHON, "-c", "import torch, numpy; print(torch.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def run_torch(args, world, rate, link_bps, batch=64):
    script = os.path.join(args.tmp, "ddp_mlp.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(TORCH_SCRIPT)
    log(f"torch mlp20m world {world} rate {rate}: ...")
    t0 = time.monotonic()
    with netbed.Bed(workers=world, rate=None if rate == "none" else rate) as bed:
        addr = f"{bed.worker_addr[0]}:{TORCH_PORT}"  # rank 0 (worker 1) holds the store
        procs = [bed.popen(bed.worker_ns[r], [
            "env", "GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1", TORCH_PYTHON, script,
            str(r), str(world), addr, str(args.steps), str(batch)], f"torch{r}")
            for r in range(world)]
        end = time.monotonic() + args.deadline
        while time.monotonic() < end and any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
        out = bed.log("torch0", tail=100000)
        codes = [p.poll() for p in procs]
        logs = bed.logs()
    bed.remove_tmp()
    res = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    row = {"system": "torch-ddp", "network": "mlp20m", "world": world, "rate": rate,
           "variant": "ddp gloo (SGD)", "batch": batch, "bed_seconds": time.monotonic() - t0}
    if res is None:
        log(f"  PyTorch failed (exit codes {codes}):\n{logs[-4000:]}")
        row["state"] = "FAILED"
        return row
    wire = 4.0 * res["parameters"]
    bound = 2 * (world - 1) / world * wire * 8 / link_bps
    row.update(state="SUCCEEDED", parameters=res["parameters"], compute_s=res["compute_s"],
               allreduce_s=res["allreduce_s"], step_s=res["step_s"],
               overlap_ratio=res["step_s"] / max(res["compute_s"], res["allreduce_s"]),
               ring_bound_s=bound, ring_ratio=res["allreduce_s"] / bound,
               samples_per_s=world * batch / res["step_s"], wire_bytes_per_step=wire,
               optimizer_s=res["optimizer_s"], test_accuracy=res["test_accuracy"],
               torch=res["torch"])
    log(f"  done in {row['bed_seconds']:.1f} s: step {row['step_s']:.3f} s, compute "
        f"{row['compute_s']:.3f} s, all-reduce {row['allreduce_s']:.3f} s")
    return row


# ---- output -----------------------------------------------------------------
def machine():
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "kernel": platform.release(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "loadavg": os.getloadavg()}


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def markdown(result):
    lines = []
    mc = result["machine"]
    lines.append(f"Machine: {mc['nproc']} CPUs ({mc['cpu']}), kernel {mc['kernel']}, "
                 f"{mc['date']}, load average at start {mc['loadavg'][0]:.2f}")
    for rate, bps in result["link_bps"].items():
        how = "measured (netbed rate --rate none)" if rate == "none" else "nominal htb rate"
        lines.append(f"Link rate `{rate}`: {bps / 1e9:.2f} Gbit/s ({how})")
    lines.append(f"Steps per run: {result['steps']}. TAGI times: means over ranks and over "
                 "steps 2..N from the workers' metrics (not the last step); step = compute + "
                 "the all-reduce it waited for; all-reduce = time in the collective; samples/s = "
                 "world x batch / step; ring bound = 2 (N-1)/N x wire bytes / link rate. "
                 "PyTorch: compute = no_sync forward+backward + SGD update, step = DDP step, "
                 "all-reduce = a bare all_reduce of all gradients (4 B/param); SGD.")
    lines.append("")
    lines.append("| network | world | rate | system / variant | buckets | compute s/step | "
                 "all-reduce s/step | step s/step | step / max(c, ar) | ar / ring bound | "
                 "samples/s | test acc | checksum |")
    lines.append("|" + "---|" * 13)
    for r in result["rows"]:
        name = r["variant"] if r["system"] == "tagi" else f"torch {r['variant']}"
        if r.get("state") != "SUCCEEDED" or "step_s" not in r:
            lines.append(f"| {r['network']} | {r['world']} | {r['rate']} | {name} | "
                         f"{r.get('state')} |" + " |" * 8)
            continue
        lines.append(
            f"| {r['network']} | {r['world']} | {r['rate']} | {name} | {fmt(r.get('buckets'), 'd')} | "
            f"{r['compute_s']:.3f} | {r['allreduce_s']:.3f} | {r['step_s']:.3f} | "
            f"{r['overlap_ratio']:.2f} | {fmt(r.get('ring_ratio'), '.2f')} | "
            f"{r['samples_per_s']:.1f} | {fmt(r.get('test_accuracy'), '.3f')} | "
            f"{(r.get('checksum') or '-')[:16]} |")
    for s in result["skipped"]:
        lines.append(f"\nSkipped: {s}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--rates", default="none,1gbit")
    ap.add_argument("--networks", default="mlp20m,cnn,resnet18")
    ap.add_argument("--variants", default="before,overlap,overlap+bf16,overlap+fp16")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin"))
    ap.add_argument("--cifar10-dir", default=os.environ.get("CIFAR10_DIR", ""),
                    help="cifar-10-batches-bin for resnet18 (default $CIFAR10_DIR)")
    ap.add_argument("--synthetic-cifar", action="store_true",
                    help="without --cifar10-dir: write a small synthetic set for resnet18")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--deadline", type=float, default=900, help="seconds per run; then cancel")
    ap.add_argument("--out", help="write the JSON result here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        log("needs root (network namespaces)")
        return 77
    args.bin = os.path.abspath(args.bin)
    worlds = [int(w) for w in args.worlds.split(",") if w]
    rates = [r for r in args.rates.split(",") if r]
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}; expected {', '.join(VARIANTS)}")
    args.tmp = tempfile.mkdtemp(prefix="netbed_bench.")
    result = {"machine": machine(), "steps": args.steps, "bin": args.bin, "link_bps": {},
              "rows": [], "skipped": [], "args": {k: v for k, v in vars(args).items() if k != "tmp"}}
    t_start = time.monotonic()
    try:
        netbed.clean(quiet=True)
        for rate in rates:
            if rate == "none":
                with netbed.Bed(workers=2, rate=None) as bed:
                    m = netbed.measure_rate(bed, seconds=4.0)
                bed.remove_tmp()
                result["link_bps"][rate] = m["bits_per_second"]
                log(f"unshaped bridge: {m['bits_per_second'] / 1e9:.2f} Gbit/s (one TCP stream, "
                    "netbed rate --rate none); the ring bound of `none` rows uses it")
            else:
                result["link_bps"][rate] = netbed._rate_bits(netbed._rate_arg(rate))
        for net in [n for n in args.networks.split(",") if n]:
            base, batch = network_job(net, args)
            if base is None:
                msg = f"{net}: {batch}"
                log("skipped " + msg)
                result["skipped"].append(msg)
                continue
            params, arena_kib = model_size(args.bin, dict(base, batchSize=batch), args.tmp)
            log(f"{net}: {params} parameters, delta arena {arena_kib} KiB, batch {batch} per rank")
            if arena_kib <= 4096 and any(not VARIANTS[v][0] for v in variants):
                log(f"{net}: the arena is not above the default bucket (4096 KiB): `overlap` "
                    "rows are one bucket too")
            for world in worlds:
                for rate in rates:
                    for v in variants:
                        try:
                            row = tagi_row(args, net, params, arena_kib, world, rate, v,
                                           result["link_bps"][rate], base, batch)
                        except (netbed.BedError, OSError, subprocess.SubprocessError,
                                ValueError) as e:  # one broken run does not end the grid
                            log(f"  ERROR: {e}")
                            row = {"system": "tagi", "network": net, "world": world,
                                   "rate": rate, "variant": v, "state": "ERROR",
                                   "reason": str(e)[-2000:]}
                        result["rows"].append(row)
        if not args.skip_torch and "mlp20m" in args.networks.split(","):
            version = torch_available()
            if not version:
                msg = f"PyTorch: `import torch` fails in {TORCH_PYTHON} (apt install python3-torch)"
                log("skipped " + msg)
                result["skipped"].append(msg)
            else:
                log(f"PyTorch {version}")
                for world in worlds:
                    for rate in rates:
                        try:
                            row = run_torch(args, world, rate, result["link_bps"][rate])
                        except (netbed.BedError, OSError, subprocess.SubprocessError,
                                ValueError) as e:
                            log(f"  ERROR: {e}")
                            row = {"system": "torch-ddp", "network": "mlp20m", "world": world,
                                   "rate": rate, "variant": "ddp gloo (SGD)", "state": "ERROR",
                                   "reason": str(e)[-2000:]}
                        result["rows"].append(row)
    finally:
        shutil.rmtree(args.tmp, ignore_errors=True)
    result["total_seconds"] = time.monotonic() - t_start
    table = markdown(result)
    result["markdown"] = table
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    print(table)
    return 0 if all(r.get("state") == "SUCCEEDED" for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
