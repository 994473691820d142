"""`pip install ./python` from PyPI, in a fresh virtual environment that sees
nothing of the system's packages, with no protoc on PATH.

For each interpreter (this one, and those in TAGI_PYPI_PYTHONS, separated
by os.pathsep: e.g. a pyenv CPython 3.9), a copy of python/ and proto/
without the generated modules is installed as a user without Debian's
packages would: pip's build isolation fetches setuptools and grpcio-tools
(setup.py asks for it, having no protoc), the install fetches grpcio,
protobuf and numpy, the package's declared dependencies. The installed
package, with those versions, then submits a job to a real coordinator,
reads its Job (string state, progress, history), and predicts with a
model file tagi-train wrote exactly as this process does.

Needs the package index: marked `network`, and skipped, with pip's words,
where `pip download six` fails (or TAGI_OFFLINE is set). About 15 s per
interpreter with a warm pip cache.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from cluster import Cluster, make_idx_data
from conftest import bin_dir
from tagi_ddp import data, load_model
from tagi_ddp.nn import Linear, ReLU, Sequential
from test_install import copy_sources

pytestmark = pytest.mark.network


def interpreters():
    extra = [p for p in os.environ.get("TAGI_PYPI_PYTHONS", "").split(os.pathsep) if p]
    return [sys.executable] + extra


@pytest.fixture(scope="module")
def index_reachable(tmp_path_factory):
    if os.environ.get("TAGI_OFFLINE"):
        pytest.skip("TAGI_OFFLINE is set: no package index")
    tmp = tmp_path_factory.mktemp("probe")
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                        "--disable-pip-version-check", "--no-cache-dir", "-d", str(tmp), "six"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        last = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or [""]
        pytest.skip(f"the package index cannot be reached (pip download six: {last[0]}); "
                    f"this test installs from it")


PROBE = r"""
import json, os, sys
import numpy, grpc, google.protobuf
import tagi_ddp
from tagi_ddp import Client, Job, load_model, data
from tagi_ddp.nn import Sequential, Linear, ReLU
address, job_json, model_path, x_path = sys.argv[1:5]
with Client(address, timeout=10) as client:
    job = client.submit(json.load(open(job_json)))
    listed = [j for j in client.list() if j.id == job.id][0]
    out = {"package": tagi_ddp.__file__, "numpy": numpy.__file__, "grpc": grpc.__file__,
           "protobuf": google.protobuf.__file__, "versions": [numpy.__version__,
           grpc.__version__, google.protobuf.__version__], "state": job.state,
           "listed": listed.state, "progress": job.progress, "history": job.history,
           "is_job": isinstance(job, Job)}
    client.cancel(job.id)
    out["final"] = client.wait(job.id, timeout=20, progress=False).state
probs = load_model(model_path).class_probabilities(numpy.load(x_path))
numpy.save(x_path + ".probs.npy", probs)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small model file by tagi-train, its job file, and images to predict."""
    tmp = str(tmp_path_factory.mktemp("model"))
    paths, (x, _) = make_idx_data(tmp, n_train=64, n_test=32)
    spec = Sequential(Linear(784, 16), ReLU(), Linear(16, 11)).to_job_dict(
        name="pypi", data=data.mnist(**paths), num_classes=10, sigma_v=1.0, batch_size=16,
        epochs=1, seed=3, world_size=2, device="cpu")
    job_path = os.path.join(tmp, "job.json")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    model_path = os.path.join(tmp, "model.tagi")
    subprocess.run([os.path.join(bin_dir(), "tagi-train"), job_path, "--out", model_path,
                    "--progress=false"], check=True, capture_output=True, timeout=120)
    x_path = os.path.join(tmp, "x.npy")
    np.save(x_path, x)
    return {"tmp": tmp, "job": job_path, "model": model_path, "x": x_path, "xs": x}


@pytest.mark.parametrize("python", interpreters())
def test_pip_install_from_pypi_into_a_bare_venv(python, tmp_path, index_reachable, trained):
    if not shutil.which(python):
        pytest.skip(f"{python} is not an interpreter here")
    version = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 9))"],
                             capture_output=True, text=True)
    assert version.stdout.strip() == "True", f"{python}: tagi-ddp needs CPython 3.9 or later"
    src = copy_sources(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = str(venv / "bin")  # no protoc, no grpc_python_plugin: grpcio-tools
    r = subprocess.run([py, "-m", "pip", "install", "--disable-pip-version-check",
                        str(src / "python")], capture_output=True, text=True, timeout=240,
                       env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert not (src / "python" / "tagi_ddp" / "_proto").exists()  # the checkout stays clean

    cluster = Cluster(bin_dir(), str(tmp_path), workers=0, world=2)
    try:
        r = subprocess.run([py, "-c", PROBE, cluster.address, trained["job"], trained["model"],
                            trained["x"]], capture_output=True, text=True, timeout=120,
                           env=env, cwd=str(tmp_path))
    finally:
        cluster.stop()
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"{python}: numpy, grpcio, protobuf {out['versions']}")
    for key in ("package", "numpy", "grpc", "protobuf"):
        assert out[key].startswith(str(venv)), (key, out[key])
    assert out["is_job"] and out["state"] == out["listed"] == "PENDING"
    assert out["final"] == "CANCELLED"
    assert out["progress"]["fraction"] == 0.0 and out["history"] == []
    ours = load_model(trained["model"]).class_probabilities(trained["xs"])
    np.testing.assert_allclose(np.load(trained["x"] + ".probs.npy"), ours, rtol=0, atol=1e-12)
