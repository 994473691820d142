"""The Jobs service of a tagi-ddp coordinator, from Python.

    client = Client("coord-host:7070", token_file="api.token", tls_ca="ca.pem")
    job = client.submit(spec)            # a JobSpec, its dict, or a job file's path
    job.wait()                           # watches it until it ends (a bar on a terminal)
    job.state, job.reason                # "SUCCEEDED", ""
    job.history                          # per epoch: a dict of its metrics
    job.download("model.tagi")

Jobs come back as Job objects (submit, get, list, cancel, watch, wait): the
state a string ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"),
the progress and the per-epoch metrics plain dicts and lists (ready for
pandas), the tagi.v1.Job message itself in job.proto.

Security is tagictl's: an API token (token=, or token_file= holding exactly one
token) is sent as "authorization: Bearer <token>"; tls_ca= talks TLS to a
coordinator whose certificate that CA signed, tls_cert= and tls_key= add a
client certificate (mutual TLS). Every call carries the protocol version
("tagi-protocol" metadata, common/protocol.h) and a deadline (timeout=, in
seconds; watch and download take their own).

Every failed call raises TagiError with the gRPC code and the server's message;
a wait that runs out of time raises TimeoutError. A Client holds one channel;
it is thread-safe as grpc channels are. close() it (or use it as a context
manager) when done.
"""
import os
import struct
import sys
import tempfile
import time

import grpc
from google.protobuf import json_format

from ._stubs import job_pb2, jobs_pb2, jobs_pb2_grpc

