#!/bin/sh
# The GPU checks of issue 6 in one call of the workplace's device tool.
#
# The GPU machine has CUDA, cuBLAS and NCCL but none of the Debian packages
# this project builds with, and no network. So the GPU binaries are built
# here (nvcc compiles sm_80/sm_90 without a GPU) and travel with the
# non-glibc, non-CUDA shared libraries they load and the Fashion-MNIST files,
# as one archive in the ignored folder .devkit/ (about 40 MB; the device
# tool's limit is 64 MiB). Nothing here runs at build or test time.
#
#   tools/device_kit.sh pack [BUILD_DIR]   # here, after `make build`
#   # then, with the device tool, from the repository root:
#   #   run(command="sh tools/device_kit.sh run", carry=[".devkit", ".whl"])
#   tools/device_kit.sh run                # there: GPU tests, gpu_bench, a ResNet18 run,
#                                          # ncu kernel times (KIT_* settings below),
#                                          # pytagi side by side; results in $OUT
# For the pytagi comparison, also fetch its wheel here first:
#   PYTAGI_PYVERS=3.12 NUMPY_VERSION=none bench/pytagi_wheel.sh fetch   # .whl/, 5 MB
#
# `run` also works on a machine without a GPU (the tests skip with the CUDA
# runtime's reason, gpu_bench says why it measured nothing), which is how it
# is checked here.
set -eu

KIT_DIR=.devkit
ARCHIVE=$KIT_DIR/kit.tar.xz
# The GPU tests, the binaries they start, and the benchmarks.
BINARIES="cuda_test cuda_engine_test nccl_test service_gpu_test gpu_bench gpu_cnn_bench
  engine_bench tagi-coordinator tagi-worker tagictl tagi-train"

die() { echo "device_kit: $*" >&2; exit 1; }

# KIT_STEPS picks the steps of `run` (default all; netbed only when named): tests gpu_bench
# gpu_cnn_bench pytagi cifar ncu; KIT_TESTS the test binaries.
want() {
  case " ${KIT_STEPS:-all} " in *" all "* | *" $1 "*) return 0 ;; esac
  return 1
}

# Shared libraries the binaries need, minus the C runtime (glibc, libstdc++,
# libgcc: the GPU machine's own are newer) and minus CUDA's libraries other
# than the runtime (cuBLAS is loaded by soname, NCCL is 200 MB: both come
# from the GPU machine's CUDA).
libraries() {
  for b in "$@"; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    grep -Ev '/lib(nccl|cublas|cublasLt|cuda|cudnn[a-z_]*)\.so'
}

pack() {
  build=${1:-build}
  [ -d "$build/bin" ] || die "no $build/bin: run make build first"
  build_abs=$(cd "$build" && pwd)
  source_abs=$(pwd)
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/build/bin" "$stage/lib" "$stage/data"
  paths=""
  for b in $BINARIES; do
    [ -x "$build/bin/$b" ] || die "$build/bin/$b is missing (is nvcc on PATH? TAGI_ENABLE_CUDA=ON?)"
    cp "$build/bin/$b" "$stage/build/bin/"
    paths="$paths $build/bin/$b"
  done
  # shellcheck disable=SC2086
  for lib in $(libraries $paths); do cp -L "$lib" "$stage/lib/"; done
  cp -r /usr/share/datasets/fashion-mnist "$stage/data/" ||
    die "Fashion-MNIST is missing: apt-get install dataset-fashion-mnist"
  # iproute2 for the netbed step (the GPU machine has none): Debian's ip and
  # tc with the libraries they need, used there only when `ip` is missing.
  if command -v ip > /dev/null 2>&1 && command -v tc > /dev/null 2>&1; then
    mkdir -p "$stage/iproute/bin" "$stage/iproute/lib"
    cp -L "$(command -v ip)" "$(command -v tc)" "$stage/iproute/bin/"
    # shellcheck disable=SC2046
    for lib in $(libraries "$stage/iproute/bin/ip" "$stage/iproute/bin/tc"); do
      cp -L "$lib" "$stage/iproute/lib/"
    done
  fi
  # The tests find the binaries, the sources' examples and the data by the
  # absolute paths they were built with.
  printf 'SOURCE_DIR=%s\nBUILD_DIR=%s\nCOMMIT=%s\n' "$source_abs" "$build_abs" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" > "$stage/paths"
  mkdir -p "$KIT_DIR"
  tar -C "$stage" -cJf "$ARCHIVE" .
  echo "device_kit: $ARCHIVE: $(du -h "$ARCHIVE" | cut -f1) ($(ls "$stage/lib" | wc -l) libraries)"
}

# The first directory holding $1 among the CUDA toolkit's and the Python
# wheels' library folders.
find_lib() {
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-*/lib64 \
           /usr/local/cuda-*/lib /usr/lib/x86_64-linux-gnu \
           $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null |
             tr ' ' '\n' | sed 's|$|/nvidia/*/lib|'); do
    for match in $d; do
      [ -e "$match/$1" ] && { echo "$match"; return 0; }
    done
  done
  return 1
}

