"""The output heads (docs/heads.md) from Python: built with tagi_ddp.nn, trained by
tagi-train, predicted in numpy as tagi-train --eval scores them.

One-hot classification (an MLP ending in Remax or ClosedFormSoftmax) on the
generated IDX set: numpy's class probabilities (the output means, clipped and
normalised) give tagi-train --eval's accuracy exactly and its log-likelihood,
ECE and Brier score to float32 precision. Heteroscedastic regression (an MLP
ending in EvenExp, no sigma_v) on 1-D data whose noise grows with |x|:
numpy's predictive mean and variance (var(mean) + E[noise], de-standardised)
give --eval's RMSE, log-likelihood, coverage and mean predictive standard
deviation; and, end to end, the trained model is calibrated (its 95 %
intervals cover 85..99 % of the test targets) with a noise that follows the
input's.
"""

import numpy as np
import pytest

from cluster import make_idx_data, tagi_train_eval
from conftest import bin_dir
from test_model import train
from tagi_ddp import data, load_model
from tagi_ddp.nn import ClosedFormSoftmax, EvenExp, Linear, ReLU, Remax, Sequential

Z68, Z95 = 0.99445788320975, 1.95996398454005  # worker/trainer.h
BINS = 15  # worker/trainer.h kCalibrationBins


def classification_scores(probs, labels):
    """tagi-train's test metrics (worker/trainer.cc ScoreClassification) in numpy."""
    n = len(labels)
    top = np.argmax(probs, axis=1)
    right = top == labels
    conf = probs[np.arange(n), top]
    bins = np.clip((conf * BINS).astype(int), 0, BINS - 1)
    gap = sum(abs(conf[bins == b].sum() - right[bins == b].sum()) for b in range(BINS))
    onehot = np.eye(probs.shape[1])[labels]
    return {"test_accuracy": float(right.mean()),
            "test_log_likelihood": float(np.mean(np.log(np.maximum(
                probs[np.arange(n), labels], 1e-12)))),
            "test_ece": float(gap / n),
            "test_brier": float(np.mean(((probs - onehot) ** 2).sum(axis=1)))}


def regression_scores(mu, var, y):
    """tagi-train's test metrics (ScoreRegression), targets and predictions in data units."""
    err = y - mu
    sd = np.sqrt(var)
    return {"test_rmse": float(np.sqrt(np.mean(err * err))),
            "test_log_likelihood": float(np.mean(-0.5 * (np.log(2 * np.pi) + np.log(var)
                                                         + err * err / var))),
            "test_coverage_68": float(np.mean(np.abs(err) <= Z68 * sd)),
            "test_coverage_95": float(np.mean(np.abs(err) <= Z95 * sd)),
            "test_mean_std": float(np.mean(sd))}


@pytest.fixture(scope="module")
def idx(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("idx"))
    paths, test = make_idx_data(tmp, n_train=60, n_test=300)
    return tmp, paths, test


@pytest.mark.parametrize("last", [Remax, ClosedFormSoftmax])
def test_one_hot_classifier_predicts_in_numpy_as_tagi_train_eval(idx, last):
    tmp, paths, (x, labels) = idx
    net = Sequential(Linear(784, 32), ReLU(), Linear(32, 10), last())
    name = last.__name__
    spec = net.to_job_dict(name=name, data=data.mnist(**paths), num_classes=10, sigma_v=0.2,
                           batch_size=8, epochs=1, seed=3)
    job_path, model_path = train(tmp, name, spec)
    model = load_model(model_path)
    assert model.one_hot and model.num_classes == 10 and model.planned[-1].kind == (
        "remax" if last is Remax else "closedFormSoftmax")
    probs = model.class_probabilities(x)
    ours = classification_scores(probs, labels)
    ref = tagi_train_eval(bin_dir(), model_path, job_path)
    print(f"{name}: numpy {ours}; tagi-train --eval {ref}")
    assert ref["test_samples"] == len(labels)
    assert ours["test_accuracy"] == pytest.approx(ref["test_accuracy"], abs=1e-6)
    for key in ("test_log_likelihood", "test_ece", "test_brier"):
        assert ours[key] == pytest.approx(ref[key], abs=1e-4), key
    assert ref["test_nll"] == pytest.approx(-ref["test_log_likelihood"], abs=1e-6)
    # It learned the (easy) task: one output per class, observed one-hot.
    assert ours["test_accuracy"] > 0.6
    mu, _ = model.forward(x)
    assert np.array_equal(model.predict_classes(x), np.argmax(mu, axis=1))


