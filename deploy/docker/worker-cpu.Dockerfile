# A tagi-ddp CPU worker (tagi-worker with tagi-train) on Debian 12, built
# from this repository with Debian's packages only: the workers of the
# default docker-compose.yml stack (docker-compose.gpu.yml switches them to
# worker-cuda.Dockerfile and reserves a GPU each). Build from the root:
#   docker build -f deploy/docker/worker-cpu.Dockerfile -t tagi-ddp/worker-cpu .
# Run (job data is read only under --data-root, by default
# /usr/share/datasets and /var/lib/tagi/data: mount a host folder there):
#   docker run -v /usr/share/datasets:/usr/share/datasets:ro -p 9100:9100 tagi-ddp/worker-cpu \
#     --coord coord-host:7070 --host worker-host --device cpu --metrics 0.0.0.0:9100

FROM debian:12 AS build
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
COPY common common
COPY spec spec
COPY worker worker
COPY coordinator coordinator
COPY ctl ctl
COPY python python
COPY deploy/docker/runtime-packages.sh /usr/local/bin/
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DTAGI_ENABLE_CUDA=OFF \
      -DTAGI_BUILD_TESTS=OFF -DTAGI_BUILD_BENCH=OFF \
 && cmake --build /build --target tagi-worker tagi-train -j"$(nproc)" \
 && sh /usr/local/bin/runtime-packages.sh /build/bin/tagi-worker /build/bin/tagi-train > /build/runtime-packages.txt

FROM debian:12-slim
COPY --from=build /build/runtime-packages.txt /usr/local/bin/runtime-packages.sh /tmp/
RUN missing="$(sh /tmp/runtime-packages.sh --missing /tmp/runtime-packages.txt)" \
 && if [ -n "$missing" ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && rm /tmp/runtime-packages.txt /tmp/runtime-packages.sh \
 && useradd --system --home-dir /var/lib/tagi --shell /usr/sbin/nologin tagi \
 && mkdir -p /var/lib/tagi/data && chown -R tagi:tagi /var/lib/tagi
COPY --from=build /build/bin/tagi-worker /build/bin/tagi-train /usr/local/bin/
USER tagi
EXPOSE 9100
ENTRYPOINT ["tagi-worker"]
CMD ["--help"]
