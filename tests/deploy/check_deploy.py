#!/usr/bin/env python3
"""Static checks of the deployment stack (deploy/ and docker-compose.yml).

- promtool accepts deploy/prometheus/prometheus.yml;
- Debian's docker-compose (v1) accepts docker-compose.yml, which defines the
  coordinator, GPU workers, Prometheus and Grafana;
- every dashboard is valid JSON, names the provisioned data source's uid in
  every panel, target and template variable, has the job and rank
  variables, and queries only metrics that the code exports;
- the Dockerfiles copy only paths that exist; runtime-packages.sh parses;
- systemd-analyze accepts the units.
A check whose tool is not installed is skipped with a message. Exit 0 when
every check that ran passed, 1 otherwise.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print("FAIL: " + msg)


def skip(msg):
    print("SKIP: " + msg)


def ok(msg):
    print("ok: " + msg)


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)


def check_prometheus(src):
    if shutil.which("promtool") is None:
        skip("promtool is not installed (Debian package prometheus)")
        return
    r = run(["promtool", "check", "config", "deploy/prometheus/prometheus.yml"], src)
    if r.returncode != 0:
        fail("promtool check config:\n" + r.stdout + r.stderr)
    else:
        ok("promtool check config deploy/prometheus/prometheus.yml")


def check_compose(src):
    if shutil.which("docker-compose") is None:
        skip("docker-compose is not installed (Debian package docker-compose)")
        return
    r = run(["docker-compose", "-f", "docker-compose.yml", "config"], src)
    if r.returncode != 0:
        fail("docker-compose config:\n" + r.stdout + r.stderr)
        return
    ok("docker-compose -f docker-compose.yml config")
    r = run(["docker-compose", "-f", "docker-compose.yml", "config", "--services"], src)
    services = set(r.stdout.split())
    for want in ("coordinator", "prometheus", "grafana"):
        if want not in services:
            fail(f"docker-compose.yml has no service {want} (services: {sorted(services)})")
    workers = sorted(s for s in services if s.startswith("worker"))
    if len(workers) < 2:
        fail(f"docker-compose.yml should define at least 2 workers, has {workers}")
    # The default stack runs on CPUs: every worker is a CPU worker that
    # restarts unless stopped, and reserves no GPU.
    def worker_blocks(files):
        config = run(["docker-compose"] + [a for f in files for a in ("-f", f)] + ["config"],
                     src)
        if config.returncode != 0:
            fail(f"docker-compose {' '.join(files)} config:\n" + config.stdout + config.stderr)
            return {}
        blocks = re.split(r"\n  (?=\S)", ("\n" + config.stdout).split("\nservices:\n", 1)[-1])
        return {b.split(":", 1)[0].strip(): b for b in blocks
                if b.split(":", 1)[0].strip() in workers}
    for name, block in worker_blocks(["docker-compose.yml"]).items():
        for needle in ("worker-cpu.Dockerfile", "restart: unless-stopped", "--metrics", "- cpu"):
            if needle not in block:
                fail(f"service {name} (CPU stack) lacks '{needle}'")
        if "nvidia" in block:
            fail(f"service {name} of the CPU stack reserves a GPU")
    ok("docker-compose.yml: CPU workers, no GPU needed")
    # The GPU variant: the overlay gives each worker the CUDA image and a GPU.
    gpu = worker_blocks(["docker-compose.yml", "docker-compose.gpu.yml"])
    if sorted(gpu) != workers:
        fail(f"docker-compose.gpu.yml: workers {sorted(gpu)}, expected {workers}")
    for name, block in gpu.items():
        for needle in ("worker-cuda.Dockerfile", "driver: nvidia", "- gpu", "cuda:0",
                       "restart: unless-stopped", "--metrics"):
            if needle not in block:
                fail(f"service {name} (GPU stack) lacks '{needle}'")
    ok("docker-compose.yml + docker-compose.gpu.yml: CUDA workers, one GPU each")
    prom = open(os.path.join(src, "deploy/prometheus/prometheus.yml")).read()
    for w in workers:
        if f"{w}:9100" not in prom:
            fail(f"deploy/prometheus/prometheus.yml does not scrape {w}:9100")


def provisioned_uid(src):
    text = open(os.path.join(src, "deploy/grafana/provisioning/datasources/prometheus.yml")).read()
    uids = re.findall(r"^\s*uid:\s*\"?([A-Za-z0-9_-]+)\"?\s*$", text, re.M)
    if len(uids) != 1:
        fail(f"the datasource provisioning file should set one uid, found {uids}")
        return None
    return uids[0]


def panels_of(dashboard):
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])  # collapsed rows


def exported_metrics(src):
    names = set()
    for f in ("coordinator/metrics.cc", "worker/metrics.cc"):
        names |= set(re.findall(r'"(tagi_[a-z0-9_]+)"', open(os.path.join(src, f)).read()))
    return names


def check_dashboards(src):
    uid = provisioned_uid(src)
    exported = exported_metrics(src)
    files = sorted(glob.glob(os.path.join(src, "deploy/grafana/dashboards/*.json")))
    if len(files) < 3:
        fail(f"expected the cluster, training and reliability dashboards, found {files}")
    provider = open(os.path.join(src, "deploy/grafana/provisioning/dashboards/tagi.yml")).read()
    compose = open(os.path.join(src, "docker-compose.yml")).read()
    m = re.search(r"^\s*path:\s*(\S+)", provider, re.M)
    if not m or f"dashboards:{m.group(1)}" not in compose:
        fail("the dashboard provider's path is not where docker-compose.yml mounts the dashboards")
    uids = set()
    for f in files:
        name = os.path.basename(f)
        try:
            d = json.load(open(f))
        except ValueError as e:
            fail(f"{name} is not valid JSON: {e}")
            continue
        if d.get("uid") in uids:
            fail(f"{name}: dashboard uid {d.get('uid')} is used twice")
        uids.add(d.get("uid"))
        variables = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
        for v in ("job", "rank"):
            if v not in variables:
                fail(f"{name}: no template variable {v}")
        for v in variables.values():
            if v.get("datasource", {}).get("uid") != uid:
                fail(f"{name}: variable {v['name']} does not use datasource uid {uid}")
        ids = set()
        queries = 0
        for p in panels_of(d):
            title = p.get("title", "?")
            if p.get("id") in ids:
                fail(f"{name}: panel id {p.get('id')} is used twice")
            ids.add(p.get("id"))
            if p.get("type") in ("row", "text"):
                continue
            if p.get("datasource", {}).get("uid") != uid:
                fail(f"{name}: panel '{title}' does not use datasource uid {uid}")
            if not p.get("targets"):
                fail(f"{name}: panel '{title}' has no query")
            for t in p.get("targets", []):
                queries += 1
                if t.get("datasource", {}).get("uid") != uid:
                    fail(f"{name}: a query of '{title}' does not use datasource uid {uid}")
                if not t.get("expr", "").strip():
                    fail(f"{name}: a query of '{title}' is empty")
                for metric in re.findall(r"\btagi_[a-z0-9_]+", t.get("expr", "")):
                    base = re.sub(r"_(bucket|sum|count)$", "", metric)
                    if metric not in exported and base not in exported:
                        fail(f"{name}: '{title}' queries {metric}, which no code exports")
        ok(f"{name}: {queries} queries, datasource uid {uid}")


def configured_folders(src):
    """The folders the top CMakeLists.txt always adds (not tests, benchmarks, fuzzers)."""
    text = open(os.path.join(src, "CMakeLists.txt")).read()
    top = text.split("if(TAGI_BUILD_TESTS)")[0]
    return re.findall(r"^add_subdirectory\((\w+)\)", top, re.M)


def check_docker(src):
    needed = configured_folders(src)
    if not needed:
        fail("no add_subdirectory in CMakeLists.txt: the Dockerfile check reads it wrongly")
    for f in sorted(glob.glob(os.path.join(src, "deploy/docker/*.Dockerfile"))):
        copied = set()
        for line in open(f):
            m = re.match(r"COPY\s+(?!--from)(.+)\s+\S+$", line.strip())
            if m:
                for path in m.group(1).split():
                    copied.add(path.rstrip("/"))
                    if not os.path.exists(os.path.join(src, path)):
                        fail(f"{os.path.basename(f)} copies {path}, which does not exist")
        ok(f"{os.path.basename(f)}: every COPY source exists")
        # An image that builds from the sources needs every folder CMake adds
        # (spec/ and python/ were missing once, and the build failed).
        if "cmake -S" in open(f).read():
            missing = [folder for folder in needed if folder not in copied]
            for folder in missing:
                fail(f"{os.path.basename(f)} builds with CMake but does not copy {folder}/ "
                     f"(CMakeLists.txt adds it)")
            if not missing:
                ok(f"{os.path.basename(f)}: copies every folder CMakeLists.txt adds "
                   f"({', '.join(needed)})")
    r = run(["sh", "-n", "deploy/docker/runtime-packages.sh"], src)
    if r.returncode != 0:
        fail("deploy/docker/runtime-packages.sh does not parse: " + r.stderr)


def check_systemd(src, bindir):
    if shutil.which("systemd-analyze") is None:
        skip("systemd-analyze is not installed")
        return
    with tempfile.TemporaryDirectory() as tmp:
        # verify wants the executables to exist: point them at any binary.
        exe = shutil.which("true")
        for unit, instance in (("tagi-coordinator.service", "tagi-coordinator.service"),
                               ("tagi-worker@.service", "tagi-worker@0.service")):
            text = open(os.path.join(src, "deploy/systemd", unit)).read()
            for key in ("EnvironmentFile=", "Restart=on-failure", "ExecStart="):
                if key not in text:
                    fail(f"{unit} has no {key}")
            text = re.sub(r"/usr/local/bin/tagi-[a-z]+", exe, text)
            path = os.path.join(tmp, instance)
            with open(path, "w") as out:
                out.write(text)
            r = run(["systemd-analyze", "verify", path], tmp)
            # verify reports unknown keys and bad values as warnings with rc 0.
            problems = [l for l in (r.stdout + r.stderr).splitlines() if instance in l]
            if r.returncode != 0 or problems:
                fail(f"systemd-analyze verify {unit}:\n" + r.stdout + r.stderr)
            else:
                ok(f"systemd-analyze verify {unit}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--bin", default="")
    args = ap.parse_args()
    src = os.path.abspath(args.source)
    check_prometheus(src)
    check_compose(src)
    check_dashboards(src)
    check_docker(src)
    check_systemd(src, args.bin)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("deploy checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