def noisy_cubic(rng, n):
    """y = x^3 / 10 + N(0, (0.3 + 0.6 |x|)^2), x uniform in [-3, 3]: noise sd 0.3 .. 2.1."""
    x = rng.uniform(-3.0, 3.0, n)
    return x, x ** 3 / 10.0 + (0.3 + 0.6 * np.abs(x)) * rng.standard_normal(n)


@pytest.fixture(scope="module")
def heteroscedastic(tmp_path_factory):
    """A heteroscedastic job built here (no sigma_v) and trained by tagi-train."""
    tmp = tmp_path_factory.mktemp("heteros")
    rng = np.random.default_rng(21)
    for split, n in (("train", 600), ("test", 400)):
        x, y = noisy_cubic(rng, n)
        np.savetxt(tmp / f"{split}.csv", np.column_stack([x, y]), delimiter=",", fmt="%.6f")
    net = Sequential(Linear(1, 32), ReLU(), Linear(32, 32), ReLU(), Linear(32, 2), EvenExp())
    spec = net.to_job_dict(name="heteros", data=data.csv(tmp / "train.csv", tmp / "test.csv"),
                           batch_size=10, epochs=20, seed=4)
    assert spec["head"] == {"regression": {"heteroscedastic": True}} and "noise" not in spec
    job_path, model_path = train(str(tmp), "heteros", spec)
    test = np.loadtxt(tmp / "test.csv", delimiter=",", dtype=np.float32)
    return job_path, model_path, test


def test_heteroscedastic_regression_predicts_in_numpy_as_tagi_train_eval(heteroscedastic):
    job_path, model_path, test = heteroscedastic
    model = load_model(model_path)
    assert model.heteroscedastic and not model.num_classes
    assert model.planned[-1].kind == "evenExp" and model.output_shape == (2, 1, 1)
    mu, var = model.predict(test[:, :1])
    assert mu.shape == var.shape == (len(test), 1)
    # The pair [mean, noise] of the output, de-standardised; sigma_v plays no part.
    out_mu, out_var = model.forward(test[:, :1])
    std = model.target_std[0]
    np.testing.assert_allclose(mu[:, 0], out_mu[:, 0] * std + model.target_mean[0], rtol=1e-12)
    np.testing.assert_allclose(var[:, 0], (out_var[:, 0] + out_mu[:, 1]) * std * std,
                               rtol=1e-12)
    np.testing.assert_array_equal(model.predict(test[:, :1], sigma_v=5.0)[1], var)
    ours = regression_scores(mu[:, 0], var[:, 0], test[:, 1].astype(np.float64))
    ref = tagi_train_eval(bin_dir(), model_path, job_path)
    print(f"numpy {ours}; tagi-train --eval {ref}")
    assert ref["test_samples"] == len(test)
    for key in ("test_rmse", "test_log_likelihood", "test_mean_std"):
        assert ours[key] == pytest.approx(ref[key], rel=1e-4, abs=1e-4), key
    for key in ("test_coverage_68", "test_coverage_95"):  # counts: one target is 1/400
        assert ours[key] == pytest.approx(ref[key], abs=1.5 / len(test)), key


def test_heteroscedastic_head_of_two_targets_predicts_pairs_in_order(tmp_path):
    # Outputs [mean 1, noise 1, mean 2, noise 2]; each target de-standardised by its own
    # statistics. --eval scores all targets together.
    rng = np.random.default_rng(8)
    for split, n in (("train", 300), ("test", 200)):
        x = rng.normal(size=(n, 2))
        y1 = 3.0 * x[:, 0] + (0.2 + np.abs(x[:, 1])) * rng.standard_normal(n) + 10.0
        y2 = x[:, 0] * x[:, 1] + 0.5 * rng.standard_normal(n) - 4.0
        np.savetxt(tmp_path / f"{split}.csv", np.column_stack([x, y1, y2]), delimiter=",",
                   fmt="%.6f")
    net = Sequential(Linear(2, 16), ReLU(), Linear(16, 4), EvenExp())
    spec = net.to_job_dict(name="two", data=data.csv(tmp_path / "train.csv",
                                                     tmp_path / "test.csv", target_columns=2),
                           batch_size=10, epochs=3, seed=6)
    job_path, model_path = train(str(tmp_path), "two", spec)
    model = load_model(model_path)
    test = np.loadtxt(tmp_path / "test.csv", delimiter=",", dtype=np.float32)
    mu, var = model.predict(test[:, :2])
    assert mu.shape == var.shape == (len(test), 2) and len(model.target_mean) == 2
    assert abs(mu[:, 0].mean() - 10.0) < 1.0 and abs(mu[:, 1].mean() + 4.0) < 1.0
    ours = regression_scores(mu.ravel(), var.ravel(), test[:, 2:].astype(np.float64).ravel())
    ref = tagi_train_eval(bin_dir(), model_path, job_path)
    print(f"numpy {ours}; tagi-train --eval {ref}")
    for key in ("test_rmse", "test_log_likelihood", "test_mean_std"):
        assert ours[key] == pytest.approx(ref[key], rel=1e-4, abs=1e-4), key
    for key in ("test_coverage_68", "test_coverage_95"):
        assert ours[key] == pytest.approx(ref[key], abs=1.5 / mu.size), key


