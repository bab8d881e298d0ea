#!/usr/bin/env bash
# The same C++ program (kvikio_read.cpp: a hot file into cudaMalloc memory through
# kvikio::FileHandle::pread at 1/4/16 threads, data verified) built once against KvikIO's
# headers and library (the libkvikio wheel) and once against gpufile's kvikio headers and
# libgpufile (release), run one after the other on the same file; JSON of each and a table last.
#
#   benches/cpp/run_kvikio_vs_gpufile.sh [--size 4GiB] [--threads 1,4,16] [--runs 5] [--file PATH]
#
# Environment: CUDA_HOME (default /usr/local/cuda: nvcc's toolkit, for cuda_runtime_api.h,
# cufile.h and libcudart), KVIKIO_WHEEL_DIR (default .whl in the checkout: the libkvikio and
# rapids_logger wheels), OUT (default target/bench-cpp: builds, JSON), GPUFILE_PREFIX (an
# install of gpufile to use instead of building one here with cmake and cargo).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
cuda=${CUDA_HOME:-/usr/local/cuda}
wheels=${KVIKIO_WHEEL_DIR:-$root/.whl}
out=${OUT:-$root/target/bench-cpp}
mkdir -p "$out"
[ -e "$cuda/include/cuda_runtime_api.h" ] || { echo "no CUDA toolkit at $cuda (set CUDA_HOME)"; exit 2; }
[ -e "$cuda/include/cufile.h" ] || { echo "no cufile.h in $cuda/include (KvikIO's headers need it)"; exit 2; }
cudart_dir=$cuda/lib64
[ -e "$cudart_dir/libcudart.so" ] || cudart_dir=$cuda/targets/x86_64-linux/lib

echo "-- KvikIO's headers and library from the wheels in $wheels"
kv=$out/kvikio
rm -rf "$kv" && mkdir -p "$kv"
python3 -m zipfile -e "$(ls "$wheels"/libkvikio*.whl | head -1)" "$kv"
python3 -m zipfile -e "$(ls "$wheels"/rapids_logger*.whl | head -1)" "$kv"
kv_lib=$kv/libkvikio/lib64
kv_libs=$(ls -d "$kv"/libkvikio*.libs 2>/dev/null | head -1 || true)
rl_lib=$kv/rapids_logger/lib64

echo "-- gpufile (release): ${GPUFILE_PREFIX:-built into $out/gpufile-prefix}"
gp=${GPUFILE_PREFIX:-}
if [ -z "$gp" ]; then  # a machine without cargo takes an install made elsewhere (GPUFILE_PREFIX)
  cmake -S . -B "$out/gpufile-build" >/dev/null
  cmake --build "$out/gpufile-build" >/dev/null
  cmake --install "$out/gpufile-build" --prefix "$out/gpufile-prefix" >/dev/null
  gp=$out/gpufile-prefix
fi
gp_lib=$(dirname "$(find "$gp" -name libgpufile.so | head -1)")

common=(-O2 -std=c++17 -I"$cuda/include" "$root/benches/cpp/kvikio_read.cpp"
        -L"$cudart_dir" -lcudart -Wl,-rpath,"$cudart_dir" -ldl -lpthread)
echo "-- building against KvikIO"
# The definitions KvikIO's CMake package gives its users (kvikio-targets.cmake): the library
# was built with cuFile and libcurl, and its classes' layout depends on them.
g++ -DBENCH_IMPL='"kvikio"' -DKVIKIO_CUFILE_FOUND -DKVIKIO_CUFILE_VERSION_API_FOUND \
    -DKVIKIO_LIBCURL_FOUND -I"$kv/libkvikio/include" -I"$kv/rapids_logger/include" \
    "${common[@]}" -L"$kv_lib" -lkvikio -L"$rl_lib" -lrapids_logger \
    -Wl,-rpath,"$kv_lib" -Wl,-rpath,"$rl_lib" ${kv_libs:+-Wl,-rpath,"$kv_libs"} \
    -o "$out/kvikio_read_kvikio"
echo "-- building against gpufile's kvikio headers"
g++ -DBENCH_IMPL='"gpufile"' -I"$gp/include" "${common[@]}" -L"$gp_lib" -lgpufile \
    -Wl,-rpath,"$gp_lib" -o "$out/kvikio_read_gpufile"

args=("$@")
for impl in kvikio gpufile; do
  echo "-- running $impl"
  "$out/kvikio_read_$impl" "${args[@]}" --json "$out/$impl.json" | tail -n +2
done
python3 - "$out/kvikio.json" "$out/gpufile.json" <<'PY'
import json, sys
k, g = (json.load(open(p)) for p in sys.argv[1:3])
print(f"\nhot file of {k['size'] / 2**30:.2f} GiB -> device memory, median of {k['runs']} runs (GB/s)")
print(f"{'threads':>8} {'KvikIO':>10} {'gpufile':>10} {'ratio':>8}")
for a, b in zip(k["results"], g["results"]):
    print(f"{a['threads']:>8} {a['median_gb_per_s']:>10.2f} {b['median_gb_per_s']:>10.2f} "
          f"{b['median_gb_per_s'] / a['median_gb_per_s']:>7.2f}x")
print("data verified:", "yes" if k["verified"] and g["verified"] else "NO")
PY
