#!/usr/bin/env python3
"""Training throughput of our engine next to the reference library's (pytagi).

Measures samples/s of full training steps (forward, output update of the
10-class hierarchical softmax, backward, parameter update) of the same MLP,
784-H-ReLU-H-ReLU-11, in tagi-ddp and in pytagi 0.2.1 (cuTAGI's wheel on PyPI),
on one device:
  a: 784-100-100-11,   B = 16   (engine_bench's (a))
  b: 784-1024-1024-11, B = 128  (engine_bench's (b))
  c: 784-4096-4096-11, B = 128  (gpu_bench's network, the GPU headline)
Inputs are N(0, 1) draws and labels uniform, from a pool of 16 batches, as in
our benches: the work per step does not depend on the data. sigma_v = 1.

  bench/pytagi_compare.py --device cpu  [--networks a,b] [--threads 1,2] [--seconds 8] [--json]
  bench/pytagi_compare.py --device cuda [--networks a,b,c] [--gpu 0] [--seconds 10] [--json]

Our side runs the prebuilt benches of --bin-dir (default build/bin) with
--json and takes their samples/s: engine_bench on the CPU (a and b in its
default run, c with --hidden 4096 --batch 128; 1 and 2 threads), gpu_bench
--hidden H --batch B on CUDA. The pytagi side runs in a child process of --pytagi-python (default this
interpreter), one per network and thread count, through pytagi's public API:
Sequential(Linear, ReLU, ...), set_threads(T) on the CPU (its layers split
each loop over T std::threads; no BLAS; the default is 4 per layer) or
to_device("cuda:N"), Utils().label_to_obs() for the hierarchical-softmax
targets (computed once for the pool, as pytagi's data loaders do), and per
step net(x), OutputUpdater.update_using_indices(...), net.backward(),
net.step(). pytagi's forward copies the outputs to the host every step; our
gpu_bench synchronises every 20 steps. The wheel's CUDA code is its own
kernels (its module links no cuBLAS), built for sm_75/80/86 with PTX, which
the driver JIT-compiles on an H100/H200 at first use (hence a longer warm-up).

Getting pytagi (bench/pytagi_wheel.sh; nothing runs it automatically):
  here, with network:  bench/pytagi_wheel.sh fetch          # .whl/: pytagi and numpy wheels
                                                            # (cp311, cp312) and Debian .debs
  where it runs:       bench/pytagi_wheel.sh install        # offline: .whl/site-cpXY, .whl/prefix
                       eval "$(bench/pytagi_wheel.sh env)"  # PYTHONPATH, LD_LIBRARY_PATH
                       bench/pytagi_compare.py --device cuda --bin-dir build/bin
The GPU machine has no network: .whl/ (git-ignored) travels with the device
tool (carry: [".whl"]). The wheel's native module needs libmpi.so.40 and
libmpi_cxx.so.40 (OpenMPI 4) and libnccl.so.2, which it does not ship:
`import pytagi` fails without them, even on a CPU. fetch downloads Debian 12's
libopenmpi3 and the libraries it loads (hwloc, libevent, udev) with
`apt-get download`; install unpacks them with `dpkg -x` into .whl/prefix (no
system install), and env points LD_LIBRARY_PATH there and at a libnccl.so.2
already present (the GPU machine's nvidia-nccl wheel, or CUDA's lib folder).
Installing Debian's libopenmpi3 system-wide works as well.
"""
import argparse, json, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETWORKS = {  # key: (hidden width, batch)
    "a": (100, 16),
    "b": (1024, 128),
    "c": (4096, 128),
}
POOL = 16  # distinct batches


def network_name(key):
    hidden = NETWORKS[key][0]
    return "%s: 784-%d-%d-11" % (key, hidden, hidden)


def flops_per_sample(key):
    """Seven products of 2*in*out flops per LINEAR layer (our benches' convention)."""
    hidden = NETWORKS[key][0]
    return 7 * 2 * (784 * hidden + hidden * hidden + hidden * 11)


# ---------------------------------------------------------------- pytagi side (child process)

def pytagi_probe():
    import pytagi
    import pytagi.cuda
    out = {"pytagi_version": pytagi.__version__.strip(), "module": pytagi.__file__}
    try:
        out["cuda_available"] = bool(pytagi.cuda.is_available())
        out["cuda_devices"] = pytagi.cuda.get_device_count() if out["cuda_available"] else 0
    except RuntimeError as e:  # 0.2.1 raises instead of returning False without a driver
        out["cuda_available"] = False
        out["cuda_error"] = str(e)
    return out


