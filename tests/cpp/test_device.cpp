// The C++ API (gpufile.hpp) and KvikIO's C++ names (kvikio/*.hpp) with device memory: reads into
// and writes from cuMemAlloc memory on gpufile's POSIX path and at the defaults, the path report
// for device memory, KvikIO's stream-ordered calls, and a size past the allocation refused with
// the memory untouched. The driver is loaded at run time (libcuda.so.1), so this builds
// everywhere; without a driver or a device every test skips with the reason.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpufile/gpufile.hpp"
#include "kvikio/file_handle.hpp"
#include "kvikio/utils.hpp"
#include "support.hpp"

namespace {

/** The few driver calls these tests make, or why there are none. */
class Driver {
 public:
  using Result = int;
  using DevPtr = unsigned long long;

  static Driver& get()
  {
    static Driver d;
    return d;
  }
  /** Empty when a device is usable; else why not (the skip reason). */
  [[nodiscard]] std::string const& unusable() const { return why_; }

  [[nodiscard]] DevPtr alloc(std::size_t n) const
  {
    DevPtr p = 0;
    check(mem_alloc_(&p, n), "cuMemAlloc");
    return p;
  }
  void free(DevPtr p) const { mem_free_(p); }
  void fill(DevPtr p, unsigned char v, std::size_t n) const
  {
    check(memset_(p, v, n), "cuMemsetD8");
  }
  [[nodiscard]] std::vector<unsigned char> to_host(DevPtr p, std::size_t n) const
  {
    std::vector<unsigned char> v(n);
    check(dtoh_(v.data(), p, n), "cuMemcpyDtoH");
    return v;
  }
  void from_host(DevPtr p, std::vector<unsigned char> const& v) const
  {
    check(htod_(p, v.data(), v.size()), "cuMemcpyHtoD");
  }

 private:
  Driver()
  {
    lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      why_ = std::string("no CUDA driver: ") + dlerror();
      return;
    }
    auto sym = [&](char const* name) {
      void* f = dlsym(lib_, name);
      if (f == nullptr && why_.empty()) { why_ = std::string("the driver lacks ") + name; }
      return f;
    };
    auto init      = reinterpret_cast<Result (*)(unsigned)>(sym("cuInit"));
    auto count     = reinterpret_cast<Result (*)(int*)>(sym("cuDeviceGetCount"));
    auto device    = reinterpret_cast<Result (*)(int*, int)>(sym("cuDeviceGet"));
    auto retain    = reinterpret_cast<Result (*)(void**, int)>(sym("cuDevicePrimaryCtxRetain"));
    auto set       = reinterpret_cast<Result (*)(void*)>(sym("cuCtxSetCurrent"));
    mem_alloc_     = reinterpret_cast<Result (*)(DevPtr*, std::size_t)>(sym("cuMemAlloc_v2"));
    mem_free_      = reinterpret_cast<Result (*)(DevPtr)>(sym("cuMemFree_v2"));
    memset_        = reinterpret_cast<Result (*)(DevPtr, unsigned char, std::size_t)>(
      sym("cuMemsetD8_v2"));
    dtoh_ = reinterpret_cast<Result (*)(void*, DevPtr, std::size_t)>(sym("cuMemcpyDtoH_v2"));
    htod_ = reinterpret_cast<Result (*)(DevPtr, void const*, std::size_t)>(sym("cuMemcpyHtoD_v2"));
    if (!why_.empty()) { return; }
    int n = 0, dev = 0;
    void* ctx = nullptr;
    if (init(0) != 0 || count(&n) != 0) {
      why_ = "cuInit failed (no usable driver)";
    } else if (n == 0) {
      why_ = "no CUDA device";
    } else if (device(&dev, 0) != 0 || retain(&ctx, dev) != 0 || set(ctx) != 0) {
      why_ = "device 0's primary context could not be made current";
    }
  }
  static void check(Result r, char const* what)
  {
    if (r != 0) { throw std::runtime_error(std::string(what) + " failed: " + std::to_string(r)); }
  }

  void* lib_{nullptr};
  std::string why_;
  Result (*mem_alloc_)(DevPtr*, std::size_t){nullptr};
  Result (*mem_free_)(DevPtr){nullptr};
  Result (*memset_)(DevPtr, unsigned char, std::size_t){nullptr};
  Result (*dtoh_)(void*, DevPtr, std::size_t){nullptr};
  Result (*htod_)(DevPtr, void const*, std::size_t){nullptr};
};

/** Device memory of `n` bytes, freed at scope exit. */
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n), p_(Driver::get().alloc(n)) {}
  ~DeviceBuffer() { Driver::get().free(p_); }
  DeviceBuffer(DeviceBuffer const&)            = delete;
  DeviceBuffer& operator=(DeviceBuffer const&) = delete;
  [[nodiscard]] void* ptr(std::size_t at = 0) const
  {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p_ + at));
  }
  [[nodiscard]] std::vector<unsigned char> bytes() const { return Driver::get().to_host(p_, n_); }
  void fill(unsigned char v) const { Driver::get().fill(p_, v, n_); }
  void set(std::vector<unsigned char> const& v) const { Driver::get().from_host(p_, v); }

 private:
  std::size_t n_;
  Driver::DevPtr p_;
};