PROTOCOL_KEY = "tagi-protocol"
PROTOCOL_VERSION = "1"
MAX_MESSAGE_BYTES = 8 << 20  # common/grpc_util.h kMaxGrpcMessageBytes
STATES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")  # the coordinator changes them no more
TERMINAL = FINAL_STATES  # its former name
WATCH_FOREVER = 7 * 24 * 3600.0  # the deadline of a watch without a timeout


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
    """A connection to a coordinator's Jobs service (see the module's docstring)."""

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
        """Submits a job; returns its Job (PENDING, with its id)."""
        req = jobs_pb2.SubmitJobRequest(spec=as_job_spec(spec))
        return Job(self._call(self._stub.Submit, req), self)

    def get(self, job_id):
        """The job `job_id` now (a Job)."""
        return Job(self._call(self._stub.Get, jobs_pb2.GetJobRequest(id=job_id)), self)

    def list(self):
        """Every job the coordinator holds, as Jobs."""
        return [Job(j, self) for j in
                self._call(self._stub.List, jobs_pb2.ListJobsRequest()).jobs]

    def cancel(self, job_id):
        """Cancels a job; returns it as the coordinator has it then (a Job)."""
        return Job(self._call(self._stub.Cancel, jobs_pb2.CancelJobRequest(id=job_id)), self)

    def workers(self):
        """The registered workers (tagi.v1.WorkerInfo messages; their state is a string)."""
        return list(self._call(self._stub.ListWorkers, jobs_pb2.ListWorkersRequest()).workers)

    def watch(self, job_id, timeout=WATCH_FOREVER, progress=None, stream=None):
        """Yields the job (a Job) now and at every change, until it ends (the last is final).

        progress: draw a progress bar on `stream` (default stderr) while
        yielding; None means when that stream is a terminal. The stream's
        deadline is `timeout` seconds (then TagiError DEADLINE_EXCEEDED).
        """
        stream = stream or sys.stderr
        if progress is None:
            progress = hasattr(stream, "isatty") and stream.isatty()
        bar = ProgressBar(stream) if progress else None
        try:
            for message in self._stub.Watch(jobs_pb2.WatchJobRequest(id=job_id),
                                            timeout=timeout, metadata=self._metadata):
                if bar:
                    bar.update(message)
                yield Job(message, self)
        except grpc.RpcError as e:
            raise _error(e, self._tls) from None
        finally:
            if bar:
                bar.finish()

    def logs(self, job_id, after=0, max_lines=0):
        """The job's log lines after seq `after` (0: from the oldest kept), as plain dicts
        {"seq", "time_ms", "rank", "generation", "worker_id", "text"}, oldest first; at most
        `max_lines` (0: the coordinator's most, 1,000). Ask again after the last "seq" for more."""
        req = jobs_pb2.GetJobLogsRequest(id=job_id, after=after, max_lines=max_lines)
        reply = self._call(self._stub.GetLogs, req)
        return [{"seq": line.seq, "time_ms": line.time_ms, "rank": line.rank,
                 "generation": line.generation, "worker_id": line.worker_id,
                 "text": line.text} for line in reply.lines]

    def wait(self, job_id, timeout=None, poll=1.0, progress=None):
        """Watches a job until it ends; returns the final Job (see Job.wait)."""
        return Job(jobs_pb2.Job(id=job_id), self).wait(timeout=timeout, poll=poll,
                                                       progress=progress)

    def download(self, job_id, path=None, timeout=600.0, snapshot=False):
        """The final model file of a SUCCEEDED job: its bytes, also written to `path` if given.
        snapshot=True: the job's newest stored snapshot as a model file instead (what a
        CANCELLED or FAILED job got to; resubmit from it with init_from)."""
        parts = []
        size = 0
        total = None
        try:
            req = jobs_pb2.DownloadModelRequest(id=job_id, from_snapshot=bool(snapshot))
            for chunk in self._stub.DownloadModel(req,
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


class Job:
    """A job as the coordinator last told this client: a tagi.v1.Job message
    (`proto`) read as plain Python.

    id, name, state ("PENDING", "RUNNING", "SUCCEEDED", "FAILED",
    "CANCELLED"), reason (why it is in its state: the failure, the cancel, what
    it waits for), done (its state is final), spec (the tagi.v1.JobSpec),
    workers (the worker id of each rank), progress (a dict, see the property)
    and history (per finished epoch a dict of its metrics). The message's
    other fields read through: job.model_bytes, job.restarts,
    job.submit_time_ms, ...

    refresh() asks the coordinator again, wait() watches until the job ends;
    both update this object in place and return it. cancel() and download()
    act on the job. A Job made by a Client keeps that client (and needs it open).
    """

    def __init__(self, proto, client=None):
        if not isinstance(proto, jobs_pb2.Job):
            raise TypeError(f"a Job wraps a tagi.v1.Job message, not {type(proto)}")
        self.proto = proto
        self._client = client

    # --- what the message says -------------------------------------------

    @property
    def id(self):
        return self.proto.id

    @property
    def name(self):
        return self.proto.spec.name

    @property
    def state(self):
        """The state's name: "PENDING", "RUNNING", "SUCCEEDED", "FAILED" or "CANCELLED"."""
        return state_name(self.proto)

    @property
    def reason(self):
        return self.proto.reason

    @property
    def done(self):
        """Whether the state is final (SUCCEEDED, FAILED or CANCELLED)."""
        return self.state in FINAL_STATES

    @property
    def spec(self):
        return self.proto.spec

    @property
    def workers(self):
        return list(self.proto.workers)

    @property
    def progress(self):
        """A plain dict of where the job is: every field of tagi.v1.JobProgress but
        the per-epoch metrics (those are `history`), with the proto's names:
        epoch (0-based, in progress), step (done in that epoch), steps_per_epoch,
        global_step, total_steps, samples_per_second, eta_seconds, step_seconds,
        allreduce_seconds, allreduce_bytes, ...; and epochs_total (the spec's
        epochs) and fraction (global_step / total_steps; 1.0 once SUCCEEDED,
        0.0 before the first step is known)."""
        p = self.proto.progress
        row = message_fields(p)
        row["epochs_total"] = int(self.proto.spec.epochs)
        if self.proto.state == jobs_pb2.SUCCEEDED:
            row["fraction"] = 1.0
        else:
            row["fraction"] = min(p.global_step / p.total_steps, 1.0) if p.total_steps else 0.0
        return row

    @property
    def history(self):
        """The metrics of every finished epoch, oldest first: a list of plain dicts
        (see history()), ready for pandas.DataFrame(job.history)."""
        return history(self.proto)

    def __getattr__(self, name):
        # The message's other fields (model_bytes, restarts, recoveries, ...).
        if name.startswith("_") or name == "proto":
            raise AttributeError(name)
        try:
            return getattr(self.proto, name)
        except AttributeError:
            raise AttributeError(f"'Job' object has no attribute {name!r}") from None

    def __repr__(self):
        return f"<Job {describe(self.proto)}>"

    # --- calls to the coordinator -----------------------------------------

    def _need_client(self):
        if self._client is None:
            raise ValueError(f"job {self.id} has no client (make it with Job(proto, client))")
        return self._client

    def refresh(self):
        """Asks the coordinator for the job again; returns this Job, updated."""
        self.proto = self._need_client().get(self.id).proto
        return self

    def wait(self, timeout=None, poll=1.0, progress=None):
        """Watches the job until its state is final; returns this Job, updated.

        timeout: seconds to wait at most (None: no limit); past it raises
        TimeoutError naming the job and where it is (the job goes on).
        A coordinator that cannot be reached (TagiError UNAVAILABLE: restarting)
        or a watch that ends before the job does is watched again after `poll`
        seconds, until the timeout; poll=None raises at once instead. Any
        other failure of the service (NOT_FOUND, UNAUTHENTICATED, ...) raises
        its TagiError. progress: a progress bar on stderr, as Client.watch.
        A FAILED or CANCELLED job is returned like a SUCCEEDED one: check state.
        """
        client = self._need_client()
        if self.done:  # a final state changes no more
            return self
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WATCH_FOREVER if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise self._timed_out(timeout)
            try:
                for update in client.watch(self.id, timeout=left, progress=progress):
                    self.proto = update.proto
                if self.done:
                    return self
                problem = TagiError(grpc.StatusCode.UNAVAILABLE,
                                    f"the watch of {self.id} ended before the job did")
            except TagiError as e:
                if e.code == grpc.StatusCode.DEADLINE_EXCEEDED and deadline is not None:
                    raise self._timed_out(timeout) from None
                if e.code != grpc.StatusCode.UNAVAILABLE:
                    raise
                problem = e
            if poll is None:
                raise problem
            pause = poll if deadline is None else min(poll, deadline - time.monotonic())
            time.sleep(max(pause, 0.0))

    def _timed_out(self, timeout):
        return TimeoutError(f"job {self.id} has not ended after {timeout:g} s: "
                            f"{describe(self.proto)}")

    def cancel(self):
        """Cancels the job; returns this Job, updated."""
        self.proto = self._need_client().cancel(self.id).proto
        return self

    def download(self, path=None, timeout=600.0, snapshot=False):
        """The final model file (of a SUCCEEDED job): its bytes, also written to `path`;
        snapshot=True: its newest stored snapshot as a model file (Client.download)."""
        return self._need_client().download(self.id, path, timeout=timeout, snapshot=snapshot)

    def logs(self, after=0):
        """Every log line of the job after seq `after`, as plain dicts (Client.logs)."""
        client = self._need_client()
        lines = []
        while True:
            page = client.logs(self.id, after=after)
            if not page:
                return lines
            lines.extend(page)
            after = page[-1]["seq"]


def _message(job):
    """The tagi.v1.Job of a Job or of the message itself."""
    return job.proto if isinstance(job, Job) else job


def state_name(job):
    """A job's state (a Job, a tagi.v1.Job, or the enum's number) as its name:
    "PENDING", ...; a number this client does not know is "STATE_<number>"."""
    number = job if isinstance(job, int) else _message(job).state
    value = jobs_pb2.JobState.DESCRIPTOR.values_by_number.get(number)
    if value is None:
        return f"STATE_{number}"
    return value.name[len("JOB_STATE_"):] if value.name.startswith("JOB_STATE_") else value.name


def _shortest_float32(x):
    """A float32 field's value at its shortest decimal that reads back as the same
    float32 (0.2, not 0.20000000298023224), as the proto's JSON form writes it."""
    exact = struct.unpack("<f", struct.pack("<f", x))[0]
    for digits in range(6, 10):
        short = float(f"{exact:.{digits}g}")
        if struct.unpack("<f", struct.pack("<f", short))[0] == exact:
            return short
    return exact


def _is_repeated(field):
    if hasattr(field, "is_repeated"):  # protobuf 6 and later
        return field.is_repeated
    return field.label == field.LABEL_REPEATED


def message_fields(message):
    """The scalar fields of a message as a plain dict, defaults included, in the
    proto's order and names: integers as int, float32 at their shortest decimal,
    enums by name; repeated and message fields left out."""
    row = {}
    for field in message.DESCRIPTOR.fields:
        if _is_repeated(field) or field.message_type is not None:
            continue
        value = getattr(message, field.name)
        if field.type == field.TYPE_FLOAT:
            value = _shortest_float32(value)
        elif field.enum_type is not None:
            known = field.enum_type.values_by_number.get(value)
            value = known.name if known else value
        row[field.name] = value
    return row


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
    """The job's per-epoch metrics (a Job or a tagi.v1.Job) as plain dicts (a list,
    oldest first, ready for pandas.DataFrame): epoch (1-based), train_accuracy,
    test_accuracy, test_rmse, test_log_likelihood, sigma_v, seconds, test_ece,
    test_nll, test_brier, test_coverage_68, test_coverage_95, test_mean_std
    (every field of tagi.v1.EpochMetrics, zeros included)."""
    return [message_fields(e) for e in _message(job).progress.epochs]


def describe(job):
    """One line about a job (a Job or a tagi.v1.Job): "job-1 RUNNING epoch 2/3 step
    40/100 850 samples/s", and the last finished epoch's test metrics (epoch_summary)."""
    job = _message(job)
    p = job.progress
    text = f"{job.id} {state_name(job)}"
    if job.state == jobs_pb2.RUNNING and p.steps_per_epoch:
        text += (f" epoch {p.epoch + 1}/{job.spec.epochs} step {p.step}/{p.steps_per_epoch}"
                 f" {p.samples_per_second:.0f} samples/s")
    if p.epochs:
        text += " " + epoch_summary(p.epochs[-1], job.spec.head.HasField("classification"))
    if job.reason and state_name(job) in FINAL_STATES:
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
        job = _message(job)
        final = state_name(job) in FINAL_STATES
        now = time.monotonic()
        if now - self.last < 0.1 and not final:
            return
        self.last = now
        p = job.progress
        done = p.global_step / p.total_steps if p.total_steps else (
            1.0 if job.state == jobs_pb2.SUCCEEDED else 0.0)
        filled = int(self.width * min(done, 1.0))
        bar = "#" * filled + "." * (self.width - filled)
        eta = (f" eta {p.eta_seconds:.0f}s"
               if job.state == jobs_pb2.RUNNING and p.eta_seconds else "")
        self.stream.write(f"\r[{bar}] {100 * done:5.1f}% {describe(job)}{eta}\x1b[K")
        self.stream.flush()
        self.drawn = True

    def finish(self):
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
