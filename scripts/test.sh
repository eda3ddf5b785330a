#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite three times: a normal
# build, then under AddressSanitizer + UndefinedBehaviorSanitizer, then under ThreadSanitizer;
# then every libFuzzer target for a bounded time from its corpus (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
jobs=$(nproc)
started=$SECONDS
stage() { echo "== $* ($((SECONDS - started)) s)"; }

# One rapidcheck seed for the whole run, printed first: a property that fails in any stage is
# run again with the same cases by `RC_PARAMS="seed=N" ./scripts/test.sh` (or the test binary).
if [[ "${RC_PARAMS:-}" != *seed=* ]]; then
  export RC_PARAMS="${RC_PARAMS:+$RC_PARAMS }seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')"
fi
echo "rapidcheck: RC_PARAMS=\"$RC_PARAMS\""

# Without debug information where stack traces are not needed, and line tables only where
# they are (-g1: file and line in every sanitizer report): it halves the time spent compiling
# (Boost, gtest) on two cores; the ASan build's -g1 instead of -g saves a quarter of its own.
stage "plain build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DRATEKEEPER_BENCH=ON >/dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs" --timeout 600)

stage "AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1" -DRATEKEEPER_SANITIZE=ON -DRATEKEEPER_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j"$jobs" --timeout 900)

# Processes the tests start (the ratekeeper server) inherit TSAN_OPTIONS: a race there stops
# the server, and the test talking to it fails. tests/tsan.supp: reports inside Debian's gRPC
# and Abseil, which are not built with ThreadSanitizer.
tsan_supp=$PWD/tests/tsan.supp
stage "ThreadSanitizer"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DRATEKEEPER_TSAN=ON -DRATEKEEPER_BENCH=OFF >/dev/null
cmake --build build-tsan -j"$jobs"
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$tsan_supp" \
  ctest --output-on-failure -j"$jobs" --timeout 900)

stage "fuzzing"
./scripts/fuzz.sh 20  # seconds per target: thirteen targets, two at a time, within the CI budget
stage "done"
