"""Model files in numpy: every layer kind the engine runs predicts as tagi-train does.

tagi-train trains small builder-made networks in one process on generated
data and writes the model; the numpy predictions of that file score what
tagi-train --eval scores (accuracy exactly, log-likelihood and RMSE to
float32 precision). Damaged files are refused with a reason.
"""
import json
import os
import subprocess

import numpy as np
import pytest

from cluster import make_idx_data, tagi_train_eval
from conftest import bin_dir
from tagi_ddp import ModelFileError, data, decode_model, load_model
from tagi_ddp.nn import (AvgPool2d, BatchNorm2d, Conv2d, LayerBlock, LayerNorm, LeakyReLU,
                         Linear, MaxPool2d, MixtureReLU, ReLU, ResNetBlock, Sequential, Sigmoid,
                         Softplus, Tanh)


def every_kind_cnn():
    """Conv2d (bias, none, both padding types, stride 2), both pools (overlapping,
    padded), batch norm on maps and on features, layer norm on both, identity and
    projection residual blocks, and every activation."""
    return Sequential(
        Conv2d(1, 4, 3, padding=1, in_width=28, in_height=28), MixtureReLU(), BatchNorm2d(4),
        MaxPool2d(2, 2),
        ResNetBlock(LayerBlock(Conv2d(4, 4, 3, bias=False, padding=1), ReLU(), BatchNorm2d(4))),
        ResNetBlock(LayerBlock(Conv2d(4, 8, 3, bias=False, stride=2, padding=1, padding_type=2),
                               Tanh(), LayerNorm([8, 7, 7])),
                    LayerBlock(Conv2d(4, 8, 2, bias=False, stride=2), LeakyReLU())),
        AvgPool2d(3, 2), MaxPool2d(3, 1, 1, 1),
        Linear(72, 16), Sigmoid(), BatchNorm2d(16), Linear(16, 16), Softplus(), LayerNorm([16]),
        Linear(16, 11))


