#!/usr/bin/python3
"""The cost in accuracy of a 16-bit wire (JobSpec.wirePrecision).

Trains the Fashion-MNIST MLP (examples/fmnist_fnn.json) and CNN
(examples/fmnist_cnn.json, batch 64 per rank: the example's global 128) on two
ranks over the TCP ring (tagi-train --world_schedule 0:2: two rank threads on
loopback, the workers' code path) for 1 and 3 epochs, with FP32, BF16 and FP16
on the wire, and reports test accuracy, log-likelihood, the parameter
checksum, and the smallest variance of the final model (every variance must
stay positive and finite).

  bench/wire_accuracy.py [--build build] [--networks fmnist_fnn,fmnist_cnn]
                         [--epochs 1,3] [--out wire_accuracy.json]
"""
import argparse, json, math, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))


def min_variance(path):
    from tagi_ddp.model import load_model
    var = load_model(path).var
    bad = [v for v in var if not math.isfinite(v) or v <= 0]
    return bad[0] if bad else float(min(var))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--networks", default="fmnist_fnn,fmnist_cnn")
    ap.add_argument("--epochs", default="1,3")
    ap.add_argument("--wires", default="FP32,BF16,FP16")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    train = os.path.join(args.build, "bin", "tagi-train")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for net in args.networks.split(","):
            with open(os.path.join(ROOT, "examples", net + ".json")) as f:
                base = json.load(f)
            for epochs in [int(e) for e in args.epochs.split(",")]:
                for wire in args.wires.split(","):
                    job = dict(base, wirePrecision=wire, worldSize=2, epochs=epochs)
                    if net == "fmnist_cnn":
                        job["batchSize"] = 64
                    path = os.path.join(tmp, f"{net}_{wire}_{epochs}.json")
                    model = path.replace(".json", ".tagi")
                    with open(path, "w") as f:
                        json.dump(job, f)
                    out = subprocess.run([train, "--world_schedule", "0:2", "--json",
                                          "--progress=false", "--out", model, path],
                                         capture_output=True, text=True, check=True)
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    row = {"network": net, "epochs": epochs, "wire": wire,
                           "test_accuracy": r["test_accuracy"],
                           "test_log_likelihood": r["test_log_likelihood"],
                           "checksum": r["parameter_checksum"],
                           "train_seconds": r["train_seconds"],
                           "min_variance": min_variance(model)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print()
    print("| network | epochs | wire | test accuracy | vs FP32 | log-likelihood | smallest variance |")
    print("|---|---|---|---|---|---|---|")
    ref = {(r["network"], r["epochs"]): r for r in rows if r["wire"] == "FP32"}
    for r in rows:
        base = ref.get((r["network"], r["epochs"]))
        delta = 100 * (r["test_accuracy"] - base["test_accuracy"]) if base else float("nan")
        print(f"| {r['network']} | {r['epochs']} | {r['wire']} | {100 * r['test_accuracy']:.2f} % "
              f"| {delta:+.2f} | {r['test_log_likelihood']:.4f} | {r['min_variance']:.3g} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
