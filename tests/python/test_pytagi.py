"""Interchange with pytagi 0.2.1's save format, checked in pytagi itself.

A model trained here (tagi-train), written by to_pytagi, loads in pytagi with
Sequential.load and gives our numpy predictions; a pytagi-saved network,
read by from_pytagi, gives pytagi's predictions here and is a model file
tagi-train --eval accepts. pytagi runs in a subprocess, from this Python or
from bench/pytagi_wheel.sh's directory (TAGI_PYTAGI_DIR, default
<source>/.whl); skips with a message where it cannot be imported.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cluster import make_idx_data, tagi_train_eval
from conftest import bin_dir, source_dir
from tagi_ddp import data, decode_model, load_model
from tagi_ddp.nn import Linear, ReLU, Sequential
from tagi_ddp.pytagi_format import from_pytagi, to_pytagi

HERE = os.path.dirname(os.path.abspath(__file__))


def pytagi_env():
    env = dict(os.environ)
    probe = [sys.executable, "-c", "import pytagi"]
    if subprocess.run(probe, env=env, capture_output=True).returncode == 0:
        return env
    whl = os.environ.get("TAGI_PYTAGI_DIR") or os.path.join(source_dir(), ".whl")
    script = os.path.join(source_dir(), "bench", "pytagi_wheel.sh")
    if os.path.isdir(whl):
        r = subprocess.run(["bash", script, "env", whl], capture_output=True, text=True,
                           env=dict(env, PYTHON=sys.executable))
        for line in r.stdout.splitlines():
            if line.startswith("export "):
                key, value = line[len("export "):].split("=", 1)
                value = value.strip('"').split("${")[0]
                env[key] = value + (":" + env[key] if env.get(key) else "")
        if subprocess.run(probe, env=env, capture_output=True).returncode == 0:
            return env
    pytest.skip(f"pytagi 0.2.1 cannot be imported by {sys.executable} (fetch it with "
                f"bench/pytagi_wheel.sh fetch {whl} && bench/pytagi_wheel.sh install {whl}, "
                f"or set TAGI_PYTAGI_DIR)")


def run_pytagi(env, mode, save, x, tmp):
    x_path, out = os.path.join(tmp, "x.npy"), os.path.join(tmp, f"{mode}.npz")
    np.save(x_path, x.astype(np.float32))
    r = subprocess.run([sys.executable, os.path.join(HERE, "pytagi_run.py"), mode, save, x_path,
                        out], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    got = np.load(out)
    return got["mu"], got["var"]


def mlp():
    return Sequential(Linear(784, 32), ReLU(), Linear(32, 11))


def test_model_trained_here_loads_in_pytagi_with_the_same_predictions(tmp_path):
    env = pytagi_env()
    tmp = str(tmp_path)
    paths, (x, _) = make_idx_data(tmp, n_train=200, n_test=50)
    spec = mlp().to_job_dict(name="mlp", data=data.mnist(**paths), num_classes=10, sigma_v=1.0,
                             batch_size=16, epochs=1, seed=4)
    job_path = os.path.join(tmp, "mlp.json")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    model_path = os.path.join(tmp, "mlp.tagi")
    r = subprocess.run([os.path.join(bin_dir(), "tagi-train"), job_path, "--out", model_path,
                        "--progress=false"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    model = load_model(model_path)
    save = os.path.join(tmp, "mlp.pytagi")
    to_pytagi(model, save)
    xs = model.standardize(x)  # pytagi keeps no standardisation: give it ours
    mu, var = run_pytagi(env, "load", save, xs, tmp)
    our_mu, our_var = model.forward(xs, standardize=False)
    np.testing.assert_allclose(mu, our_mu, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(var, our_var, rtol=1e-4, atol=1e-6)


def test_pytagi_saved_network_predicts_here_and_evaluates_in_tagi_train(tmp_path):
    env = pytagi_env()
    tmp = str(tmp_path)
    paths, (x, labels) = make_idx_data(tmp, n_train=40, n_test=50)
    save = os.path.join(tmp, "made.pytagi")
    mu, var = run_pytagi(env, "make", save, x, tmp)
    blob = from_pytagi(save, mlp(), num_classes=10)
    model = decode_model(blob)
    our_mu, our_var = model.forward(x)  # no standardisation stored: x as given
    np.testing.assert_allclose(our_mu, mu, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(our_var, var, rtol=1e-4, atol=1e-6)
    model_path = os.path.join(tmp, "made.tagi")
    with open(model_path, "wb") as f:
        f.write(blob)
    spec = mlp().to_job_dict(name="mlp", data=data.mnist(**paths, standardize=False),
                             num_classes=10, sigma_v=1.0, batch_size=16, epochs=1)
    job_path = os.path.join(tmp, "mlp.json")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    ref = tagi_train_eval(bin_dir(), model_path, job_path)
    accuracy = float(np.mean(model.predict_classes(x) == labels))
    assert ref["test_accuracy"] == pytest.approx(accuracy, abs=1e-6)
