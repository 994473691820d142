#!/usr/bin/env bash
# make images: the coordinator, CPU worker and Prometheus images, built with
# podman on a base image made from Debian's archive by mmdebstrap (no image
# registry is used; Debian's archive must be reachable, or DEBIAN_MIRROR a
# local mirror). Nothing is compiled inside a container: the images take
# host-built binaries and the Debian packages of the libraries they load.
#   1. base     $TAGI_IMAGE_PREFIX/base:SUITE, the host's Debian suite (its
#               updates and security too), minbase variant, merged /usr, no
#               docs, man pages or translations; made once (REBUILD_BASE=1
#               remakes it)
#   2. binaries tagi-coordinator, tagictl from $BUILD_DIR; tagi-worker,
#               tagi-train from $BUILD_DIR when they load only libraries of
#               Debian packages, else from $CPU_BUILD_DIR (configured here
#               with TAGI_ENABLE_CUDA=OFF: a CUDA build links the toolkit's
#               libcudart and NCCL); each target is brought up to date first
#   3. images   coordinator, worker-cpu, prometheus (deploy/podman/*.Containerfile)
# Settings (environment): BUILD_DIR (build), CPU_BUILD_DIR (build-cpu), JOBS
# (2), BUILD_LOCK (a file: run cmake --build under flock on it, for a
# checkout shared with other builds), TAGI_IMAGE_PREFIX (localhost/tagi-ddp),
# DEBIAN_SUITE (the host's), DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR.
# Prints each step's time and the images' sizes. Needs root (rootful podman).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
CPU_BUILD_DIR=${CPU_BUILD_DIR:-build-cpu}
JOBS=${JOBS:-2}
# shellcheck source=tools/podman_env.sh
. tools/podman_env.sh

