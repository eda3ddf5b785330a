#!/usr/bin/env bash
# `cmake --install` of a build directory into a temporary prefix, then a C++20 project using
# the installed package (find_package(ratekeeper), ratekeeper::ratekeeper) is configured,
# built and run: the target's compile feature must raise it to C++23.
#
# usage: consumer_test.sh CMAKE BUILD_DIR SOURCE_DIR CXX_COMPILER [COMPILER_LAUNCHER]
set -euo pipefail
cmake=$1 build=$2 source=$3 cxx=$4 launcher=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }

"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }

# What is installed, where the prefix puts it.
for f in bin/ratekeeper include/ratekeeper/store/memory_store.hpp include/ratekeeper/rls/descriptors.hpp \
         etc/ratekeeper/ratekeeper.yaml lib/systemd/system/ratekeeper.service \
         share/doc/ratekeeper/configuration.md; do
  [[ -e $prefix/$f ]] || fail "$f is not installed"
done
for f in include/ratekeeper/rls/service.hpp include/ratekeeper/rls/grpc_server.hpp; do
  [[ ! -e $prefix/$f ]] || fail "$f is installed (it belongs to a library that is not)"
done
# Only the library's API: no layer's internals, and every installed header includes only
# installed ones.
for f in include/ratekeeper/redis/cluster.hpp include/ratekeeper/redis/connection.hpp \
         include/ratekeeper/algorithms/step.hpp include/ratekeeper/store/lua_scripts.hpp \
         include/ratekeeper/store/redis_store.hpp; do
  [[ ! -e $prefix/$f ]] || fail "$f is installed (it is internal to the library)"
done
while read -r header; do
  while read -r included; do
    [[ -e $prefix/include/$included ]] || fail "${header#"$prefix"/} includes $included, which is not installed"
  done < <(sed -n 's/^#include "\(ratekeeper\/[^"]*\)".*/\1/p' "$header")
done < <(find "$prefix/include/ratekeeper" -name '*.hpp')
config=$(find "$prefix" -name ratekeeperConfig.cmake)
[[ -n $config ]] || fail "no ratekeeperConfig.cmake installed"
grep -qx "ExecStart=$prefix/bin/ratekeeper serve --config $prefix/etc/ratekeeper/ratekeeper.yaml" \
  "$prefix/lib/systemd/system/ratekeeper.service" || fail "the unit does not name the installed program and configuration"
"$prefix/bin/ratekeeper" --version | grep -q '^ratekeeper [0-9]' || fail "the installed program does not run"

# The consumer: C++20, one translation unit.
args=(-S "$source/tests/packaging/consumer" -B "$tmp/consumer" -DCMAKE_BUILD_TYPE=Release
      -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix"
      -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
[[ -n $launcher ]] && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher")
"$cmake" "${args[@]}" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configuring the consumer"; }
"$cmake" --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "building the consumer"; }
grep -q -- '-std=c++\(23\|2b\)' "$tmp/consumer/compile_commands.json" ||
  fail "the consumer was not compiled as C++23: $(grep -o -- '-std=[^ ]*' "$tmp/consumer/compile_commands.json")"

expected='allowed remaining=1 retry_after_us=0
allowed remaining=0 retry_after_us=0
denied remaining=0 retry_after_us=1000000'
actual=$("$tmp/consumer/consumer")
[[ $actual == "$expected" ]] || fail "the consumer printed
$actual
instead of
$expected"
echo "consumer: built as C++23 from a C++20 project against $config, decisions as expected"
