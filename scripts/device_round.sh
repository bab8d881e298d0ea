#!/usr/bin/env bash
# One whole round on the GPU machine (run there from the repository root, after
# scripts/build_for_device.sh here; carry target/wheels, target/gpu-tests and .whl):
# install, GPU tests (pytest and Rust), then the benchmark; a short table last; JSON under $OUT.
#   bash scripts/device_round.sh [--quick] [extra benchmark options]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpufile-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
quick=0 sanitize=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --sanitize) sanitize=1; shift ;;
    *) break ;;
  esac
done

python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  target/wheels/gpufile-*.whl .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import gpufile, kvikio; print("gpufile", gpufile.__version__, "kvikio", kvikio.__version__)'

status=0
echo "== Rust GPU tests"
for t in target/gpu-tests/*; do "$t" --test-threads=1 2>&1 | tail -4 || status=1; done
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

echo "== benchmark"
if [ $quick = 1 ]; then
  python3 benches/gpu_bench.py --size 1GiB --runs 1 --skip cold,host --json "$out/bench.json" "$@"
else
  python3 benches/gpu_bench.py --json "$out/bench.json" "$@"
fi
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
