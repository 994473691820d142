#!/usr/bin/env python3
"""Checks of deploy/kubernetes, offline.

  kubernetes_test.py schemas   --source DIR
      every manifest (and, where kubectl is installed, the output of
      `kubectl kustomize` with throwaway tokens) validates against the
      Kubernetes schemas bundled by kubernetes-validate (PyPI), strictly
      (unknown fields refused), at the oldest and the newest version it has.
      Skips (77) with a message when kubernetes-validate is not installed.
  kubernetes_test.py manifests --source DIR --bin DIR
      what the schemas cannot see: every container's command line is accepted
      by the real binary (its flags exist and their values parse), the files
      the flags name are where the Secrets and volumes are mounted, Services
      and probes name ports that exist, selectors select, Prometheus scrape
      annotations point at a metrics port, the coordinator keeps --state-dir on
      its PersistentVolumeClaim, GPU workers ask for nvidia.com/gpu.
Exit 0 when every check passed, 1 otherwise.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed (tools/install_deps.sh installs it)")
    sys.exit(77)

FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print("FAIL: " + msg)


def ok(msg):
    print("ok: " + msg)


def k8s_dir(src):
    return os.path.join(src, "deploy", "kubernetes")


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def kustomization(src):
    return load_docs(os.path.join(k8s_dir(src), "kustomization.yaml"))[0]


def manifest_files(src):
    return sorted(p for p in glob.glob(os.path.join(k8s_dir(src), "*.yaml"))
                  if os.path.basename(p) != "kustomization.yaml")


def rendered_with_kubectl(src, tmp):
    """`kubectl kustomize` of a copy with throwaway tokens, or None without kubectl."""
    if shutil.which("kubectl") is None:
        print("note: kubectl is not installed; the kustomization is checked by hand only")
        return None
    copy = os.path.join(tmp, "kubernetes")
    shutil.copytree(k8s_dir(src), copy)
    for gen in kustomization(src).get("secretGenerator", []):
        for entry in gen.get("files", []):
            with open(os.path.join(copy, entry.split("=", 1)[-1]), "w") as f:
                f.write("throwaway-token\n")
    r = subprocess.run(["kubectl", "kustomize", copy], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        fail("kubectl kustomize deploy/kubernetes:\n" + r.stderr)
        return None
    out = os.path.join(tmp, "rendered.yaml")
    with open(out, "w") as f:
        f.write(r.stdout)
    ok("kubectl kustomize deploy/kubernetes (%d resources)" %
       len([d for d in yaml.safe_load_all(r.stdout) if d]))
    return out


def schemas(args):
    try:
        import kubernetes_validate
    except ImportError:
        print("SKIP: kubernetes-validate is not installed (PyPI; tools/install_deps.sh "
              "installs it): the manifests were not checked against the schemas")
        return 77
    schema_root = os.path.join(os.path.dirname(kubernetes_validate.__file__),
                               "kubernetes-json-schema")
    versions = sorted({m.group(1) for m in (re.match(r"v(\d+\.\d+\.\d+)-local-strict$", d)
                                            for d in os.listdir(schema_root)) if m},
                      key=lambda v: tuple(int(x) for x in v.split(".")))
    if not versions:
        fail("kubernetes-validate bundles no strict schemas under " + schema_root)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        files = manifest_files(args.source)
        rendered = rendered_with_kubectl(args.source, tmp)
        if rendered:
            files.append(rendered)
        for version in (versions[0], versions[-1]):
            for path in files:
                for doc in load_docs(path):
                    what = "%s %s/%s" % (os.path.basename(path), doc.get("kind"),
                                         doc.get("metadata", {}).get("name"))
                    try:
                        kubernetes_validate.validate(doc, version, strict=True)
                    except kubernetes_validate.ValidationError as e:
                        fail("%s against Kubernetes %s: %s at %s" % (
                            what, version, e.message, "/".join(map(str, e.path))))
                    except Exception as e:  # a kind without schema, a bad document
                        fail("%s against Kubernetes %s: %s" % (what, version, e))
            ok("%d files validated against the Kubernetes %s schemas (strict)" %
               (len(files), version))
    return 1 if FAILURES else 0


# ---- manifests -------------------------------------------------------------

def resources(src):
    """The kustomization's resources plus every other manifest in the folder,
    and a stand-in Secret per secretGenerator entry (name, keys)."""
    k = kustomization(src)
    listed = [os.path.join(k8s_dir(src), r) for r in k.get("resources", [])]
    for path in listed:
        if not os.path.exists(path):
            fail("kustomization.yaml lists %s, which does not exist" % os.path.basename(path))
    docs = []
    for path in manifest_files(src):
        for d in load_docs(path):
            docs.append((os.path.basename(path), d))
    for gen in k.get("secretGenerator", []):
        keys = [e.split("=", 1)[0] for e in gen.get("files", [])]
        docs.append(("kustomization.yaml", {
            "kind": "Secret", "metadata": {"name": gen["name"]},
            "data": {key: "" for key in keys}}))
    return k, docs


def pod_workloads(docs):
    for origin, d in docs:
        if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet"):
            yield origin, d


def expand(arg, env):
    """$(VAR) as Kubernetes expands it, from the container's env (a stand-in value
    for fieldRef values)."""
    def sub(m):
        e = env.get(m.group(1))
        if e is None:
            fail("an argument uses $(%s), which the container does not define" % m.group(1))
            return "x"
        return e.get("value", "127.0.0.1")
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, arg)


def flag_value(args, name):
    for a in args:
        if a.startswith("--%s=" % name) or a.startswith("--%s=" % name.replace("-", "_")):
            return a.split("=", 1)[1]
    return None


def check_command_line(what, c, bin_dir):
    command = c.get("command") or []
    if not command:
        fail("%s: no command (the image's entrypoint would hide the flags from this check)"
             % what)
        return []
    env = {e["name"]: e for e in c.get("env", [])}
    args = [expand(a, env) for a in c.get("args", [])]
    for a in args:
        if a.startswith("--") and "=" not in a and a != "--insecure":
            fail("%s: write flags as --name=value (got %s)" % (what, a))
    binary = os.path.join(bin_dir, os.path.basename(command[0]))
    if not os.access(binary, os.X_OK):
        fail("%s: no binary %s to check its flags against" % (what, binary))
        return args
    # absl parses every flag, reports unknown names and bad values, then
    # handles --help: "ERROR:" in the output means a flag would stop it.
    r = subprocess.run([binary] + command[1:] + args + ["--help"], capture_output=True,
                       text=True, timeout=30)
    errors = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("ERROR")]
    if errors:
        fail("%s: %s refuses its arguments: %s" % (what, command[0], "; ".join(errors)))
    else:
        ok("%s: %s accepts %s" % (what, command[0], " ".join(args)))
    return args


def mounted_file(what, path, c, pod, secrets, claims):
    """The volume `path` lies in, failing when none does or a Secret lacks the key."""
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path != mp and not path.startswith(mp + "/"):
            continue
        if m["name"] in claims:
            return "claim"
        vol = next((v for v in pod.get("volumes", []) if v["name"] == m["name"]), None)
        if vol and "secret" in vol:
            key = path[len(mp) + 1:]
            name = vol["secret"]["secretName"]
            if name not in secrets:
                fail("%s: %s is in Secret %s, which nothing defines" % (what, path, name))
            elif key not in secrets[name]:
                fail("%s: %s: Secret %s has no key %s (keys: %s)" % (
                    what, path, name, key, sorted(secrets[name])))
            return "secret"
        return "volume"
    fail("%s: %s is on no volume mounted in the container" % (what, path))
    return None


def check_workload(origin, w, docs, bin_dir):
    name = "%s %s/%s" % (origin, w["kind"], w["metadata"]["name"])
    spec = w["spec"]
    tmpl = spec["template"]
    pod = tmpl["spec"]
    labels = tmpl["metadata"].get("labels", {})
    for k, v in spec["selector"]["matchLabels"].items():
        if labels.get(k) != v:
            fail("%s: selector %s=%s does not match its pod labels" % (name, k, v))
    secrets = {d["metadata"]["name"]: set(d.get("data", {})) | set(d.get("stringData", {}))
               for _, d in docs if d.get("kind") == "Secret"}
    claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
    volumes = {v["name"] for v in pod.get("volumes", [])} | claims
    ann = tmpl["metadata"].get("annotations", {})
    ports = {}
    for c in pod["containers"]:
        what = "%s container %s" % (name, c["name"])
        for p in c.get("ports", []):
            ports[p.get("name")] = p["containerPort"]
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes:
                fail("%s mounts %s, which is no volume of the pod" % (what, m["name"]))
        for probe in ("livenessProbe", "readinessProbe"):
            port = c.get(probe, {}).get("httpGet", {}).get("port")
            if port is None:
                fail("%s has no HTTP %s" % (what, probe))
            elif isinstance(port, str) and port not in ports:
                fail("%s: %s names port %s, which the container does not have" % (
                    what, probe, port))
        if not c.get("resources", {}).get("requests") or not c["resources"].get("limits"):
            fail("%s: no resource requests and limits" % what)
        args = check_command_line(what, c, bin_dir)
        binary = os.path.basename((c.get("command") or ["?"])[0])
        for flag in ("join-token-file", "api-tokens-file", "tls-cert", "tls-key", "tls-ca",
                     "tls-client-ca"):
            path = flag_value(args, flag)
            if path:
                kind = mounted_file(what, path, c, pod, secrets, claims)
                if kind not in ("secret", None):
                    fail("%s: --%s=%s is not in a Secret" % (what, flag, path))
        if binary == "tagi-coordinator":
            state = flag_value(args, "state-dir")
            if not state or mounted_file(what, state, c, pod, secrets, claims) != "claim":
                fail("%s: --state-dir must be on the PersistentVolumeClaim" % what)
            if w["kind"] != "StatefulSet":
                fail("%s: the coordinator should be a StatefulSet" % what)
            for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
                got = c.get(probe, {}).get("httpGet", {}).get("path")
                if got != path:
                    fail("%s: %s should be GET %s, is %s" % (what, probe, path, got))
            http = flag_value(args, "http")
            if not http or int(http.rsplit(":", 1)[1]) != ports.get("http"):
                fail("%s: --http=%s is not the container port named http" % (what, http))
            probe_http = flag_value(args, "probe-http")
            if probe_http:
                if int(probe_http.rsplit(":", 1)[1]) != ports.get("probes"):
                    fail("%s: --probe-http=%s is not the container port named probes" % (
                        what, probe_http))
                for probe in ("livenessProbe", "readinessProbe"):
                    if c.get(probe, {}).get("httpGet", {}).get("port") != "probes":
                        fail("%s: %s should use the probe listener (port probes)" % (what, probe))
                if ann.get("prometheus.io/port") != str(ports.get("probes")):
                    fail("%s: Prometheus should scrape the probe listener" % what)
            listen = flag_value(args, "listen")
            if not listen or int(listen.rsplit(":", 1)[1]) != ports.get("grpc"):
                fail("%s: --listen=%s is not the container port named grpc" % (what, listen))
        if binary == "tagi-worker":
            for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
                got = c.get(probe, {}).get("httpGet", {}).get("path")
                if got != path:
                    fail("%s: %s should be GET %s, is %s" % (what, probe, path, got))
            device = flag_value(args, "device") or "cpu"
            gpus = c["resources"].get("limits", {}).get("nvidia.com/gpu")
            if device.startswith("cuda") and not gpus:
                fail("%s: --device=%s without an nvidia.com/gpu limit" % (what, device))
            if device == "cpu" and gpus:
                fail("%s: a CPU worker asks for nvidia.com/gpu" % what)
            coord = flag_value(args, "coord") or ""
            host, _, port = coord.rpartition(":")
            svc = next((d for _, d in docs if d.get("kind") == "Service"
                        and d["metadata"]["name"] == host), None)
            if svc is None:
                fail("%s: --coord=%s names no Service" % (what, coord))
            elif not any(str(p["port"]) == port for p in svc["spec"]["ports"]):
                fail("%s: --coord=%s: Service %s has no port %s" % (what, coord, host, port))
            metrics = flag_value(args, "metrics")
            if not metrics or int(metrics.rsplit(":", 1)[1]) != ports.get("metrics"):
                fail("%s: --metrics=%s is not the container port named metrics" % (
                    what, metrics))
            if "$(" not in " ".join(c.get("args", [])):
                fail("%s: --host should be the pod's IP ($(POD_IP)) for its peers" % what)
        image = c.get("image", "")
        expected = {"tagi-coordinator": ("tagi-ddp/coordinator",),
                    "tagi-worker": ("tagi-ddp/worker-cuda", "tagi-ddp/worker-cpu")}
        if image.split(":")[0] not in expected.get(binary, ()):
            fail("%s: image %s is not one of %s" % (what, image, expected.get(binary)))
    if ann.get("prometheus.io/scrape") != "true":
        fail("%s: no prometheus.io/scrape: \"true\" annotation" % name)
    if ann.get("prometheus.io/path") != "/metrics":
        fail("%s: prometheus.io/path should be /metrics" % name)
    if str(ann.get("prometheus.io/port")) not in {str(p) for p in ports.values()}:
        fail("%s: prometheus.io/port %s is no container port" % (name, ann.get(
            "prometheus.io/port")))
    return labels, ports


def manifests(args):
    k, docs = resources(args.source)
    pods = {}
    for origin, w in pod_workloads(docs):
        pods[w["metadata"]["name"]] = check_workload(origin, w, docs, args.bin)
    for origin, s in docs:
        if s.get("kind") != "Service":
            continue
        sel = s["spec"].get("selector", {})
        target = [(n, ports) for n, (labels, ports) in pods.items()
                  if all(labels.get(a) == b for a, b in sel.items())]
        if not target:
            fail("%s Service/%s selects no pods" % (origin, s["metadata"]["name"]))
        for p in s["spec"]["ports"]:
            tp = p.get("targetPort", p["port"])
            for n, ports in target:
                if tp not in ports and tp not in ports.values():
                    fail("Service/%s port %s: %s has no port %s" % (
                        s["metadata"]["name"], p["port"], n, tp))
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in docs}
    for want in (("StatefulSet", "tagi-coordinator"), ("Service", "tagi-coordinator"),
                 ("Deployment", "tagi-worker-gpu"), ("Deployment", "tagi-worker-cpu")):
        if want not in kinds:
            fail("deploy/kubernetes has no %s %s" % want)
    for gen in k.get("secretGenerator", []):
        ignore = os.path.join(k8s_dir(args.source), "secrets", ".gitignore")
        if not os.path.exists(ignore):
            fail("deploy/kubernetes/secrets/.gitignore is missing: tokens could be committed")
    if not FAILURES:
        ok("%d workloads, %d Services" % (len(pods), sum(
            1 for _, d in docs if d.get("kind") == "Service")))
    return 1 if FAILURES else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["schemas", "manifests"])
    ap.add_argument("--source", required=True)
    ap.add_argument("--bin")
    args = ap.parse_args()
    if args.check == "manifests" and not args.bin:
        ap.error("manifests needs --bin")
    rc = schemas(args) if args.check == "schemas" else manifests(args)
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
    sys.exit(rc)


if __name__ == "__main__":
    main()
