#!/usr/bin/env python3
"""deploy/slurm/tagi.sbatch on a one-node Slurm cluster made by this test.

The test starts munged, slurmctld and slurmd (Debian's slurm-wlm) from a
generated slurm.conf and munge key in a temporary directory, inside new
network, UTS, mount and PID namespaces: the node is called tagi-node1 and
resolves to 127.0.0.1 (a bind-mounted /etc/hosts), the only interface is
loopback, and every process the test started dies with the namespace's first
process, whatever happens. Then it submits the sbatch script for a 2-worker
CPU job and checks that:
- sbatch --wait exits 0 and the model file came back;
- the job's log shows the TLS coordinator, the submission and SUCCEEDED;
- the workers were stopped with SIGTERM (not killed), and no tagi process
  and no node directory is left after the job;
- a job that fails (its data file is outside the workers' data roots) makes
  the script exit non-zero, with the reason in its log;
- `scancel --batch --signal=TERM` of a long job runs the script's trap, which
  cancels the job (CANCELLED), stops the workers with SIGTERM, then every
  process, and removes the node directory.
Skips (exit 77) with a message where the tools are missing, the test is not
root (namespaces, slurmd), or the daemons cannot start.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
NODE = "tagi-node1"
TOOLS = ["munged", "slurmctld", "slurmd", "sbatch", "srun", "sbcast", "scontrol",
         "sinfo", "unshare", "ip", "hostname", "mount", "openssl"]
INNER_STARTED = "slurm_test: inside the namespaces"


def skip(msg):
    print("SKIP: " + msg, flush=True)
    sys.exit(SKIP)


def outer(args):
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        skip("missing %s (Debian packages slurm-wlm, munge, util-linux, iproute2, "
             "openssl; tools/install_deps.sh installs them)" % ", ".join(missing))
    if os.geteuid() != 0:
        skip("needs root: slurmd runs jobs as their user and the test makes namespaces")
    cmd = ["unshare", "--net", "--uts", "--mount", "--pid", "--fork", "--mount-proc",
           "--kill-child", sys.executable, os.path.abspath(__file__), "--inner",
           "--source", args.source, "--bin", args.bin]
    try:
        p = subprocess.run(cmd, timeout=args.timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired as e:
        # unshare is killed by run(); --kill-child takes the namespace with it.
        print((e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""))
        print("FAIL: timed out after %d s" % args.timeout)
        return 1
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    if INNER_STARTED not in p.stdout and p.returncode != 0:
        skip("could not create the namespaces (unshare exit %d)" % p.returncode)
    return p.returncode


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, **kw)


class Cluster:
    """munged, slurmctld and slurmd from files in `tmp`; stop() ends them."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []
        self.conf = os.path.join(tmp, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)

    def start(self):
        t = self.tmp
        for d in ("munge", "ctld", "spool", "log"):
            os.makedirs(os.path.join(t, d), mode=0o700)
        key = os.path.join(t, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(t, "munge", "munge.socket")
        self.spawn("munged", ["munged", "--foreground", "--force", "--key-file", key,
                              "--socket", sock, "--pid-file", os.path.join(t, "munge", "pid"),
                              "--log-file", os.path.join(t, "log", "munged.log"),
                              "--seed-file", os.path.join(t, "munge", "seed")])
        if not self.wait_for(lambda: os.path.exists(sock), 10):
            self.skip_with_log("munged did not create its socket", "munged.log")
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF.format(node=NODE, tmp=t, sock=sock))
        self.spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", self.conf])
        self.spawn("slurmd", ["slurmd", "-D", "-f", self.conf, "-N", NODE])
        idle = lambda: sh(["sinfo", "-h", "-N", "-o", "%T"], env=self.env).stdout.strip()
        if not self.wait_for(lambda: idle() == "idle", 30):
            self.skip_with_log("the node did not come up idle (sinfo: %r)" % idle(),
                               "slurmctld.log", "slurmd.log")

    def spawn(self, name, cmd):
        log = open(os.path.join(self.tmp, "log", name + ".out"), "w")
        try:
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        except OSError as e:
            skip("cannot start %s: %s" % (name, e))
        self.procs.append((name, p))

    def wait_for(self, cond, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if cond():
                return True
            for name, p in self.procs:
                if p.poll() is not None:
                    self.skip_with_log("%s exited with %d" % (name, p.returncode),
                                       name + ".log", name + ".out")
            time.sleep(0.2)
        return cond()

    def skip_with_log(self, why, *logs):
        for name in logs:
            path = os.path.join(self.tmp, "log", name)
            if os.path.exists(path):
                print("--- %s (tail)" % name)
                print("".join(open(path, errors="replace").readlines()[-30:]))
        self.stop()
        skip("the one-node Slurm cluster could not start: " + why)

    def stop(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


SLURM_CONF = """\
ClusterName=tagi-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={tmp}/ctld
SlurmdSpoolDir={tmp}/spool
SlurmctldPidFile={tmp}/ctld/slurmctld.pid
SlurmdPidFile={tmp}/spool/slurmd.pid
SlurmctldLogFile={tmp}/log/slurmctld.log
SlurmdLogFile={tmp}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
SlurmdTimeout=30
InactiveLimit=0
KillWait=30
NodeName={node} NodeAddr=127.0.0.1 CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def job_spec(name, data):
    return {
        "name": name,
        "layers": [{"kind": "LINEAR", "inFeatures": 1, "outFeatures": 16}, {"kind": "RELU"},
                   {"kind": "LINEAR", "inFeatures": 16, "outFeatures": 1}],
        "head": {"regression": {}}, "data": data, "noise": {"sigmaV": 0.06},
        "batchSize": 10, "epochs": 3, "seed": 1, "device": "cpu",
    }


def tagi_processes():
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                comm = open("/proc/%s/comm" % pid).read().strip()
            except OSError:
                continue
            if comm.startswith("tagi"):
                found.append("%s %s" % (pid, comm))
    return found


def sbatch_command(source, bin_dir, work, job, out, extra=()):
    job_path = os.path.join(work, job["name"] + ".json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    log = os.path.join(work, job["name"] + ".log")
    node_dir = os.path.join(work, "node-" + job["name"])
    cmd = ["sbatch", "--ntasks=2", "--cpus-per-task=1", "--job-name=" + job["name"],
           "--output=" + log, "--chdir=" + work,
           os.path.join(source, "deploy", "slurm", "tagi.sbatch"), "--bin", bin_dir,
           "--node-dir", node_dir, "-o", out] + list(extra) + [job_path]
    return cmd, log, node_dir


def run_sbatch(cluster, source, bin_dir, work, job, out, extra=()):
    cmd, log, node_dir = sbatch_command(source, bin_dir, work, job, out, extra)
    cmd.insert(1, "--wait")
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=cluster.env)
    text = open(log, errors="replace").read() if os.path.exists(log) else "(no log)"
    print("--- sbatch %s: exit %d in %.1f s\n%s%s--- job log\n%s" % (
        job["name"], p.returncode, time.monotonic() - t0, p.stdout, p.stderr, text))
    return p.returncode, text, node_dir


def cancel_while_running(cluster, args, work, failures):
    """scancel in the middle of a long job: the script's trap stops everything."""
    # Long through its epochs' length, not their number: every epoch adds a
    # record to the job's progress (tens of thousands of 2-step epochs made
    # the coordinator rewrite megabytes per epoch and stall under load).
    job = job_spec("long", {"kind": "TOY_CUBIC", "toyTrainSize": 400000, "toyTestSize": 40})
    job["epochs"] = 50
    cmd, log, node_dir = sbatch_command(args.source, args.bin, work, job,
                                        os.path.join(work, "long.tagi"))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                       env=cluster.env)
    slurm_id = r.stdout.strip().split()[-1] if r.returncode == 0 else ""
    if not slurm_id.isdigit():
        failures.append("sbatch of the long job: %s%s" % (r.stdout, r.stderr))
        return
    read = lambda: open(log, errors="replace").read() if os.path.exists(log) else ""
    end = time.monotonic() + 40
    while "RUNNING" not in read() and time.monotonic() < end:
        time.sleep(0.2)
    if "RUNNING" not in read():
        failures.append("the long job did not start running within 40 s:\n" + read())
    t0 = time.monotonic()
    # As deploy/README.md advises: the batch shell gets SIGTERM, its trap
    # stops the workers' step and cleans up while the allocation lasts.
    sh(["scancel", "--batch", "--signal=TERM", slurm_id], env=cluster.env)
    queued = lambda: sh(["squeue", "-h", "-j", slurm_id], env=cluster.env).stdout.strip()
    end = time.monotonic() + 45
    while queued() and time.monotonic() < end:
        time.sleep(0.2)
    took = time.monotonic() - t0
    text = read()
    print("--- scancel of the long job: gone from the queue after %.1f s\n--- job log\n%s"
          % (took, text))
    if queued():
        failures.append("the cancelled job is still in the queue after 45 s")
    if "signalled: stopping" not in text:
        failures.append("the script did not run its trap on scancel")
    if not re.search(r"job-\d+\s+CANCELLED", text):  # tagictl watch's last line
        failures.append("the trap did not cancel the running job")
    if "Killed" in text:
        failures.append("the workers were killed, not stopped with SIGTERM, on scancel")
    if os.path.exists(os.path.join(work, "long.tagi")):
        failures.append("a model file appeared for a cancelled job")
    left = tagi_processes()
    if left:
        failures.append("tagi processes left after scancel: %s" % left)
    if os.path.exists(node_dir):
        failures.append("the node directory %s was not removed after scancel" % node_dir)


def inner(args):
    print(INNER_STARTED, flush=True)
    failures = []
    tmp = tempfile.mkdtemp(prefix="tagi-slurm-test-")
    os.chmod(tmp, 0o755)
    # Slurm resolves its listening address with AI_ADDRCONFIG for IPv4, which
    # glibc answers only when some IPv4 address other than 127.0.0.1 exists:
    # 127.0.0.2 on lo is one, and still loopback.
    for cmd in (["ip", "link", "set", "lo", "up"],
                ["ip", "addr", "add", "127.0.0.2/32", "dev", "lo"], ["hostname", NODE]):
        r = sh(cmd)
        if r.returncode != 0:
            skip("%s failed: %s" % (" ".join(cmd), r.stderr.strip()))
    hosts = os.path.join(tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("127.0.0.1 localhost %s\n::1 localhost\n" % NODE)
    r = sh(["mount", "--bind", hosts, "/etc/hosts"])
    if r.returncode != 0:
        skip("cannot bind-mount /etc/hosts: " + r.stderr.strip())
    cluster = Cluster(tmp)
    try:
        cluster.start()
        work = os.path.join(tmp, "work")
        os.makedirs(work)

        model = os.path.join(work, "cubic.tagi")
        rc, log, node_dir = run_sbatch(
            cluster, args.source, args.bin, work,
            job_spec("cubic", {"kind": "TOY_CUBIC", "toyTrainSize": 40, "toyTestSize": 40}),
            model, ["--coordinator-flag=--http=127.0.0.1:0", "--worker-flag",
                    "--metrics=127.0.0.1:0", "--tagictl-flag=--timeout=20s"])
        if rc != 0:
            failures.append("the sbatch script exited %d for a job that should succeed" % rc)
        if not (os.path.exists(model) and os.path.getsize(model) > 0):
            failures.append("no model file at %s" % model)
        for needle in ("2 cpu worker(s) on 1 node(s), tls", "submitted", "SUCCEEDED"):
            if needle not in log:
                failures.append("the job log does not say %r" % needle)
        if "Killed" in log:
            failures.append("the workers were killed, not stopped with SIGTERM")
        left = tagi_processes()
        if left:
            failures.append("tagi processes left after the job: %s" % left)
        if os.path.exists(node_dir):
            failures.append("the node directory %s was not removed" % node_dir)

        secret = os.path.join(tmp, "secret.csv")
        with open(secret, "w") as f:
            f.write("x,y\n1,2\n")
        bad = job_spec("outside", {"kind": "CSV", "trainCsv": secret, "testCsv": secret,
                                   "csvHasHeader": True})
        rc, log, node_dir = run_sbatch(cluster, args.source, args.bin, work, bad,
                                       os.path.join(work, "outside.tagi"), ["--insecure"])
        if rc == 0:
            failures.append("the sbatch script exited 0 for a job that cannot succeed")
        for needle in ("did not succeed", "FAILED", "outside the directories"):
            if needle not in log:
                failures.append("the failing job's log does not say %r" % needle)
        if os.path.exists(os.path.join(work, "outside.tagi")):
            failures.append("a model file appeared for a failed job")
        left = tagi_processes()
        if left:
            failures.append("tagi processes left after the failed job: %s" % left)
        cancel_while_running(cluster, args, work, failures)
    finally:
        cluster.stop()
        sh(["umount", "/etc/hosts"])
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL: " + f)
    print("slurm_test: %s" % ("FAILED" if failures else "passed"))
    return 1 if failures else 0


def static(args):
    """shellcheck, --help, usage errors and the workers' command line, without Slurm."""
    script = os.path.join(args.source, "deploy", "slurm", "tagi.sbatch")
    failures = []
    if shutil.which("shellcheck"):
        r = sh(["shellcheck", script])
        if r.returncode != 0:
            failures.append("shellcheck deploy/slurm/tagi.sbatch:\n" + r.stdout + r.stderr)
        else:
            print("ok: shellcheck deploy/slurm/tagi.sbatch")
    else:
        print("note: shellcheck is not installed; the script was not linted")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    cases = [
        ([], {}, 2, "not inside a Slurm allocation"),
        (["--help"], {}, 0, "--insecure"),
        ([], {"SLURM_JOB_ID": "7"}, 2, "no job file"),
        (["--bogus", "job.json"], {"SLURM_JOB_ID": "7"}, 2, "unknown option --bogus"),
        (["--device", "tpu", "/dev/null"], {"SLURM_JOB_ID": "7", "TAGI_BIN": args.bin}, 2,
         "--device is auto, cpu or cuda"),
        (["/dev/null"], {"SLURM_JOB_ID": "7", "TAGI_BIN": "/nonexistent"}, 2,
         "no tagi-coordinator in /nonexistent"),
    ]
    for argv, extra, want_rc, want_text in cases:
        r = subprocess.run(["bash", script] + argv, capture_output=True, text=True,
                           timeout=30, env=dict(env, **extra), cwd=tempfile.gettempdir())
        if r.returncode != want_rc or want_text not in r.stdout + r.stderr:
            failures.append("tagi.sbatch %s (%s): exit %d, wanted %d and %r; said:\n%s" % (
                " ".join(argv), extra, r.returncode, want_rc, want_text, r.stdout + r.stderr))
        else:
            print("ok: tagi.sbatch %s: exit %d, %r" % (" ".join(argv), want_rc, want_text))
    failures += check_worker_task(script, args.bin, env)
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


def check_worker_task(script, bin_dir, env):
    """The worker command line srun's tasks run: the device each task takes,
    TLS or not, and every flag accepted by the real tagi-worker."""
    failures = []
    with tempfile.TemporaryDirectory() as stub:
        with open(os.path.join(stub, "tagi-worker"), "w") as f:
            f.write("#!/bin/sh\necho \"$@\"\n")
        os.chmod(os.path.join(stub, "tagi-worker"), 0o755)
        cases = [  # device, security, CUDA_VISIBLE_DEVICES, SLURM_LOCALID, expected
            ("cpu", "tls", None, "1", ["--device cpu", "--tls-ca /n/worker/ca.pem"]),
            ("cuda", "tls", "3", "1", ["--device cuda:0"]),
            ("cuda", "insecure", "0,1,2,3", "5", ["--device cuda:1"]),
        ]
        for device, security, cvd, localid, want in cases:
            e = dict(env, SLURM_LOCALID=localid)
            if cvd is not None:
                e["CUDA_VISIBLE_DEVICES"] = cvd
            r = subprocess.run(["bash", script, "--worker-task", stub, "node1:7070", device,
                                "2", "/n", security, "--metrics=0.0.0.0:9100"],
                               capture_output=True, text=True, timeout=30, env=e)
            line = r.stdout.strip()
            what = "worker task (%s, %s, CUDA_VISIBLE_DEVICES=%s, SLURM_LOCALID=%s)" % (
                device, security, cvd, localid)
            missing = [w for w in want if w not in line]
            if r.returncode != 0 or missing or (security == "insecure") == ("--tls-ca" in line):
                failures.append("%s ran: %r (exit %d), wanted %s" % (what, line, r.returncode,
                                                                      want))
                continue
            real = os.path.join(bin_dir, "tagi-worker")
            h = subprocess.run([real] + line.split() + ["--help"], capture_output=True,
                               text=True, timeout=30)
            errors = [l for l in (h.stdout + h.stderr).splitlines() if l.startswith("ERROR")]
            if errors:
                failures.append("%s: tagi-worker refuses %r: %s" % (what, line, errors))
            else:
                print("ok: %s: tagi-worker %s" % (what, line))
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--inner", action="store_true")
    ap.add_argument("--static", action="store_true", help="only the checks without Slurm")
    ap.add_argument("--timeout", type=int, default=150)
    args = ap.parse_args()
    args.source = os.path.abspath(args.source)
    args.bin = os.path.abspath(args.bin)
    if args.static:
        sys.exit(static(args))
    sys.exit(inner(args) if args.inner else outer(args))


if __name__ == "__main__":
    main()
