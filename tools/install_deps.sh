#!/usr/bin/env bash
# Installs the Debian packages tagi-ddp needs, when any is missing.
# Idempotent and quick when everything is present (no apt-get call at all).
set -euo pipefail

PACKAGES=(
  cmake g++ make pkg-config
  libabsl-dev libprotobuf-dev protobuf-compiler
  libgrpc++-dev protobuf-compiler-grpc libgloo-dev libssl-dev
  libcpp-httplib-dev libmicrohttpd-dev prometheus-cpp-dev
  prometheus docker-compose curl python3-yaml openssl
  libopenblas-dev zlib1g-dev
  # oneDNN: the CPU engine's direct convolutions (worker/engine/direct_conv.h);
  # its CMake package asks for OpenCL (its GPU runtime), which it only
  # recommends, and recommendations are not installed here
  libdnnl-dev ocl-icd-opencl-dev
  # data kinds: NPZ (libzip), image folders (libpng, libjpeg)
  libzip-dev libpng-dev libjpeg62-turbo-dev
  libgtest-dev libgmock-dev
  # the Python package (python/) and its tests; its gRPC modules come from
  # protobuf-compiler-grpc's grpc_python_plugin
  python3-grpcio python3-protobuf python3-numpy python3-pytest python3-setuptools
  # clang and its libFuzzer / sanitizer runtimes: make fuzz, make fuzz-smoke
  clang libclang-rt-14-dev
  dataset-fashion-mnist
  # a one-node Slurm cluster for deploy/slurm's test (tests/deploy/slurm_test.py);
  # installing starts no daemon where systemd does not run, and the test runs
  # its own munged, slurmctld and slurmd from a temporary directory
  slurm-wlm munge shellcheck iproute2
  # libfaketime: the wall-clock jump tests (tests/hostile/hostile_time_test.cc)
  faketime
  # the manual as a static site: make docs, the ctest docs.site (tools/build_docs.sh)
  mkdocs
  # headless browser for the web UI's test (tests/rest/web_ui_test.cc)
  chromium
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Optional, from PyPI: schemathesis drives the REST API from docs/openapi.yaml
# (tests/rest); kubernetes-validate checks deploy/kubernetes against the
# Kubernetes schemas it bundles (offline; Debian has no such validator).
# Best effort: without one, its test skips with a message.
pip_extras() {
  if ! python3 -c "import kubernetes_validate" 2>/dev/null; then
    timeout 300 python3 -m pip install --quiet 'kubernetes-validate>=1.30,<2' >/dev/null 2>&1 &&
      echo "deps: installed kubernetes-validate" ||
      echo "deps: kubernetes-validate not installed (deploy.kubernetes_schemas will skip)"
  fi
  # The reference library (pytagi 0.2.1 from PyPI, with the OpenMPI .debs
  # its native module links, unpacked, not installed) into .whl for the
  # interchange test (tests/python/test_pytagi.py); bench/pytagi_wheel.sh.
  local py=/usr/bin/python3 here
  here=$(cd "$(dirname "$0")/.." && pwd)
  if [ -x "$py" ] && [ ! -d "$here/.whl/site-$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')" ]; then
    local v
    v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if (cd "$here" && PYTHON=$py PYTAGI_PYVERS=$v NUMPY_VERSION=none \
          timeout 300 bench/pytagi_wheel.sh fetch .whl &&
        PYTHON=$py timeout 120 bench/pytagi_wheel.sh install .whl) >/dev/null 2>&1; then
      echo "deps: fetched pytagi 0.2.1 into .whl"
    else
      echo "deps: pytagi 0.2.1 not fetched (python.pytagi will skip)"
    fi
  fi
  if ! python3 -c "import schemathesis" 2>/dev/null; then
    timeout 300 python3 -m pip install --quiet 'schemathesis>=4,<5' >/dev/null 2>&1 &&
      echo "deps: installed schemathesis" ||
      echo "deps: schemathesis not installed (its test will skip)"
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} packages present"
  pip_extras
  exit 0
fi

echo "deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "deps: not root and no sudo; install these packages: ${missing[*]}" >&2
    exit 1
  fi
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
pip_extras
