#!/usr/bin/env python3
"""Reference figure for fault tolerance: torchrun's elastic restart after a local kill -9.

torchrun (gloo, 1 node x 2 ranks, --max_restarts 10, c10d rendezvous on loopback) runs
DDP training of a 784-100-100-10 ReLU MLP on Fashion-MNIST (Adam, batch 128 per rank,
OMP_NUM_THREADS=1). Rank 0 saves model + optimizer + step every --ckpt-every steps
(torch.save to a temp file, then os.replace); every rank, on start, loads the newest
checkpoint if there is one and continues from its step. Each rank appends
"<time.time()> <TORCHELASTIC_RESTART_COUNT> <global step>" to its step log after every step.

torchrun's agent checks its workers only every --monitor_interval (default 5 s) from a fixed
start, and the ranks run ~200 steps/s here, so a kill at a random step alone would hit nearly
the same phase of that tick every run; to sample the phase, both ranks pause for U(0, S) s after
their first step (S = --phase-jitter, default the monitor interval), which does not touch
launch -> first step.

For each run the driver waits until rank 1 logs a step drawn at random from --kill-range,
sends SIGKILL to rank 1's process and measures
  * kill -> first step after restart: kill -> every rank has logged its first step with
    restart count 1, split into kill -> new rank 1 process started (its first line, before
    importing torch: failure detection, stopping rank 0, re-rendezvous, spawn) and the rest
    (imports, process group, data, checkpoint load, first step);
  * steps redone: last step rank 1 logged before the kill - step the restart resumed from;
  * launch -> first step (context): torchrun started -> every rank logged its first step.
Then it stops the job (or lets it finish with --finish) and kills torchrun's whole
process group. It prints a table and a final "JSON {...}" line (median/min/max).

  bench/torchrun_elastic.py [--runs 5] [--seed 0] [--ckpt-every 50] [--total-steps 600]
                            [--kill-range 60:260] [--monitor-interval S] [--phase-jitter S]
                            [--finish] [--out F]
Needs Debian's python3-torch (in /usr/bin/python3, or TORCH_PYTHON) and dataset-fashion-mnist.
--monitor-interval sets torchrun's --monitor_interval (default: torchrun's own, 5 s), which
dominates the time to notice a dead rank. The figures depend on other load on the host (the
1-minute load average at start and end is printed and kept in the JSON).
"""
import argparse, json, os, random, shutil, signal, socket, statistics, subprocess, sys
import tempfile, time

# Debian's python3-torch lives in the system interpreter (as in bench/ddp_compare.py).
TORCH_PYTHON = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")

# The training script run by torchrun. argv: data_dir work_dir ckpt_every total_steps batch pause
TRAIN_SCRIPT = r'''
import gzip, os, sys, time
data_dir, work = sys.argv[1], sys.argv[2]
ckpt_every, total_steps, batch = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
pause = float(sys.argv[6])  # seconds to sleep after the first step of the first attempt
rank, restart = int(os.environ["RANK"]), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
with open(os.path.join(work, "pid.r%d.a%d" % (rank, restart)), "w") as f:  # before importing torch
    f.write("%d %r\n" % (os.getpid(), time.time()))
import numpy as np, torch, torch.distributed as dist, torch.nn as nn
dist.init_process_group("gloo")
world = dist.get_world_size()
torch.manual_seed(1)
def idx(name, off):  # IDX gz file -> flat uint8 array (header of `off` bytes skipped)
    with gzip.open(os.path.join(data_dir, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=off)
x = torch.tensor(idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784), dtype=torch.float32) / 255
y = torch.tensor(idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64))
x = (x - x.mean()) / x.std()
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(), nn.Linear(100, 10)))
opt = torch.optim.Adam(model.parameters(), 1e-3)
ckpt = os.path.join(work, "ckpt.pt")
step = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    step = int(state["step"])
sampler = torch.utils.data.distributed.DistributedSampler(torch.arange(len(x)), world, rank, seed=1)
per_epoch = len(sampler) // batch
loss_fn = nn.CrossEntropyLoss()
log = open(os.path.join(work, "steps.r%d" % rank), "a")
while step < total_steps:
    epoch, pos = divmod(step, per_epoch)
    sampler.set_epoch(epoch)
    idxs = torch.tensor(list(iter(sampler)))
    for s in range(pos * batch, per_epoch * batch, batch):
        b = idxs[s:s + batch]
        opt.zero_grad(); loss_fn(model(x[b]), y[b]).backward(); opt.step()
        step += 1
        log.write("%r %d %d\n" % (time.time(), restart, step)); log.flush()
        if restart == 0 and step == 1:
            time.sleep(pause)
        if rank == 0 and step % ckpt_every == 0:
            tmp = ckpt + ".tmp"
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, ckpt)
        if step >= total_steps:
            break
dist.destroy_process_group()
'''

