// The gather kernel: copies many ranges of registered host memory (page cache a file mapping
// pins) into device memory, one thread block per range at a time, so the GPU's own loads move
// the rows and no CPU copies them through a bounce buffer.
//
// gpufile loads the PTX this compiles to (gather.ptx beside it, embedded in the library) with
// cuModuleLoadData; the driver JIT-compiles it for the GPU at hand. Regenerate it with the
// command in scripts/build_kernels.sh, never by hand.

#include <stdint.h>

// One range: `len` bytes from `src` (a device address of registered host memory) to `dst`.
// The layout is gpufile's `cuda::GatherPiece` (three little-endian u64).
struct Piece {
    uint64_t src;
    uint64_t dst;
    uint64_t len;
};

// Copies `len` bytes with `T`-sized loads and stores; `src` and `dst` are `T`-aligned.
template <typename T>
__device__ void copy_words(const unsigned char* src, unsigned char* dst, uint64_t len) {
    const T* s = reinterpret_cast<const T*>(src);
    T* d = reinterpret_cast<T*>(dst);
    uint64_t words = len / sizeof(T);
    for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) {
        d[i] = s[i];
    }
    for (uint64_t i = words * sizeof(T) + threadIdx.x; i < len; i += blockDim.x) {
        dst[i] = src[i];
    }
}

// Copies one range: bytes up to the next 16-byte boundary of `src` where `src` and `dst` share
// their alignment, then 16-byte words; 4-byte words where they share only that; bytes otherwise.
__device__ void copy_range(const unsigned char* src, unsigned char* dst, uint64_t len) {
    uint64_t mis = reinterpret_cast<uint64_t>(src) ^ reinterpret_cast<uint64_t>(dst);
    if ((mis & 15) == 0) {
        uint64_t head = (16 - (reinterpret_cast<uint64_t>(src) & 15)) & 15;
        if (head > len) head = len;
        for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
        copy_words<uint4>(src + head, dst + head, len - head);
    } else if ((mis & 3) == 0) {
        uint64_t head = (4 - (reinterpret_cast<uint64_t>(src) & 3)) & 3;
        if (head > len) head = len;
        for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
        copy_words<uint32_t>(src + head, dst + head, len - head);
    } else {
        for (uint64_t i = threadIdx.x; i < len; i += blockDim.x) dst[i] = src[i];
    }
}

// Copies `n` ranges described at `pieces` (readable by the device: pinned host memory). Block b
// takes ranges b, b + gridDim.x, ...; the ranges' destinations do not overlap.
extern "C" __global__ void gpufile_gather(const Piece* pieces, uint32_t n) {
    for (uint32_t k = blockIdx.x; k < n; k += gridDim.x) {
        Piece p = pieces[k];
        copy_range(reinterpret_cast<const unsigned char*>(p.src),
                   reinterpret_cast<unsigned char*>(p.dst), p.len);
    }
}
