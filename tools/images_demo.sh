#!/usr/bin/env bash
# make images-demo: the podman stack of deploy/podman/compose.yml (images of
# `make images`) runs a job. Brings up a coordinator, two CPU workers and
# Prometheus with every port published on 127.0.0.1 (free ports chosen here),
# submits a short Fashion-MNIST job (examples/fmnist_fnn.json with
# trainLimit/testLimit) through the REST API, watches it with the image's
# tagictl until SUCCEEDED, checks through Prometheus' HTTP API that it scraped
# the coordinator and both workers (targets up, and the job's series from
# each rank), downloads the model through REST and evaluates it with the
# image's tagi-train. Everything it started is removed on exit (containers,
# network, volumes), Ctrl-C included; logs of a failed run are kept.
# Settings (environment): TAGI_DATA_DIR (host folder with fashion-mnist/,
# default /usr/share/datasets: Debian's dataset-fashion-mnist),
# TRAIN_LIMIT (5000), TEST_LIMIT (1000), EPOCHS (2), STACK (tagi-images: the
# compose project name). Needs root (rootful podman), curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/podman_env.sh
. tools/podman_env.sh
STACK=${STACK:-tagi-images}
COMPOSE_FILE=deploy/podman/compose.yml
export TAGI_DATA_DIR=${TAGI_DATA_DIR:-/usr/share/datasets}
TRAIN_LIMIT=${TRAIN_LIMIT:-5000}
TEST_LIMIT=${TEST_LIMIT:-1000}
EPOCHS=${EPOCHS:-2}
command -v podman-compose >/dev/null || { echo "images_demo: apt-get install podman-compose" >&2; exit 2; }
for image in coordinator worker-cpu prometheus; do
  podman_ image exists "$TAGI_IMAGE_PREFIX/$image:latest" \
    || { echo "images_demo: no image $TAGI_IMAGE_PREFIX/$image: run make images" >&2; exit 2; }
done
[ -e "$TAGI_DATA_DIR/fashion-mnist/train-images-idx3-ubyte.gz" ] || {
  echo "images_demo: no Fashion-MNIST under $TAGI_DATA_DIR (apt-get install dataset-fashion-mnist," \
       "or set TAGI_DATA_DIR)" >&2
  exit 2
}

WORK=$(mktemp -d /var/tmp/tagi-images-demo.XXXXXX)
chmod 755 "$WORK"  # tagi-train reads the model and the job file as the image's user
compose() {
  podman-compose -p "$STACK" -f "$COMPOSE_FILE" \
    --podman-run-args "${PODMAN_GLOBAL[*]} ${PODMAN_LIMITS[*]}" "$@" >>"$WORK/compose.log" 2>&1
}
ok=0
WATCH=
cleanup() {
  set +e
  [ -z "$WATCH" ] || kill -TERM "$WATCH" 2>/dev/null
  if [ "$ok" -ne 1 ]; then
    for c in $(podman_ ps -a --filter "label=io.podman.compose.project=$STACK" --format '{{.Names}}'); do
      podman_ logs "$c" >"$WORK/$c.log" 2>&1
    done
  fi
  compose down -t 5
  # podman-compose 1.0.3's down leaves the volumes and the network.
  for v in $(podman_ volume ls -q --filter "label=io.podman.compose.project=$STACK"); do
    podman_ volume rm -f "$v" >/dev/null
  done
  podman_ network exists "${STACK}_default" && podman_ network rm -f "${STACK}_default" >/dev/null
  if [ "$ok" -eq 1 ]; then rm -rf "$WORK"; else echo "images_demo: failed; logs in $WORK"; fi
}
trap cleanup EXIT
trap 'echo; echo "images_demo: interrupted"; exit 130' INT TERM
fail() { echo "images_demo: $*" >&2; exit 1; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export TAGI_GRPC_PORT=${TAGI_GRPC_PORT:-$(free_port)}
export TAGI_HTTP_PORT=${TAGI_HTTP_PORT:-$(free_port)}
export TAGI_PROMETHEUS_PORT=${TAGI_PROMETHEUS_PORT:-$(free_port)}
REST=http://127.0.0.1:$TAGI_HTTP_PORT
PROM=http://127.0.0.1:$TAGI_PROMETHEUS_PORT
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# poll SECONDS COMMAND...: run COMMAND every 0.5 s until it succeeds.
poll() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}