DATA_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")


def find_data_dir():
    """Directory of Debian's dataset-fashion-mnist IDX gz files."""
    cands = ["/usr/share/datasets/fashion-mnist", "/usr/share/dataset-fashion-mnist"]
    try:
        out = subprocess.run(["dpkg", "-L", "dataset-fashion-mnist"], capture_output=True,
                             text=True).stdout
        cands += [os.path.dirname(p) for p in out.split() if p.endswith(DATA_FILES[0])]
    except OSError:
        pass
    for d in cands:
        if all(os.path.exists(os.path.join(d, f)) for f in DATA_FILES):
            return d
    sys.exit("Fashion-MNIST not found: install Debian's dataset-fashion-mnist")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StepLog:
    """Incremental reader of one rank's step log: list of (time, restart, step)."""

    def __init__(self, path):
        self.path, self.pos, self.rows, self.partial = path, 0, [], ""

    def poll(self):
        try:
            with open(self.path) as f:
                f.seek(self.pos)
                data = f.read()
                self.pos = f.tell()
        except FileNotFoundError:
            return self.rows
        data = self.partial + data
        lines = data.split("\n")
        self.partial = lines.pop()  # incomplete last line, if any
        for ln in lines:
            t, r, s = ln.split()
            self.rows.append((float(t), int(r), int(s)))
        return self.rows

    def first(self, restart):
        return next((row for row in self.rows if row[1] == restart), None)

    def last(self, restart):
        return next((row for row in reversed(self.rows) if row[1] == restart), None)


def wait_for(pred, timeout, what, proc, poll=0.005):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        if proc.poll() is not None:
            raise RuntimeError("torchrun exited (rc %s) while waiting for %s" % (proc.returncode, what))
        time.sleep(poll)
    raise RuntimeError("timed out after %.0f s waiting for %s" % (timeout, what))


def kill_group(proc):
    """SIGTERM then SIGKILL to torchrun's whole process group (agent + workers)."""
    if proc is None:
        return
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid  # already reaped; the group id is still the leader's pid
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        end = time.time() + grace
        while time.time() < end:
            proc.poll()
            try:
                os.killpg(pgid, 0)  # anyone left in the group?
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            continue
        break
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


def group_members(pgid):
    out = subprocess.run(["ps", "-e", "-o", "pid=,pgid="], capture_output=True, text=True).stdout
    return [int(a) for a, b in (ln.split() for ln in out.splitlines()) if int(b) == pgid]


