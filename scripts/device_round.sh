#!/usr/bin/env bash
# One whole round on the GPU machine (run there from the repository root, after
# scripts/build_for_device.sh here; carry target/wheels, target/gpu-tests, target/gpu-tests-cpp
# and .whl):
# install, GPU tests (pytest and Rust), then the benchmark; a short table last; JSON under $OUT.
#   bash scripts/device_round.sh [--quick] [--sanitize] [--only-bench | --tests-only]
#                                [--before WHEEL_DIR]
#                                [--conformance DIR] [--extra WHEEL_DIR] [--safetensors]
#                                [extra benchmark options]
# --extra DIR: third-party wheels for the optional tests (zarr, dask, moto, safetensors, ...),
#   installed into their own folder behind gpufile's. --safetensors: also run
#   benches/safetensors_bench.py (gpufile vs safetensors, fastsafetensors, InstantTensor).
# --tests-only: the GPU tests (Rust, C++, pytest) and nothing else, for a round split over calls
#   (with scripts/before_after.sh for the benchmark).
# --before DIR: also benchmark the wheel in DIR (an earlier gpufile), same file, same run, after
#   the current one, for a before/after table. --conformance DIR: run KvikIO's own test suite
#   (a copy of the shared conformance folder) against the installed gpufile; failures other than
#   the differences docs/compatibility.md keeps fail it (scripts/kvikio_suite_verdict.py).
#
# Every part's exit status is kept: the round ends with a table of its parts and exits non-zero
# when any part failed or did not run ($OUT/round.json holds the same). pytest runs with
# GPUFILE_REQUIRE_GPU=1 GPUFILE_TEST_MACHINE=gpu (a GPU test that skips fails), the Rust GPU tests
# with --include-ignored (they are ignored where there is no GPU), and a skipped C++ device test
# fails. GPUFILE_SKIP_CPP=1 accepts a round without the C++ device tests (build_for_device.sh
# built none: no cmake or GoogleTest there); the table says so.
set -euo pipefail

part_names=() part_status=() part_secs=()

# record NAME STATUS [SECONDS]: one row of the final table. STATUS "ok" or "skipped: ..." passes;
# anything else ("FAILED (exit N)", "NOT RUN: why") fails the round.
record() { part_names+=("$1"); part_status+=("$2"); part_secs+=("${3:-0}"); }

# run_part NAME CMD...: one part of the round; its exit status goes to the table, and the round
# goes on. (Inside CMD errexit is off, as for any command tested with ||: parts return their
# failures explicitly.)
run_part() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  if [ $rc = 0 ]; then record "$name" ok $((SECONDS - start))
  else record "$name" "FAILED (exit $rc)" $((SECONDS - start)); fi
}

# report: the table of parts, $out/round.json; returns 1 when any part failed or did not run.
report() {
  local i failed=0 json="" status
  echo "== round: parts"
  printf '   %-44s %6s  %s\n' part seconds status
  for i in "${!part_names[@]}"; do
    status=${part_status[$i]}
    printf '   %-44s %6s  %s\n' "${part_names[$i]}" "${part_secs[$i]}" "$status"
    case "$status" in ok | skipped:*) ;; *) failed=$((failed + 1)) ;; esac
    json+="${json:+,}{\"part\": \"${part_names[$i]}\", \"status\": \"$status\", \"seconds\": ${part_secs[$i]}}"
  done
  [ ${#part_names[@]} -gt 0 ] || { echo "   no part ran"; failed=1; }
  printf '{"failed": %d, "parts": [%s]}\n' "$failed" "$json" >"$out/round.json"
  if [ $failed -gt 0 ]; then echo "== round FAILED: $failed part(s) failed or did not run"; return 1; fi
  echo "== round passed: every part ran and passed"
}

# rust_tests LOG CMD...: a Rust test binary (possibly under a wrapper); passes when it exits 0
# and printed libtest's summary.
rust_tests() {
  local log=$1 rc=0
  shift
  "$@" --test-threads=1 --include-ignored >"$log" 2>&1 || rc=$?
  tail -4 "$log"
  [ $rc = 0 ] || return $rc
  grep -q "^test result: ok\. [1-9]" "$log" || { echo "no passed test in $log"; return 1; }
}

cpp_device() {  # the C++ API's device tests: a test that skips means the GPU was not usable
  local log=$out/cpp-device.log rc=0
  LD_LIBRARY_PATH=target/gpu-tests-cpp target/gpu-tests-cpp/test_device >"$log" 2>&1 || rc=$?
  tail -12 "$log"
  [ $rc = 0 ] || return $rc
  grep -q '^\[  PASSED  \] [1-9]' "$log" || { echo "no passed test in $log"; return 1; }
  if grep -q '^\[  SKIPPED \]' "$log"; then echo "C++ device tests skipped on the GPU machine"; return 1; fi
}

# The pytest files that touch cuFile's state (the udev entry some write), the GPU's memory (JAX
# preallocates), or need the GPU to themselves: one process; every other file: in
# $rest_shards processes beside it, the files dealt out in turn. One process took about 9 minutes
# and two more than 6 (the second half); the machine has 16 cores.
rest_shards=${GPUFILE_ROUND_SHARDS:-4}
gpu_files() {
  local f
  for f in tests/test_*.py; do
    case "$(basename "$f")" in
      *gpu* | test_cufile*.py | test_kvikio_compat.py | test_dma_cache.py | test_multi_gpu.py \
        | test_stream*.py | test_reliability*.py | test_jax.py | test_pagecache.py) echo "$f" ;;
    esac
  done
}

