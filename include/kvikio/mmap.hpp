/*
 * KvikIO's MmapHandle, served by gpufile (the core's read-only mapping, read through its
 * engine into host or device memory).
 */
#pragma once

#include <sys/mman.h>
#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <future>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include <gpufile/gpufile.hpp>
#include <kvikio/defaults.hpp>
#include <kvikio/detail/in_monitor.hpp>
#include <kvikio/error.hpp>
#include <kvikio/file_handle.hpp>
#include <kvikio/threadpool_wrapper.hpp>

namespace kvikio {

/** A file region mapped read-only. */
class MmapHandle {
 public:
  MmapHandle() noexcept = default;
  MmapHandle(std::string const& file_path,
             std::string const& flags                    = "r",
             std::optional<std::size_t> initial_map_size = std::nullopt,
             std::size_t initial_map_offset              = 0,
             mode_t mode                                 = FileHandle::m644,
             std::optional<int> map_flags                = std::nullopt)
  {
    if (map_flags) { check_mapping_type(*map_flags); }
    _m = detail::as_kvikio([&] {
      return gpufile::Mmap(file_path,
                           flags,
                           initial_map_size ? std::optional<std::uint64_t>(*initial_map_size)
                                            : std::nullopt,
                           initial_map_offset,
                           static_cast<std::uint32_t>(mode),
                           map_flags.value_or(0));
    });
  }
  MmapHandle(MmapHandle const&)            = delete;
  MmapHandle& operator=(MmapHandle const&) = delete;
  MmapHandle(MmapHandle&& o) noexcept      = default;
  MmapHandle& operator=(MmapHandle&& o) noexcept = default;
  ~MmapHandle() noexcept                         = default;

  /** Bytes mapped (0 once closed). */
  [[nodiscard]] std::size_t initial_map_size() const noexcept
  {
    return closed() ? 0 : noexcept_info([&] { return _m.initial_map_size(); });
  }
  /** File offset of the mapped region (0 once closed). */
  [[nodiscard]] std::size_t initial_map_offset() const noexcept
  {
    return closed() ? 0 : noexcept_info([&] { return _m.initial_map_offset(); });
  }
  /** The file's size now (0 once closed). */
  [[nodiscard]] std::size_t file_size() const
  {
    return closed() ? 0 : detail::as_kvikio([&] { return _m.file_size(); });
  }
  [[nodiscard]] std::size_t nbytes() const { return file_size(); }
  [[nodiscard]] bool closed() const noexcept { return _m.closed(); }
  void close() noexcept { _m.close(); }

  /** Reads `size` bytes (nullopt: to the end of the file) at `offset` into `buf`; blocks. */
  std::size_t read(void* buf, std::optional<std::size_t> size = std::nullopt, std::size_t offset = 0)
  {
    return pread(buf, size, offset).get();
  }

  gpufile::Future pread(void* buf,
                                 std::optional<std::size_t> size = std::nullopt,
                                 std::size_t offset              = 0,
                                 std::size_t task_size           = defaults::task_size(),
                                 ThreadPool* /*thread_pool*/     = &defaults::thread_pool())
  {
    KVIKIO_EXPECT(!closed(), "Cannot read from a closed MmapHandle", std::runtime_error);
    detail::expect_not_in_monitor("read");
    // KvikIO's MmapHandle takes no buffer size: the read's own length bounds it.
    return detail::as_kvikio(
      [&] { return _m.pread(buf, static_cast<std::size_t>(-1), size, offset, task_size); });
  }

 private:
  /**
   * KvikIO hands `map_flags` to mmap(2), which refuses flags without a mapping type with EINVAL:
   * the same GenericSystemError here, before the file opens. Flags gpufile itself refuses
   * (MAP_FIXED, MAP_FIXED_NOREPLACE, MAP_ANONYMOUS) are std::invalid_argument, from the core.
   */
  static void check_mapping_type(int map_flags)
  {
    int const type = map_flags & MAP_TYPE;
    bool const known = type == MAP_SHARED || type == MAP_PRIVATE
#ifdef MAP_SHARED_VALIDATE
                       || type == MAP_SHARED_VALIDATE
#endif
      ;
    if (known) { return; }
    std::ostringstream msg;
    msg << "map_flags 0x" << std::hex << static_cast<unsigned>(map_flags)
        << " have no mapping type (MAP_SHARED, MAP_PRIVATE or MAP_SHARED_VALIDATE), which "
           "mmap(2) refuses";
    throw GenericSystemError(EINVAL, msg.str());
  }

  template <typename F>
  static std::size_t noexcept_info(F&& f) noexcept
  {
    try {
      return static_cast<std::size_t>(f());
    } catch (...) {
      return 0;
    }
  }
  gpufile::Mmap _m;
};

}  // namespace kvikio
