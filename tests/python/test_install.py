"""`pip install ./python` works offline with Debian's packages.

A copy of python/ and proto/ (without the generated modules, so setup.py
generates them) is installed into a fresh virtual environment that sees the
system's site-packages (python3-grpcio, python3-protobuf, python3-numpy),
with no package index and no build isolation; the installed package is then
imported from outside the source tree. In a virtual environment that does
not see them, whose setuptools has no bdist_wheel (before 70.1, without the
wheel package: Debian 12's venv), the same install stops with setup.py's
hint rather than setuptools' bare "invalid command 'bdist_wheel'". Skips
without the venv module or pip. test_install_pypi.py installs from PyPI.
"""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import source_dir


def need_venv():
    try:
        import ensurepip  # noqa: F401  (Debian: python3-venv)
        import pip  # noqa: F401
    except ImportError as e:
        pytest.skip(f"no venv/pip for {sys.executable}: {e}")


def copy_sources(tmp_path):
    """python/ and proto/ as a checkout without a build has them (no _proto)."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(source_dir(), "proto"), src / "proto")
    shutil.copytree(os.path.join(source_dir(), "python"), src / "python",
                    ignore=shutil.ignore_patterns("_proto", "build", "*.egg-info",
                                                  "__pycache__"))
    return src


def test_pip_install_offline_into_a_venv(tmp_path):
    need_venv()
    src = copy_sources(tmp_path)
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


def test_a_build_without_bdist_wheel_stops_with_a_hint(tmp_path):
    need_venv()
    src = copy_sources(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    probe = ("import importlib.util as u; print(u.find_spec('setuptools') is not None and "
             "u.find_spec('setuptools.command.bdist_wheel') is None and "
             "u.find_spec('wheel') is None)")
    r = subprocess.run([py, "-c", probe], capture_output=True, text=True, check=True)
    if r.stdout.strip() != "True":
        pytest.skip(f"the venv of {sys.executable} has no setuptools, or one with bdist_wheel")
    r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                        "--disable-pip-version-check", str(src / "python")],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "has no bdist_wheel command" in out, out
    assert "drop --no-build-isolation" in out and "install `wheel`" in out, out
    assert "invalid command 'bdist_wheel'" not in out, out
