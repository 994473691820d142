#!/usr/bin/env bash
# pytagi_wheel.sh: the reference library (pytagi 0.2.1 from PyPI, the Python
# wheel of cuTAGI) for bench/pytagi_compare.py, on a machine with network
# access (fetch) and on one without (install, env), e.g. the GPU machine.
#
#   bench/pytagi_wheel.sh fetch   [DIR]   # here: wheels and .debs into DIR (default .whl)
#   bench/pytagi_wheel.sh install [DIR]   # anywhere, offline: DIR/site-cpXY and DIR/prefix
#   bench/pytagi_wheel.sh env     [DIR]   # prints the exports; eval "$(... env)"
#
# Nothing calls this script during a build or a test: run it by hand.
#
# Why the .debs: the wheel's native module (cutagi.cpython-*.so) is linked
# against OpenMPI 4 (NEEDED libmpi.so.40 and libmpi_cxx.so.40, RUNPATH
# /usr/lib/x86_64-linux-gnu/openmpi/lib) and NCCL (libnccl.so.2), and the wheel
# carries neither, so `import pytagi` fails without them even on a CPU. Debian
# 12's libopenmpi3 (4.1.4) provides both MPI libraries; what they load in turn
# is libopen-pal/libopen-rte (same package), libhwloc15, libevent-core and
# libevent-pthreads, and libudev1 (through hwloc; most systems have it).
# `dpkg -x` unpacks them into DIR/prefix without installing anything, and
# LD_LIBRARY_PATH points the loader there. The library calls MPI only in its
# DDP code (MPI_Bcast of the NCCL id, MPI_Barrier; src/ddp.cpp of cuTAGI
# v0.2.1) and never initialises it, so single-process training needs no
# mpirun and no OPAL_PREFIX.
# libnccl.so.2 is not fetched (about 200 MB): `env` finds one already present
# (ldconfig, /usr/local/cuda*/lib*, or the nvidia-nccl-cu* wheel in python3's
# site-packages, which the GPU machine's image has).
#
# Settings (environment): PYTHON (default python3: the interpreter that will
# run the benchmark), PYTAGI_PYVERS (fetch: Python versions to fetch wheels
# for, default "3.11 3.12": this machine's Debian 12 and the GPU machine's
# image), NUMPY_VERSION (default 2.4.6; "none" fetches no numpy; install adds
# numpy only where PYTHON has none). The GPU machine's python3 (3.12) has
# numpy: PYTAGI_PYVERS=3.12 NUMPY_VERSION=none makes a 5 MB .whl instead of 40.
set -euo pipefail

PYTAGI_VERSION=0.2.1
NUMPY_VERSION=${NUMPY_VERSION:-2.4.6}
PYTHON=${PYTHON:-python3}
DEBS="libopenmpi3 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libudev1"

usage() {
  sed -n '6,8p' "$0" | sed 's/^# //' >&2
  exit 2
}

py_tag() { "$PYTHON" -c 'import sys; print("cp%d%d" % sys.version_info[:2])'; }

fetch() {
  local dir=$1 numpy=$NUMPY_VERSION
  [[ $numpy == none ]] && numpy=
  mkdir -p "$dir"
  for v in ${PYTAGI_PYVERS:-3.11 3.12}; do
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$v" \
      --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 -d "$dir" \
      "pytagi==$PYTAGI_VERSION" ${numpy:+"numpy==$NUMPY_VERSION"}
  done
  if ! apt-cache show libopenmpi3 >/dev/null 2>&1; then
    echo "pytagi_wheel.sh: apt knows no libopenmpi3: run apt-get update first" >&2
    exit 1
  fi
  local deb
  for deb in $DEBS; do
    (cd "$dir" && apt-get download -q "$deb:amd64" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    ls "$dir"/"${deb}"_*.deb >/dev/null
  done
  ls -l "$dir"
}

install() {
  local dir=$1 tag
  tag=$(py_tag)
  local site=$dir/site-$tag
  local wheels=("$dir"/pytagi-"$PYTAGI_VERSION"-"$tag"-*.whl)
  [[ -e ${wheels[0]} ]] || { echo "pytagi_wheel.sh: no pytagi wheel for $tag in $dir" >&2; exit 1; }
  if ! "$PYTHON" -c 'import numpy' 2>/dev/null; then
    wheels+=("$dir"/numpy-"$NUMPY_VERSION"-"$tag"-*.whl)
  fi
  rm -rf "$site"
  "$PYTHON" -m pip install --quiet --root-user-action=ignore --no-index --no-deps --no-compile --target "$site" "${wheels[@]}"
  rm -rf "$dir/prefix"
  local f
  for f in "$dir"/*.deb; do
    # The system's own libudev wins when it has one (the .deb is a fallback).
    if [[ $(basename "$f") == libudev1_* ]] && ldconfig -p | grep -q 'libudev\.so\.1 '; then
      continue
    fi
    dpkg -x "$f" "$dir/prefix"
  done
  eval "$(env_lines "$dir")"
  "$PYTHON" -c 'import pytagi; print("pytagi", pytagi.__version__.strip(), "imports from", pytagi.__file__)'
}

nccl_dir() {
  ldconfig -p | grep -q 'libnccl\.so\.2 ' && return 0
  local d
  d=$("$PYTHON" - <<'EOF' 2>/dev/null || true
import glob, os, site
for p in site.getsitepackages():
    for f in glob.glob(os.path.join(p, "nvidia", "**", "libnccl.so.2"), recursive=True):
        print(os.path.dirname(f)); raise SystemExit
EOF
)
  if [[ -z $d ]]; then
    d=$(ls -d /usr/local/cuda*/lib*/libnccl.so.2 2>/dev/null | head -1 || true)
    d=${d%/libnccl.so.2}
  fi
  [[ -n $d ]] || echo "pytagi_wheel.sh: warning: no libnccl.so.2 found; import pytagi will fail" >&2
  echo "$d"
}

env_lines() {
  local dir
  dir=$(realpath "$1")
  local libs=$dir/prefix/usr/lib/x86_64-linux-gnu nccl
  nccl=$(nccl_dir)
  [[ -n $nccl ]] && libs=$libs:$nccl
  echo "export PYTHONPATH=\"$dir/site-$(py_tag)\${PYTHONPATH:+:\$PYTHONPATH}\""
  echo "export LD_LIBRARY_PATH=\"$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
}

cmd=${1:-}
dir=${2:-.whl}
case $cmd in
  fetch) fetch "$dir" ;;
  install) install "$dir" ;;
  env) env_lines "$dir" ;;
  *) usage ;;
esac