def train(tmp, name, spec):
    job_path = os.path.join(tmp, name + ".json")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    model_path = os.path.join(tmp, name + ".tagi")
    r = subprocess.run([os.path.join(bin_dir(), "tagi-train"), job_path, "--out", model_path,
                        "--progress=false"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return job_path, model_path


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("cnn"))
    paths, test = make_idx_data(tmp, n_train=240, n_test=120)
    spec = every_kind_cnn().to_job_dict(
        name="every-kind", data=data.mnist(**paths), num_classes=10, sigma_v=0.5, batch_size=8,
        epochs=1, seed=5)
    job_path, model_path = train(tmp, "every-kind", spec)
    return job_path, model_path, test


def test_model_file_holds_every_layers_blocks_and_state(cnn):
    model = load_model(cnn[1])
    assert model.version == 2 and model.input_shape == (1, 28, 28) and model.num_classes == 10
    kinds = [lp.kind for lp in model.planned]
    assert kinds.count("conv2d") == 4 and kinds.count("batchNorm") == 3
    first = model.planned[0]
    assert first.mu_w.shape == (4, 1, 3, 3) and first.mu_b.shape == (4,)
    assert model.planned[4].path == "layers[4].residual.main[0]" and model.planned[4].mu_b is None
    bn = model.planned[2]
    assert bn.mu_w.shape == (4,) and set(bn.state) == {"mu_ra", "var_ra", "first_batch"}
    assert bn.state["first_batch"][0] == 0.0  # trained
    assert np.all(bn.state["var_ra"] > 0) and np.any(bn.state["mu_ra"] != 0)
    assert np.all(model.var > 0)
    assert len(model.input_mean) == 1  # one scalar for the IDX images


def test_every_kind_predicts_in_numpy_as_tagi_train_eval(cnn):
    job_path, model_path, (x, labels) = cnn
    model = load_model(model_path)
    probs = model.class_probabilities(x)
    n = len(labels)
    accuracy = float(np.mean(np.argmax(probs, axis=1) == labels))
    log_likelihood = float(np.mean(np.log(np.maximum(probs[np.arange(n), labels], 1e-12))))
    ref = tagi_train_eval(bin_dir(), model_path, job_path)
    print(f"numpy accuracy {accuracy:.6f} log-likelihood {log_likelihood:.6f}; "
          f"tagi-train --eval {ref}")
    assert ref["test_samples"] == n
    assert accuracy == pytest.approx(ref["test_accuracy"], abs=1e-6)
    assert log_likelihood == pytest.approx(ref["test_log_likelihood"], abs=1e-4)


def test_the_batch_size_of_a_forward_pass_changes_nothing(cnn):
    """Evaluation treats every sample alone: one at a time, 7 at a time (the last batch
    short) and all at once give the same outputs, to float64 rounding."""
    _, model_path, (x, _) = cnn
    model = load_model(model_path)
    mu, var = model.forward(x)
    assert mu.shape == var.shape == (len(x), 11) and np.all(var > 0)
    for batch_size in (1, 7, len(x)):
        m, v = model.forward(x, batch_size=batch_size)
        np.testing.assert_allclose(m, mu, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(v, var, rtol=1e-12, atol=1e-12)
    one = model.class_probabilities(x[3:4])
    np.testing.assert_allclose(one[0], model.class_probabilities(x)[3], rtol=1e-12)


def test_regression_predicts_in_numpy_as_tagi_train_eval(tmp_path):
    rng = np.random.default_rng(11)
    for split, n in (("train", 200), ("test", 100)):
        x = rng.normal(size=(n, 3))
        y = 2.0 * x[:, 0] - x[:, 1] * x[:, 2] + 0.1 * rng.normal(size=n) + 5.0
        np.savetxt(tmp_path / f"{split}.csv", np.column_stack([x, y]), delimiter=",",
                   fmt="%.6f")
    net = Sequential(Linear(3, 16), ReLU(), Linear(16, 1))
    spec = net.to_job_dict(name="reg", data=data.csv(tmp_path / "train.csv",
                                                     tmp_path / "test.csv"),
                           sigma_v=0.3, batch_size=10, epochs=5, seed=2)
    job_path, model_path = train(str(tmp_path), "reg", spec)
    model = load_model(model_path)
    test = np.loadtxt(tmp_path / "test.csv", delimiter=",", dtype=np.float32)
    mu, var = model.predict(test[:, :3], sigma_v=0.3)
    err = mu[:, 0] - test[:, 3]
    rmse = float(np.sqrt(np.mean(err * err)))
    ll = float(np.mean(-0.5 * (np.log(2 * np.pi) + np.log(var[:, 0]) + err * err / var[:, 0])))
    ref = tagi_train_eval(bin_dir(), model_path, job_path)
    print(f"numpy rmse {rmse:.6f} log-likelihood {ll:.6f}; tagi-train --eval {ref}")
    assert rmse == pytest.approx(ref["test_rmse"], abs=1e-4)
    assert ll == pytest.approx(ref["test_log_likelihood"], abs=1e-4)
    assert len(model.target_mean) == 1 and abs(model.target_mean[0] - 5.0) < 0.5


def test_damaged_files_are_refused_with_the_reason(cnn):
    with open(cnn[1], "rb") as f:
        blob = bytearray(f.read())
    decode_model(blob)
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 1
    with pytest.raises(ModelFileError, match="checksum mismatch"):
        decode_model(flipped)
    with pytest.raises(ModelFileError, match="truncated or padded"):
        decode_model(blob[:-9])
    with pytest.raises(ModelFileError, match="bad magic"):
        decode_model(b"NOTAMODEL" + blob[9:])
    future = bytearray(blob)
    future[8] = 4
    with pytest.raises(ModelFileError, match="version 4 is not supported"):
        decode_model(future)


def test_inputs_of_the_wrong_width_are_refused(cnn):
    model = load_model(cnn[1])
    with pytest.raises(ValueError, match="the model takes 784"):
        model.forward(np.zeros((2, 100)))
