#!/usr/bin/env bash
# The cluster demo: a coordinator and two CPU workers on loopback (ports
# chosen by the OS), the Fashion-MNIST example job with world 2, its
# progress, final accuracy, the downloaded model evaluated by tagi-train.
# Every process started here is stopped on exit, Ctrl-C included. The logs
# are removed after a successful run and kept (and named) after a failure.
set -euo pipefail
BIN=${BIN:-build/bin}
JOB=${JOB:-examples/fmnist_fnn.json}
WORK=$(mktemp -d /tmp/tagi-demo.XXXXXX)
PIDS=()

cleanup() {
  local status=$?
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  if [ "$status" -eq 0 ]; then
    rm -rf "$WORK"
  else
    echo "demo: failed (exit $status); the logs are kept in $WORK" >&2
  fi
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted"; exit 130' INT TERM

"$BIN/tagi-coordinator" --world 2 --listen 127.0.0.1:0 --port-file "$WORK/port" \
  --state-dir "$WORK/state" 2>"$WORK/coordinator.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.05; done
[ -s "$WORK/port" ] || { echo "demo: the coordinator did not start:"; cat "$WORK/coordinator.log"; exit 1; }
COORD=127.0.0.1:$(cat "$WORK/port")
echo "demo: coordinator on $COORD (logs in $WORK)"
for i in 1 2; do
  "$BIN/tagi-worker" --coord "$COORD" --threads 1 2>"$WORK/worker$i.log" &
  PIDS+=($!)
done

ID=$("$BIN/tagictl" --coord "$COORD" submit "$JOB")
echo "demo: submitted $JOB as $ID; watching (Ctrl-C stops everything)"
status=0
"$BIN/tagictl" --coord "$COORD" watch "$ID" || status=$?
"$BIN/tagictl" --coord "$COORD" status "$ID"
[ "$status" -eq 0 ] || { echo "demo: the job did not succeed"; exit 1; }
MODEL=${MODEL:-build/fmnist_fnn.tagi}
"$BIN/tagictl" --coord "$COORD" download "$ID" -o "$MODEL"
echo "demo: evaluating the downloaded model with tagi-train --eval"
"$BIN/tagi-train" --eval "$MODEL" "$JOB"
