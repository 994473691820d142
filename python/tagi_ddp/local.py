"""One job on this host from Python, like `tagi-run` (which it runs):

    from tagi_ddp import run, data
    from tagi_ddp.nn import Sequential, Linear, ReLU
    net = Sequential(Linear(784, 64), ReLU(), Linear(64, 11))
    model = run(net, data.fashion_mnist(), nproc=2, num_classes=10, sigma_v=1.0,
                batch_size=64, epochs=2, name="mine")
    probabilities = model.class_probabilities(images)

tagi-run starts a coordinator and `nproc` workers on loopback, trains the job,
writes the model and leaves nothing behind; run() returns the model read
with load_model. A job that does not succeed raises RunError with the exit
code, the job's last state line and what tagi-run printed last.
"""
import json
import os
import shutil
import subprocess
import tempfile

from .model import load_model

# tagi-run's exit codes (docs/api.md "tagi-run").
EXIT_STATES = {0: "SUCCEEDED", 1: "FAILED", 2: "REFUSED", 3: "CANCELLED", 4: "CLUSTER LOST",
               130: "INTERRUPTED"}


class RunError(RuntimeError):
    """A local run that did not succeed: `code` (tagi-run's exit code), `state`
    (its name: FAILED, CANCELLED, REFUSED, ...), `output` (the end of what
    tagi-run printed)."""

    def __init__(self, code, output):
        self.code = code
        self.state = EXIT_STATES.get(code, f"exit {code}")
        self.output = output
        super().__init__(f"tagi-run ended {self.state} (exit {code}):\n{output}")


def find_tagi_run(bin_dir=None):
    """The tagi-run program: in `bin_dir`, else $TAGI_BIN_DIR, else on PATH."""
    for directory in (bin_dir, os.environ.get("TAGI_BIN_DIR")):
        if directory:
            path = os.path.join(directory, "tagi-run")
            if os.access(path, os.X_OK):
                return path
            raise FileNotFoundError(f"no tagi-run in {directory}")
    path = shutil.which("tagi-run")
    if path is None:
        raise FileNotFoundError("tagi-run is not on PATH: build the project (make build) and "
                                "pass bin_dir= or set TAGI_BIN_DIR to its build/bin")
    return path


def run(model, data=None, nproc=2, *, sets=(), bin_dir=None, out=None, threads=None,
        timeout=None, quiet=False, **job):
    """Trains a job with `nproc` local workers and returns the trained Model.

    model: a tagi_ddp.nn.Sequential (then `data` and the keyword arguments of
    Sequential.to_job_dict, name= included, make the job; its world size is
    nproc), a job dict in the job-file form, or a job file's path.
    sets: "FIELD=VALUE" overrides, as tagi-run --set takes them.
    out: also keep the model file there (else it lives in a temporary
    directory only while it is read). threads: BLAS threads per worker.
    timeout: seconds before tagi-run gives up (and cancels). quiet: do not
    show tagi-run's progress (it goes to this process's stderr otherwise).
    """
    if hasattr(model, "to_job_dict"):
        if data is None:
            raise ValueError("run(model, data, ...): a network needs its data (tagi_ddp.data)")
        job.setdefault("name", "python")
        spec = model.to_job_dict(data=data, world_size=nproc, **job)
    elif isinstance(model, dict):
        spec = model
    elif isinstance(model, (str, os.PathLike)):
        spec = None
    else:
        raise TypeError("run(model, ...): a Sequential, a job dict or a job file's path")
    program = find_tagi_run(bin_dir)
    with tempfile.TemporaryDirectory(prefix="tagi-py-run-") as tmp:
        if spec is None:
            job_path = os.fspath(model)
        else:
            job_path = os.path.join(tmp, "job.json")
            with open(job_path, "w", encoding="utf-8") as f:
                json.dump(spec, f)
        model_path = out or os.path.join(tmp, "model.tagi")
        argv = [program, "--nproc", str(int(nproc)), job_path, "--out", model_path]
        for s in sets:
            argv += ["--set", s]
        if threads is not None:
            argv += ["--threads", str(int(threads))]
        if timeout is not None:
            argv += ["--timeout", f"{float(timeout)}s"]
        # Its progress and messages (stderr) show as they come unless quiet.
        done = subprocess.run(argv, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE if quiet else None, text=True)
        if done.returncode != 0:
            said = done.stdout + (done.stderr or "(its messages are above)")
            raise RunError(done.returncode, said[-4000:])
        return load_model(model_path)
