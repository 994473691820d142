"""The Jobs service of a tagi-ddp coordinator, from Python.

    client = Client("coord-host:7070", token_file="api.token", tls_ca="ca.pem")
    job = client.submit(spec)            # a JobSpec, its dict, or a job file's path
    for update in client.watch(job.id):  # tagi.v1.Job messages until the job ends
        ...
    client.download(job.id, "model.tagi")

Security is tagictl's: an API token (token=, or token_file= holding exactly one
token) is sent as "authorization: Bearer <token>"; tls_ca= talks TLS to a
coordinator whose certificate that CA signed, tls_cert= and tls_key= add a
client certificate (mutual TLS). Every call carries the protocol version
("tagi-protocol" metadata, common/protocol.h) and a deadline (timeout=, in
seconds; watch and download take their own).

Every failed call raises TagiError with the gRPC code and the server's message.
A Client holds one channel; it is thread-safe as grpc channels are. close() it
(or use it as a context manager) when done.
"""
import os
import sys
import tempfile
import time

import grpc
from google.protobuf import json_format

from ._stubs import job_pb2, jobs_pb2, jobs_pb2_grpc

PROTOCOL_KEY = "tagi-protocol"
PROTOCOL_VERSION = "1"
MAX_MESSAGE_BYTES = 8 << 20  # common/grpc_util.h kMaxGrpcMessageBytes
TERMINAL = (jobs_pb2.SUCCEEDED, jobs_pb2.FAILED, jobs_pb2.CANCELLED)


class TagiError(Exception):
    """A failed call: `code` (grpc.StatusCode) and `message` (the server's words)."""

    def __init__(self, code, message, hint=""):
        self.code = code
        self.message = message
        super().__init__(f"{code.name}: {message}{hint}")


def _error(rpc_error, tls):
    code = rpc_error.code() if hasattr(rpc_error, "code") else grpc.StatusCode.UNKNOWN
    message = rpc_error.details() if hasattr(rpc_error, "details") else str(rpc_error)
    hint = ""
    if code == grpc.StatusCode.UNAVAILABLE:
        hint = (" (TLS is on: does the coordinator serve TLS with a certificate signed by the CA "
                "given, for this host name?)" if tls else
                " (if the coordinator serves TLS, pass tls_ca)")
    elif code == grpc.StatusCode.UNAUTHENTICATED:
        hint = " (check the token)"
    return TagiError(code, message or "", hint)


def read_token_file(path):
    """The one token of a token file (common/auth.h's format: one per line, '#' comments)."""
    with open(path, encoding="utf-8") as f:
        tokens = [line.strip() for line in f
                  if line.strip() and not line.strip().startswith("#")]
    if len(tokens) != 1:
        raise ValueError(f"token file {path} holds {len(tokens)} tokens; expected exactly one")
    return tokens[0]


def _read(path):
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def as_job_spec(spec):
    """A tagi.v1.JobSpec from a JobSpec, a dict of the job-file form, or a job file's path."""
    if isinstance(spec, job_pb2.JobSpec):
        return spec
    if isinstance(spec, (str, os.PathLike)):
        with open(spec, encoding="utf-8") as f:
            return json_format.Parse(f.read(), job_pb2.JobSpec())
    if isinstance(spec, dict):
        return json_format.ParseDict(spec, job_pb2.JobSpec())
    raise TypeError(f"a job spec is a tagi.v1.JobSpec, a dict or a path, not {type(spec)}")


