"""Interchange with pytagi 0.2.1's save format, checked in pytagi itself.

For an MLP, an MLP with a batch norm on Linear features, and a small CNN with
every image kind (Conv2d with and without bias and both padding types,
BatchNorm2d, AvgPool2d, MaxPool2d, residual blocks with identity and projection
shortcuts, LayerNorm, activations): a model trained here (tagi-train), written
by to_pytagi, loads in pytagi with Sequential.load and gives our numpy
predictions; a network trained a few steps in pytagi and saved, read by
from_pytagi, gives pytagi's predictions here, is a model file tagi-train
--eval scores as numpy does, and starts a job (init_from) whose first
evaluation equals it. The output heads' activations (Remax, ClosedFormSoftmax,
EvenExp at the end of an MLP) forward here as in pytagi, both directions,
and give their heads. Conversions pytagi cannot express raise
NotImplementedError. pytagi runs in a subprocess (pytagi_run.py, which also
defines the networks for both libraries), from this Python or from
bench/pytagi_wheel.sh's directory (TAGI_PYTAGI_DIR, default <source>/.whl);
skips with a message where it cannot be imported.
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
from tagi_ddp import nn
from tagi_ddp.pytagi_format import from_pytagi, to_pytagi

from pytagi_run import network  # noqa: E402  (no pytagi import at module level)

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


def run_pytagi(env, mode, name, save, x, tmp):
    x_path, out = os.path.join(tmp, "x.npy"), os.path.join(tmp, f"{mode}-{name}.npz")
    np.save(x_path, x.astype(np.float32))
    r = subprocess.run([sys.executable, os.path.join(HERE, "pytagi_run.py"), mode, name, save,
                        x_path, out], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    got = np.load(out)
    return got["mu"], got["var"]


NETS = ("mlp", "mlp_bn", "cnn")


def write_job(tmp, name, paths, standardize=None, **kwargs):
    job = dict(name=name, data=data.mnist(**paths, standardize=standardize), num_classes=10,
               sigma_v=1.0, batch_size=16, epochs=1)
    job.update(kwargs)
    spec = network(name, nn).to_job_dict(**job)
    job_path = os.path.join(tmp, f"{name}-{len(os.listdir(tmp))}.json")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    return job_path


def tagi_train(job_path, model_path):
    r = subprocess.run([os.path.join(bin_dir(), "tagi-train"), job_path, "--out", model_path,
                        "--progress=false"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return load_model(model_path)


# Tolerances (the MLP test's before CNNs): pytagi computes in float32 with its
# own summation order, we in float64 from the same float32 parameters. Measured
# on these networks, both directions: output means differ by at most 1.4e-6
# (outputs up to 2.3 in size), variances by at most 6.3e-7 relative; atol 1e-5
# and rtol 1e-4 leave a margin of 7 or more. A wrong layout is of order 1: a
# transposed convolution kernel moved the CNN's outputs by 1.7, swapped running
# statistics gave NaN.
MU_TOL = dict(rtol=1e-4, atol=1e-5)
VAR_TOL = dict(rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", NETS)
def test_model_trained_here_loads_in_pytagi_with_the_same_predictions(tmp_path, name):
    env = pytagi_env()
    tmp = str(tmp_path)
    paths, (x, _) = make_idx_data(tmp, n_train=200, n_test=50)
    model = tagi_train(write_job(tmp, name, paths, seed=4), os.path.join(tmp, f"{name}.tagi"))
    for lp in model.planned:  # trained statistics, not the initial ones
        if lp.kind == "batchNorm":
            assert lp.state["first_batch"][0] == 0 and np.any(lp.state["mu_ra"] != 0)
    save = os.path.join(tmp, f"{name}.pytagi")
    to_pytagi(model, save)
    xs = model.standardize(x)  # pytagi keeps no standardisation: give it ours
    mu, var = run_pytagi(env, "load", name, save, xs, tmp)
    our_mu, our_var = model.forward(xs, standardize=False)
    np.testing.assert_allclose(mu, our_mu, **MU_TOL)
    np.testing.assert_allclose(var, our_var, **VAR_TOL)
    # and back: the same parameters and statistics, the same architecture
    back = decode_model(from_pytagi(save, network(name, nn), num_classes=10))
    np.testing.assert_array_equal(back.mu, model.mu)
    np.testing.assert_array_equal(back.var, model.var)
    np.testing.assert_array_equal(back.state, model.state)
    assert back.layers == model.layers and back.input_shape == model.input_shape


@pytest.mark.parametrize("name", NETS)
def test_pytagi_saved_network_predicts_here_and_evaluates_in_tagi_train(tmp_path, name):
    env = pytagi_env()
    tmp = str(tmp_path)
    paths, (x, labels) = make_idx_data(tmp, n_train=40, n_test=50)
    save = os.path.join(tmp, "made.pytagi")
    mu, var = run_pytagi(env, "make", name, save, x, tmp)
    blob = from_pytagi(save, network(name, nn), num_classes=10)
    model = decode_model(blob)
    for lp in model.planned:  # pytagi trained it: statistics kept, first batch done
        if lp.kind == "batchNorm":
            assert lp.state["first_batch"][0] == 0 and np.any(lp.state["var_ra"] != 1)
    our_mu, our_var = model.forward(x)  # no standardisation stored: x as given
    np.testing.assert_allclose(our_mu, mu, **MU_TOL)
    np.testing.assert_allclose(our_var, var, **VAR_TOL)
    model_path = os.path.join(tmp, "made.tagi")
    with open(model_path, "wb") as f:
        f.write(blob)
    ref = tagi_train_eval(bin_dir(), model_path, write_job(tmp, name, paths, standardize=False))
    accuracy = float(np.mean(model.predict_classes(x) == labels))
    assert ref["test_accuracy"] == pytest.approx(accuracy, abs=1e-6)
    # A job built here starts from it (init_from): with sigma_v = 1000 one batch
    # barely moves the parameters, which a draw from the seed would not give.
    job = write_job(tmp, name, dict(paths, train_limit=16), standardize=False, sigma_v=1000.0,
                    seed=9, init_from=model_path)
    with open(job, encoding="utf-8") as f:
        assert json.load(f)["initFrom"] == model_path
    started = tagi_train(job, os.path.join(tmp, "started.tagi"))
    np.testing.assert_allclose(started.mu, model.mu, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(started.var, model.var, rtol=1e-3, atol=1e-7)


def expect_refusal(net, match, input_shape=None):
    with pytest.raises(NotImplementedError, match=match):
        from_pytagi("/nonexistent", net, num_classes=10, input_shape=input_shape)


def test_what_pytagi_cannot_express_is_refused_naming_the_layer():
    # Checked before the file is read; needs no pytagi.
    expect_refusal(nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Linear(2 * 2 * 4, 11)),
                   r"layers\[0\] \(conv2d\).*4x6.*square", input_shape=(1, 4, 6))
    expect_refusal(nn.Sequential(nn.ReLU(), nn.Conv2d(1, 2, 3, in_width=5), nn.Linear(18, 11)),
                   r"layers\[0\] \(relu\).*first Conv2d", input_shape=(1, 5, 5))
    expect_refusal(nn.Sequential(nn.ResNetBlock(nn.LayerBlock(nn.Linear(4, 4), nn.ReLU())),
                                 nn.Linear(4, 11)), r"layers\[0\] \(residual\)",
                   input_shape=(4, 1, 1))
    expect_refusal(nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, in_width=4), nn.AvgPool2d(
        2, 2, padding=1, padding_type=1), nn.Linear(2 * 3 * 3, 11)),
        r"layers\[1\] \(avgPool2d\).*B5")
    expect_refusal(nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 11)),
                   r"layers\[1\] \(leakyRelu\).*0\.1")
    expect_refusal(nn.Sequential(nn.Conv2d(1, 8, 3, in_width=3), nn.Linear(8, 8),
                                 nn.BatchNorm2d(8), nn.Linear(8, 11)),
                   r"layers\[2\] \(batchNorm\).*B3")
    # ... and a residual block's inner layers are named by their path
    expect_refusal(nn.Sequential(nn.Conv2d(1, 2, 3, in_width=4), nn.ResNetBlock(
        nn.LayerBlock(nn.MaxPool2d(2, 2, padding=1, padding_type=1), nn.ReLU()),
        nn.LayerBlock(nn.MaxPool2d(2, 2, padding=1, padding_type=1))), nn.Linear(8, 11)),
        r"layers\[1\]\.residual\.main\[0\] \(maxPool2d\)")


def test_a_file_of_another_network_or_damaged_is_refused(tmp_path):
    tmp = str(tmp_path)
    paths, _ = make_idx_data(tmp, n_train=40, n_test=10)
    model = tagi_train(write_job(tmp, "cnn", paths, seed=2), os.path.join(tmp, "cnn.tagi"))
    save = os.path.join(tmp, "cnn.pytagi")
    to_pytagi(model, save)
    with pytest.raises(ValueError, match=r"layers\[0\] is 'Conv2d\(1,4,27,27,4\)' in the file; "
                                         r"the network has 'Linear\(784,32\)'"):
        from_pytagi(save, network("mlp", nn), num_classes=10)
    with open(save, "rb") as f:
        whole = f.read()
    for cut, match in ((len(whole) - 3, "truncated|bytes after"), (5, "ends before|is ")):
        with open(save, "wb") as f:
            f.write(whole[:cut])
        with pytest.raises(ValueError, match=match):
            from_pytagi(save, network("cnn", nn), num_classes=10)
    with open(save, "wb") as f:
        f.write(whole + b"\0" * 4)
    with pytest.raises(ValueError, match="bytes after the last layer"):
        from_pytagi(save, network("cnn", nn), num_classes=10)


# The output heads (docs/heads.md). Remax and ClosedFormSoftmax compute a
# unit's log-variance as a difference of terms as large as the
# pre-activation variance (here up to ~15), so in float32 a small
# variance carries an absolute error of order 1e-6 in var / mu^2 (= exp of
# the log-variance, minus 1): measured up to 6e-7 where var / mu^2 was 5e-4,
# i.e. 0.1 % of that variance. They are compared as var / mu^2 with atol 1e-5
# (and rtol 1e-4 where it is large, as EvenExp's noise units). The means
# agreed to 4e-6 relative. Wrong formulas are of order 1: EvenExp's variance
# computed from its already-exponentiated mean came out 1e11 times too large.
HEADS = {"remax": {"classification": {"numClasses": 10, "output": "ONE_HOT"}},
         "cfsoftmax": {"classification": {"numClasses": 10, "output": "ONE_HOT"}},
         "evenexp": {"regression": {"heteroscedastic": True}}}
RATIO_TOL = dict(rtol=1e-4, atol=1e-5)


def assert_head_outputs_close(name, mu, var, ref_mu, ref_var):
    np.testing.assert_allclose(mu, ref_mu, **MU_TOL)
    units = slice(1, None, 2) if name == "evenexp" else slice(None)
    np.testing.assert_allclose(var[:, units] / mu[:, units] ** 2,
                               ref_var[:, units] / ref_mu[:, units] ** 2, **RATIO_TOL)
    if name == "evenexp":  # the mean units: a Linear's output, passed through
        np.testing.assert_allclose(var[:, 0::2], ref_var[:, 0::2], **VAR_TOL)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_output_head_activations_forward_as_in_pytagi_both_ways(tmp_path, name):
    env = pytagi_env()
    tmp = str(tmp_path)
    x = np.random.default_rng(5).normal(size=(40, 8)).astype(np.float32)
    save = os.path.join(tmp, f"{name}.pytagi")
    mu, var = run_pytagi(env, "make", name, save, x, tmp)
    num_classes = 10 if "classification" in HEADS[name] else None
    model = decode_model(from_pytagi(save, network(name, nn), num_classes=num_classes))
    assert model.head == HEADS[name]
    assert [lp.kind for lp in model.planned][-1] == {"remax": "remax", "cfsoftmax":
                                                     "closedFormSoftmax"}.get(name, "evenExp")
    our_mu, our_var = model.forward(x)
    print(f"{name}: means differ by at most {np.max(np.abs(our_mu - mu) / np.abs(mu)):.2e} "
          f"relative, variances by {np.max(np.abs(our_var - var) / var):.2e}")
    assert_head_outputs_close(name, our_mu, our_var, mu, var)
    if name == "remax":  # renormalised: the means are the class probabilities
        np.testing.assert_allclose(our_mu.sum(axis=1), 1.0, rtol=1e-9)
    if num_classes:
        probs = model.class_probabilities(x)
        np.testing.assert_allclose(probs, our_mu / our_mu.sum(axis=1, keepdims=True), rtol=1e-12)
        assert np.all(model.predict_classes(x) == np.argmax(mu, axis=1))
    else:  # no standardisation stored: the output pair is the prediction
        p_mu, p_var = model.predict(x)
        np.testing.assert_allclose(p_mu[:, 0], our_mu[:, 0], rtol=1e-12)
        np.testing.assert_allclose(p_var[:, 0], our_var[:, 0] + our_mu[:, 1], rtol=1e-12)
    # and back: our file in pytagi's format loads there and gives pytagi's outputs
    back = os.path.join(tmp, f"{name}.back.pytagi")
    to_pytagi(model, back)
    with open(back, "rb") as f, open(save, "rb") as g:
        assert f.read() == g.read()
    loaded_mu, loaded_var = run_pytagi(env, "load", name, back, x, tmp)
    assert_head_outputs_close(name, our_mu, our_var, loaded_mu, loaded_var)
