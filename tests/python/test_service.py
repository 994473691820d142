"""The client against a real coordinator and 2 workers on loopback.

A network built with the builder trains data-parallel on tiny generated IDX
data; the downloaded model's numpy predictions score exactly what
tagi-train --eval scores; bad jobs and ids are refused with the server's
message; get, list, watch and cancel behave as tagictl's, and give Job
objects with string states.
"""
import io
import json
import os
import time

import grpc
import numpy as np
import pytest

from cluster import Cluster, make_idx_data, tagi_train_eval
from tagi_ddp import Client, TagiError, data, load_model
from tagi_ddp.client import FINAL_STATES
from tagi_ddp.nn import Linear, ReLU, Sequential


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from conftest import bin_dir
    tmp = str(tmp_path_factory.mktemp("service"))
    paths, test = make_idx_data(tmp)
    cluster = Cluster(bin_dir(), tmp, workers=2, world=2)
    client = Client(cluster.address, timeout=10)
    try:
        yield {"tmp": tmp, "paths": paths, "test": test, "cluster": cluster, "client": client}
    finally:
        client.close()
        cluster.stop()


def mlp():
    return Sequential(Linear(784, 32), ReLU(), Linear(32, 11))


def job(env, name, epochs=2, net=None):
    return (net or mlp()).to_job_dict(
        name=name, data=data.mnist(**env["paths"]), num_classes=10, sigma_v=1.0, batch_size=16,
        epochs=epochs, seed=3, reduction="SUM", world_size=2, device="cpu")


def wait_training(client, job_id, timeout=30):
    """Waits until the job has taken a step (a cancel during the ranks' rendezvous
    leaves the next job waiting one --connect-timeout: a service issue, not this test's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = client.get(job_id)
        if j.state == "RUNNING" and j.progress["global_step"] > 0:
            return j
        time.sleep(0.02)
    raise AssertionError(f"{job_id} took no step in {timeout} s: {j}")


def test_trained_model_in_numpy_scores_as_tagi_train_eval(env):
    client = env["client"]
    spec = job(env, "py-mlp")
    submitted = client.submit(spec)
    assert submitted.id and submitted.spec.name == "py-mlp"
    events = list(client.watch(submitted.id, timeout=60, progress=False))
    final = events[-1]
    assert final.state == "SUCCEEDED", env["cluster"].logs()
    assert all(e.id == submitted.id for e in events)
    assert [e.state for e in events[:-1]].count("SUCCEEDED") == 0
    assert len(final.history) == 2 and len(final.workers) == 2

    model_path = os.path.join(env["tmp"], "py-mlp.tagi")
    blob = client.download(submitted.id, model_path)
    assert len(blob) == final.model_bytes and os.path.getsize(model_path) == len(blob)
    model = load_model(model_path)
    assert [lp.kind for lp in model.planned] == ["linear", "relu", "linear"]
    assert model.planned[0].mu_w.shape == (32, 784) and model.planned[2].var_b.shape == (11,)

    x, labels = env["test"]
    probs = model.class_probabilities(x)
    assert probs.shape == (200, 10) and np.allclose(probs.sum(axis=1), 1.0)
    accuracy = float(np.mean(np.argmax(probs, axis=1) == labels))
    log_likelihood = float(np.mean(np.log(np.maximum(probs[np.arange(200), labels], 1e-12))))

    job_path = os.path.join(env["tmp"], "py-mlp.json")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    ref = tagi_train_eval(env["cluster"].bindir, model_path, job_path)
    print(f"numpy accuracy {accuracy:.6f} log-likelihood {log_likelihood:.6f}; "
          f"tagi-train --eval {ref}")
    assert ref["test_samples"] == 200
    assert round(accuracy, 6) == pytest.approx(ref["test_accuracy"], abs=1e-9)
    assert log_likelihood == pytest.approx(ref["test_log_likelihood"], abs=2e-5)
    assert accuracy > 0.5  # it learned the bands
    # The coordinator's own last-epoch test accuracy is the same model's.
    assert final.history[-1]["test_accuracy"] == pytest.approx(accuracy, abs=1e-6)


def test_bad_job_is_refused_with_the_servers_message(env):
    bad = Sequential(Linear(784, 32), ReLU(), Linear(30, 11))
    with pytest.raises(TagiError) as e:
        env["client"].submit(job(env, "bad", net=bad))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "layers[2].inFeatures: 30 does not match its input, which has 32 features" in \
        e.value.message
    with pytest.raises(TagiError) as e:
        env["client"].submit(dict(job(env, "bad"), batchSize=0))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "batchSize" in e.value.message


def test_unknown_job_is_not_found_with_the_servers_message(env):
    for call in (env["client"].get, env["client"].cancel):
        with pytest.raises(TagiError) as e:
            call("job-999")
        assert e.value.code == grpc.StatusCode.NOT_FOUND and "job-999" in e.value.message
    with pytest.raises(TagiError) as e:
        env["client"].download("job-999")
    assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_cancel_ends_a_running_job_and_list_shows_it(env):
    client = env["client"]
    long_job = client.submit(job(env, "py-long", epochs=100000))
    wait_training(client, long_job.id)
    client.cancel(long_job.id)
    final = client.wait(long_job.id, timeout=30, progress=False)
    assert final.state == "CANCELLED"
    listed = {j.id: j for j in client.list()}
    assert listed[long_job.id].state == "CANCELLED"
    assert client.get(long_job.id).spec.name == "py-long"
    assert len(client.workers()) == 2


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_watch_draws_a_progress_bar_on_a_terminal(env):
    client = env["client"]
    submitted = client.submit(job(env, "py-bar", epochs=1))
    screen = Terminal()
    updates = list(client.watch(submitted.id, timeout=60, stream=screen))
    assert updates[-1].state in FINAL_STATES
    text = screen.getvalue()
    assert text.startswith("\r[") and "100.0%" in text and text.endswith("\n")
    assert f"{submitted.id} SUCCEEDED" in text
