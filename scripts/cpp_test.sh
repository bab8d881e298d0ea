#!/usr/bin/env bash
# The C and C++ API tests of the README's test command: the root CMake project (driving cargo for
# libgpufile, a debug build that `cargo test` built already) with its GoogleTest tests, once plain
# and once under AddressSanitizer + UndefinedBehaviorSanitizer; then an install to a temporary
# prefix and the downstream project examples/cpp built against it and run; then an install moved
# to another place, and a C and a C++ program built with pkg-config's flags alone and run.
# Needs cmake, a C++17 compiler and GoogleTest (Debian: cmake g++ libgtest-dev libgmock-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

for variant in plain asan; do
  build=target/cmake-$variant
  flags=(-DGPUFILE_CARGO_PROFILE=dev -DGPUFILE_BUILD_TESTS=ON)
  [ "$variant" = asan ] && flags+=(-DGPUFILE_SANITIZE=ON)
  echo "-- $variant: configure and build ($build)"
  cmake -S . -B "$build" "${flags[@]}" >"$build.log" 2>&1 || { cat "$build.log"; exit 1; }
  cmake --build "$build" -j "$jobs" >>"$build.log" 2>&1 || { cat "$build.log"; exit 1; }
  echo "-- $variant: ctest (no test found fails it)"
  # detect_leaks=0: the Rust library's process-wide engine (its worker threads) lives until exit.
  # The tests get a TMPDIR of their own, which they must leave empty (death tests' children
  # exit past destructors).
  test_tmp=$(mktemp -d)
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 TMPDIR=$test_tmp \
    ctest --test-dir "$build" --output-on-failure --no-tests=error
  left=$(find "$test_tmp" -mindepth 1 -maxdepth 1)
  [ -z "$left" ] || { echo "the C/C++ tests left files behind in TMPDIR:"; echo "$left"; exit 1; }
  rmdir "$test_tmp"
done

echo "-- install to a temporary prefix, then build and run examples/cpp against it"
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install target/cmake-plain --prefix "$prefix" >/dev/null
cmake -S examples/cpp -B "$prefix/build" -DCMAKE_PREFIX_PATH="$prefix" >"$prefix/example.log" 2>&1 \
  && cmake --build "$prefix/build" >>"$prefix/example.log" 2>&1 || { cat "$prefix/example.log"; exit 1; }
"$prefix/build/gpufile_example" "$prefix/example.bin"
# An install without the static library (a distribution's shared-only package) still serves
# find_package for the shared targets.
rm "$(find "$prefix" -name libgpufile.a | head -1)"
cmake -S examples/cpp -B "$prefix/build-shared-only" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$prefix/example-shared.log" 2>&1 && cmake --build "$prefix/build-shared-only" \
  >>"$prefix/example-shared.log" 2>&1 || { cat "$prefix/example-shared.log"; exit 1; }
"$prefix/build-shared-only/gpufile_example" "$prefix/example2.bin"

echo "-- install to another prefix, move it, then build a C and a C++ program with pkg-config"
# gpufile.pc names its prefix from where it lies (${pcfiledir}), so a moved prefix still serves.
cmake --install target/cmake-plain --prefix "$prefix/installed" >/dev/null
mv "$prefix/installed" "$prefix/moved"
pc_dir=$(dirname "$(find "$prefix/moved" -name gpufile.pc | head -1)")
pc_flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs gpufile) \
  || { echo "gpufile.pc is not readable by pkg-config"; exit 1; }
# The C program of docs/c-api.md, and examples/cpp with KvikIO's names.
awk '/^```c$/ {on = 1; next} /^```/ {on = 0} on' docs/c-api.md >"$prefix/example.c"
# shellcheck disable=SC2086 # the flags are words
cc -std=c11 "$prefix/example.c" -o "$prefix/example_c" $pc_flags \
  && c++ -std=c++17 examples/cpp/main.cpp -o "$prefix/example_cpp" $pc_flags \
  || { echo "a program built with pkg-config's flags ($pc_flags) did not build"; exit 1; }
"$prefix/example_c" "$prefix/pc-c.bin"
"$prefix/example_cpp" "$prefix/pc-cpp.bin"
