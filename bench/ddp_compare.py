#!/usr/bin/env python3
"""tagi-ddp against PyTorch DDP (torchrun, gloo) on the same MLP and data.

Measures, for 1 and 2 workers (1 thread each) at batch 128 and 16 per worker:
  * rendezvous latency: tagi: all workers registered and idle, job submitted ->
    first training step done (the job's rendezvous_seconds); torch: torchrun
    launched -> first step done;
  * training throughput (samples/s over one Fashion-MNIST epoch);
  * per-step all-reduce time and bytes, and its share of the step.
The network is 784-100-100 with ReLU; TAGI's head has 11 outputs (hierarchical
softmax over 10 classes), PyTorch's 10 (softmax, Adam).

  bench/ddp_compare.py [--build build] [--skip-torch] [--epochs 1]
Needs Debian's python3-torch for the PyTorch side (not installed by make deps).
"""
import argparse, json, os, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Debian's python3-torch lives in the system interpreter.
TORCH_PYTHON = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")

TORCH_SCRIPT = r'''
import gzip, os, sys, time
import numpy as np, torch, torch.distributed as dist, torch.nn as nn
t_launch = float(os.environ["BENCH_T0"])
batch, epochs = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(1)
d = "/usr/share/datasets/fashion-mnist/"
def idx(name, off):
    with gzip.open(d + name) as f: return np.frombuffer(f.read(), np.uint8, offset=off)
x = torch.tensor(idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784), dtype=torch.float32) / 255
y = torch.tensor(idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64))
x = (x - x.mean()) / x.std()
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(), nn.Linear(100, 10)))
opt = torch.optim.Adam(model.parameters(), 1e-3)
sampler = torch.utils.data.distributed.DistributedSampler(torch.arange(len(x)), world, rank, seed=1)
loss_fn = nn.CrossEntropyLoss()
first = None
t0 = time.time(); n = 0
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    idxs = torch.tensor(list(iter(sampler)))
    for s in range(0, len(idxs) - batch + 1, batch):
        b = idxs[s:s + batch]
        opt.zero_grad(); loss_fn(model(x[b]), y[b]).backward(); opt.step()
        n += batch
        if first is None:
            first = time.time() - t_launch; t0 = time.time(); n = 0
sps = n * world / (time.time() - t0)
# A bare all-reduce of the gradient size, timed.
g = torch.zeros(sum(p.numel() for p in model.parameters()))
for _ in range(5): dist.all_reduce(g)
ts = []
for _ in range(50):
    t = time.time(); dist.all_reduce(g); ts.append(time.time() - t)
if rank == 0:
    ts.sort()
    print("RESULT " + repr({"first_step_s": first, "samples_per_s": sps,
                            "allreduce_ms": 1e3 * ts[len(ts) // 2], "allreduce_bytes": 4 * g.numel()}))
dist.destroy_process_group()
'''