class Device : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override
  {
    if (!Driver::get().unusable().empty()) { GTEST_SKIP() << Driver::get().unusable(); }
    data = support::pattern(3 << 20);
    path = dir.file("data.bin");
    support::write_file(path, data);
  }
  support::TempDir dir;
  std::vector<unsigned char> data;
  std::string path;
};

}  // namespace

// Each test runs on gpufile's POSIX path ("on") and at the defaults ("auto": cuFile where it
// can, its own compat path or gpufile's where not).
INSTANTIATE_TEST_SUITE_P(CompatMode, Device, ::testing::Values("on", "auto"));

TEST_P(Device, file_reads_into_and_writes_from_device_memory)
{
  gpufile::ScopedSettings s{{"compat_mode", GetParam()}};
  DeviceBuffer dev(data.size());
  gpufile::File f(path, "r");
  EXPECT_EQ(f.read(dev.ptr(), data.size(), 0), data.size());
  EXPECT_EQ(dev.bytes(), data);

  dev.fill(0);
  std::size_t const half = data.size() / 2;
  EXPECT_EQ(f.pread(dev.ptr(half), half, 5).get(), half);
  auto got = dev.bytes();
  EXPECT_TRUE(std::all_of(got.begin(), got.begin() + half, [](unsigned char b) { return b == 0; }));
  EXPECT_TRUE(std::equal(got.begin() + half, got.end(), data.begin() + 5));

  auto const io = f.io_path(gpufile::Memory::Device, data.size());
  if (std::string(GetParam()) == "on") { EXPECT_EQ(io.backend_name(), "gpufile-posix"); }
  EXPECT_FALSE(io.reason.empty());

  auto const out = dir.file("out.bin");
  {
    gpufile::File w(out, "w");
    dev.set(data);
    EXPECT_EQ(w.pwrite(dev.ptr(), data.size(), 0).get(), data.size());
  }
  EXPECT_EQ(support::read_file(out), data);
}

TEST_P(Device, a_size_past_the_allocation_is_refused_and_the_memory_left_alone)
{
  gpufile::ScopedSettings s{{"compat_mode", GetParam()}};
  DeviceBuffer dev(data.size());
  dev.fill(0);
  gpufile::File f(path, "r");
  EXPECT_THROW((void)f.read(dev.ptr(1), data.size(), 0), gpufile::BadArgumentError);
  auto const got = dev.bytes();
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](unsigned char b) { return b == 0; }));
}

TEST_P(Device, kvikio_file_handle_with_device_memory_and_stream_ordered_calls)
{
  auto const mode = std::string(GetParam()) == "on" ? kvikio::CompatMode::ON
                                                    : kvikio::CompatMode::AUTO;
  DeviceBuffer dev(data.size());
  kvikio::FileHandle f(path, "r", kvikio::FileHandle::m644, mode);
  EXPECT_EQ(f.pread(dev.ptr(), data.size()).get(), data.size());
  EXPECT_EQ(dev.bytes(), data);
  EXPECT_FALSE(kvikio::is_host_memory(dev.ptr()));

  dev.fill(0);
  auto fut = f.read_async(dev.ptr(), 4096, 8192, 0, nullptr);
  EXPECT_EQ(fut.check_bytes_done(), 4096u);
  auto const got = dev.bytes();
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 4096, data.begin() + 8192));

  auto const out = dir.file("k.bin");
  {
    kvikio::FileHandle w(out, "w", kvikio::FileHandle::m644, mode);
    dev.set(data);
    EXPECT_EQ(w.pwrite(dev.ptr(), data.size()).get(), data.size());
    auto wf = w.write_async(dev.ptr(), 4096, data.size(), 0, nullptr);
    EXPECT_EQ(wf.check_bytes_done(), 4096u);
  }
  auto const file = support::read_file(out);
  ASSERT_EQ(file.size(), data.size() + 4096);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), file.begin()));
  EXPECT_TRUE(std::equal(data.begin(), data.begin() + 4096, file.begin() + data.size()));
}

TEST_P(Device, load_checkpoint_fills_device_buffers_back_to_back_in_one_allocation)
{
  gpufile::ScopedSettings s{{"compat_mode", GetParam()}};
  // Three tensors of one file, loaded into one device allocation: t1 and t2 back to back
  // (adjacent in the file too: one request), t0 after them.
  std::vector<std::vector<unsigned char>> bytes;
  std::vector<gpufile::TensorView> tensors;
  for (int i = 0; i < 3; ++i) {
    auto b = support::pattern(4000);
    for (auto& c : b) { c = static_cast<unsigned char>(c + 5 * i); }
    bytes.push_back(std::move(b));
  }
  for (int i = 0; i < 3; ++i) {
    tensors.push_back(
      {"t" + std::to_string(i), "U8", {4000}, bytes[i].data(), bytes[i].size()});
  }
  auto const file = dir.file("model.safetensors");
  gpufile::save_file(file, tensors);
  DeviceBuffer dev(12000);
  dev.fill(0);
  gpufile::load_checkpoint(file, {{"t1", dev.ptr(0), 4000},
                                  {"t2", dev.ptr(4000), 4000},
                                  {"t0", dev.ptr(8000), 4000}});
  auto const got = dev.bytes();
  EXPECT_TRUE(std::equal(bytes[1].begin(), bytes[1].end(), got.begin()));
  EXPECT_TRUE(std::equal(bytes[2].begin(), bytes[2].end(), got.begin() + 4000));
  EXPECT_TRUE(std::equal(bytes[0].begin(), bytes[0].end(), got.begin() + 8000));
}
