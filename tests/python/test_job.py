"""tagi_ddp.Job: the client's jobs as plain Python, against a real coordinator.

Without a server: state names for every enum value (and one this client does
not know), progress and history as dicts of ints and floats, the message's
other fields read through, a Job without a client refusing calls. With a
coordinator and 2 workers on loopback: submit, wait, refresh, cancel and
download on Job objects; wait's timeout raising TimeoutError about when it
should, and naming the job; a wait outliving a restart of the coordinator
(its state directory keeps the job), and one against nothing raising
UNAVAILABLE at once with poll=None.
"""
import os
import threading
import time

import grpc
import pytest

from cluster import Cluster, make_idx_data
from tagi_ddp import Client, Job, TagiError, data, decode_model
from tagi_ddp._stubs import jobs_pb2
from tagi_ddp.client import FINAL_STATES, STATES, history, state_name
from tagi_ddp.nn import Linear, ReLU, Sequential


def message(**fields):
    job = jobs_pb2.Job(**dict(dict(id="job-4", state=jobs_pb2.RUNNING), **fields))
    job.spec.name = "mlp"
    job.spec.epochs = 3
    p = job.progress
    p.epoch, p.step, p.steps_per_epoch = 1, 5, 20
    p.global_step, p.total_steps = 25, 60
    p.samples_per_second, p.eta_seconds, p.allreduce_bytes = 850.5, 12.0, 1 << 40
    p.epochs.add(epoch=1, train_accuracy=0.5, test_accuracy=0.75, sigma_v=0.2, seconds=1.5,
                 test_ece=0.05, test_nll=0.7, test_brier=0.3)
    return job


def test_states_are_names_without_a_prefix():
    names = {state_name(Job(jobs_pb2.Job(state=n))) for n in range(6)}
    assert names == {"UNSPECIFIED", *STATES}
    assert Job(jobs_pb2.Job(state=jobs_pb2.CANCELLED)).state == "CANCELLED"
    assert state_name(9) == "STATE_9"  # a state a newer coordinator may add
    assert set(FINAL_STATES) == {"SUCCEEDED", "FAILED", "CANCELLED"}
    assert Job(jobs_pb2.Job(state=jobs_pb2.FAILED)).done
    assert not Job(jobs_pb2.Job(state=jobs_pb2.RUNNING)).done


def test_progress_and_history_are_plain_dicts():
    job = Job(message(model_bytes=123))
    p = job.progress
    assert type(p) is dict and "epochs" not in p
    assert (p["epoch"], p["step"], p["steps_per_epoch"]) == (1, 5, 20)
    assert p["global_step"] == 25 and type(p["global_step"]) is int
    assert p["allreduce_bytes"] == 1 << 40 and type(p["allreduce_bytes"]) is int
    assert p["samples_per_second"] == 850.5 and p["eta_seconds"] == 12.0
    assert p["epochs_total"] == 3 and p["fraction"] == pytest.approx(25 / 60)
    assert p["rendezvous_seconds"] == 0.0  # every field, defaults included
    rows = job.history
    assert rows == history(job.proto) == history(job)
    assert len(rows) == 1 and type(rows[0]) is dict
    assert rows[0]["epoch"] == 1 and type(rows[0]["epoch"]) is int
    assert rows[0]["sigma_v"] == 0.2  # float32, at its shortest decimal
    assert rows[0]["test_accuracy"] == 0.75 and rows[0]["test_rmse"] == 0.0
    assert all(type(v) in (int, float) for v in rows[0].values())
    done = Job(message(state=jobs_pb2.SUCCEEDED))
    assert done.progress["fraction"] == 1.0
    assert Job(jobs_pb2.Job(id="job-1")).progress["fraction"] == 0.0


def test_other_fields_read_through_and_repr_shows_the_state():
    job = Job(message(model_bytes=123, restarts=2))
    assert job.id == "job-4" and job.name == "mlp" and job.reason == ""
    assert job.model_bytes == 123 and job.restarts == 2 and job.spec.epochs == 3
    assert job.workers == [] and isinstance(job.workers, list)
    assert repr(job).startswith("<Job job-4 RUNNING epoch 2/3 step 5/20 ")
    with pytest.raises(AttributeError, match="no_such_field"):
        job.no_such_field
    with pytest.raises(ValueError, match="no client"):
        job.refresh()
    with pytest.raises(TypeError):
        Job({"id": "job-1"})


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from conftest import bin_dir
    tmp = str(tmp_path_factory.mktemp("job"))
    paths, _ = make_idx_data(tmp, n_train=160, n_test=40)
    cluster = Cluster(bin_dir(), tmp, workers=2, world=2)
    client = Client(cluster.address, timeout=10)
    try:
        yield {"tmp": tmp, "paths": paths, "cluster": cluster, "client": client}
    finally:
        client.close()
        cluster.stop()


def spec(paths, name, epochs, world_size=2):
    return Sequential(Linear(784, 16), ReLU(), Linear(16, 11)).to_job_dict(
        name=name, data=data.mnist(**paths), num_classes=10, sigma_v=1.0, batch_size=16,
        epochs=epochs, seed=3, world_size=world_size, device="cpu")


