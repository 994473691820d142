#!/usr/bin/env python3
"""Image networks: our CPU engine next to the reference library (pytagi), side by side.

Samples/s of full training steps (forward, hierarchical-softmax output update,
backward, parameter update) on random inputs, at 1 and 2 threads, for
  cnn:      examples/fmnist_cnn.json (the reference's MNIST-tutorial CNN), B = 128, sigma_v 0.2
  resnet18: examples/cifar10_resnet18.json (its ResNet18 for CIFAR-10), B = 16, sigma_v 0.05
Our side is build/bin/cnn_bench --json on the job files; pytagi's the same
network through its public API (Sequential of Conv2d, ReLU / MixtureReLU,
BatchNorm2d, AvgPool2d, ResNetBlock(LayerBlock(...)), Linear; set_threads(T);
Utils.label_to_obs; OutputUpdater.update_using_indices; backward; step), in a
child process per figure. pytagi is slow on these (about 20 samples/s on the
CNN): each of its figures runs at least --min-steps steps.

  eval "$(bench/pytagi_wheel.sh env)"   # after bench/pytagi_wheel.sh fetch + install
  bench/pytagi_cnn_compare.py [--networks cnn,resnet18] [--seconds 20] [--min-steps 2] [--json]

With --device cuda (on a GPU machine: tools/device_kit.sh runs it) both run on
the GPU: our build/bin/gpu_cnn_bench, pytagi after net.to_device("cuda:0"), at
the batches of issue 13 (the CNN at B = 128, ResNet18 on 3x32x32 at B = 64 and
128).

Nothing runs this during a build or a test.
"""
import argparse
import json
import os
import subprocess
import sys
import time

NETWORKS = {"cnn": ("examples/fmnist_cnn.json", 128), "resnet18": ("examples/cifar10_resnet18.json", 16)}


def build_pytagi(key):
    from pytagi.nn import (AvgPool2d, BatchNorm2d, Conv2d, LayerBlock, Linear, MixtureReLU, ReLU,
                           ResNetBlock, Sequential)
    if key == "cnn":
        return Sequential(
            Conv2d(1, 32, 4, bias=False, padding=1, in_width=28, in_height=28), ReLU(),
            BatchNorm2d(32), AvgPool2d(3, 2), Conv2d(32, 64, 5, bias=False), ReLU(),
            BatchNorm2d(64), AvgPool2d(3, 2), Linear(1024, 256), ReLU(), Linear(256, 11)), 784, 0.2
    g = 0.083

    def block(cin, cout, stride=1, padding_type=1):
        return LayerBlock(
            Conv2d(cin, cout, 3, bias=False, stride=stride, padding=1, padding_type=padding_type,
                   gain_weight=g), MixtureReLU(), BatchNorm2d(cout),
            Conv2d(cout, cout, 3, bias=False, padding=1, gain_weight=g), MixtureReLU(),
            BatchNorm2d(cout))

    layers = [Conv2d(3, 64, 3, bias=False, padding=1, in_width=32, in_height=32, gain_weight=g),
              MixtureReLU(), BatchNorm2d(64), ResNetBlock(block(64, 64)), ResNetBlock(block(64, 64))]
    for cin, cout in ((64, 128), (128, 256), (256, 512)):
        shortcut = LayerBlock(Conv2d(cin, cout, 2, bias=False, stride=2, gain_weight=g),
                              MixtureReLU(), BatchNorm2d(cout))
        layers += [ResNetBlock(block(cin, cout, 2, 2), shortcut), ResNetBlock(block(cout, cout))]
    layers += [AvgPool2d(4), Linear(512, 11, gain_weight=g, gain_bias=g)]
    return Sequential(*layers), 3072, 0.05


GPU_RUNS = [("cnn", 128), ("resnet18", 64), ("resnet18", 128)]


