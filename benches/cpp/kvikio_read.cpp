// A hot file read into cudaMalloc memory through KvikIO's C++ API (kvikio::FileHandle::pread),
// at several thread counts, data verified. The same source builds against KvikIO's headers and
// library, and against gpufile's kvikio headers and libgpufile (run_kvikio_vs_gpufile.sh):
//
//   kvikio_read --file PATH [--size 4GiB] [--threads 1,4,16] [--runs 5] [--json out.json]
//
// The file is written (a pattern of its offsets) where it is missing or of another size, read
// once through the page cache so that it is hot, then per thread count: one warm-up read and
// --runs timed reads of the whole file (median GB/s, 1 GB = 1e9 bytes). After each thread
// count the device buffer is copied back and compared with the pattern.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <kvikio/defaults.hpp>
#include <kvikio/file_handle.hpp>

#ifndef BENCH_IMPL
#define BENCH_IMPL "unknown"
#endif

namespace {

void check_cuda(cudaError_t e, char const* what)
{
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

/** The 8-byte word at `offset` (a multiple of 8): its offset, mixed. */
inline std::uint64_t word(std::uint64_t offset) { return (offset * 0x9E3779B97F4A7C15ull) ^ 0x5bd1e995; }

void fill(std::vector<std::uint64_t>& chunk, std::uint64_t offset)
{
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    chunk[i] = word(offset + i * 8);
  }
}

std::size_t parse_size(std::string s)
{
  double mult = 1;
  auto ends   = [&](char const* suf) {
    auto n = std::strlen(suf);
    if (s.size() > n && s.compare(s.size() - n, n, suf) == 0) {
      s.resize(s.size() - n);
      return true;
    }
    return false;
  };
  if (ends("GiB")) { mult = 1ull << 30; }
  else if (ends("MiB")) { mult = 1ull << 20; }
  else if (ends("KiB")) { mult = 1ull << 10; }
  return static_cast<std::size_t>(std::stod(s) * mult);
}

constexpr std::size_t kChunk = 64ull << 20;

void ensure_file(std::string const& path, std::size_t size)
{
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && static_cast<std::size_t>(st.st_size) == size) { return; }
  std::fprintf(stderr, "writing %s (%zu bytes)\n", path.c_str(), size);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) { std::perror("open"); std::exit(1); }
  std::vector<std::uint64_t> chunk(kChunk / 8);
  for (std::size_t off = 0; off < size; off += kChunk) {
    fill(chunk, off);
    auto n = std::min(kChunk, size - off);
    if (pwrite(fd, chunk.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
      std::perror("pwrite");
      std::exit(1);
    }
  }
  fsync(fd);
  close(fd);
}

void warm(std::string const& path, std::size_t size)
{
  int fd = open(path.c_str(), O_RDONLY);
  std::vector<char> buf(kChunk);
  for (std::size_t off = 0; off < size; off += kChunk) {
    if (pread(fd, buf.data(), std::min(kChunk, size - off), static_cast<off_t>(off)) < 0) {
      std::perror("pread");
      std::exit(1);
    }
  }
  close(fd);
}

bool verify(void const* dev, std::size_t size)
{
  std::vector<std::uint64_t> want(kChunk / 8), got(kChunk / 8);
  for (std::size_t off = 0; off < size; off += kChunk) {
    auto n = std::min(kChunk, size - off);
    check_cuda(cudaMemcpy(got.data(), static_cast<char const*>(dev) + off, n, cudaMemcpyDeviceToHost),
               "cudaMemcpy");
    fill(want, off);
    if (std::memcmp(got.data(), want.data(), n) != 0) {
      std::fprintf(stderr, "data differ in the chunk at offset %zu\n", off);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv)
{
  std::string path = "/tmp/gpufile-bench-cpp.bin", json;
  std::size_t size = 4ull << 30;
  std::vector<unsigned> threads{1, 4, 16};
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--file") { path = v; }
    else if (a == "--size") { size = parse_size(v); }
    else if (a == "--runs") { runs = std::stoi(v); }
    else if (a == "--json") { json = v; }
    else if (a == "--threads") {
      threads.clear();
      std::stringstream ss(v);
      std::string t;
      while (std::getline(ss, t, ',')) { threads.push_back(static_cast<unsigned>(std::stoul(t))); }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  size -= size % 8;
  ensure_file(path, size);
  warm(path, size);
  void* dev = nullptr;
  check_cuda(cudaMalloc(&dev, size), "cudaMalloc");

  std::ostringstream out;
  out << "{\"impl\": \"" << BENCH_IMPL << "\", \"file\": \"" << path << "\", \"size\": " << size
      << ", \"runs\": " << runs << ", \"task_size\": " << kvikio::defaults::task_size()
      << ", \"results\": [";
  std::vector<std::pair<unsigned, double>> table;
  bool all_ok = true;
  for (std::size_t k = 0; k < threads.size(); ++k) {
    kvikio::defaults::set_thread_pool_nthreads(threads[k]);
    kvikio::FileHandle f(path, "r");
    check_cuda(cudaMemset(dev, 0, size), "cudaMemset");
    f.pread(dev, size).get();  // warm-up (and the cuFile/bounce setup)
    bool const ok = verify(dev, size);
    all_ok        = all_ok && ok;
    std::vector<double> gbps;
    for (int r = 0; r < runs; ++r) {
      auto t0        = std::chrono::steady_clock::now();
      std::size_t n  = f.pread(dev, size).get();
      auto t1        = std::chrono::steady_clock::now();
      double const s = std::chrono::duration<double>(t1 - t0).count();
      if (n != size) {
        std::fprintf(stderr, "read %zu of %zu bytes\n", n, size);
        return 1;
      }
      gbps.push_back(static_cast<double>(size) / s / 1e9);
    }
    auto sorted = gbps;
    std::sort(sorted.begin(), sorted.end());
    double const median = sorted[sorted.size() / 2];
    table.emplace_back(threads[k], median);
    out << (k ? ", " : "") << "{\"threads\": " << threads[k] << ", \"median_gb_per_s\": " << median
        << ", \"verified\": " << (ok ? "true" : "false") << ", \"gb_per_s\": [";
    for (std::size_t r = 0; r < gbps.size(); ++r) { out << (r ? ", " : "") << gbps[r]; }
    out << "]}";
  }
  out << "], \"verified\": " << (all_ok ? "true" : "false") << "}";
  cudaFree(dev);
  if (!json.empty()) { std::ofstream(json) << out.str() << "\n"; }
  std::printf("%s\n", out.str().c_str());
  std::printf("\n%-8s %8s %14s\n", "impl", "threads", "median GB/s");
  for (auto const& [t, g] : table) { std::printf("%-8s %8u %14.2f\n", BENCH_IMPL, t, g); }
  std::printf("data verified: %s\n", all_ok ? "yes" : "NO");
  return all_ok ? 0 : 1;
}
