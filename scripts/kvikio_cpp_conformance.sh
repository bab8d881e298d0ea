#!/usr/bin/env bash
# KvikIO's C++ examples and public-API tests (the shared conformance folder, unmodified, never
# copied into the project) built against gpufile's kvikio headers and libgpufile, and run.
#
#   scripts/kvikio_cpp_conformance.sh [--cpu]
#
# --cpu runs only what needs no GPU (the rest is built, not run). Environment:
#   KVIKIO_CPP_CONFORMANCE  the folder (default: ../shared/conformance/kvikio-cpp beside the checkout)
#   GPUFILE_PREFIX          an install of gpufile (default: this checkout, built and installed
#                           into target/conformance-prefix)
#   CUDA_INCLUDE_DIR        where cuda_runtime_api.h is (default: $CUDA_HOME/include, CUDA_HOME
#                           defaulting to /usr/local/cuda); on a machine without CUDA, the
#                           include folder of the nvidia-cuda-runtime and nvidia-cuda-crt wheels
#   CUDART_LIBRARY          libcudart to link (default: $CUDA_HOME/lib64/libcudart.so)
#   GTEST_SOURCE_DIR        GoogleTest's sources to build (where it is not installed, e.g. a
#                           copy of /usr/src/googletest carried to the GPU machine)
# test_hdfs.cpp stays out: its helper drives libcurl through KvikIO's shim (docs/compatibility.md).
set -euo pipefail

# The counts: passed, failed and failed_names (globals, set by main), work files under $tmp.

run_example() {  # run_example NAME PROGRAM: an example passes when it exits 0
  local name=$1 program=$2
  if (cd "$tmp" && "$program" >"$tmp/$name.out" 2>&1); then
    passed=$((passed + 1)); echo "PASS example $name"
  else
    failed=$((failed + 1)); failed_names+=("example:$name"); echo "FAIL example $name"; tail -5 "$tmp/$name.out"
  fi
}

# run_gtest NAME PROGRAM FILTER: one GoogleTest program, its cases counted from its summary. The
# program fails as a whole (one failure more) when it crashed (a signal, or a non-zero exit
# without a failed case), printed no summary, or ran no case.
run_gtest() {
  local name=$1 program=$2 filter=$3 rc=0 p f ran why=""
  "$program" --gtest_filter="$filter" >"$tmp/$name.out" 2>&1 || rc=$?
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from .* ran\..*/\1/p' "$tmp/$name.out" | tail -1)
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}.*/\1/p' "$tmp/$name.out" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}.*/\1/p' "$tmp/$name.out" | tail -1)
  p=${p:-0} f=${f:-0}
  if [ $rc -gt 128 ]; then why="killed by signal $((rc - 128))"
  elif [ -z "$ran" ]; then why="no GoogleTest summary (exit $rc)"
  elif [ "$ran" -eq 0 ]; then why="ran no test (filter $filter)"
  elif [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then why="exit $rc with no failed test"
  fi
  passed=$((passed + p)); failed=$((failed + f))
  echo "$name: $p passed, $f failed${why:+; FAILED: $why}"
  while read -r n; do failed_names+=("$n"); done < <(sed -n 's/^\[  FAILED  \] \([A-Za-z_][^ ,]*\).*/\1/p' "$tmp/$name.out" | sort -u)
  if [ -n "$why" ]; then
    failed=$((failed + 1)); failed_names+=("$name: $why"); tail -5 "$tmp/$name.out"
  fi
}

summary() {  # the totals; fails when anything failed
  local n
  echo "== KvikIO C++ conformance: $passed passed, $failed failed"
  for n in "${failed_names[@]}"; do echo "   failed: $n"; done
  [ "$failed" -eq 0 ]
}

