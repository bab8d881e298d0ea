#!/usr/bin/env bash
# A before/after benchmark of two gpufile wheels in one call on the GPU machine, same files, same
# run: the current one (target/wheels, from scripts/build_for_device.sh) and an earlier one.
#   bash scripts/before_after.sh BEFORE_WHEEL_DIR [--quick]
# Carry target/wheels, .whl (KvikIO's wheels) and BEFORE_WHEEL_DIR. Rows: gpu_bench's hot
# (defaults and 1/4/16 threads), host, files (the 256-file loop and read_batch), random
# (4 KiB/64 KiB/1 MiB) and writes groups; ranges_bench's gathers into GPU memory; save_bench's
# gpufile rows (save_file, save_checkpoint, async_save). Each bench runs for the current wheel,
# then the earlier one; JSON under $OUT (or /tmp/gpufile-out).
set -uo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: before_after.sh BEFORE_WHEEL_DIR [--quick]}
quick=${2:-}
out=${OUT:-/tmp/gpufile-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
for site in now before; do
  wheel=target/wheels/gpufile-*.whl
  [ $site = before ] && wheel="$before"/gpufile-*.whl
  # shellcheck disable=SC2086 # the wheel's glob
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-$site \
    $wheel .whl/*.whl || exit 1
done
size=2GiB runs=3 rows=4KiB:100000,64KiB:20000,1MiB:2000 gb=2
[ "$quick" = --quick ] && size=1GiB runs=1 rows=4KiB:100000 gb=1
status=0
for site in now before; do
  echo "== gpu_bench ($site)"
  PYTHONPATH=/tmp/site-$site python3 benches/gpu_bench.py --size $size --runs $runs \
    --only hot,host,files,random,writes --threads 1,4,16 --json "$out/bench-$site.json" \
    2>&1 | tail -40 || status=1
done
for site in now before; do
  echo "== ranges_bench ($site)"
  PYTHONPATH=/tmp/site-$site python3 benches/ranges_bench.py --file-size $size --rows $rows \
    --dest device --runs $runs --only hot --libs gpufile --json "$out/ranges-$site.json" \
    2>&1 | tail -12 || status=1
done
for site in now before; do
  echo "== save_bench ($site)"
  PYTHONPATH=/tmp/site-$site python3 benches/save_bench.py --gb $gb --runs $runs \
    --skip dd,peers,dcp --json "$out/save-$site.json" 2>&1 | tail -14 || status=1
done
exit $status
