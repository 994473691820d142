#!/usr/bin/env python3
"""Sum Nsight Compute's per-kernel GPU times by family.

    bench/kernel_split.py NCU.csv [--top N]

NCU.csv is `ncu --csv --metrics gpu__time_duration.sum ...` output (the
program's own lines before the CSV header are skipped). Families: our own
kernels (their names carry the tagi:: namespace), convolution-library
kernels (cuDNN's, and the CUTLASS/xmma kernels it calls, named for
convolutions: conv, fprop, dgrad, wgrad, implicit), matrix-product kernels
(gemm: cuBLAS's, or cuDNN's own GEMMs) and the rest (copies and fills named by
the runtime). tools/device_kit.sh runs it on the GPU machine.
"""
import argparse
import csv
import io
import sys
from collections import defaultdict

UNITS = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6,
         "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
CONV_WORDS = ("conv", "fprop", "dgrad", "wgrad", "implicit", "cudnn", "fft", "winograd")


def family(name):
    low = name.lower()
    if "tagi::" in name:
        return "ours"
    if any(w in low for w in CONV_WORDS):
        return "convolution library"
    if "gemm" in low or "cublas" in low:
        return "matrix product library"
    return "other"


def read(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"ID","Process ID"')
    if start < 0:
        raise ValueError("%s holds no ncu CSV header" % path)
    rows = []
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = UNITS.get(row.get("Metric Unit", ""))
        if unit is None:
            raise ValueError("unknown unit %r" % row.get("Metric Unit"))
        value = float(row["Metric Value"].replace(",", ""))
        rows.append((row["Kernel Name"], value * unit))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    try:
        rows = read(args.csv)
    except (OSError, ValueError) as e:
        print("kernel_split: %s" % e, file=sys.stderr)
        return 1
    if not rows:
        print("kernel_split: no kernel times in %s" % args.csv, file=sys.stderr)
        return 1
    total = sum(t for _, t in rows)
    by_family = defaultdict(lambda: [0.0, 0])
    by_name = defaultdict(lambda: [0.0, 0])
    for name, t in rows:
        f = by_family[family(name)]
        f[0] += t
        f[1] += 1
        short = name.split("(")[0][-90:]
        n = by_name[short]
        n[0] += t
        n[1] += 1
    print("kernel_split: %d launches, %.1f ms of GPU time" % (len(rows), total / 1e3))
    for fam, (t, n) in sorted(by_family.items(), key=lambda kv: -kv[1][0]):
        print("  %-24s %6.1f %%  %9.1f ms  %6d launches" % (fam, 100 * t / total, t / 1e3, n))
    print("  top kernels:")
    for name, (t, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print("  %6.1f %%  %6d x %8.1f us  %s" % (100 * t / total, n, t / n, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