main() {
  cd "$(dirname "$0")/.."
  root=$PWD
  cpu=0
  [ "${1:-}" = "--cpu" ] && cpu=1
  conf=${KVIKIO_CPP_CONFORMANCE:-$root/../shared/conformance/kvikio-cpp}
  [ -d "$conf/tests" ] || { echo "no conformance folder at $conf (set KVIKIO_CPP_CONFORMANCE)"; exit 2; }
  conf=$(cd "$conf" && pwd)
  cuda_home=${CUDA_HOME:-/usr/local/cuda}
  cuda_inc=${CUDA_INCLUDE_DIR:-$cuda_home/include}
  cudart=${CUDART_LIBRARY:-$cuda_home/lib64/libcudart.so}
  [ -e "$cuda_inc/cuda_runtime_api.h" ] || { echo "no cuda_runtime_api.h in $cuda_inc"; exit 2; }
  [ -e "$cudart" ] || { echo "no libcudart at $cudart"; exit 2; }

  prefix=${GPUFILE_PREFIX:-}
  if [ -z "$prefix" ]; then
    prefix=$root/target/conformance-prefix
    echo "-- building and installing gpufile into $prefix"
    cmake -S . -B target/cmake-conformance >/dev/null
    cmake --build target/cmake-conformance >/dev/null
    cmake --install target/cmake-conformance --prefix "$prefix" >/dev/null
  fi

  work=$root/target/kvikio-cpp-conformance
  mkdir -p "$work"
  cat >"$work/CMakeLists.txt" <<CMAKE
  cmake_minimum_required(VERSION 3.18)
  project(kvikio_cpp_conformance LANGUAGES C CXX)
  set(CMAKE_CXX_STANDARD 20)
  find_package(gpufile REQUIRED)
  if(DEFINED GTEST_SOURCE_DIR)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory(\${GTEST_SOURCE_DIR} googletest EXCLUDE_FROM_ALL)
    set(gtest_main_target gtest_main)
    set(gmock_target gmock)
  else()
    find_package(GTest REQUIRED)
    set(gtest_main_target GTest::gtest_main)
    set(gmock_target GTest::gmock)
  endif()
  set(conf "$conf")
  foreach(example basic_no_cuda basic_io)
    add_executable(\${example} \${conf}/examples/\${example}.cpp)
    target_include_directories(\${example} PRIVATE "$cuda_inc")
    target_link_libraries(\${example} PRIVATE gpufile::kvikio "$cudart")
  endforeach()
  foreach(t test_error test_defaults test_file_utils test_remote_handle test_mmap test_basic_io
            test_summary test_observation test_counters)
    add_executable(\${t} \${conf}/tests/\${t}.cpp \${conf}/tests/utils/env.cpp)
    target_include_directories(\${t} PRIVATE "$cuda_inc" \${conf}/tests)
    target_link_libraries(\${t} PRIVATE gpufile::kvikio "$cudart" \${gtest_main_target} \${gmock_target})
  endforeach()
CMAKE
  gtest_flag=()
  [ -n "${GTEST_SOURCE_DIR:-}" ] && gtest_flag=(-DGTEST_SOURCE_DIR="$GTEST_SOURCE_DIR")
  echo "-- building the conformance programs ($work/build)"
  cmake -S "$work" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" "${gtest_flag[@]}" \
    >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
  cmake --build "$work/build" -j "$(nproc 2>/dev/null || echo 2)" >"$work/build.log" 2>&1 \
    || { grep -E "error" "$work/build.log" | head -40; exit 1; }

  # What runs: on CPU, the programs and cases that need no GPU. The cases gpufile differs in on
  # purpose stay out everywhere (docs/compatibility.md, "KvikIO's C++ observation API").
  local summary_differs=SummaryTest.an_operation_still_running_counts_as_busy
  summary_differs+=:SummaryTest.the_backends_that_carried_the_work_are_counted_apart
  local observation_gpu=ObservationTest.a_failed_blocking_call_is_recorded_as_failed
  observation_gpu+=:ObservationTest.a_sub_threshold_device_call_is_observed_as_posix
  observation_gpu+=:ObservationTest.a_device_call_is_one_observation_too
  observation_gpu+=:ObservationTest.a_device_write_is_one_observation_too
  declare -A filter=(
    [test_error]='*' [test_defaults]='*' [test_file_utils]='*' [test_remote_handle]='*'
    [test_mmap]='*' [test_basic_io]='*' [test_summary]="*-$summary_differs"
    [test_observation]='*' [test_counters]='*')
  examples=(basic_no_cuda basic_io)
  if [ $cpu = 1 ]; then
    filter=([test_error]='*' [test_defaults]='*' [test_file_utils]='*' [test_remote_handle]='*'
            [test_basic_io]='PosixHostIOTest.*' [test_summary]="*-$summary_differs"
            [test_observation]="*-$observation_gpu" [test_counters]='*')
    examples=(basic_no_cuda)
  fi
  passed=0 failed=0 failed_names=()
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for e in "${examples[@]}"; do run_example "$e" "$work/build/$e"; done
  for t in test_error test_defaults test_file_utils test_remote_handle test_mmap test_basic_io \
           test_summary test_observation test_counters; do
    [ -n "${filter[$t]:-}" ] || continue
    run_gtest "$t" "$work/build/$t" "${filter[$t]}"
  done
  summary
}

# Sourced (tests/test_scripts.py), it only defines the functions.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
