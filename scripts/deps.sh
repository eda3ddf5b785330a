#!/usr/bin/env bash
# Installs the Debian bookworm packages ratekeeper builds, tests and runs with (as root).
set -euo pipefail
packages=(cmake g++ make pkg-config libboost-dev libboost-system-dev libhiredis-dev libyaml-cpp-dev
  nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev librapidcheck-dev libgtest-dev
  libgmock-dev googletest libbenchmark-dev redis-server redis-sentinel redis-tools curl wrk
  # Envoy's rate limit service: gRPC and protobuf (the server, the C++ test client), SHA-256
  # of long descriptor identities (libssl-dev); its Python test (stubs from proto/ by
  # grpc_tools); bench/rls_h2load.sh (h2load)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libssl-dev
  python3-grpcio python3-grpc-tools nghttp2-client
  # HTTP/2 to clients (libnghttp2); the HTTP/2 tests' clients: curl (above), h2load (nghttp2-client)
  libnghttp2-dev
  # the auth_request tests: a real nginx (started by the tests, never as a service); the
  # decision API's Python example, run by the tests
  nginx python3
  # scripts/fuzz.sh: libFuzzer and the sanitizer runtimes of clang 16 (clang 14 cannot compile
  # <expected>), llvm-symbolizer for readable stack traces.
  clang-16 libclang-rt-16-dev llvm
  # scripts/tidy.sh
  clang-tidy-16
  # tests/recipes: the seed's FastAPI application under uvicorn (Debian's /usr/bin/python3);
  # bench/http_wrk.sh: the same application with the seed's own limiter on Redis (redis-py)
  python3-fastapi python3-uvicorn python3-redis
  # the Python package (python/): its native module (pybind11), its tests (pytest, httpx, the
  # documented FastAPI application under uvicorn) and the rules its decorators add (PyYAML)
  pybind11-dev python3-dev python3-pytest python3-httpx python3-yaml
  # tests/edge: the WebSocket client and upstream (curl and openssl are above)
  python3-websockets openssl
  # tests/edge: the alerting rules and the exposition checked by promtool
  prometheus
  # bench/proxy_callgrind.sh: instructions and allocations a request
  valgrind
  # tests/packaging: the Debian packages (CPack's DEB generator: dpkg-shlibdeps, file), their
  # unit checked by systemd-analyze (no running systemd needed)
  dpkg-dev file systemd)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The packaged redis-server may have been started as a service; the tests start their own.
# So may prometheus (on port 9090): the tests use only its promtool.
if pgrep -x prometheus >/dev/null 2>&1; then
  systemctl stop prometheus >/dev/null 2>&1 || service prometheus stop >/dev/null 2>&1 || pkill -x prometheus || true
fi
