// Many small reads of one file into one host buffer through KvikIO's C++ batch API
// (kvikio::BatchHandle: submit, then status until every event is back), data verified:
//
//   kvikio_batch --file PATH [--ops 4096] [--op-size 4096] [--runs 7]
//
// The file (ops * op-size bytes, each 8-byte word its offset mixed) is written where it is
// missing or of another size, and read once so that it is hot. Each run submits the ops (op i
// reads the file's i-th op-size piece into the buffer at a scattered place: piece i lands at
// (i * 7919 mod ops)), waits for every event, then checks every byte; the median of the runs'
// times is printed, with the ops per second. Built against gpufile's kvikio headers and
// libgpufile (no CUDA needed).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <kvikio/batch.hpp>
#include <kvikio/file_handle.hpp>

namespace {

inline std::uint64_t word(std::uint64_t offset)
{
  return (offset * 0x9E3779B97F4A7C15ull) ^ 0x5bd1e995;
}

std::vector<std::uint64_t> contents(std::size_t bytes)
{
  std::vector<std::uint64_t> v(bytes / 8);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = word(i * 8);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv)
{
  std::string path;
  std::size_t ops = 4096, op_size = 4096;
  int runs = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const a = argv[i];
    if (a == "--file") {
      path = argv[i + 1];
    } else if (a == "--ops") {
      ops = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--op-size") {
      op_size = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--runs") {
      runs = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (path.empty() || op_size % 8 != 0 || ops == 0 || runs < 1) {
    std::fprintf(stderr,
                 "usage: %s --file PATH [--ops N] [--op-size B (multiple of 8)] [--runs R]\n",
                 argv[0]);
    return 2;
  }
  auto const bytes = ops * op_size;
  auto const want  = contents(bytes);
  {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in || static_cast<std::size_t>(in.tellg()) != bytes) {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<char const*>(want.data()), static_cast<std::streamsize>(bytes));
    }
  }
  kvikio::FileHandle f(path, "r");
  std::vector<unsigned char> buf(bytes);
  f.read(buf.data(), bytes, 0, 0);  // hot in the page cache
  auto const place = [&](std::size_t i) { return (i * 7919) % ops * op_size; };
  std::vector<kvikio::BatchOp> batch_ops;
  for (std::size_t i = 0; i < ops; ++i) {
    batch_ops.push_back({f,
                         buf.data(),
                         static_cast<off_t>(i * op_size),
                         static_cast<off_t>(place(i)),
                         op_size,
                         CUFILE_READ});
  }
  kvikio::BatchHandle batch(static_cast<int>(ops));
  std::vector<double> seconds;
  for (int r = 0; r < runs; ++r) {
    std::fill(buf.begin(), buf.end(), 0);
    auto const t0 = std::chrono::steady_clock::now();
    batch.submit(batch_ops);
    std::size_t seen = 0;
    while (seen < ops) {
      auto const events =
        batch.status(static_cast<unsigned>(ops - seen), static_cast<unsigned>(ops));
      for (auto const& e : events) {
        if (e.status != CUFILE_COMPLETE || e.ret != op_size) {
          std::fprintf(stderr, "run %d: an operation failed\n", r);
          return 1;
        }
      }
      seen += events.size();
    }
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    auto const* got = reinterpret_cast<unsigned char const*>(want.data());
    for (std::size_t i = 0; i < ops; ++i) {
      if (std::memcmp(buf.data() + place(i), got + i * op_size, op_size) != 0) {
        std::fprintf(stderr, "run %d: operation %zu read the wrong bytes\n", r, i);
        return 1;
      }
    }
  }
  std::sort(seconds.begin(), seconds.end());
  auto const median = seconds[seconds.size() / 2];
  std::printf("%zu ops of %zu bytes: median %.3f ms over %d runs (min %.3f, max %.3f), %.0f ops/s, "
              "data verified\n",
              ops,
              op_size,
              median * 1e3,
              runs,
              seconds.front() * 1e3,
              seconds.back() * 1e3,
              static_cast<double>(ops) / median);
  return 0;
}