pytest_half() {  # pytest_half NAME FILES...: one process's share, its log under $out
  local name=$1 rc=0
  shift
  # JAX would otherwise take three quarters of the GPU's memory in each process that imports it.
  XLA_PYTHON_CLIENT_PREALLOCATE=false GPUFILE_REQUIRE_GPU=1 GPUFILE_TEST_MACHINE=gpu \
    python3 -m pytest -p no:cacheprovider -rs -v --durations=15 --basetemp="/tmp/pytest-$name" \
    "$@" >"$out/pytest-$name.log" 2>&1 || rc=$?
  return $rc
}

pytest_all() {  # every pytest test, in 1 + $rest_shards processes; a GPU test that skips fails
  local gpu=() f rc=0 i n=0 pids=() names=(gpu) log
  local -a shard
  mapfile -t gpu < <(gpu_files)
  pytest_half gpu "${gpu[@]}" & pids+=($!)
  for i in $(seq 1 "$rest_shards"); do
    shard=()
    n=0
    for f in tests/test_*.py; do
      [[ " ${gpu[*]} " == *" $f "* ]] && continue
      [ $((n % rest_shards + 1)) = "$i" ] && shard+=("$f")
      n=$((n + 1))
    done
    [ ${#shard[@]} -gt 0 ] || continue
    pytest_half "rest$i" "${shard[@]}" & pids+=($!)
    names+=("rest$i")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || rc=$((rc ? rc : $?))
  done
  for i in "${names[@]}"; do
    log=$out/pytest-$i.log
    echo "-- $(basename "$log")"
    grep -E "PASSED|FAILED|ERROR|SKIPPED" "$log" | grep -v PASSED | head -30 || true
    grep -B2 -A12 "Fatal Python error" "$log" | head -40 || true
    tail -3 "$log"
    grep -qE "[0-9]+ passed.* in [0-9.]+s" "$log" || { echo "no pytest summary in $log"; [ $rc != 0 ] || rc=1; }
  done
  return $rc
}

bench() {  # bench SITE [args]: one benchmark run with the gpufile installed in SITE
  local site=$1 name=$2
  shift 2
  if [ $quick = 1 ]; then
    PYTHONPATH=$site python3 benches/gpu_bench.py --size 1GiB --runs 1 --skip cold,host \
      --json "$out/bench-$name.json" "$@"
  else
    PYTHONPATH=$site python3 benches/gpu_bench.py --json "$out/bench-$name.json" "$@"
  fi
}

kvikio_suite() {  # KvikIO's own test suite under `import gpufile as kvikio`
  local rc=0
  # pytest-asyncio (carried with --extra for the zarr tests) wants its loop scope named.
  OUT=$out/conformance VERIFY_TIMEOUT=${VERIFY_TIMEOUT:-240} PYTHONPATH=$conformance/shim:$PYTHONPATH \
    bash "$conformance/run_kvikio_suite.sh" "$conformance/kvikio_tests" \
    -o asyncio_default_fixture_loop_scope=function | tail -60 || rc=$?
  [ $rc = 0 ] || { echo "the suite's runner failed (exit $rc): no summary"; return $rc; }
  python3 scripts/kvikio_suite_verdict.py "$out/conformance/results.jsonl"
}

safetensors() {
  OUT=$out python3 benches/safetensors_bench.py 2>&1 | tail -30
}

benches() {  # the benchmark(s), then what --conformance and --safetensors add
  echo "== benchmark (now)"
  run_part "benchmark (now)" bench "$PYTHONPATH" now "$@"
  if [ -n "$before" ]; then
    echo "== benchmark (before)"
    run_part "benchmark (before)" bench /tmp/site-before before "$@"
  fi
  if [ -n "$conformance" ]; then
    echo "== KvikIO's own test suite under import gpufile as kvikio"
    run_part "KvikIO's test suite" kvikio_suite
  fi
  if [ $safetensors = 1 ]; then
    echo "== model checkpoint loading (benches/safetensors_bench.py)"
    run_part "safetensors_bench" safetensors
  fi
}

gpu_tests() {
  local t
  # Every GPU test, in every language: one that finds no usable GPU fails rather than skips.
  local -x GPUFILE_REQUIRE_GPU=1
  echo "== Rust GPU tests"
  if ! compgen -G "target/gpu-tests/*" >/dev/null; then
    record "Rust GPU tests" "NOT RUN: target/gpu-tests is empty (scripts/build_for_device.sh)"
  fi
  for t in target/gpu-tests/*; do
    [ -e "$t" ] || continue
    run_part "Rust $(basename "$t")" rust_tests "$out/rust-$(basename "$t").log" "$t"
  done
  if [ -x target/gpu-tests-cpp/test_device ]; then
    echo "== C++ device tests (GoogleTest)"
    run_part "C++ device tests" cpp_device
  elif [ "${GPUFILE_SKIP_CPP:-}" = 1 ]; then
    echo "!! C++ device tests NOT RUN: GPUFILE_SKIP_CPP=1"
    record "C++ device tests" "skipped: GPUFILE_SKIP_CPP=1 (not built)"
  else
    record "C++ device tests" "NOT RUN: no target/gpu-tests-cpp/test_device (GPUFILE_SKIP_CPP=1 accepts that)"
  fi
  if [ $sanitize = 1 ]; then
    echo "== compute-sanitizer memcheck over the Rust GPU tests"
    if ! command -v compute-sanitizer >/dev/null; then
      record "compute-sanitizer" "NOT RUN: --sanitize, but no compute-sanitizer here"
    else
      for t in target/gpu-tests/*; do
        [ -e "$t" ] || continue
        run_part "compute-sanitizer $(basename "$t")" rust_tests "$out/sanitize-$(basename "$t").log" \
          compute-sanitizer --tool memcheck --error-exitcode 9 "$t"
      done
    fi
  fi
  echo "== pytest (all, GPU included; GPUFILE_REQUIRE_GPU=1 GPUFILE_TEST_MACHINE=gpu)"
  run_part "pytest (GPU required)" pytest_all
}

cli_auto() {  # compat_mode AUTO (udev entry written): the path taken and its reason
  python3 -m gpufile read /tmp/gpufile-1g.bin --compat-mode auto --verify | grep -E "path|reason"
}

cli() {
  local entry=""
  echo "== gpufile check"
  run_part "gpufile check" python3 -m gpufile check /tmp/gpufile-bench.bin
  echo "== gpufile read (CLI, the README's main job)"
  run_part "gpufile read --verify" python3 -m gpufile read /tmp/gpufile-bench.bin --verify --repeat 3
  echo "== the spec's Step 5 here: 1 GiB, task_size 4 MiB, compat_mode OFF (udev database written)"
  if head -c $((1 << 30)) /tmp/gpufile-bench.bin >/tmp/gpufile-1g.bin \
    && entry=/run/udev/data/b$(stat -c '%Hd:%Ld' /tmp/gpufile-1g.bin) && mkdir -p /run/udev/data \
    && printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n' >"$entry"; then
    run_part "Step 5: read, compat OFF, 4 MiB tasks" \
      python3 -m gpufile read /tmp/gpufile-1g.bin --compat-mode off --task-size 4MiB --verify
    run_part "read, compat AUTO: path and reason" cli_auto
    echo "== gpufile explain --run (1 GiB, task_size 4 MiB, compat_mode OFF)"
    run_part "explain --run, compat OFF" python3 -m gpufile explain --size 1GiB --task-size 4MiB \
      --compat-mode off /tmp/gpufile-1g.bin --run
  else
    record "Step 5" "NOT RUN: the 1 GiB file or the udev entry could not be written"
  fi
  [ -z "$entry" ] || rm -f "$entry"
}

install() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    target/wheels/gpufile-*.whl .whl/*.whl || { echo "install of the wheels failed"; exit 1; }
  export PYTHONPATH=/tmp/site
  if [ -n "$extra" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/extra "$extra"/*.whl \
      || { echo "install of the --extra wheels failed"; exit 1; }
    export PYTHONPATH=/tmp/site:/tmp/extra
  fi
  if [ -n "$before" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-before \
      "$before"/gpufile-*.whl .whl/*.whl || { echo "install of the --before wheel failed"; exit 1; }
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi failed"
  python3 -c 'import gpufile, kvikio; print("gpufile", gpufile.__version__, "kvikio", kvikio.__version__)' \
    || { echo "gpufile or kvikio does not import"; exit 1; }
}

main() {
  cd "$(dirname "$0")/.."
  out=${OUT:-/tmp/gpufile-out}
  mkdir -p "$out"
  export PYTHONUNBUFFERED=1
  quick=0 sanitize=0 before="" conformance="" only_bench=0 tests_only=0 extra="" safetensors=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --quick) quick=1; shift ;;
      --sanitize) sanitize=1; shift ;;
      --only-bench) only_bench=1; shift ;;
      --tests-only) tests_only=1; shift ;;
      --before) before=$2; shift 2 ;;
      --conformance) conformance=$2; shift 2 ;;
      --extra) extra=$2; shift 2 ;;
      --safetensors) safetensors=1; shift ;;
      *) break ;;
    esac
  done
  install
  [ $only_bench = 1 ] || gpu_tests
  if [ $tests_only = 0 ]; then
    benches "$@"
    [ $only_bench = 1 ] || cli
  fi
  report
}

# Sourced (tests/test_scripts.py), it only defines the functions.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