def wait_file(path, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return open(path).read().strip()
        time.sleep(0.02)
    raise RuntimeError("timed out waiting for " + path)


def run_tagi(bin_dir, world, batch, epochs, backend):
    tmp = tempfile.mkdtemp(prefix="tagi-bench-")
    job = json.load(open(os.path.join(ROOT, "examples/fmnist_fnn.json")))
    job.update(batchSize=batch, epochs=epochs, worldSize=world, reduction="SUM")
    if backend:
        job["backend"] = backend
    job_path = os.path.join(tmp, "job.json")
    json.dump(job, open(job_path, "w"))
    procs = []
    try:
        procs.append(subprocess.Popen(
            [bin_dir + "/tagi-coordinator", "--world", str(world), "--listen", "127.0.0.1:0",
             "--port-file", tmp + "/port"], stderr=subprocess.DEVNULL))
        coord = "127.0.0.1:" + wait_file(tmp + "/port")
        for _ in range(world):
            procs.append(subprocess.Popen([bin_dir + "/tagi-worker", "--coord", coord, "--threads", "1"],
                                          stderr=subprocess.DEVNULL))
        ctl = [bin_dir + "/tagictl", "--coord", coord]
        end = time.time() + 20  # wait until every worker is registered and idle
        while time.time() < end:
            out = subprocess.run(ctl + ["workers"], capture_output=True, text=True).stdout
            if out.count("IDLE") == world:
                break
            time.sleep(0.05)
        job_id = subprocess.run(ctl + ["submit", job_path], capture_output=True, text=True,
                                check=True).stdout.strip()
        subprocess.run(ctl + ["watch", job_id], capture_output=True, check=True)
        st = json.loads(subprocess.run(ctl + ["status", job_id, "--json"], capture_output=True,
                                       text=True, check=True).stdout)
        p = st["progress"]
        seconds = sum(e["seconds"] for e in p["epochs"])
        steps = int(p["globalStep"])
        return {"first_step_s": st.get("rendezvousSeconds", 0.0),
                "data_s": p.get("dataSeconds", 0.0), "group_s": p.get("groupSeconds", 0.0),
                "samples_per_s": steps * batch * world / seconds,
                "allreduce_ms": 1e3 * p.get("allreduceSeconds", 0.0),
                "step_ms": 1e3 * p.get("stepSeconds", 0.0),
                "allreduce_bytes": int(p.get("allreduceBytes", 0)),
                "test_accuracy": p["epochs"][-1]["testAccuracy"]}
    finally:
        for pr in procs:
            pr.terminate()
        for pr in procs:
            pr.wait(10)


def run_torch(world, batch, epochs):
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(TORCH_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1", BENCH_T0=repr(time.time()))
    # --redirects 1 --tee 1: Debian's torch 1.13 under Python 3.11 cannot parse
    # the default "0" (enum.Flag no longer iterates its zero member), so
    # torchrun crashes at start; teeing stdout works and keeps it visible.
    out = subprocess.run([TORCH_PYTHON, "-m", "torch.distributed.run", "--standalone",
                          "--redirects", "1", "--tee", "1",
                          "--nproc_per_node", str(world), f.name, str(batch), str(epochs)],
                         capture_output=True, text=True, env=env)
    os.unlink(f.name)
    for line in out.stdout.splitlines():
        if "RESULT " in line:
            return eval(line[line.index("RESULT ") + 7:])
    raise RuntimeError("torchrun failed:\n" + out.stderr[-2000:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--backend", default="", help="TCP_RING (default) or GLOO")
    args = ap.parse_args()
    bin_dir = os.path.join(args.build, "bin")
    rows = {}
    for batch in (128, 16):
        for world in (1, 2):
            rows[("tagi", batch, world)] = run_tagi(bin_dir, world, batch, args.epochs, args.backend)
            if not args.skip_torch:
                rows[("torch", batch, world)] = run_torch(world, batch, args.epochs)
    print("%-6s %5s %5s %12s %10s %12s %10s %12s" % ("system", "batch", "world", "samples/s",
          "first step", "allreduce", "bytes", "AR share"))
    for (system, batch, world), r in rows.items():
        share = r["allreduce_ms"] / r["step_ms"] if r.get("step_ms") else float("nan")
        print("%-6s %5d %5d %12.0f %9.2fs %10.3fms %10d %11.0f%%" % (
            system, batch, world, r["samples_per_s"], r["first_step_s"], r["allreduce_ms"],
            r["allreduce_bytes"], 100 * share if world > 1 else 0))
    for system in ("tagi", "torch"):
        for batch in (128, 16):
            one, two = rows.get((system, batch, 1)), rows.get((system, batch, 2))
            if one and two:
                print("%s B=%d: 2 workers / 1 worker = %.2fx" % (
                    system, batch, two["samples_per_s"] / one["samples_per_s"]))
    for (system, batch, world), r in rows.items():
        if system == "tagi":
            print("tagi B=%d W=%d: first step %.3f s = data %.3f s + group %.3f s + model/step %.3f s" % (
                batch, world, r["first_step_s"], r["data_s"], r["group_s"],
                r["first_step_s"] - r["data_s"] - r["group_s"]))
    print("JSON " + json.dumps({"%s/B%d/W%d" % k: v for k, v in rows.items()}))


if __name__ == "__main__":
    main()
