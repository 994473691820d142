#!/usr/bin/env python3
"""Numpy predictions (tagi_ddp.load_model) against tagi-train --eval, on the same CNN and images.

Trains examples/fmnist_cnn.json (the reference's MNIST-tutorial CNN) on the
first --train-limit Fashion-MNIST images for one epoch with tagi-train (or
reuses --model), then times, best of --repeat runs each:

  - tagi-train --eval MODEL JOB --json on the first --images test images
    (the whole process: it reads the model and the images, then predicts);
  - numpy: read the same images (tagi_ddp.data.read_idx), load the model and
    compute the class probabilities (Model.class_probabilities), and the
    prediction alone.

Both score the images; their accuracy must agree exactly and their
log-likelihood to float32 precision (the script says so, and exits 1 if
not). It ends with the ratio numpy / tagi-train --eval.

  bench/python_predict.py [--bin build/bin] [--images 1000] [--train-limit 6000]
                          [--model cnn.tagi] [--repeat 3] [--batch-size 64] [--json]
Needs Debian's dataset-fashion-mnist, python3-numpy, and build/bin/tagi-train.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # noqa: E402

from tagi_ddp import data, load_model  # noqa: E402
from tagi_ddp.model import BATCH_SIZE  # noqa: E402


def job_file(path, images, train_limit):
    with open(os.path.join(ROOT, "examples", "fmnist_cnn.json"), encoding="utf-8") as f:
        job = json.load(f)
    job["data"] = {"kind": "FASHION_MNIST", "trainLimit": train_limit, "testLimit": images}
    job["epochs"] = 1
    job.pop("snapshotInterval", None)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(job, f, indent=1)
    return path


def best_of(repeat, run):
    """(fastest seconds, the result of its run) over `repeat` runs of run()."""
    best = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        seconds = time.perf_counter() - start
        if best is None or seconds < best[0]:
            best = (seconds, result)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=os.environ.get("TAGI_BIN_DIR",
                                                        os.path.join(ROOT, "build", "bin")))
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--train-limit", type=int, default=6000)
    parser.add_argument("--model", help="a model file of examples/fmnist_cnn.json's network "
                        "(default: train one here)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE,
                        help="Model.forward's samples per pass")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args()
    tagi_train = os.path.join(args.bin, "tagi-train")

    with tempfile.TemporaryDirectory(prefix="python-predict-") as tmp:
        job = job_file(os.path.join(tmp, "cnn.json"), args.images, args.train_limit)
        model_path = args.model
        if model_path is None:
            model_path = os.path.join(tmp, "cnn.tagi")
            start = time.perf_counter()
            subprocess.run([tagi_train, job, "--out", model_path, "--progress=false"],
                           check=True, capture_output=True)
            print(f"trained on {args.train_limit} images, 1 epoch, in "
                  f"{time.perf_counter() - start:.1f} s")

        def tagi_eval():
            r = subprocess.run([tagi_train, "--eval", model_path, job, "--json"], check=True,
                               capture_output=True, text=True)
            return json.loads(r.stdout.strip().splitlines()[-1])

        images = os.path.join(data.FASHION_MNIST_DIR, "t10k-images-idx3-ubyte.gz")
        labels = data.read_idx(os.path.join(data.FASHION_MNIST_DIR,
                                            "t10k-labels-idx1-ubyte.gz"))[:args.images]

        def numpy_all():
            x = data.read_idx(images)[:args.images].reshape(args.images, -1) / 255.0
            model = load_model(model_path)
            return model.class_probabilities(x, batch_size=args.batch_size)

        x = data.read_idx(images)[:args.images].reshape(args.images, -1) / 255.0
        model = load_model(model_path)
        eval_s, ref = best_of(args.repeat, tagi_eval)
        all_s, _ = best_of(args.repeat, numpy_all)
        predict_s, probs = best_of(
            args.repeat, lambda: model.class_probabilities(x, batch_size=args.batch_size))

    accuracy = float(np.mean(np.argmax(probs, axis=1) == labels))
    log_likelihood = float(np.mean(np.log(np.maximum(probs[np.arange(len(labels)), labels],
                                                     1e-12))))
    agree = (ref["test_samples"] == args.images
             and round(accuracy, 6) == round(ref["test_accuracy"], 6)
             and abs(log_likelihood - ref["test_log_likelihood"]) < 1e-4)
    print(f"{args.images} Fashion-MNIST test images, examples/fmnist_cnn.json, best of "
          f"{args.repeat}:")
    print(f"  tagi-train --eval (whole process)      {eval_s:7.3f} s  accuracy "
          f"{ref['test_accuracy']:.4f}  log-likelihood {ref['test_log_likelihood']:.6f}")
    print(f"  numpy: read images + model + predict   {all_s:7.3f} s")
    print(f"  numpy: class_probabilities alone       {predict_s:7.3f} s  accuracy "
          f"{accuracy:.4f}  log-likelihood {log_likelihood:.6f}")
    print(f"  ratio numpy / tagi-train --eval: {all_s / eval_s:.2f} (whole), "
          f"{predict_s / eval_s:.2f} (prediction alone)")
    print("  the scores agree" if agree else "  THE SCORES DISAGREE")
    if args.json:
        print(json.dumps({"images": args.images, "eval_seconds": round(eval_s, 4),
                          "numpy_seconds": round(all_s, 4),
                          "numpy_predict_seconds": round(predict_s, 4),
                          "ratio": round(all_s / eval_s, 3), "agree": agree}))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
