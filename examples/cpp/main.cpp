// Writes 1 MiB to the file named by its argument with KvikIO's FileHandle, reads it back with
// gpufile's own File, and prints the path report of the read.
#include <cstdio>
#include <numeric>
#include <vector>

#include <gpufile/gpufile.hpp>
#include <kvikio/file_handle.hpp>

int main(int argc, char** argv)
{
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <file>\n", argv[0]);
    return 2;
  }
  std::vector<unsigned char> out(1 << 20);
  std::iota(out.begin(), out.end(), static_cast<unsigned char>(0));
  try {
    {
      kvikio::FileHandle f(argv[1], "w");
      f.pwrite(out.data(), out.size()).get();
    }
    gpufile::File f(argv[1], "r");
    std::vector<unsigned char> in(out.size());
    std::size_t const n = f.pread(in.data(), in.size()).get();
    auto const path     = f.io_path(gpufile::Memory::Host, in.size());
    std::printf("read %zu bytes, %s; path: %s (%s)\n",
                n,
                in == out ? "same bytes" : "DIFFERENT bytes",
                path.backend_name().c_str(),
                path.reason.c_str());
    return in == out ? 0 : 1;
  } catch (gpufile::Error const& e) {
    std::fprintf(stderr, "gpufile error (status %d, errno %d): %s [%s]\n",
                 static_cast<int>(e.status()), e.errno_value(), e.what(), e.path().c_str());
  } catch (std::exception const& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
