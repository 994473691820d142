"""tagi_ddp.run: a network and its data trained by tagi-run with 2 local workers,
the model back in Python; a refused job and a failing one raise RunError with
tagi-run's exit code and words; nothing is left behind."""
import glob
import os
import tempfile

import numpy as np
import pytest

from conftest import bin_dir
from tagi_ddp import RunError, run, data
from tagi_ddp.nn import Linear, ReLU, Sequential


def leftovers():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "tagi-run.*")))


def test_run_trains_with_local_workers_and_returns_the_model(tmp_path):
    before = leftovers()
    net = Sequential(Linear(1, 32), ReLU(), Linear(32, 1))
    out = str(tmp_path / "toy.tagi")
    model = run(net, data.toy_cubic(train_size=200, test_size=50), nproc=2, name="py-run",
                sigma_v=0.3, batch_size=10, epochs=3, seed=4, bin_dir=bin_dir(), out=out,
                threads=1, quiet=True)
    assert os.path.getsize(out) > 0
    x = np.linspace(-1, 1, 5).reshape(5, 1)
    mean, var = model.predict(x)
    assert mean.shape == (5, 1) and np.all(var > 0) and np.all(np.isfinite(mean))
    # --set overrides reach the job: the same run with one epoch more differs.
    again = run(net, data.toy_cubic(train_size=200, test_size=50), nproc=2, name="py-run",
                sigma_v=0.3, batch_size=10, epochs=3, seed=4, bin_dir=bin_dir(),
                sets=["epochs=4"], threads=1, quiet=True)
    assert not np.array_equal(again.predict(x)[0], mean)
    assert leftovers() <= before


def test_a_refused_or_failed_job_raises_with_tagi_runs_words(tmp_path):
    net = Sequential(Linear(1, 8), ReLU(), Linear(8, 1))
    with pytest.raises(RunError) as refused:
        run(net, data.toy_cubic(), nproc=1, sigma_v=0.3, batch_size=10, epochs=1,
            bin_dir=bin_dir(), sets=["epoch=2"], quiet=True)
    assert refused.value.code == 2 and refused.value.state == "REFUSED"
    assert 'did you mean "epochs"' in refused.value.output
    missing = data.csv(str(tmp_path / "absent.csv"), str(tmp_path / "absent.csv"))
    with pytest.raises(RunError) as failed:
        run(net, missing, nproc=1, sigma_v=0.3, batch_size=10, epochs=1, bin_dir=bin_dir(),
            quiet=True)
    assert failed.value.code == 1 and failed.value.state == "FAILED"
    assert "absent.csv" in failed.value.output
    with pytest.raises(ValueError):
        run(net, None)
