#!/usr/bin/env python3
"""The CPU engine beside PyTorch on the same networks, in one run (issue 28's ratios).

  /usr/bin/python3 bench/engine_vs_torch.py [--bin build/bin] [--rounds 3] [--seconds 6]
      [--threads 1,2] [--only cnn|resnet18]

For each network and thread count it alternates, round by round, cnn_bench
(the engine's training step on examples/fmnist_cnn.json at B 128 and
examples/cifar10_resnet18.json at B 16) and PyTorch training the same
network (Adam for the CNN, SGD with momentum for ResNet18, on random inputs
and labels), each for about --seconds. At 1 thread both are pinned to the
same core (taskset and sched_setaffinity); at N threads to the first N
cores. It prints the median samples/s of each and their ratio (engine over
PyTorch), and --json one line per row.

TAGI does seven products per layer where SGD's backward does three, so the
ratio at equal efficiency per product is about 0.43 (the issue's ceiling).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

NETWORKS = {
    "cnn": ("examples/fmnist_cnn.json", 128),
    "resnet18": ("examples/cifar10_resnet18.json", 16),
}


def torch_network(name):
    import torch
    from torch import nn
    if name == "cnn":
        # examples/fmnist_cnn.json: the output layer has 11 units there
        # (the classification head's hierarchical code); the same here.
        net = nn.Sequential(
            nn.Conv2d(1, 32, 4, padding=1, bias=False), nn.ReLU(), nn.BatchNorm2d(32),
            nn.AvgPool2d(3, 2),
            nn.Conv2d(32, 64, 5, bias=False), nn.ReLU(), nn.BatchNorm2d(64),
            nn.AvgPool2d(3, 2),
            nn.Flatten(), nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, 11))
        return net, torch.optim.Adam(net.parameters(), lr=1e-3), (1, 28, 28), 11
    sys.path.insert(0, HERE)
    from torch_resnet18_memory import resnet18
    net = resnet18()
    return net, torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9), (3, 32, 32), 10


def torch_rate(name, batch, threads, seconds):
    """PyTorch's training samples/s, in a child pinned like the engine."""
    code = f"""
import os, sys, time, torch
sys.path.insert(0, {HERE!r})
from engine_vs_torch import torch_network
os.sched_setaffinity(0, set(range({threads})))
torch.set_num_threads({threads})
torch.manual_seed(0)
net, opt, shape, k = torch_network({name!r})
x = torch.randn({batch}, *shape)
y = torch.randint(0, k, ({batch},))
loss = torch.nn.CrossEntropyLoss()
def step():
    opt.zero_grad()
    loss(net(x), y).backward()
    opt.step()
step()
steps, start = 0, time.perf_counter()
while time.perf_counter() - start < {seconds} or steps < 2:
    step()
    steps += 1
print(steps * {batch} / (time.perf_counter() - start))
"""
    out = subprocess.run(["/usr/bin/python3", "-c", code], check=True, capture_output=True,
                         text=True, timeout=600)
    return float(out.stdout.strip().splitlines()[-1])


def engine_rate(binary, job, batch, threads, seconds):
    cores = ",".join(str(c) for c in range(threads))
    out = subprocess.run(["taskset", "-c", cores, binary, "--json", "--threads", str(threads),
                          "--seconds", str(seconds), f"{job}:{batch}"],
                         check=True, capture_output=True, text=True, timeout=600, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_second"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=6)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--only", choices=sorted(NETWORKS))
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    binary = os.path.join(a.bin, "cnn_bench")
    threads = [int(t) for t in a.threads.split(",")]
    if max(threads) > os.cpu_count():
        sys.exit(f"--threads {max(threads)}: this machine has {os.cpu_count()} cores")
    names = [a.only] if a.only else list(NETWORKS)
    for name in names:
        job, batch = NETWORKS[name]
        for t in threads:
            ours, theirs = [], []
            for _ in range(a.rounds):
                ours.append(engine_rate(binary, job, batch, t, a.seconds))
                theirs.append(torch_rate(name, batch, t, a.seconds))
            e, q = statistics.median(ours), statistics.median(theirs)
            row = {"network": name, "batch": batch, "threads": t, "engine": round(e, 1),
                   "torch": round(q, 1), "ratio": round(e / q, 3),
                   "engine_runs": [round(v, 1) for v in ours],
                   "torch_runs": [round(v, 1) for v in theirs],
                   "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
            if a.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"{name:9s} B {batch:3d} threads {t}: engine {e:8.1f} samples/s, "
                      f"torch {q:8.1f} samples/s, ratio {e / q:.3f} "
                      f"(runs {row['engine_runs']} / {row['torch_runs']})", flush=True)


if __name__ == "__main__":
    main()