def pytagi_train(key, device, gpu, threads, seconds, min_steps):
    import numpy as np
    import pytagi
    from pytagi import Utils
    from pytagi.nn import Linear, OutputUpdater, ReLU, Sequential

    hidden, batch = NETWORKS[key]
    pytagi.manual_seed(1)
    net = Sequential(Linear(784, hidden), ReLU(), Linear(hidden, hidden), ReLU(),
                     Linear(hidden, 11))
    if device == "cuda":
        net.to_device("cuda:%d" % gpu)
    else:
        net.set_threads(threads)
    net.train()
    updater = OutputUpdater(net.device)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((POOL, batch * 784), dtype=np.float32)
    labels = rng.integers(0, 10, POOL * batch)
    y, y_idx, num_obs = Utils().label_to_obs(labels, 10)  # 4 nodes per label for K = 10
    y = y.astype(np.float32).reshape(POOL, batch * num_obs)
    y_idx = y_idx.reshape(POOL, batch * num_obs)
    var_y = np.ones(batch * num_obs, np.float32)  # sigma_v = 1

    def step(i):
        k = i % POOL
        net(x[k])
        updater.update_using_indices(net.output_z_buffer, y[k], var_y, y_idx[k],
                                     net.input_delta_z_buffer)
        net.backward()
        net.step()

    warmup = 5 if device == "cuda" else 2  # CUDA: the wheel's PTX is JIT-compiled for sm_90
    for i in range(warmup):
        step(i)
    steps = 0
    start = time.perf_counter()
    while True:
        step(steps)
        steps += 1
        if steps >= min_steps and time.perf_counter() - start >= seconds:
            break
    if device == "cuda":
        net.get_outputs()  # a device-to-host copy: waits for the last step's kernels
    elapsed = time.perf_counter() - start
    return {"samples_per_second": steps * batch / elapsed, "steps": steps, "seconds": elapsed,
            "device": net.device}


def child_main(args):
    try:
        if args.worker == "probe":
            r = pytagi_probe()
        else:
            r = pytagi_train(args.worker, args.device, args.gpu, args.threads[0], args.seconds,
                             args.min_steps)
    except ImportError as e:  # no wheel on sys.path, or no libmpi.so.40 / libnccl.so.2
        r = {"error": "%s: %s (see bench/pytagi_wheel.sh: install, then eval \"$(... env)\")"
                      % (type(e).__name__, e)}
    except Exception as e:  # reported by the parent, with the cause
        r = {"error": "%s: %s" % (type(e).__name__, e)}
    print("RESULT " + json.dumps(r), flush=True)


def run_child(args, worker, threads=1):
    cmd = [args.pytagi_python, os.path.abspath(__file__), "--worker", worker, "--device",
           args.device, "--gpu", str(args.gpu), "--threads", str(threads), "--seconds",
           str(args.seconds), "--min-steps", str(args.min_steps)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": "no result within --timeout %d s" % args.timeout}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (out.stderr.strip().splitlines() or ["exit code %d" % out.returncode])[-1]
    return {"error": "pytagi child failed (%s); see bench/pytagi_wheel.sh" % tail}


# ---------------------------------------------------------------- our side

def json_lines(cmd, timeout):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (cmd[0], out.returncode, out.stderr.strip()))
    rows = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    return rows, out.stdout.strip()


# Each returns ({(key, threads): the bench's JSON row}, why any other row is missing).
def ours_cpu(args, keys):
    exe = os.path.join(args.bin_dir, "engine_bench")
    found = {}
    if set(keys) & {"a", "b"}:  # its default run times a and b at 1 and 2 threads
        rows, _ = json_lines([exe, "--json", "--seconds", str(args.seconds)], args.timeout)
        found.update({(r["bench"].split(":")[0], r["threads"]): r for r in rows})
    if "c" in keys:
        hidden, batch = NETWORKS["c"]
        rows, _ = json_lines([exe, "--json", "--seconds", str(args.seconds), "--hidden",
                              str(hidden), "--batch", str(batch)], args.timeout)
        found.update({("c", r["threads"]): r for r in rows})
    return found, "engine_bench times 1 and 2 threads only"


def ours_cuda(args, keys):
    exe = os.path.join(args.bin_dir, "gpu_bench")
    found = {}
    for key in keys:
        hidden, batch = NETWORKS[key]
        rows, text = json_lines([exe, "--json", "--device", str(args.gpu), "--seconds",
                                 str(args.seconds), "--batch", str(batch), "--hidden",
                                 str(hidden)], args.timeout)
        if not rows:  # no device: it says why and exits 0
            return {}, text
        found[(key, 0)] = rows[0]
    return found, ""


