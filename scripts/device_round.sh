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
#   (a copy of the shared conformance folder) against the installed gpufile.
set -uo pipefail
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

python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  target/wheels/gpufile-*.whl .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
if [ -n "$extra" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/extra "$extra"/*.whl \
    || exit 1
  export PYTHONPATH=/tmp/site:/tmp/extra
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import gpufile, kvikio; print("gpufile", gpufile.__version__, "kvikio", kvikio.__version__)'

status=0
if [ -n "$before" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-before \
    "$before"/gpufile-*.whl .whl/*.whl || exit 1
fi
bench() {  # bench NAME SITE [args]: one benchmark run with the gpufile installed in SITE
  local name=$1 site=$2; shift 2
  echo "== benchmark ($name)"
  if [ $quick = 1 ]; then
    PYTHONPATH=$site python3 benches/gpu_bench.py --size 1GiB --runs 1 --skip cold,host \
      --json "$out/bench-$name.json" "$@"
  else
    PYTHONPATH=$site python3 benches/gpu_bench.py --json "$out/bench-$name.json" "$@"
  fi
}
conformance_run() {
  [ -n "$conformance" ] || return 0
  echo "== KvikIO's own test suite under import gpufile as kvikio"
  # pytest-asyncio (carried with --extra for the zarr tests) wants its loop scope named.
  OUT=$out/conformance VERIFY_TIMEOUT=${VERIFY_TIMEOUT:-240} PYTHONPATH=$conformance/shim:$PYTHONPATH \
    bash "$conformance/run_kvikio_suite.sh" "$conformance/kvikio_tests" \
    -o asyncio_default_fixture_loop_scope=function | tail -60
}
safetensors_run() {
  [ $safetensors = 1 ] || return 0
  echo "== model checkpoint loading (benches/safetensors_bench.py)"
  OUT=$out python3 benches/safetensors_bench.py 2>&1 | tail -30
}
if [ $only_bench = 1 ]; then
  bench now "$PYTHONPATH" "$@"
  [ -n "$before" ] && bench before /tmp/site-before "$@"
  safetensors_run
  conformance_run
  exit $status
fi
echo "== Rust GPU tests"
for t in target/gpu-tests/*; do "$t" --test-threads=1 2>&1 | tail -4 || status=1; done
if [ -x target/gpu-tests-cpp/test_device ]; then
  echo "== C++ device tests (GoogleTest)"
  LD_LIBRARY_PATH=target/gpu-tests-cpp target/gpu-tests-cpp/test_device 2>&1 | tail -12 \
    || status=1
fi
if [ $sanitize = 1 ] && command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck over the Rust GPU tests"
  for t in target/gpu-tests/*; do
    compute-sanitizer --tool memcheck --error-exitcode 9 "$t" --test-threads=1 2>&1 | tail -4 || status=1
  done
fi
echo "== pytest (all, GPU included)"
python3 -m pytest -p no:cacheprovider -rs -v tests > "$out/pytest.log" 2>&1 || status=1
grep -E "PASSED|FAILED|ERROR|SKIPPED" "$out/pytest.log" | grep -v PASSED | head -30
grep -B2 -A12 "Fatal Python error" "$out/pytest.log" | head -40
tail -3 "$out/pytest.log"
[ $tests_only = 1 ] && exit $status

bench now "$PYTHONPATH" "$@"
[ -n "$before" ] && bench before /tmp/site-before "$@"
conformance_run
safetensors_run
echo "== gpufile check"
python3 -m gpufile check /tmp/gpufile-bench.bin 2>&1 || status=1
echo "== gpufile read (CLI, the README's main job)"
python3 -m gpufile read /tmp/gpufile-bench.bin --verify --repeat 3 || status=1
echo "== the spec's Step 5 here: 1 GiB, task_size 4 MiB, compat_mode OFF (udev database written)"
head -c $((1 << 30)) /tmp/gpufile-bench.bin > /tmp/gpufile-1g.bin
entry=/run/udev/data/b$(stat -c '%Hd:%Ld' /tmp/gpufile-1g.bin)
mkdir -p /run/udev/data && printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n' > "$entry"
python3 -m gpufile read /tmp/gpufile-1g.bin --compat-mode off --task-size 4MiB --verify || status=1
python3 -m gpufile read /tmp/gpufile-1g.bin --compat-mode auto --verify | grep -E "path|reason"
echo "== gpufile explain --run (1 GiB, task_size 4 MiB, compat_mode OFF)"
python3 -m gpufile explain --size 1GiB --task-size 4MiB --compat-mode off /tmp/gpufile-1g.bin --run || status=1
rm -f "$entry"
exit $status
