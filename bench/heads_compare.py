#!/usr/bin/env python3
"""The heads of docs/heads.md side by side: accuracy, NLL, ECE and Brier per epoch.

Classification: the reference's MNIST-tutorial CNN (examples/fmnist_cnn.json)
on Fashion-MNIST with hierarchical softmax, Remax and closed-form softmax
heads (tagi-train, one process), and PyTorch's same CNN (Adam 1e-3, softmax,
cross-entropy, batch 128) with the same test metrics.

Regression: examples/heteroscedastic.json on tools/heteroscedastic_data.py's
data (noise sd 0.05 .. 1.05 across the input) against the homoscedastic head
on the same network (1-128-128-1) at two sigma_v: the coverage of the 68 %
and 95 % predictive intervals, overall and on each half of the input range
(from the model file, predicted with the Python package).

  bench/heads_compare.py [--build build] [--epochs 3] [--train-limit N] [--threads 1]
                         [--heads hsm,remax,cfs] [--skip-torch] [--skip-classification]
                         [--skip-regression]
Needs Debian's python3-torch for the PyTorch column (not installed by make deps).
"""
import argparse
import gzip
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = "/usr/share/datasets/fashion-mnist/"
BINS = 15

EPOCH_LINE = re.compile(r"epoch (\d+)/\d+.*?test accuracy ([0-9.]+)%  test log-likelihood "
                        r"(-?[0-9.]+)  ECE ([0-9.]+)  Brier ([0-9.]+)")