# ---------------------------------------------------------------- the comparison

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--gpu", type=int, default=0, help="CUDA device ordinal")
    ap.add_argument("--networks", default="", help="comma-separated a,b,c (default: cpu a,b; cuda a,b,c)")
    ap.add_argument("--threads", default="1,2", help="CPU thread counts (our engine_bench: 1 and 2)")
    ap.add_argument("--seconds", type=float, default=5.0, help="timed seconds per measurement")
    ap.add_argument("--min-steps", type=int, default=3, help="timed steps at least")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--pytagi-python", default=sys.executable)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per child process")
    ap.add_argument("--skip-ours", action="store_true")
    ap.add_argument("--skip-pytagi", action="store_true")
    ap.add_argument("--json", action="store_true", help="end with a line 'JSON {...}'")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")] if args.device == "cpu" else [0]
    if args.worker:
        return child_main(args)
    keys = [k for k in (args.networks or ("a,b" if args.device == "cpu" else "a,b,c")).split(",")]
    if any(k not in NETWORKS for k in keys):
        ap.error("--networks: expected a comma-separated list of a, b, c")

    probe = {"error": "skipped"} if args.skip_pytagi else run_child(args, "probe")
    if "pytagi_version" in probe:
        cuda = ("yes, %d device(s)" % probe["cuda_devices"] if probe["cuda_available"]
                else "no (%s)" % probe.get("cuda_error", "is_available() is False"))
        print("pytagi %s (%s); CUDA available to pytagi: %s" % (
            probe["pytagi_version"], probe["module"], cuda), flush=True)
    pytagi_reason = probe.get("error", "")
    if not pytagi_reason and args.device == "cuda" and not probe["cuda_available"]:
        pytagi_reason = "pytagi sees no CUDA device"

    ours, ours_reason = {}, "skipped"
    if not args.skip_ours:
        try:
            ours, ours_reason = (ours_cpu if args.device == "cpu" else ours_cuda)(args, keys)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:  # no binary, a failure
            ours_reason = "%s (build it, or pass --bin-dir)" % e
    rows = []
    for key in keys:
        for t in args.threads:
            row = {"network": network_name(key), "batch": NETWORKS[key][1],
                   "device": args.device if args.device == "cpu" else "cuda:%d" % args.gpu,
                   "threads": t}
            o = ours.get((key, t))
            row["ours"] = o["samples_per_second"] if o else None
            if not o:
                row["ours_note"] = ours_reason
            elif args.device == "cuda":
                row["gpu_name"] = o["device"]
            if pytagi_reason:
                p = {"error": pytagi_reason}
            else:
                print("pytagi %s threads %d ..." % (network_name(key), t), file=sys.stderr,
                      flush=True)
                p = run_child(args, key, t)
            row["pytagi"] = p.get("samples_per_second")
            row["pytagi_steps"] = p.get("steps")
            if "error" in p:
                row["pytagi_note"] = p["error"]
            row["ratio"] = row["ours"] / row["pytagi"] if row["ours"] and row["pytagi"] else None
            rows.append(row)
    print_table(rows)
    if args.json:
        print("JSON " + json.dumps({"probe": probe, "rows": rows}))


def print_table(rows):
    def num(v, fmt):
        return fmt % v if v is not None else "-"
    print("%-22s %4s %7s %7s %12s %8s %12s %8s %7s %12s" % (
        "network", "B", "device", "threads", "ours/s", "GFLOP/s", "pytagi/s", "GFLOP/s",
        "steps", "ours/pytagi"))
    for r in rows:
        f = flops_per_sample(r["network"][0]) / 1e9
        print("%-22s %4d %7s %7s %12s %8s %12s %8s %7s %12s" % (
            r["network"], r["batch"], r["device"], r["threads"] or "-",
            num(r["ours"], "%.0f"), num(r["ours"] and r["ours"] * f, "%.1f"),
            num(r["pytagi"], "%.1f"), num(r["pytagi"] and r["pytagi"] * f, "%.2f"),
            num(r["pytagi_steps"], "%d"), num(r["ratio"], "%.1fx")))
    for name in sorted({r["gpu_name"] for r in rows if "gpu_name" in r}):
        print("  GPU: %s" % name)
    notes = {}  # (side, note) -> networks, in order
    for r in rows:
        for side in ("ours", "pytagi"):
            if r.get(side + "_note"):
                nets = notes.setdefault((side, r[side + "_note"]), [])
                if r["network"][0] not in nets:
                    nets.append(r["network"][0])
    for (side, note), nets in notes.items():
        print("  %s (%s): %s" % (side, ",".join(nets), note))


if __name__ == "__main__":
    main()
