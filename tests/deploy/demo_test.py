#!/usr/bin/env python3
"""tools/demo.sh (what `make demo` runs) end to end on a small job.

A job that succeeds leaves nothing behind: its processes are gone and its log
folder removed. A job that fails keeps the log folder the demo pointed to and
names it (it used to delete the logs it had just pointed the user to).
shellcheck when it is installed. Every process is stopped by the script
itself; the test checks that none of the demo's is left.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run_demo(source, bin_dir, job, model):
    env = dict(os.environ, BIN=bin_dir, JOB=job, MODEL=model)
    return subprocess.run(["bash", os.path.join(source, "tools/demo.sh")], cwd=source, env=env,
                          capture_output=True, text=True, timeout=240)


def log_dir(output):
    m = re.search(r"logs in (/tmp/tagi-demo\.\w+)", output)
    assert m, f"the demo names no log folder:\n{output}"
    return m.group(1)


def leftover_processes(work):
    out = subprocess.run(["pgrep", "-af", work], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if "pgrep" not in l]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    p.add_argument("--bin", required=True)
    a = p.parse_args()
    if shutil.which("shellcheck"):
        r = subprocess.run(["shellcheck", os.path.join(a.source, "tools/demo.sh")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    tmp = tempfile.mkdtemp(prefix="tagi-demo-test-")
    try:
        # Success: the toy regression (a second) on the demo's two workers.
        ok = run_demo(a.source, a.bin, "examples/toy_cubic.json", os.path.join(tmp, "toy.tagi"))
        assert ok.returncode == 0, ok.stdout + ok.stderr
        work = log_dir(ok.stdout)
        assert not os.path.exists(work), f"{work} left behind after a successful demo"
        assert os.path.exists(os.path.join(tmp, "toy.tagi")), "no model downloaded"
        assert not leftover_processes(work), leftover_processes(work)
        # Failure: a job whose data file is missing FAILS on the workers.
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            f.write('{"name": "bad", "layers": [{"linear": {"inFeatures": 2, "outFeatures": 1}}],'
                    ' "head": {"regression": {}}, "data": {"kind": "CSV", "trainCsv": '
                    f'"{tmp}/none.csv", "testCsv": "{tmp}/none.csv"}}, "noise": {{"sigmaV": 1}},'
                    ' "batchSize": 4, "epochs": 1}')
        failed = run_demo(a.source, a.bin, bad, os.path.join(tmp, "bad.tagi"))
        assert failed.returncode != 0, failed.stdout + failed.stderr
        work = log_dir(failed.stdout)
        assert os.path.isdir(work), f"the failed demo removed its logs {work}"
        assert f"the logs are kept in {work}" in failed.stderr, failed.stderr
        assert os.path.exists(os.path.join(work, "coordinator.log"))
        assert not leftover_processes(work), leftover_processes(work)
        shutil.rmtree(work)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("demo: success cleans up, failure keeps and names its logs")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAIL: {e}")
        sys.exit(1)