def tagi_classification(bin_dir, example, name, edit, epochs, limit, threads, tmp):
    job = json.load(open(os.path.join(ROOT, "examples", example)))
    job.update(edit)
    job["name"] = name
    if limit:
        job["data"]["trainLimit"] = limit
    path = os.path.join(tmp, name + ".json")
    json.dump(job, open(path, "w"))
    t0 = time.time()
    r = subprocess.run([os.path.join(bin_dir, "tagi-train"), path, "--epochs", str(epochs),
                        "--threads", str(threads), "--progress=false"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tagi-train {name} failed:\n{r.stderr}")
    rows = []
    for m in EPOCH_LINE.finditer(r.stderr):
        rows.append({"epoch": int(m[1]), "accuracy": float(m[2]) / 100, "nll": -float(m[3]),
                     "ece": float(m[4]), "brier": float(m[5])})
    if len(rows) != epochs:
        sys.exit(f"tagi-train {name}: expected {epochs} epoch lines in:\n{r.stderr}")
    return rows, time.time() - t0


TORCH_SCRIPT = r'''
import gzip, json, sys, time
import numpy as np, torch, torch.nn as nn
epochs, limit, threads, bins = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(threads)
torch.manual_seed(1)
d = "/usr/share/datasets/fashion-mnist/"
def idx(name, off):
    with gzip.open(d + name) as f: return np.frombuffer(f.read(), np.uint8, offset=off)
def images(name): return torch.tensor(idx(name, 16).reshape(-1, 1, 28, 28), dtype=torch.float32) / 255
x = images("train-images-idx3-ubyte.gz"); y = torch.tensor(idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64))
xt = images("t10k-images-idx3-ubyte.gz"); yt = torch.tensor(idx("t10k-labels-idx1-ubyte.gz", 8).astype(np.int64))
if limit: x, y = x[:limit], y[:limit]
mean, std = x.mean(), x.std()
x, xt = (x - mean) / std, (xt - mean) / std
model = nn.Sequential(
    nn.Conv2d(1, 32, 4, padding=1, bias=False), nn.ReLU(), nn.BatchNorm2d(32), nn.AvgPool2d(3, 2),
    nn.Conv2d(32, 64, 5, bias=False), nn.ReLU(), nn.BatchNorm2d(64), nn.AvgPool2d(3, 2),
    nn.Flatten(), nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters(), 1e-3)
loss_fn = nn.CrossEntropyLoss()
g = torch.Generator().manual_seed(1)
rows = []
for epoch in range(epochs):
    model.train(); t0 = time.time()
    perm = torch.randperm(len(x), generator=g)
    for s in range(0, len(x) - 127, 128):
        b = perm[s:s + 128]
        opt.zero_grad(); loss_fn(model(x[b]), y[b]).backward(); opt.step()
    seconds = time.time() - t0
    model.eval()
    with torch.no_grad():
        p = torch.cat([torch.softmax(model(xt[i:i + 1000]), 1) for i in range(0, len(xt), 1000)]).double()
    conf, pred = p.max(1)
    right = (pred == yt).double()
    nll = -torch.log(p[torch.arange(len(yt)), yt].clamp_min(1e-12)).mean().item()
    onehot = torch.nn.functional.one_hot(yt, 10).double()
    brier = ((p - onehot) ** 2).sum(1).mean().item()
    which = (conf * bins).long().clamp(0, bins - 1)
    ece = sum(abs(conf[which == k].sum().item() - right[which == k].sum().item())
              for k in range(bins)) / len(yt)
    rows.append({"epoch": epoch + 1, "accuracy": right.mean().item(), "nll": nll, "ece": ece,
                 "brier": brier, "seconds": seconds})
print("RESULT " + json.dumps(rows))
'''


def torch_classification(epochs, limit, threads):
    python = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")
    t0 = time.time()
    r = subprocess.run([python, "-c", TORCH_SCRIPT, str(epochs), str(limit or 0), str(threads),
                        str(BINS)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"PyTorch failed:\n{r.stderr}")
    line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), time.time() - t0


def print_classification(results):
    print("\n| head | epoch | test accuracy | NLL | ECE | Brier |")
    print("|---|---|---|---|---|---|")
    for name, rows, _ in results:
        for r in rows:
            print(f"| {name} | {r['epoch']} | {100 * r['accuracy']:.2f} % | {r['nll']:.4f} | "
                  f"{r['ece']:.4f} | {r['brier']:.4f} |")
    print()
    for name, _, seconds in results:
        print(f"{name}: {seconds:.0f} s in all")


def regression(bin_dir, tmp, threads):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from tagi_ddp.model import load_model  # the package's numpy prediction
    data = os.path.join(tmp, "heteroscedastic")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools/heteroscedastic_data.py"), data,
                    "--train", "1000", "--test", "4000"], check=True)
    base = json.load(open(os.path.join(ROOT, "examples/heteroscedastic.json")))
    base["data"]["trainCsv"] = os.path.join(data, "train.csv")
    base["data"]["testCsv"] = os.path.join(data, "test.csv")
    xs, ys = [], []
    for line in open(os.path.join(data, "test.csv")).read().splitlines()[1:]:
        a, b = line.split(",")
        xs.append(float(a))
        ys.append(float(b))
    import numpy as np
    x, y = np.array(xs), np.array(ys)
    configs = [("heteroscedastic (EvenExp)", base)]
    for sigma in (0.2, 0.5):
        homo = json.loads(json.dumps(base))
        homo["layers"] = homo["layers"][:-1]
        homo["layers"][-1] = {"linear": {"inFeatures": 128, "outFeatures": 1}}
        homo["head"] = {"regression": {}}
        homo["noise"] = {"sigmaV": sigma}
        configs.append((f"homoscedastic, sigma_v {sigma}", homo))
    print("\n| head | coverage 68 % (x<0 / x>0) | coverage 95 % (x<0 / x>0) | mean sd | "
          "test log-lik |")
    print("|---|---|---|---|---|")
    for name, job in configs:
        path = os.path.join(tmp, "reg.json")
        model_path = os.path.join(tmp, "reg.tagi")
        json.dump(job, open(path, "w"))
        r = subprocess.run([os.path.join(bin_dir, "tagi-train"), path, "--json", "--threads",
                            str(threads), "--progress=false", "--out", model_path],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"tagi-train {name} failed:\n{r.stderr}")
        out = json.loads(r.stdout.strip().splitlines()[-1])
        model = load_model(model_path)
        mu, var = model.predict(x.reshape(-1, 1), sigma_v=job.get("noise", {}).get("sigmaV", 0.0))
        mu, sd = mu.reshape(-1), np.sqrt(var.reshape(-1))
        inside = {z: np.abs(y - mu) <= z * sd for z in (0.99445788, 1.95996398)}
        left, right = x < 0, x >= 0
        def cov(z):
            m = inside[z]
            return f"{100 * m.mean():.1f} % ({100 * m[left].mean():.1f} / {100 * m[right].mean():.1f})"
        print(f"| {name} | {cov(0.99445788)} | {cov(1.95996398)} | {out['test_mean_std']:.3f} | "
              f"{out['test_log_likelihood']:.3f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--heads", default="hsm,remax,cfs",
                   help="comma-separated subset of hsm, remax, cfs")
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--skip-classification", action="store_true")
    p.add_argument("--skip-regression", action="store_true")
    a = p.parse_args()
    bin_dir = os.path.join(a.build, "bin")
    tmp = tempfile.mkdtemp(prefix="tagi-heads-")
    if not a.skip_classification:
        cfs = json.load(open(os.path.join(ROOT, "examples/fmnist_cnn_remax.json")))
        cfs["layers"][-1] = {"closedFormSoftmax": {}}
        heads = [("hierarchical softmax", "fmnist_cnn.json", {}, "hsm"),
                 ("Remax", "fmnist_cnn_remax.json", {}, "remax"),
                 ("closed-form softmax", "fmnist_cnn_remax.json", {"layers": cfs["layers"]},
                  "cfs"),
                 ("closed-form softmax (sigma_v 0.2)", "fmnist_cnn_remax.json",
                  {"layers": cfs["layers"], "noise": {"sigmaV": 0.2}}, "cfs")]
        wanted = set(a.heads.split(","))
        heads = [h[:3] for h in heads if h[3] in wanted]
        results = []
        for name, example, edit in heads:
            rows, seconds = tagi_classification(bin_dir, example, re.sub(r"\W+", "-", name), edit,
                                                a.epochs, a.train_limit, a.threads, tmp)
            results.append(("TAGI " + name, rows, seconds))
            print_classification(results[-1:])
        if not a.skip_torch:
            rows, seconds = torch_classification(a.epochs, a.train_limit, a.threads)
            results.append(("PyTorch (Adam, softmax)", rows, seconds))
        print_classification(results)
    if not a.skip_regression:
        regression(bin_dir, tmp, a.threads)


if __name__ == "__main__":
    main()
