#!/usr/bin/env bash
# Regenerates the PTX gpufile embeds from its CUDA sources (needs nvcc; run where the CUDA
# toolkit is, e.g. the GPU machine): crates/gpufile/kernels/*.cu -> *.ptx beside them.
# compute_75 (Turing, the oldest CUDA 13 compiles for) is the oldest GPU the PTX serves; the
# driver JIT-compiles it for the GPU at hand, and a driver older than this nvcc's PTX ISA refuses
# it (gpufile then reports why and gathers through bounce buffers).
set -euo pipefail
cd "$(dirname "$0")/.."
for cu in crates/gpufile/kernels/*.cu; do
  nvcc -ptx -O3 -arch=compute_75 -o "${cu%.cu}.ptx" "$cu"
done
ls -la crates/gpufile/kernels/
