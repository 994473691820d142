# A tagi-ddp worker on an NVIDIA CUDA base image (CUDA 13 with NCCL), built
# from this repository. NVIDIA publishes its CUDA images for Ubuntu (and
# RHEL-family) only; Ubuntu 24.04 carries the versions of Debian 12 that the
# project is built with (gRPC 1.51, protobuf 3.21, Abseil 20220623,
# prometheus-cpp 1.0, cpp-httplib, Gloo) under the same package names.
# Build from the repository root (no GPU is needed to build):
#   docker build -f deploy/docker/worker-cuda.Dockerfile -t tagi-ddp/worker-cuda .
# Run on a host with the NVIDIA container toolkit (the container sees the
# GPU it is given as device 0):
#   docker run --gpus '"device=0"' -p 9100:9100 tagi-ddp/worker-cuda \
#     --coord coord-host:7070 --host worker-host --device cuda:0 --metrics 0.0.0.0:9100
# cuBLAS is loaded at run time from the runtime image's CUDA libraries; NCCL
# is linked. Without --device the worker runs the CPU engine only.
ARG CUDA_VERSION=13.0.1
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates cmake g++ make pkg-config \
      libabsl-dev libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc \
      libgloo-dev libssl-dev libcpp-httplib-dev libmicrohttpd-dev prometheus-cpp-dev libopenblas-dev libdnnl-dev zlib1g-dev \
      libzip-dev libpng-dev libjpeg62-turbo-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY proto proto
COPY spec spec
COPY common common
COPY worker worker
COPY coordinator coordinator
COPY ctl ctl
COPY python python
COPY deploy/docker/runtime-packages.sh /usr/local/bin/
# sm_80 (A100) and sm_90 (H100/H200): the project's default architectures.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DTAGI_ENABLE_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="80;90" -DTAGI_BUILD_TESTS=OFF -DTAGI_BUILD_BENCH=OFF \
 && cmake --build /build --target tagi-worker tagi-train -j"$(nproc)" \
 && sh /usr/local/bin/runtime-packages.sh /build/bin/tagi-worker /build/bin/tagi-train > /build/runtime-packages.txt

# The runtime image has the CUDA runtime libraries, cuBLAS and NCCL; the
# packages of the other libraries come from the list made in the build stage.
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}
COPY --from=build /build/runtime-packages.txt /usr/local/bin/runtime-packages.sh /tmp/
RUN missing="$(sh /tmp/runtime-packages.sh --missing /tmp/runtime-packages.txt)" \
 && if [ -n "$missing" ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && rm /tmp/runtime-packages.txt /tmp/runtime-packages.sh \
 && useradd --system --home-dir /var/lib/tagi --shell /usr/sbin/nologin tagi
COPY --from=build /build/bin/tagi-worker /build/bin/tagi-train /usr/local/bin/
USER tagi
EXPOSE 9100
ENTRYPOINT ["tagi-worker"]
CMD ["--help"]
