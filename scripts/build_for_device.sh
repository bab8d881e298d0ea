#!/usr/bin/env bash
# Here (with cargo): build what a GPU machine round needs, under ignored paths to carry:
#   target/wheels/gpufile-*.whl   the abi3 wheel (release)
#   target/gpu-tests/             Rust test binaries that touch the GPU
#   target/gpu-tests-cpp/         the C++ API's device tests (GoogleTest, built with CMake) and the
#                                 libgpufile.so they load (the GPU machine has no GoogleTest);
#                                 without cmake and GoogleTest here it fails, unless
#                                 GPUFILE_SKIP_CPP=1 (then device_round.sh needs it too)
# KvikIO's wheels for side-by-side runs go to .whl/ (downloaded once).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${GPUFILE_VENV:-.venv}
# The C++ device tests need cmake and GoogleTest here: checked first, so a build that cannot be
# whole fails before the long part.
build_cpp=1
if ! command -v cmake >/dev/null || [ ! -e /usr/include/gtest/gtest.h ]; then
  if [ "${GPUFILE_SKIP_CPP:-}" != 1 ]; then
    echo "FAILED: the C++ device tests need cmake and GoogleTest (Debian: cmake libgtest-dev"
    echo "        libgmock-dev); GPUFILE_SKIP_CPP=1 builds the rest without them"
    exit 1
  fi
  echo "!! LEFT OUT (GPUFILE_SKIP_CPP=1): the C++ device tests are not built (no cmake or GoogleTest"
  echo "!! here); scripts/device_round.sh fails without them unless GPUFILE_SKIP_CPP=1 there too"
  build_cpp=0
fi
[ -x "$venv/bin/maturin" ] || { python3 -m venv "$venv"; "$venv/bin/pip" install -q "maturin>=1.7,<2"; }
rm -rf target/wheels target/gpu-tests
"$venv/bin/maturin" build --release --quiet --out target/wheels
mkdir -p target/gpu-tests
cargo test --release -p gpufile --test gpu_io --test gpu_stream -p gpufile-capi --test device --no-run \
    --message-format=json 2>target/gpu-tests.log \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])' | xargs -I{} cp {} target/gpu-tests/ \
  || { cat target/gpu-tests.log; exit 1; }
[ "$(ls target/gpu-tests | wc -l)" -eq 3 ] || { echo "expected 3 Rust GPU test binaries"; exit 1; }
rm -rf target/gpu-tests-cpp
if [ $build_cpp = 1 ]; then
  cmake -S . -B target/cmake-device -DGPUFILE_BUILD_TESTS=ON >target/cmake-device.log 2>&1 \
    && cmake --build target/cmake-device --target test_device >>target/cmake-device.log 2>&1 \
    || { cat target/cmake-device.log; exit 1; }
  mkdir -p target/gpu-tests-cpp
  cp target/cmake-device/tests/cpp/test_device target/release/libgpufile.so target/gpu-tests-cpp/
fi
if [ ! -d .whl ] || ! ls .whl/kvikio_cu13-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
    -d .whl kvikio-cu13==26.10.0 libkvikio-cu13==26.10.0 rapids-logger==0.3.0
fi
ls -la target/wheels target/gpu-tests .whl
[ $build_cpp = 0 ] || ls -la target/gpu-tests-cpp