def test_a_job_waits_until_it_succeeds_and_gives_its_history(env):
    client = env["client"]
    job = client.submit(spec(env["paths"], "py-job", 2))
    assert isinstance(job, Job) and job.state in ("PENDING", "RUNNING") and job.name == "py-job"
    assert job.wait(timeout=60, progress=False) is job
    assert job.state == "SUCCEEDED", env["cluster"].logs()
    assert job.done and job.reason == "trained 2 epochs on 2 workers"
    p = job.progress
    assert p["fraction"] == 1.0 and p["global_step"] == p["total_steps"] == 2 * 5
    assert p["epochs_total"] == 2 and p["steps_per_epoch"] == 5
    rows = job.history
    assert [r["epoch"] for r in rows] == [1, 2]
    assert all(0.0 <= r["test_accuracy"] <= 1.0 and r["seconds"] > 0 for r in rows)
    assert rows[-1]["test_nll"] == pytest.approx(-rows[-1]["test_log_likelihood"])
    assert [j.state for j in client.list() if j.id == job.id] == ["SUCCEEDED"]
    again = client.get(job.id)
    assert again.history == rows and again.state == "SUCCEEDED"
    path = os.path.join(env["tmp"], "py-job.tagi")
    assert len(job.download(path)) == job.model_bytes == os.path.getsize(path)
    assert job.wait(timeout=0) is job  # final: no call needed
    updates = list(client.watch(job.id, timeout=10, progress=False))
    assert [u.state for u in updates] == ["SUCCEEDED"] and isinstance(updates[0], Job)
    # The ranks' log: a start, 2 epochs and an end each (the end comes just after).
    deadline = time.monotonic() + 20
    while len(job.logs()) < 8 and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = job.logs()
    assert len(lines) == 8, lines
    assert sorted(l["rank"] for l in lines) == [0] * 4 + [1] * 4
    assert [l["seq"] for l in lines] == list(range(1, 9))
    assert sum(l["text"] == "finished" for l in lines) == 2
    assert any(l["text"].startswith("epoch 2: train accuracy") for l in lines)
    assert all(l["generation"] == 1 and l["worker_id"] in job.workers for l in lines)
    assert job.logs(after=6) == lines[6:]
    assert client.logs(job.id, after=2, max_lines=3) == lines[2:5]


def test_wait_times_out_naming_the_job_then_cancel_ends_it(env):
    client = env["client"]
    job = client.submit(spec(env["paths"], "py-wait", 100000))
    start = time.monotonic()
    with pytest.raises(TimeoutError) as e:
        job.wait(timeout=1.5, progress=False)
    took = time.monotonic() - start
    assert 1.4 <= took < 6.0, took  # not early, and not much later (a loaded machine)
    assert f"job {job.id} has not ended after 1.5 s" in str(e.value)
    assert job.state in ("PENDING", "RUNNING")  # it goes on
    assert job.refresh() is job and job.state == "RUNNING"
    assert job.progress["global_step"] > 0
    # While it runs, its newest snapshot (an epoch's end) is a model file.
    deadline = time.monotonic() + 20
    while job.refresh().snapshot_step == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    partial = decode_model(job.download(snapshot=True))
    assert partial.mu.size > 0 and partial.var.size == partial.mu.size
    assert job.cancel() is job and job.state in ("RUNNING", "CANCELLED")
    assert job.wait(timeout=30, progress=False).state == "CANCELLED"
    assert job.reason
    with pytest.raises(TagiError) as e:
        job.download()
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    # Without --state-dir the coordinator kept its snapshots only while it ran.
    with pytest.raises(TagiError) as e:
        job.download(snapshot=True)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "no --state-dir" in e.value.message


def test_waiting_for_an_unknown_job_raises_not_found(env):
    with pytest.raises(TagiError) as e:
        env["client"].wait("job-999", timeout=10)
    assert e.value.code == grpc.StatusCode.NOT_FOUND and "job-999" in e.value.message


def test_wait_against_nothing_raises_unavailable_or_times_out(tmp_path):
    with Client("127.0.0.1:1", timeout=2) as client:
        job = Job(jobs_pb2.Job(id="job-1"), client)
        start = time.monotonic()
        with pytest.raises(TagiError) as e:
            job.wait(timeout=20, poll=None)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - start < 10
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            job.wait(timeout=1.0, poll=0.1)
        assert 0.9 <= time.monotonic() - start < 5


def test_wait_outlives_a_restart_of_the_coordinator(tmp_path):
    """No workers: the job stays PENDING; the coordinator restarts on the same port
    with the same state directory, and a cancel there ends the first wait."""
    from conftest import bin_dir
    tmp = str(tmp_path)
    paths, _ = make_idx_data(tmp, n_train=32, n_test=16)
    state = os.path.join(tmp, "state")
    cluster = Cluster(bin_dir(), tmp, workers=0, world=2, coordinator_flags=["--state-dir", state])
    try:
        with Client(cluster.address, timeout=10) as client:
            job = client.submit(spec(paths, "py-restart", 1))
            assert job.state == "PENDING"
            result = {}

            def wait():
                try:
                    result["job"] = job.wait(timeout=60, poll=0.1, progress=False)
                except Exception as e:  # noqa: BLE001  (the test reports it)
                    result["error"] = e
            # A daemon: should the test fail, the interpreter does not wait
            # out the thread's 60 s (the ctest timeout would hide the failure).
            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            time.sleep(0.5)
            cluster.coordinator.terminate()
            cluster.coordinator.wait(timeout=10)
            time.sleep(0.5)
            assert waiter.is_alive(), result
            cluster.coordinator = cluster._start("coordinator-again", [
                os.path.join(bin_dir(), "tagi-coordinator"), "--listen", cluster.address,
                "--world", "2", "--state-dir", state])
            deadline = time.monotonic() + 20
            while True:
                try:
                    assert client.get(job.id).state == "PENDING"
                    break
                except TagiError as e:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"the restarted coordinator did not answer: {e}\n"
                                             f"{cluster.logs()}") from None
                    time.sleep(0.1)
            client.cancel(job.id)
            waiter.join(timeout=30)
            assert not waiter.is_alive()
            assert "error" not in result, (result, cluster.logs())
            assert result["job"] is job and job.state == "CANCELLED"
    finally:
        cluster.stop()
