"""Real tagi-coordinator and tagi-worker processes on loopback, and tiny data.

Cluster(bindir, tmp, workers=2) starts a coordinator on an OS-chosen port
(--port-file) and the workers; stop() ends every process it started (also
when a test fails; PR_SET_PDEATHSIG ends them if the test process dies).
make_idx_data writes a small learnable IDX classification set.
"""
import ctypes
import os
import signal
import struct
import subprocess
import time

import numpy as np


def _die_with_parent():
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Cluster:
    def __init__(self, bindir, tmp, workers=2, world=2, coordinator_flags=(), worker_flags=(),
                 worker_dirs=None):
        """worker_dirs: one directory per worker, its working directory and its
        --data-root (default: every worker in this process's directory, root tmp),
        so that a relative data path names a different file on each (two hosts)."""
        self.bindir = bindir
        self.tmp = tmp
        self.procs = []
        port_file = os.path.join(tmp, "coordinator.port")
        self.coordinator = self._start("coordinator", [
            os.path.join(bindir, "tagi-coordinator"), "--listen", "127.0.0.1:0",
            "--port-file", port_file, "--world", str(world), *coordinator_flags])
        deadline = time.monotonic() + 20
        port = 0
        while time.monotonic() < deadline and not port:
            if self.coordinator.poll() is not None:
                raise RuntimeError("the coordinator ended: " + self.log("coordinator"))
            try:
                with open(port_file, encoding="utf-8") as f:
                    text = f.read()
                port = int(text) if text.endswith("\n") else 0
            except (FileNotFoundError, ValueError):
                time.sleep(0.02)
        if not port:
            self.stop()
            raise RuntimeError("the coordinator wrote no port in 20 s")
        self.address = f"127.0.0.1:{port}"
        for i in range(workers):
            cwd = worker_dirs[i] if worker_dirs else None
            self._start(f"worker{i + 1}", [
                os.path.join(bindir, "tagi-worker"), "--coord", self.address, "--threads", "1",
                "--connect-timeout", "20s", "--collective-timeout", "20s",
                "--data-root", cwd or tmp, *worker_flags], cwd=cwd)

    def _start(self, name, argv, cwd=None):
        log = open(os.path.join(self.tmp, name + ".log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                             stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        log.close()
        self.procs.append((name, p))
        return p

    def log(self, name):
        try:
            with open(os.path.join(self.tmp, name + ".log"), encoding="utf-8",
                      errors="replace") as f:
                return f.read()[-4000:]
        except FileNotFoundError:
            return ""

    def logs(self):
        return "\n".join(f"---- {n}:\n{self.log(n)}" for n, _ in self.procs)

    def stop(self):
        for _, p in self.procs:
            if p.poll() is None:
                p.terminate()
        for _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def write_idx(path, dims, payload):
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 0x08, len(dims)))
        for d in dims:
            f.write(struct.pack(">I", d))
        f.write(payload)


def make_idx_data(directory, n_train=400, n_test=200, size=28, seed=7):
    """Images [n][size][size] (the IDX kinds are 28x28) whose class (0..9) is a brighter row band, with noise.

    Returns the four paths (train_images, train_labels, test_images,
    test_labels) and the test split as (pixels / 255 [n][size*size], labels).
    """
    rng = np.random.default_rng(seed)
    paths = {}
    test = None
    for split, n in (("train", n_train), ("test", n_test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 120, (n, size, size)).astype(np.int64)
        for i, c in enumerate(labels):
            row = int(c) * (size - 2) // 9
            images[i, row:row + 2, :] += 120
        images = np.clip(images, 0, 255).astype(np.uint8)
        paths[f"{split}_images"] = os.path.join(directory, f"{split}-images.idx")
        paths[f"{split}_labels"] = os.path.join(directory, f"{split}-labels.idx")
        write_idx(paths[f"{split}_images"], (n, size, size), images.tobytes())
        write_idx(paths[f"{split}_labels"], (n,), labels.tobytes())
        if split == "test":
            test = (images.reshape(n, -1).astype(np.float32) / 255.0, labels.astype(np.int64))
    return paths, test


def tagi_train_eval(bindir, model_path, job_path):
    """tagi-train --eval's metrics (its --json line) for a model file and a job file."""
    import json
    r = subprocess.run([os.path.join(bindir, "tagi-train"), "--eval", model_path, job_path,
                        "--json"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"tagi-train --eval failed ({r.returncode}): {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])