def pytagi_train(key, threads, seconds, min_steps, batch=None, device="cpu"):
    import numpy as np
    import pytagi
    from pytagi import Utils
    from pytagi.nn import OutputUpdater
    batch = batch or NETWORKS[key][1]
    pytagi.manual_seed(1)
    net, width, sigma_v = build_pytagi(key)
    if device == "cuda":
        net.to_device("cuda:0")
    else:
        net.set_threads(threads)
    net.train()
    updater = OutputUpdater(net.device)
    pool = 4
    rng = np.random.default_rng(7)
    x = rng.standard_normal((pool, batch * width), dtype=np.float32)
    labels = rng.integers(0, 10, pool * batch)
    y, y_idx, num_obs = Utils().label_to_obs(labels, 10)
    y = y.astype(np.float32).reshape(pool, batch * num_obs)
    y_idx = y_idx.reshape(pool, batch * num_obs)
    var_y = np.full(batch * num_obs, sigma_v * sigma_v, np.float32)

    def step(i):
        k = i % pool
        net(x[k])
        updater.update_using_indices(net.output_z_buffer, y[k], var_y, y_idx[k],
                                     net.input_delta_z_buffer)
        net.backward()
        net.step()

    step(0)
    steps = 0
    start = time.perf_counter()
    while steps < min_steps or time.perf_counter() - start < seconds:
        step(steps)
        steps += 1
    elapsed = time.perf_counter() - start
    return {"samples_per_second": steps * batch / elapsed, "steps": steps, "seconds": elapsed}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--networks", default="cnn,resnet18")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--min-steps", type=int, default=2)
    p.add_argument("--bin-dir", default="build/bin")
    p.add_argument("--json", action="store_true")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--batch", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        try:
            r = pytagi_train(args.worker, args.threads, args.seconds, args.min_steps,
                             args.batch or None, args.device)
        except Exception as e:  # reported by the parent
            r = {"error": "%s: %s" % (type(e).__name__, e)}
        print("RESULT " + json.dumps(r), flush=True)
        return 0
    if args.device == "cuda":
        return compare_gpu(args)
    rows = []
    for key in args.networks.split(","):
        path, batch = NETWORKS[key]
        out = subprocess.run([os.path.join(args.bin_dir, "cnn_bench"), "--json", "--seconds",
                              str(args.seconds), "%s:%d" % (path, batch)],
                             capture_output=True, text=True, check=True)
        ours = {r["threads"]: r for r in map(json.loads, out.stdout.splitlines())}
        for threads in (1, 2):
            child = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--worker", key, "--threads",
                 str(threads), "--seconds", str(args.seconds), "--min-steps", str(args.min_steps)],
                capture_output=True, text=True)
            theirs = next((json.loads(l[7:]) for l in child.stdout.splitlines()
                           if l.startswith("RESULT ")), {"error": child.stderr.strip()[-300:]})
            row = {"network": key, "batch": batch, "threads": threads,
                   "ours": ours[threads]["samples_per_second"],
                   "pytagi": theirs.get("samples_per_second"), "pytagi_error": theirs.get("error")}
            if row["pytagi"]:
                row["ratio"] = row["ours"] / row["pytagi"]
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print("%-9s B %3d threads %d  tagi-ddp %8.1f samples/s  pytagi %s  %s" % (
                    key, batch, threads, row["ours"],
                    "%8.2f samples/s" % row["pytagi"] if row["pytagi"] else row["pytagi_error"],
                    "(%.0fx)" % row["ratio"] if "ratio" in row else ""), flush=True)
    return 0


def compare_gpu(args):
    """Both on the GPU, one row per (network, batch) of GPU_RUNS."""
    keys = args.networks.split(",")
    for key, batch in GPU_RUNS:
        if key not in keys:
            continue
        path = NETWORKS[key][0]
        out = subprocess.run([os.path.join(args.bin_dir, "gpu_cnn_bench"), "--json", "--fused-only",
                              "--seconds", str(args.seconds), "%s:%d" % (path, batch)],
                             capture_output=True, text=True)
        ours = next((json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")),
                    {"error": out.stderr.strip()[-300:]})
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker", key, "--device", "cuda",
             "--batch", str(batch), "--seconds", str(args.seconds), "--min-steps",
             str(args.min_steps)], capture_output=True, text=True)
        theirs = next((json.loads(l[7:]) for l in child.stdout.splitlines()
                       if l.startswith("RESULT ")), {"error": child.stderr.strip()[-300:]})
        row = {"network": key, "batch": batch, "device": ours.get("device", "cuda"),
               "ours": ours.get("samples_per_second"), "ours_error": ours.get("error"),
               "pytagi": theirs.get("samples_per_second"), "pytagi_error": theirs.get("error")}
        if row["ours"] and row["pytagi"]:
            row["ratio"] = row["ours"] / row["pytagi"]
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
