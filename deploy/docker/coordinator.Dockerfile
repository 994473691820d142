# The coordinator (with tagictl) on Debian 12, built from this repository with
# Debian's packages only. Build from the repository root:
#   docker build -f deploy/docker/coordinator.Dockerfile -t tagi-ddp/coordinator .
# Run (gRPC on 7070, REST and /metrics on 8080, models under /var/lib/tagi):
#   docker run -p 7070:7070 -p 8080:8080 -v tagi-state:/var/lib/tagi tagi-ddp/coordinator --world 2

FROM debian:12 AS build
# The configure step finds every library of the project (Gloo and OpenBLAS
# too, although the coordinator links neither); tests and benchmarks are off.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates cmake g++ make pkg-config \
      libabsl-dev libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc \
      libgloo-dev libssl-dev libcpp-httplib-dev libmicrohttpd-dev prometheus-cpp-dev libopenblas-dev libdnnl-dev zlib1g-dev \
      libzip-dev libpng-dev libjpeg62-turbo-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only the sources the two programs need: build folders and data stay out.
COPY CMakeLists.txt ./
COPY proto proto
COPY spec spec
COPY common common
COPY worker worker
COPY coordinator coordinator
COPY ctl ctl
COPY python python
COPY deploy/docker/runtime-packages.sh /usr/local/bin/
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DTAGI_ENABLE_CUDA=OFF \
      -DTAGI_BUILD_TESTS=OFF -DTAGI_BUILD_BENCH=OFF \
 && cmake --build /build --target tagi-coordinator tagictl -j"$(nproc)" \
 && sh /usr/local/bin/runtime-packages.sh /build/bin/tagi-coordinator /build/bin/tagictl > /build/runtime-packages.txt

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
 && mkdir -p /var/lib/tagi && chown tagi:tagi /var/lib/tagi
COPY --from=build /build/bin/tagi-coordinator /build/bin/tagictl /usr/local/bin/
USER tagi
VOLUME /var/lib/tagi
EXPOSE 7070 8080
# The container network is private to the compose stack, hence --insecure in
# CMD; to serve TLS, pass --tls-cert/--tls-key (and token files) instead
# (README "Security").
ENTRYPOINT ["tagi-coordinator", "--listen", "0.0.0.0:7070", "--http", "0.0.0.0:8080", \
            "--state-dir", "/var/lib/tagi"]
CMD ["--world", "1", "--insecure"]
