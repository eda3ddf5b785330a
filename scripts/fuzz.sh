#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cpp) with clang 16 in build-fuzz, then runs each
# for a bounded time on a copy of its corpus (fuzz/corpus/<target>, left unchanged), two at a
# time. Fails when a target finds a crash, a leak, a timeout or an out-of-memory input; the
# input is printed (base64) and kept under build-fuzz/findings/<target>/.
#
#   scripts/fuzz.sh [seconds per target, default 45] [target...]
#
# FUZZ_PARALLEL: targets run at once (default 2); FUZZ_BUILD_DIR: the build (build-fuzz). The
# compiler cache, if wanted, comes from the environment:
#   CMAKE_CXX_COMPILER_LAUNCHER=ccache scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-45}
shift $(($# > 0 ? 1 : 0))
parallel=${FUZZ_PARALLEL:-2}
build=${FUZZ_BUILD_DIR:-build-fuzz}

targets=("$@")
if ((${#targets[@]} == 0)); then
  for source in fuzz/*_fuzz.cpp; do
    name=${source#fuzz/}
    targets+=("${name%_fuzz.cpp}")
  done
fi

# Longest input per target: enough for what each parses (a configuration file, a domain file
# of the rate limit service, a URL, a few script replies behind resp_fuzz's 128-byte header, a
# peer, a header and a proxy list, a decision API body, a few pipelined HTTP requests, a
# redirection line and a few topology replies, a client's ALPN list, a query string, a body
# read for its cost).
max_len_of() {
  case $1 in
    config) echo 4096 ;;
    rls_config) echo 4096 ;;
    store_url) echo 256 ;;
    resp) echo 2048 ;;
    forwarded) echo 512 ;;
    check_json) echo 1024 ;;
    http_request) echo 8192 ;;
    redis_topology) echo 2048 ;;
    alpn) echo 512 ;;
    admin_keys) echo 1024 ;;
    usage_scan) echo 4096 ;;
    *) echo 4096 ;;
  esac
}

if ! command -v clang++-16 >/dev/null; then
  echo "fuzz.sh: clang++-16 not found (scripts/deps.sh installs clang-16 and libclang-rt-16-dev)" >&2
  exit 2
fi
CXX=clang++-16 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRATEKEEPER_FUZZ=ON \
  -DRATEKEEPER_TESTS=OFF -DRATEKEEPER_BENCH=OFF >/dev/null
cmake --build "$build" -j"$parallel" --target $(printf '%s_fuzz ' "${targets[@]}")

# Symbolised stack traces in reports, when an llvm-symbolizer is installed.
for s in llvm-symbolizer-16 llvm-symbolizer; do
  if command -v "$s" >/dev/null; then
    export ASAN_SYMBOLIZER_PATH=$(command -v "$s")
    break
  fi
done
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

work=$(mktemp -d "${TMPDIR:-/tmp}/ratekeeper-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Runs one target: its output goes to $work/<target>/log, its exit status to .../rc, what it
# found to $work/<target>/.
run() {
  local target=$1 dir=$work/$1
  mkdir -p "$dir/corpus"
  cp fuzz/corpus/"$target"/* "$dir/corpus/"
  local dict=()
  [[ -f fuzz/$target.dict ]] && dict=(-dict="fuzz/$target.dict")
  "$build/fuzz/${target}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$(max_len_of "$target")" "${dict[@]}" -artifact_prefix="$dir/" -print_final_stats=1 \
    "$dir/corpus" >"$dir/log" 2>&1 && echo 0 >"$dir/rc" || echo $? >"$dir/rc"
}

for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
  run "$target" &
done
wait

failed=0
for target in "${targets[@]}"; do
  dir=$work/$target
  if [[ $(cat "$dir/rc") == 0 ]]; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log")
    cov=$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1)
    echo "fuzz: $target: ok, ${runs:-?} runs in ${seconds}s, ${cov:-no coverage line}"
    continue
  fi
  failed=1
  echo "fuzz: $target: FAILED (libFuzzer exit status $(cat "$dir/rc")), log:" >&2
  # The report: from the first sanitizer or libFuzzer error line, else the end of the log.
  report=$(awk '/ERROR: |runtime error:|deadly signal/ { p = 1 } p && n++ < 80' "$dir/log")
  [[ -n $report ]] || report=$(tail -20 "$dir/log")
  echo "$report" >&2
  mkdir -p "$build/findings/$target"
  for input in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-*; do
    [[ -e $input ]] || continue
    cp "$input" "$build/findings/$target/"
    echo "input: $build/findings/$target/$(basename "$input")" >&2
    echo "base64: $(base64 -w0 "$input")" >&2
  done
done
exit "$failed"
