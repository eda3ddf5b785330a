#!/usr/bin/env bash
# Runs clang-tidy 16 (checks: .clang-tidy) over the library and the server: src/, server/ and,
# through them, include/. Uses the compile commands of a configured build directory
# (default build/). Exit status 1 on any finding.
#
#   scripts/tidy.sh [build-dir] [file...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
(($#)) && shift
[ -f "$build/compile_commands.json" ] || { echo "tidy.sh: no $build/compile_commands.json (configure $build first)" >&2; exit 2; }
command -v clang-tidy-16 >/dev/null || { echo "tidy.sh: clang-tidy-16 is not installed (scripts/deps.sh)" >&2; exit 2; }
if (($#)); then files=("$@"); else mapfile -t files < <(git ls-files 'src/*.cpp' 'server/*.cpp'); fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# The compile commands are g++'s: clang 16 spells C++23 c++2b, and needs the concepts level
# that libstdc++ 12 tests before it declares std::expected.
status=0
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy-16 -p "$build" --quiet \
  --extra-arg=-std=c++2b --extra-arg=-U__cpp_concepts --extra-arg=-D__cpp_concepts=202002L \
  --extra-arg=-Wno-builtin-macro-redefined \
  >"$out" 2>&1 || status=1
grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter' "$out" || true
if ((status)); then echo "tidy.sh: findings above (${#files[@]} files)" >&2; exit 1; fi
echo "tidy.sh: ${#files[@]} files, no findings"