python3 - "$TRAIN_LIMIT" "$TEST_LIMIT" "$EPOCHS" >"$WORK/job.json" <<'EOF'
import json, sys
job = json.load(open("examples/fmnist_fnn.json"))
job["name"] = "images-demo"
job["data"].update(trainLimit=int(sys.argv[1]), testLimit=int(sys.argv[2]))
job["epochs"] = int(sys.argv[3])
json.dump(job, sys.stdout, indent=1)
EOF

T0=$(now)
echo "images_demo: podman-compose up ($STACK: coordinator, worker-0, worker-1, prometheus;" \
     "REST $REST, gRPC 127.0.0.1:$TAGI_GRPC_PORT, Prometheus $PROM)"
compose up -d || fail "podman-compose up failed (see $WORK/compose.log)"
poll 60 curl -sf "$REST/readyz" || fail "the coordinator did not become ready at $REST"
two_workers() { [ "$(curl -sf "$REST/v1/workers" | grep -o '"state": *"IDLE"' | wc -l)" -ge 2 ]; }
poll 60 two_workers || fail "two idle workers did not register: $(curl -s "$REST/v1/workers")"
T_UP=$(since "$T0")
echo "images_demo: stack up with 2 idle workers after $T_UP s"

T1=$(now)
ID=$(curl -sf -X POST "$REST/v1/jobs" -H 'Content-Type: application/json' --data-binary @"$WORK/job.json" \
     | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])') || fail "submitting the job failed"
echo "images_demo: submitted $ID (trainLimit $TRAIN_LIMIT, testLimit $TEST_LIMIT, epochs $EPOCHS);" \
     "watching with the image's tagictl"
# In the background: bash runs a trap (TERM) only once the foreground child
# ends, but it interrupts wait.
podman_ exec "${STACK}_coordinator_1" tagictl --coord 127.0.0.1:7070 watch "$ID" --watch_timeout 10m &
WATCH=$!
wait "$WATCH" || fail "the job did not succeed: $(curl -s "$REST/v1/jobs/$ID")"
WATCH=
T_JOB=$(since "$T1")
T_TOTAL=$(since "$T0")
podman_ exec "${STACK}_coordinator_1" tagictl --coord 127.0.0.1:7070 status "$ID"

# Prometheus: the three tagi targets up, and the job's steps counted by both ranks.
query() {
  curl -sfG "$PROM/api/v1/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
print("\n".join(sorted(
    "%s %s" % (",".join("%s=%s" % kv for kv in sorted(r["metric"].items())), r["value"][1])
    for r in json.load(sys.stdin)["data"]["result"])))'
}
scraped() {
  [ "$(query 'up{job=~"tagi-.*"} == 1' | wc -l)" -eq 3 ] \
    && [ "$(query "tagi_worker_steps_total{job=\"$ID\"} > 0" | wc -l)" -eq 2 ] \
    && [ "$(query "tagi_coordinator_job_progress_ratio{job=\"$ID\"} == 1" | wc -l)" -eq 1 ]
}
poll 60 scraped || fail "Prometheus did not scrape all three targets: $(query up)"
echo "images_demo: Prometheus scrapes the coordinator and both workers:"
query 'up{job=~"tagi-.*"}' | sed 's/^/  /'
query "tagi_worker_steps_total{job=\"$ID\"}" | sed 's/^/  /'

curl -sf -o "$WORK/model.tagi" "$REST/v1/jobs/$ID/model" || fail "downloading the model failed"
echo "images_demo: model $(stat -c %s "$WORK/model.tagi") bytes; tagi-train --eval in the worker image:"
podman_ run --rm "${PODMAN_LIMITS[@]}" --network none --entrypoint tagi-train \
  -v "$WORK:/work:ro" -v "$TAGI_DATA_DIR:/usr/share/datasets:ro" \
  "$TAGI_IMAGE_PREFIX/worker-cpu:latest" --eval /work/model.tagi /work/job.json \
  || fail "tagi-train --eval failed"

echo
echo "images_demo: SUCCEEDED; up (2 workers registered) $T_UP s, job submitted to SUCCEEDED $T_JOB s," \
     "up to SUCCEEDED $T_TOTAL s"
ok=1