run() {
  [ -f "$ARCHIVE" ] || die "no $ARCHIVE: pack it here first and carry .devkit"
  # The device tool brings back at most 8 files from $OUT: the logs go into
  # one archive there, and stdout says what matters.
  out=${OUT:-$(mktemp -d)}
  logs=${KIT_LOGS:-$(mktemp -d)}
  mkdir -p "$logs"
  kit=$(mktemp -d)
  tar -C "$kit" -xJf "$ARCHIVE"
  . "$kit/paths"
  # Put the kit where the binaries expect it.
  if [ ! -d "$SOURCE_DIR" ]; then
    mkdir -p "$(dirname "$SOURCE_DIR")"
    ln -s "$(pwd)" "$SOURCE_DIR"
  fi
  if [ "$BUILD_DIR" != "$(cd "$SOURCE_DIR" && pwd)/build" ] || [ ! -x "$BUILD_DIR/bin/gpu_bench" ]; then
    mkdir -p "$(dirname "$BUILD_DIR")"
    [ -e "$BUILD_DIR" ] || ln -s "$kit/build" "$BUILD_DIR"
  fi
  bin=$BUILD_DIR/bin
  [ -x "$bin/gpu_bench" ] || die "$BUILD_DIR exists and is not the kit's build"
  if [ ! -d /usr/share/datasets/fashion-mnist ]; then
    mkdir -p /usr/share/datasets && cp -r "$kit/data/fashion-mnist" /usr/share/datasets/
  fi
  libpath=$kit/lib
  # cuDNN (Conv2d) is loaded by soname like cuBLAS; its libraries (about
  # 1 GB) come from the GPU machine's CUDA or a pip wheel there.
  for so in libcublas.so.13 libnccl.so.2 libcudnn.so.9; do
    if d=$(find_lib "$so"); then libpath=$libpath:$d; else echo "device_kit: $so not found" >&2; fi
  done
  export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "device_kit: commit $COMMIT, LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
  status=0
  # Every step has a time limit (KIT_SECONDS scales the benchmarks), so a
  # hung step cannot keep the logs from coming back.
  seconds=${KIT_SECONDS:-10}
  nvidia-smi 2>&1 | sed -n '3p' || true
  want tests || KIT_TESTS=" "
  for t in ${KIT_TESTS:-cuda_test cuda_engine_test nccl_test service_gpu_test}; do
    echo "== $t"
    timeout 150 "$bin/$t" --gtest_output="json:$logs/$t.json" > "$logs/$t.log" 2>&1 || status=1
    # Results, and each failure with its message.
    grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|actual|error' \
      "$logs/$t.log" | head -60 || tail -5 "$logs/$t.log"
  done
  if want gpu_bench; then
    echo "== gpu_bench"
    for net in "128 4096" "128 1024" "16 100"; do
      set -- $net
      timeout 60 "$bin/gpu_bench" --json --batch "$1" --hidden "$2" >> "$logs/gpu_bench.json" 2>&1 ||
        status=1
    done
    cat "$logs/gpu_bench.json"
  fi
  # The image networks (issue 13): the reference's MNIST CNN at B = 128,
  # ResNet18 on 3x32x32 at B = 64 and 128, with the device memory each holds,
  # each with the activations fused into the norms and without.
  if want gpu_cnn_bench; then
    echo "== gpu_cnn_bench"
    (cd "$SOURCE_DIR" && timeout 240 "$bin/gpu_cnn_bench" --json --seconds "$seconds") \
      > "$logs/gpu_cnn_bench.json" 2>&1 || status=1
    cat "$logs/gpu_cnn_bench.json"
  fi
  # The reference library side by side, when its wheel travelled along
  # (here: PYTAGI_PYVERS=3.12 NUMPY_VERSION=none bench/pytagi_wheel.sh fetch;
  # carry .whl too).
  if want pytagi && ls .whl/pytagi-*.whl > /dev/null 2>&1; then
    echo "== pytagi side by side"
    if bash bench/pytagi_wheel.sh install > "$logs/pytagi_install.log" 2>&1; then
      eval "$(bash bench/pytagi_wheel.sh env)"
      PYTHONUNBUFFERED=1 timeout 150 python3 bench/pytagi_compare.py --device cuda \
        --bin-dir "$bin" --seconds "$seconds" --json > "$logs/pytagi_compare.txt" 2>&1 || status=1
      cat "$logs/pytagi_compare.txt"
      # The image networks side by side on the GPU (issue 13).
      PYTHONUNBUFFERED=1 timeout 150 python3 bench/pytagi_cnn_compare.py --device cuda \
        --bin-dir "$bin" --seconds "$seconds" > "$logs/pytagi_cnn_compare.txt" 2>&1 || status=1
      cat "$logs/pytagi_cnn_compare.txt"
    else
      tail -20 "$logs/pytagi_install.log"
      echo "device_kit: pytagi did not install"; status=1
    fi
  fi
  # One ResNet18 training run on the GPU, on CIFAR-10-shaped data that
  # tools/cifar10_synthetic.py writes (no real CIFAR-10 ships in a package):
  # KIT_CIFAR_TRAIN images, as many epochs as fit in KIT_CIFAR_SECONDS.
  if want cifar; then
    echo "== resnet18 training run"
    cifar=$(mktemp -d)
    if python3 tools/cifar10_synthetic.py "$cifar/data" --train "${KIT_CIFAR_TRAIN:-20000}" \
         --test 2000 > "$logs/cifar_run.log" 2>&1; then
      sed -e "s|/path/to/cifar-10-batches-bin|$cifar/data|" \
        -e 's|"batchSize": 64|"batchSize": 128|' examples/cifar10_resnet18.json > "$cifar/job.json"
      timeout "${KIT_CIFAR_SECONDS:-150}" "$bin/tagi-train" "$cifar/job.json" --device cuda:0 \
        --epochs "${KIT_CIFAR_EPOCHS:-3}" --progress=false --json >> "$logs/cifar_run.log" 2>&1 ||
        status=1
    else
      status=1
    fi
    grep -Ev '^\s*$' "$logs/cifar_run.log" | tail -15
  fi
  # The network bench on the GPU machine's CPU cores (not in `all`: ask for
  # it with KIT_STEPS=netbed): worlds of 2 and 4 CPU workers in network
  # namespaces, where this machine has the root and the cores for them. That
  # machine has no iproute2: the kit carries Debian's ip and tc (used when
  # `ip` is missing, or always with KIT_CARRIED_IPROUTE=1).
  if [ -n "${KIT_STEPS:-}" ] && want netbed; then
    echo "== netbed bench (CPU workers in network namespaces)"
    if { ! command -v ip > /dev/null 2>&1 || [ -n "${KIT_CARRIED_IPROUTE:-}" ]; } &&
       [ -x "$kit/iproute/bin/ip" ]; then
      # The carried ip and tc, through wrappers that add their libraries
      # after (not before) the environment's, which `ip netns exec` passes
      # on to the binaries it starts.
      mkdir -p "$kit/iproute/wrap"
      for b in ip tc; do
        printf '#!/bin/sh\nLD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}%s" exec %s "$@"\n' \
          "$kit/iproute/lib" "$kit/iproute/bin/$b" > "$kit/iproute/wrap/$b"
        chmod +x "$kit/iproute/wrap/$b"
      done
      PATH=$kit/iproute/wrap:$PATH
      export PATH
      echo "device_kit: using the kit's iproute2 ($(ip -V))"
    fi
    if python3 tools/netbed.py probe > "$logs/netbed_probe.log" 2>&1; then
      nproc; grep -m1 'model name' /proc/cpuinfo || true
      timeout "${KIT_NETBED_SECONDS:-420}" python3 bench/netbed_bench.py --bin "$bin" \
        ${KIT_NETBED_ARGS:---networks mlp20m --worlds 2,4 --rates 1gbit,none} \
        --out "$out/netbed_bench.json" > "$logs/netbed_bench.log" 2>&1 || status=1
      tail -40 "$logs/netbed_bench.log"
    else
      echo "device_kit: no network namespaces here:"; cat "$logs/netbed_probe.log"
    fi
  fi
  # Where a ResNet18 step's GPU time goes, kernel by kernel (Nsight Compute,
  # one metric, clocks unlocked): after the first steps (cuDNN's algorithm
  # search), a window of launches; bench/kernel_split.py sums it by family.
  if want ncu && command -v ncu > /dev/null 2>&1; then
    echo "== ncu kernel times (ResNet18, B 128)"
    (cd "$SOURCE_DIR" && timeout "${KIT_NCU_SECONDS:-150}" ncu --clock-control none \
       --metrics gpu__time_duration.sum --csv --launch-skip "${KIT_NCU_SKIP:-2000}" --launch-count "${KIT_NCU_COUNT:-1500}" \
       "$bin/gpu_cnn_bench" --fused-only --seconds 2 examples/cifar10_resnet18.json:128) \
      > "$logs/ncu_resnet18.csv" 2> "$logs/ncu_resnet18.err" || status=1
    python3 bench/kernel_split.py "$logs/ncu_resnet18.csv" || tail -5 "$logs/ncu_resnet18.err"
    # The small MLP (784-100-100-11, B 16), whose step is short enough for
    # launches to matter: its kernels and their times.
    echo "== ncu kernel times (784-100-100-11, B 16)"
    timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 2000 \
      --launch-count 400 "$bin/gpu_bench" --batch 16 --hidden 100 --seconds 1 \
      > "$logs/ncu_mlp.csv" 2> "$logs/ncu_mlp.err" || status=1
    python3 bench/kernel_split.py "$logs/ncu_mlp.csv" --top 40 || tail -5 "$logs/ncu_mlp.err"
  fi
  tar -C "$logs" -czf "$out/device_kit_logs.tar.gz" .
  echo "device_kit: logs and gtest JSON in $out/device_kit_logs.tar.gz; exit $status"
  return $status
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) run ;;
  *) die "usage: tools/device_kit.sh pack [BUILD_DIR] | run" ;;
esac