def test_heteroscedastic_job_from_the_builder_is_calibrated_end_to_end(heteroscedastic):
    _, model_path, test = heteroscedastic
    model = load_model(model_path)
    x, y = test[:, :1], test[:, 1].astype(np.float64)
    mu, var = model.predict(x)
    scores = regression_scores(mu[:, 0], var[:, 0], y)
    # The learned noise follows the data's: sd 0.3 at x = 0, 2.1 at |x| = 3.
    grid = np.array([[-2.7], [0.0], [2.7]], dtype=np.float32)
    grid_mu, grid_var = model.predict(grid)
    sd = np.sqrt(grid_var[:, 0])
    print(f"coverage 68% {scores['test_coverage_68']:.3f} 95% {scores['test_coverage_95']:.3f}"
          f" rmse {scores['test_rmse']:.3f}; at x = -2.7, 0, 2.7 predictive mean "
          f"{grid_mu[:, 0]} (x^3 / 10: -1.97, 0, 1.97), sd {sd} (noise 1.92, 0.3, 1.92)")
    assert 0.85 <= scores["test_coverage_95"] <= 0.99
    assert 0.55 <= scores["test_coverage_68"] <= 0.80
    assert sd[0] > 2.0 * sd[1] and sd[2] > 2.0 * sd[1]
    # The mean follows x^3 / 10 (the noise is not all it learned): near the
    # RMSE of the true mean (a constant mean has 1.3 times that).
    oracle = np.sqrt(np.mean((y - x[:, 0].astype(np.float64) ** 3 / 10) ** 2))
    assert scores["test_rmse"] < 1.15 * oracle
    np.testing.assert_allclose(grid_mu[:, 0], grid[:, 0] ** 3 / 10, atol=0.8)


def test_describe_shows_the_calibration_metrics():
    from tagi_ddp._stubs import jobs_pb2
    from tagi_ddp.client import describe
    job = jobs_pb2.Job(id="job-7", state=jobs_pb2.SUCCEEDED)
    job.spec.head.classification.num_classes = 10
    job.progress.epochs.add(test_accuracy=0.85, test_ece=0.0213, test_nll=0.4211,
                            test_brier=0.219)
    assert describe(job) == ("job-7 SUCCEEDED test accuracy 85.00% ECE 0.0213 NLL 0.4211 "
                             "Brier 0.2190")
    job = jobs_pb2.Job(id="job-8", state=jobs_pb2.SUCCEEDED)
    job.spec.head.regression.heteroscedastic = True
    job.progress.epochs.add(test_rmse=0.512, test_nll=0.8, test_coverage_68=0.67,
                            test_coverage_95=0.945)
    assert describe(job) == ("job-8 SUCCEEDED test RMSE 0.5120 NLL 0.8000 coverage 68% 67.0% "
                             "95% 94.5%")


def test_history_gives_every_epochs_metrics_as_plain_dicts():
    from tagi_ddp._stubs import jobs_pb2
    from tagi_ddp.client import history
    job = jobs_pb2.Job(id="job-9", state=jobs_pb2.RUNNING)
    job.progress.epochs.add(epoch=1, test_accuracy=0.8, test_ece=0.05, test_brier=0.3)
    job.progress.epochs.add(epoch=2, test_accuracy=0.85, test_ece=0.03, test_brier=0.25)
    rows = history(job)
    assert [r["test_ece"] for r in rows] == [0.05, 0.03]
    assert rows[1]["test_accuracy"] == 0.85
    assert rows[0]["test_coverage_95"] == 0 and "test_mean_std" in rows[0]
    assert all(isinstance(r, dict) for r in rows)
    assert [r["epoch"] for r in rows] == [1, 2]