SUITE=${DEBIAN_SUITE:-$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")}
[ -n "$SUITE" ] || { echo "build_images: cannot tell the host's Debian suite; set DEBIAN_SUITE" >&2; exit 2; }
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
BASE=$TAGI_IMAGE_PREFIX/base:$SUITE
for tool in cmake strip; do
  command -v "$tool" >/dev/null || { echo "build_images: $tool is missing (apt-get install $tool)" >&2; exit 2; }
done

WORK=$(mktemp -d /var/tmp/tagi-images.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
TIMES=()
step_start() { STEP_T0=$(date +%s.%N); echo "== $1"; }
step_end() {
  local secs
  secs=$(awk -v a="$STEP_T0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  TIMES+=("$(printf '%-42s %7.1f s' "$1" "$secs")")
}

build_targets() {  # DIR TARGET...: cmake --build, under flock when BUILD_LOCK is set
  local dir=$1; shift
  local lock=()
  [ -z "${BUILD_LOCK:-}" ] || lock=(flock "$BUILD_LOCK")
  "${lock[@]}" cmake --build "$dir" -j"$JOBS" --target "$@"
}

# The libraries BINARY loads from outside /lib and /usr/lib (e.g. the CUDA
# toolkit's): a Debian package cannot provide them.
foreign_libraries() {
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// && $3 !~ /^\/(usr\/)?lib\// { print $3 }'
}

# package_list DIR: DIR/runtime-packages.txt, the Debian packages owning the
# libraries of the binaries in DIR; fails when a library belongs to none.
package_list() {
  local err
  if ! err=$(sh deploy/docker/runtime-packages.sh "$1"/* 2>&1 >"$1.packages") || [ -n "$err" ]; then
    echo "build_images: $err" >&2
    return 1
  fi
  mv "$1.packages" "$1/runtime-packages.txt"
}

# Images this run replaced (an older build under the same tag), removed at
# the end unless something still uses them.
REPLACED=()
image_id() { podman_ image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
remember_replaced() {  # TAG OLD_ID
  local now
  now=$(image_id "$1")
  [ -z "$2" ] || [ "$2" = "$now" ] || REPLACED+=("$2")
}

# ---- 1. the base image
if podman_ image exists "$BASE" && [ -z "${REBUILD_BASE:-}" ]; then
  echo "== base image $BASE exists (REBUILD_BASE=1 remakes it)"
else
  step_start "base image $BASE from $MIRROR"
  old_id=$(image_id "$BASE")
  # dpkg drops documentation, man pages and translations of every package
  # installed now and in the images built on this base (as Debian's "slim"
  # images do); copyright files stay. The merged-usr hook makes the /usr
  # links itself and installs usr-is-merged: without it mmdebstrap installs
  # usrmerge, which pulls in perl (46 MB).
  mmdebstrap --variant=minbase --format=tar \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$SUITE" - \
    "deb $MIRROR $SUITE main" \
    "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY_MIRROR $SUITE-security main" \
    | podman_ import --change 'CMD ["/bin/bash"]' \
        --message "mmdebstrap --variant=minbase $SUITE" - "$BASE"
  remember_replaced "$BASE" "$old_id"
  step_end "base image (mmdebstrap + import)"
fi

# ---- 2. the binaries
step_start "binaries"
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  echo "build_images: $BUILD_DIR is not configured; run make build first" >&2
  exit 2
fi
build_targets "$BUILD_DIR" tagi-coordinator tagictl tagi-worker tagi-train
WORKER_BIN=$BUILD_DIR/bin
foreign=$(foreign_libraries "$BUILD_DIR/bin/tagi-worker" | tr '\n' ' ')
if [ -n "$foreign" ]; then
  echo "$BUILD_DIR/bin/tagi-worker loads ${foreign}(a CUDA build): the CPU worker" \
       "image takes tagi-worker and tagi-train from a build without CUDA in $CPU_BUILD_DIR"
  [ -f "$CPU_BUILD_DIR/CMakeCache.txt" ] \
    || cmake -S . -B "$CPU_BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTAGI_ENABLE_CUDA=OFF \
         -DTAGI_BUILD_TESTS=OFF -DTAGI_BUILD_BENCH=OFF >/dev/null
  build_targets "$CPU_BUILD_DIR" tagi-worker tagi-train
  WORKER_BIN=$CPU_BUILD_DIR/bin
fi
mkdir -p "$WORK/coordinator" "$WORK/worker-cpu" "$WORK/prometheus"
cp "$BUILD_DIR/bin/tagi-coordinator" "$BUILD_DIR/bin/tagictl" "$WORK/coordinator/"
cp "$WORKER_BIN/tagi-worker" "$WORKER_BIN/tagi-train" "$WORK/worker-cpu/"
strip --strip-unneeded "$WORK"/coordinator/* "$WORK"/worker-cpu/*
package_list "$WORK/coordinator"
package_list "$WORK/worker-cpu"
step_end "binaries (up to date, stripped, listed)"

# ---- 3. the images
for image in coordinator worker-cpu prometheus; do
  step_start "image $TAGI_IMAGE_PREFIX/$image"
  old_id=$(image_id "$TAGI_IMAGE_PREFIX/$image:latest")
  podman_ build "${PODMAN_LIMITS[@]}" --build-arg "BASE=$BASE" \
    -f "deploy/podman/$image.Containerfile" -t "$TAGI_IMAGE_PREFIX/$image:latest" "$WORK/$image"
  remember_replaced "$TAGI_IMAGE_PREFIX/$image:latest" "$old_id"
  step_end "image $image"
done

# Newest first: an old base goes once the old images built on it are gone.
for ((i = ${#REPLACED[@]} - 1; i >= 0; i--)); do
  # (an old base may be gone already, with the last old image built on it)
  podman_ image exists "${REPLACED[i]}" || continue
  podman_ rmi "${REPLACED[i]}" >/dev/null 2>&1 || echo "kept the replaced image ${REPLACED[i]} (in use)"
done

echo
echo "times:"
printf '  %s\n' "${TIMES[@]}"
echo "images:"
podman_ image ls --filter "reference=$TAGI_IMAGE_PREFIX/*" \
  --format '  {{.Repository}}:{{.Tag}}  {{.Size}}'