class Client:
    def __init__(self, coord="127.0.0.1:7070", *, token=None, token_file=None, tls_ca=None,
                 tls_cert=None, tls_key=None, timeout=10.0):
        if token is not None and token_file is not None:
            raise ValueError("give token or token_file, not both")
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together (mutual TLS)")
        if tls_cert is not None and tls_ca is None:
            raise ValueError("a client certificate needs tls_ca (the coordinator's CA)")
        if token_file is not None:
            token = read_token_file(token_file)
        self.timeout = timeout
        self._tls = tls_ca is not None
        self._metadata = [(PROTOCOL_KEY, PROTOCOL_VERSION)]
        if token:
            self._metadata.append(("authorization", "Bearer " + token))
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.keepalive_time_ms", 10000), ("grpc.keepalive_timeout_ms", 5000)]
        if self._tls:
            creds = grpc.ssl_channel_credentials(root_certificates=_read(tls_ca),
                                                 private_key=_read(tls_key),
                                                 certificate_chain=_read(tls_cert))
            self._channel = grpc.secure_channel(coord, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(coord, options=options)
        self._stub = jobs_pb2_grpc.JobsStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout=None):
        try:
            return method(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise _error(e, self._tls) from None

    def submit(self, spec):
        """Submits a job; returns its tagi.v1.Job (PENDING, with its id)."""
        req = jobs_pb2.SubmitJobRequest(spec=as_job_spec(spec))
        return self._call(self._stub.Submit, req)

    def get(self, job_id):
        return self._call(self._stub.Get, jobs_pb2.GetJobRequest(id=job_id))

    def list(self):
        return list(self._call(self._stub.List, jobs_pb2.ListJobsRequest()).jobs)

    def cancel(self, job_id):
        return self._call(self._stub.Cancel, jobs_pb2.CancelJobRequest(id=job_id))

    def workers(self):
        return list(self._call(self._stub.ListWorkers, jobs_pb2.ListWorkersRequest()).workers)

    def watch(self, job_id, timeout=7 * 24 * 3600.0, progress=None, stream=None):
        """Yields the job now and at every change, until it ends (the last is final).

        progress: draw a progress bar on `stream` (default stderr) while
        yielding; None means when that stream is a terminal.
        """
        stream = stream or sys.stderr
        if progress is None:
            progress = hasattr(stream, "isatty") and stream.isatty()
        bar = ProgressBar(stream) if progress else None
        try:
            for job in self._stub.Watch(jobs_pb2.WatchJobRequest(id=job_id), timeout=timeout,
                                        metadata=self._metadata):
                if bar:
                    bar.update(job)
                yield job
        except grpc.RpcError as e:
            raise _error(e, self._tls) from None
        finally:
            if bar:
                bar.finish()

    def wait(self, job_id, timeout=7 * 24 * 3600.0, progress=None):
        """Watches until the job ends; returns the final tagi.v1.Job."""
        last = None
        for last in self.watch(job_id, timeout=timeout, progress=progress):
            pass
        if last is None or last.state not in TERMINAL:
            raise TagiError(grpc.StatusCode.UNAVAILABLE,
                            f"the watch of {job_id} ended before the job did")
        return last

    def download(self, job_id, path=None, timeout=600.0):
        """The final model file of a SUCCEEDED job: its bytes, also written to `path` if given."""
        parts = []
        size = 0
        total = None
        try:
            for chunk in self._stub.DownloadModel(jobs_pb2.DownloadModelRequest(id=job_id),
                                                  timeout=timeout, metadata=self._metadata):
                if chunk.offset != size:
                    raise TagiError(grpc.StatusCode.DATA_LOSS,
                                    f"model chunk at offset {chunk.offset}, expected {size}")
                parts.append(chunk.data)
                size += len(chunk.data)
                total = chunk.total_bytes
        except grpc.RpcError as e:
            raise _error(e, self._tls) from None
        data = b"".join(parts)
        if total is None or len(data) != total:
            raise TagiError(grpc.StatusCode.DATA_LOSS,
                            f"model download of {job_id} ended at {len(data)} of {total} bytes")
        if path is not None:
            directory = os.path.dirname(os.path.abspath(path))
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tagi-download-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        return data


def state_name(job):
    return jobs_pb2.JobState.Name(job.state)


def epoch_summary(epoch, classification):
    """The test metrics of one tagi.v1.EpochMetrics, as tagictl shows them:
    "test accuracy 85.10% ECE 0.0213 NLL 0.4211 Brier 0.2190" (classification) or
    "test RMSE 0.5120 NLL 0.8000 coverage 68% 67.0% 95% 94.5%" (regression)."""
    e = epoch
    if classification:
        return (f"test accuracy {100 * e.test_accuracy:.2f}% ECE {e.test_ece:.4f} "
                f"NLL {e.test_nll:.4f} Brier {e.test_brier:.4f}")
    return (f"test RMSE {e.test_rmse:.4f} NLL {e.test_nll:.4f} coverage 68% "
            f"{100 * e.test_coverage_68:.1f}% 95% {100 * e.test_coverage_95:.1f}%")


def history(job):
    """The job's per-epoch metrics as plain dicts (a list, oldest first, ready for
    pandas.DataFrame): epoch, train_accuracy, test_accuracy, test_rmse,
    test_log_likelihood, test_nll, test_ece, test_brier, test_coverage_68,
    test_coverage_95, test_mean_std, sigma_v, seconds (every field, zeros included)."""
    rows = []
    for e in job.progress.epochs:
        row = json_format.MessageToDict(e, preserving_proto_field_name=True,
                                        including_default_value_fields=True)
        row["epoch"] = int(row["epoch"])  # a uint64, which the JSON mapping writes as text
        rows.append(row)
    return rows


def describe(job):
    """One line about a job: "job-1 RUNNING epoch 2/3 step 40/100 850 samples/s", and the
    last finished epoch's test metrics (epoch_summary)."""
    p = job.progress
    text = f"{job.id} {state_name(job)}"
    if job.state == jobs_pb2.RUNNING and p.steps_per_epoch:
        text += (f" epoch {p.epoch + 1}/{job.spec.epochs} step {p.step}/{p.steps_per_epoch}"
                 f" {p.samples_per_second:.0f} samples/s")
    if p.epochs:
        text += " " + epoch_summary(p.epochs[-1], job.spec.head.HasField("classification"))
    if job.reason and job.state in TERMINAL:
        text += f": {job.reason}"
    return text


class ProgressBar:
    """One self-overwriting line on a terminal, at most every 0.1 s."""

    def __init__(self, stream, width=30):
        self.stream = stream
        self.width = width
        self.last = 0.0
        self.drawn = False

    def update(self, job):
        now = time.monotonic()
        if now - self.last < 0.1 and job.state not in TERMINAL:
            return
        self.last = now
        p = job.progress
        done = p.global_step / p.total_steps if p.total_steps else (
            1.0 if job.state == jobs_pb2.SUCCEEDED else 0.0)
        filled = int(self.width * min(done, 1.0))
        bar = "#" * filled + "." * (self.width - filled)
        eta = f" eta {p.eta_seconds:.0f}s" if job.state == jobs_pb2.RUNNING and p.eta_seconds else ""
        self.stream.write(f"\r[{bar}] {100 * done:5.1f}% {describe(job)}{eta}\x1b[K")
        self.stream.flush()
        self.drawn = True

    def finish(self):
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