def one_run(args, data_dir, script, kill_step, pause, keep):
    work = tempfile.mkdtemp(prefix="torchrun-elastic-")
    port = free_port()
    cmd = [TORCH_PYTHON, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--max_restarts", "10", "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:%d" % port,
           "--rdzv_id", "elastic-bench",
           # Debian's torch 1.13 under Python 3.11 cannot parse the default "0" (enum.Flag no
           # longer iterates its zero member) and crashes at start; redirect + tee stdout instead.
           "--redirects", "1", "--tee", "1", "--log_dir", os.path.join(work, "logs")]
    if args.monitor_interval is not None:
        cmd += ["--monitor_interval", str(args.monitor_interval)]
    cmd += [script, data_dir, work, str(args.ckpt_every), str(args.total_steps), "128", repr(pause)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    logs = [StepLog(os.path.join(work, "steps.r%d" % r)) for r in (0, 1)]
    out = open(os.path.join(work, "torchrun.out"), "w")
    proc = None
    try:
        t_launch = time.time()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=work)
        wait_for(lambda: all(l.poll() and l.first(0) for l in logs), 120, "the first step", proc)
        t_first = max(l.first(0)[0] for l in logs)
        wait_for(lambda: logs[1].poll() and logs[1].last(0)[2] >= kill_step, 120,
                 "rank 1 at step %d" % kill_step, proc, poll=0.002)
        pid = int(open(os.path.join(work, "pid.r1.a0")).read().split()[0])
        if pid not in group_members(os.getpgid(proc.pid)):
            raise RuntimeError("rank 1 pid %d is not in torchrun's process group" % pid)
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
        step_at_kill = logs[1].poll() and logs[1].last(0)[2]  # final: the process is dead
        wait_for(lambda: all(l.poll() and l.first(1) for l in logs), 120,
                 "the first step after the restart", proc)
        t_resumed = max(l.first(1)[0] for l in logs)
        resumed_from = logs[1].first(1)[2] - 1
        t_respawn = float(open(os.path.join(work, "pid.r1.a1")).read().split()[1])
        rc = None
        if args.finish:
            rc = proc.wait(600)
            if rc != 0:
                raise RuntimeError("torchrun exited with %d after the restart" % rc)
        return {"kill_step": kill_step, "pause_s": pause, "step_at_kill": step_at_kill, "resumed_from": resumed_from,
                "steps_redone": step_at_kill - resumed_from,
                "kill_to_first_step_s": t_resumed - t_kill,
                "kill_to_respawn_s": t_respawn - t_kill,
                "respawn_to_first_step_s": t_resumed - t_respawn,
                "launch_to_first_step_s": t_first - t_launch}
    except Exception:
        out.flush()
        sys.stderr.write("---- torchrun output (%s) ----\n" % work)
        sys.stderr.write(open(os.path.join(work, "torchrun.out")).read()[-3000:])
        keep.append(work)
        raise
    finally:
        if proc is not None:
            pgid = proc.pid
            kill_group(proc)
            left = group_members(pgid)
            if left:
                sys.stderr.write("warning: processes left in group %d: %s\n" % (pgid, left))
        out.close()
        if work not in keep:
            shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random kill steps")
    ap.add_argument("--ckpt-every", type=int, default=50, help="checkpoint every K steps")
    ap.add_argument("--total-steps", type=int, default=600)
    ap.add_argument("--kill-range", default="60:260", help="LO:HI, kill rank 1 at a step in it")
    ap.add_argument("--monitor-interval", type=float, default=None,
                    help="torchrun --monitor_interval (default: torchrun's, 5 s)")
    ap.add_argument("--phase-jitter", type=float, default=None,
                    help="pause both ranks U(0, S) s after their first step, so that the kill falls at "
                         "a random phase of torchrun's monitor tick (default: the monitor interval; 0: off)")
    ap.add_argument("--finish", action="store_true",
                    help="let each job run to --total-steps instead of stopping after recovery")
    ap.add_argument("--out", help="write the summary JSON here")
    args = ap.parse_args()
    lo, hi = map(int, args.kill_range.split(":"))
    if not (args.ckpt_every <= lo <= hi < args.total_steps):
        sys.exit("need --ckpt-every <= LO <= HI < --total-steps")

    # Ctrl-C / SIGTERM unwind through one_run's finally, which kills the process group.
    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)  # also when started with SIGINT ignored (e.g. `cmd &`)

    monitor = args.monitor_interval if args.monitor_interval is not None else 5.0
    jitter = args.phase_jitter if args.phase_jitter is not None else monitor
    data_dir = find_data_dir()
    load_start = os.getloadavg()[0]  # the figures are sensitive to other load on the host
    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="torchrun-elastic-script-")
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write(TRAIN_SCRIPT)
    keep, rows = [], []
    try:
        for i in range(args.runs):
            r = one_run(args, data_dir, script, rng.randint(lo, hi), rng.uniform(0, jitter), keep)
            rows.append(r)
            print("run %d: kill at step %d, resumed from %d, kill->first step %.2f s" % (
                i + 1, r["step_at_kill"], r["resumed_from"], r["kill_to_first_step_s"]), flush=True)
    except KeyboardInterrupt:
        sys.exit("interrupted; every process stopped")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for w in keep:
            sys.stderr.write("kept the failed run's files in %s\n" % w)

    keys = ["kill_to_first_step_s", "kill_to_respawn_s", "respawn_to_first_step_s",
            "steps_redone", "launch_to_first_step_s"]
    print("%4s %8s %8s %7s %11s %10s %10s %13s" % (
        "run", "kill@", "resumed", "redone", "kill->step", "kill->new", "new->step", "launch->step"))
    for i, r in enumerate(rows):
        print("%4d %8d %8d %7d %10.2fs %9.2fs %9.2fs %12.2fs" % (
            i + 1, r["step_at_kill"], r["resumed_from"], r["steps_redone"], r["kill_to_first_step_s"],
            r["kill_to_respawn_s"], r["respawn_to_first_step_s"], r["launch_to_first_step_s"]))
    summary = {"runs": len(rows), "ckpt_every": args.ckpt_every, "world": 2, "batch": 128,
               "monitor_interval_s": monitor, "phase_jitter_s": jitter}
    for k in keys:
        v = [r[k] for r in rows]
        summary[k] = {"median": statistics.median(v), "min": min(v), "max": max(v)}
    summary["loadavg_1min"] = {"start": load_start, "end": os.getloadavg()[0], "cpus": os.cpu_count()}
    summary["per_run"] = rows
    for k in keys:
        s = summary[k]
        print("%-24s median %8.2f  min %8.2f  max %8.2f" % (k, s["median"], s["min"], s["max"]))
    print("load average (1 min) %.2f at start, %.2f at end, %d CPUs" % (
        load_start, summary["loadavg_1min"]["end"], os.cpu_count()))
    line = json.dumps(summary)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")
    print("JSON " + line)


if __name__ == "__main__":
    main()
