// Probe: 4 KiB (and larger) random rows of a hot file into one device array, three ways, each
// verified: gpufile's gather kernel over the file's mapping registered read-only, one
// cudaMemcpyBatchAsync of the rows from the same mapping (CUDA 12.8+), and a cudaMemcpyAsync
// per row. Build and run (GPU machine):
//   nvcc -O3 -arch=sm_90 -o /tmp/gather_probe benches/gather_kernel_probe.cu && /tmp/gather_probe FILE
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "../crates/gpufile/kernels/gather.cu"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::printf("%s: %s\n", #x, cudaGetErrorString(e)); std::exit(1); } } while (0)

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  if (argc < 2) { std::printf("usage: %s FILE\n", argv[0]); return 2; }
  int fd = open(argv[1], O_RDONLY);
  struct stat st; fstat(fd, &st);
  size_t size = st.st_size;
  unsigned char* map = (unsigned char*)mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  double t0 = now();
  CK(cudaHostRegister(map, size, cudaHostRegisterReadOnly | cudaHostRegisterPortable));
  std::printf("register %.1f GiB: %.3f s\n", size / double(1 << 30), now() - t0);
  int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t stream; CK(cudaStreamCreate(&stream));
  for (size_t row : {size_t(4096), size_t(65536), size_t(1 << 20)}) {
    size_t n = std::min<size_t>(100000, (size / row) / 2);
    std::mt19937_64 rng(7);
    std::vector<Piece> pieces(n);
    unsigned char* dev; CK(cudaMalloc(&dev, n * row));
    for (size_t i = 0; i < n; i++) {
      pieces[i] = {(uint64_t)(map + (rng() % (size / row)) * row), (uint64_t)(dev + i * row), row};
    }
    Piece* hp; CK(cudaMallocHost(&hp, n * sizeof(Piece)));
    std::memcpy(hp, pieces.data(), n * sizeof(Piece));
    std::vector<unsigned char> host(n * row);
    auto verify = [&](const char* what) {
      CK(cudaMemset(dev, 0, 0));
      CK(cudaMemcpy(host.data(), dev, n * row, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < n; i++)
        if (std::memcmp(host.data() + i * row, (void*)pieces[i].src, row) != 0) {
          std::printf("%s: row %zu differs\n", what, i); std::exit(1);
        }
    };
    for (int grid_per_sm : {4, 16, 64}) {
      std::vector<double> ts;
      for (int rep = 0; rep < 5; rep++) {
        CK(cudaMemset(dev, 0, n * row)); CK(cudaDeviceSynchronize());
        double a = now();
        unsigned grid = (unsigned)std::min<size_t>(n, size_t(sms) * grid_per_sm);
        gpufile_gather<<<grid, 256, 0, stream>>>(hp, (uint32_t)n);
        CK(cudaStreamSynchronize(stream));
        ts.push_back(now() - a);
        if (rep == 0) verify("kernel");
      }
      std::sort(ts.begin(), ts.end());
      std::printf("row %7zu n %6zu kernel grid %2d/SM: %.2f M rows/s, %.1f GB/s\n", row, n,
                  grid_per_sm, n / ts[2] / 1e6, n * row / ts[2] / 1e9);
    }
#if CUDART_VERSION >= 12080
    {
      std::vector<void*> d(n), s(n); std::vector<size_t> sz(n, row);
      for (size_t i = 0; i < n; i++) { d[i] = (void*)pieces[i].dst; s[i] = (void*)pieces[i].src; }
      cudaMemcpyAttributes attr; std::memset(&attr, 0, sizeof attr);
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      size_t idx = 0;
      std::vector<double> ts;
      for (int rep = 0; rep < 5; rep++) {
        CK(cudaMemset(dev, 0, n * row)); CK(cudaDeviceSynchronize());
        double a = now();
#if CUDART_VERSION >= 13000
        CK(cudaMemcpyBatchAsync((const void**)d.data(), (const void**)s.data(), sz.data(), n, &attr, &idx, 1, stream));
#else
        size_t fail = 0;
        CK(cudaMemcpyBatchAsync(d.data(), s.data(), sz.data(), n, &attr, &idx, 1, &fail, stream));
#endif
        CK(cudaStreamSynchronize(stream));
        ts.push_back(now() - a);
        if (rep == 0) verify("batch");
      }
      std::sort(ts.begin(), ts.end());
      std::printf("row %7zu n %6zu cudaMemcpyBatchAsync: %.2f M rows/s, %.1f GB/s\n", row, n,
                  n / ts[2] / 1e6, n * row / ts[2] / 1e9);
    }
#endif
    {
      std::vector<double> ts;
      for (int rep = 0; rep < 3; rep++) {
        double a = now();
        for (size_t i = 0; i < n; i++)
          CK(cudaMemcpyAsync((void*)pieces[i].dst, (void*)pieces[i].src, row, cudaMemcpyHostToDevice, stream));
        CK(cudaStreamSynchronize(stream));
        ts.push_back(now() - a);
      }
      std::sort(ts.begin(), ts.end());
      std::printf("row %7zu n %6zu cudaMemcpyAsync per row: %.2f M rows/s, %.1f GB/s\n", row, n,
                  n / ts[1] / 1e6, n * row / ts[1] / 1e9);
    }
    CK(cudaFree(dev)); CK(cudaFreeHost(hp));
  }
  return 0;
}
