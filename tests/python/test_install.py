"""`pip install ./python` works offline with Debian's packages.

A copy of python/ and proto/ (without the generated modules, so setup.py
generates them) is installed into a fresh virtual environment that sees the
system's site-packages (python3-grpcio, python3-protobuf, python3-numpy),
with no package index and no build isolation; the installed package is then
imported from outside the source tree. Skips without the venv module or
pip.
"""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import source_dir


def test_pip_install_offline_into_a_venv(tmp_path):
    try:
        import ensurepip  # noqa: F401  (Debian: python3-venv)
        import pip  # noqa: F401
    except ImportError as e:
        pytest.skip(f"no venv/pip for {sys.executable}: {e}")
    src = tmp_path / "src"
    shutil.copytree(os.path.join(source_dir(), "proto"), src / "proto")
    shutil.copytree(os.path.join(source_dir(), "python"), src / "python",
                    ignore=shutil.ignore_patterns("_proto", "build", "*.egg-info",
                                                  "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    py = str(venv / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                        "--disable-pip-version-check", str(src / "python")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    probe = ("import tagi_ddp, tagi_ddp.client as c; from tagi_ddp.nn import Sequential, Linear;"
             "print(tagi_ddp.__file__);"
             "print(c.as_job_spec(Sequential(Linear(2, 1)).to_job_dict(name='x', data={},"
             " sigma_v=1, batch_size=1, epochs=1)).layers[0].linear.in_features)")
    r = subprocess.run([py, "-c", probe], capture_output=True, text=True, cwd=str(tmp_path),
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert r.returncode == 0, r.stderr
    path, width = r.stdout.split()
    assert path.startswith(str(venv)) and width == "2"
