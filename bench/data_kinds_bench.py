#!/usr/bin/env python3
"""Load time, peak resident memory and training speed of Fashion-MNIST's 60,000
28x28 training images (and 10,000 test images) in each format a job reads:
IDX (the Debian package's gzip files), NPZ (stored), NPY pair, IMAGE_FOLDER
(PNG), each trained one epoch by tagi-train (784-100-100-11, batch 16).

    bench/data_kinds_bench.py [--bin build/bin] [--work /tmp/tagi-data-bench] [--threads 1]

Load time is the process's wall time minus its training time (the epoch and
its evaluation, which tagi-train reports as train_seconds): reading,
decoding, standardising and the start of the process. Peak memory is the
process's maximum resident set (os.wait4). samples/s is the epoch's.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_measured(bindir, job, path, threads):
    """tagi-train's JSON line, its wall time and its own peak RSS (MiB)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(job, f)
    start = time.monotonic()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        os.close(r)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.execv(os.path.join(bindir, "tagi-train"),
                 ["tagi-train", path, "--json", "--threads", str(threads), "--progress=false"])
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - start
    if status != 0:
        raise RuntimeError(f"{job['name']}: tagi-train exited with status {status}")
    return json.loads(out.strip().splitlines()[-1]), wall, usage.ru_maxrss / 1024.0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    p.add_argument("--work", default="/tmp/tagi-data-bench")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if not os.path.exists(os.path.join(args.work, "fmnist.npz")):
        t = time.monotonic()
        subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "make_fmnist_files.py"),
                        args.work], check=True)
        print(f"files written in {time.monotonic() - t:.1f} s")
    with open(os.path.join(HERE, "..", "examples", "fmnist_npz.json"), encoding="utf-8") as f:
        base = json.load(f)
    base["epochs"] = 1
    npy = os.path.join(args.work, "fmnist-npy")
    kinds = {
        "IDX (gzip)": {"kind": "FASHION_MNIST"},
        "NPZ (stored)": {"kind": "NUMPY", "npz": os.path.join(args.work, "fmnist.npz")},
        "NPY pair": {"kind": "NUMPY", "trainXNpy": f"{npy}/x_train.npy",
                     "trainYNpy": f"{npy}/y_train.npy", "testXNpy": f"{npy}/x_test.npy",
                     "testYNpy": f"{npy}/y_test.npy"},
        "IMAGE_FOLDER (PNG)": {"kind": "IMAGE_FOLDER",
                               "trainDir": os.path.join(args.work, "fmnist-png", "train"),
                               "testDir": os.path.join(args.work, "fmnist-png", "test")},
    }
    print(f"{'format':20} {'load s':>7} {'peak RSS MiB':>12} {'train samples/s':>16} "
          f"{'test acc':>8}  data fingerprint")
    for name, data in kinds.items():
        job = dict(base, name=name.split()[0].lower(), data=data)
        result, wall, rss = run_measured(args.bin, job, os.path.join(args.work, "job.json"),
                                         args.threads)
        load = wall - result["train_seconds"]
        print(f"{name:20} {load:7.2f} {rss:12.0f} {result['samples_per_second']:16.0f} "
              f"{result['test_accuracy']:8.4f}  {result['data_fingerprint']}")


if __name__ == "__main__":
    main(sys.argv[1:])
