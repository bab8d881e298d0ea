/*
 * KvikIO's file helpers, served by gpufile: descriptors, sizes, the page-cache helpers (the
 * core's, through the C API) and block-device information.
 */
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <fstream>
#include <string>
#include <utility>

#include <gpufile/gpufile.hpp>
#include <kvikio/error.hpp>
#include <kvikio/shim/cufile_h_wrapper.hpp>

namespace kvikio {

/** open(2) flags of KvikIO's "r", "w", "a" (each optionally with "+"), with O_DIRECT. */
inline int open_fd_parse_flags(std::string const& flags, bool o_direct)
{
  int file_flags = -1;
  KVIKIO_EXPECT(!flags.empty(), "Unknown file open flag", std::invalid_argument);
  switch (flags[0]) {
    case 'r':
      file_flags = O_RDONLY;
      if (flags.size() > 1 && flags[1] == '+') { file_flags = O_RDWR; }
      break;
    case 'w':
      file_flags = O_WRONLY;
      if (flags.size() > 1 && flags[1] == '+') { file_flags = O_RDWR; }
      file_flags |= O_CREAT | O_TRUNC;
      break;
    case 'a': KVIKIO_FAIL("Open flag 'a' isn't supported", std::invalid_argument);
    default: KVIKIO_FAIL("Unknown file open flag", std::invalid_argument);
  }
  file_flags |= O_CLOEXEC;
  if (o_direct) { file_flags |= O_DIRECT; }
  return file_flags;
}

/** Opens `file_path`; a GenericSystemError (with errno) where it cannot. */
inline int open_fd(std::string const& file_path,
                   std::string const& flags,
                   bool o_direct,
                   mode_t mode)
{
  int const fd = ::open(file_path.c_str(), open_fd_parse_flags(flags, o_direct), mode);
  if (fd == -1) { throw GenericSystemError("Unable to open file: " + file_path); }
  return fd;
}

/** fcntl(F_GETFL) of `fd`. */
[[nodiscard]] inline int open_flags(int fd)
{
  int const ret = fcntl(fd, F_GETFL);  // NOLINT(cppcoreguidelines-pro-type-vararg)
  if (ret == -1) { throw GenericSystemError("Unable to retrieve open flags"); }
  return ret;
}

[[nodiscard]] inline std::size_t get_file_size(int file_descriptor)
{
  struct stat st {};
  if (fstat(file_descriptor, &st) == -1) {
    throw GenericSystemError("Unable to query file size");
  }
  return static_cast<std::size_t>(st.st_size);
}

[[nodiscard]] inline std::size_t get_file_size(std::string const& file_path)
{
  struct stat st {};
  if (stat(file_path.c_str(), &st) == -1) {
    throw GenericSystemError("Unable to query file size: " + file_path);
  }
  return static_cast<std::size_t>(st.st_size);
}

/** An owned file descriptor, closed by the destructor. */
class FileWrapper {
 public:
  FileWrapper(std::string const& file_path, std::string const& flags, bool o_direct, mode_t mode)
  {
    open(file_path, flags, o_direct, mode);
  }
  FileWrapper() noexcept = default;
  ~FileWrapper() noexcept { close(); }
  FileWrapper(FileWrapper const&)            = delete;
  FileWrapper& operator=(FileWrapper const&) = delete;
  FileWrapper(FileWrapper&& other) noexcept : _fd(std::exchange(other._fd, -1)) {}
  FileWrapper& operator=(FileWrapper&& other) noexcept
  {
    if (this != &other) {
      close();
      _fd = std::exchange(other._fd, -1);
    }
    return *this;
  }
  void open(std::string const& file_path, std::string const& flags, bool o_direct, mode_t mode)
  {
    if (!opened()) { _fd = open_fd(file_path, flags, o_direct, mode); }
  }
  [[nodiscard]] bool opened() const noexcept { return _fd != -1; }
  void close() noexcept
  {
    if (opened()) { ::close(std::exchange(_fd, -1)); }
  }
  [[nodiscard]] int fd() const noexcept { return _fd; }

 private:
  int _fd{-1};
};

namespace detail {
/** Runs a page-cache call, an error being the GenericSystemError KvikIO throws. */
template <typename F>
void page_cache_call(F&& f)
{
  try {
    f();
  } catch (gpufile::Error const& e) {
    throw system_error_of(e, e.errno_value() != 0 ? e.errno_value() : EINVAL);
  }
}
}  // namespace detail

/** Of the pages of `length` bytes (0: to the end) at `offset`, (cached, total). */
inline std::pair<std::size_t, std::size_t> get_page_cache_info(int fd,
                                                               std::size_t offset = 0,
                                                               std::size_t length = 0)
{
  if (fd < 0) { throw GenericSystemError(EBADF, "get_page_cache_info: bad file descriptor"); }
  std::uint64_t cached = 0, total = 0;
  detail::page_cache_call([&] {
    gpufile::detail::check(gpufile_page_cache_info(fd, nullptr, offset, length, &cached, &total));
  });
  return {cached, total};
}

inline std::pair<std::size_t, std::size_t> get_page_cache_info(std::string const& file_path,
                                                               std::size_t offset = 0,
                                                               std::size_t length = 0)
{
  std::uint64_t cached = 0, total = 0;
  detail::page_cache_call([&] {
    gpufile::detail::check(
      gpufile_page_cache_info(-1, file_path.c_str(), offset, length, &cached, &total));
  });
  return {cached, total};
}

/** Evicts the pages of `length` bytes (0: to the end) at `offset` of `fd`. */
inline void drop_file_page_cache(int fd,
                                 std::size_t offset = 0,
                                 std::size_t length = 0,
                                 bool sync_first    = true)
{
  if (fd < 0) { throw GenericSystemError(EBADF, "drop_file_page_cache: bad file descriptor"); }
  detail::page_cache_call([&] {
    gpufile::detail::check(
      gpufile_drop_file_page_cache(fd, nullptr, offset, length, sync_first ? 1 : 0));
  });
}

inline void drop_file_page_cache(std::string const& file_path,
                                 std::size_t offset = 0,
                                 std::size_t length = 0,
                                 bool sync_first    = true)
{
  detail::page_cache_call([&] {
    gpufile::detail::check(
      gpufile_drop_file_page_cache(-1, file_path.c_str(), offset, length, sync_first ? 1 : 0));
  });
}

/** Drops the whole page cache (needs root); whether it did. */
inline bool drop_system_page_cache(bool reclaim_dentries_and_inodes = true, bool sync_first = true)
{
  int done = 0;
  gpufile::detail::check(gpufile_drop_system_page_cache(
    reclaim_dentries_and_inodes ? 1 : 0, sync_first ? 1 : 0, &done));
  return done != 0;
}

[[deprecated]] inline bool clear_page_cache(bool reclaim_dentries_and_inodes = true,
                                            bool clear_dirty_pages           = true)
{
  return drop_system_page_cache(reclaim_dentries_and_inodes, clear_dirty_pages);
}

/** The block device a file lives on. */
struct BlockDeviceInfo {
  dev_t id;
  unsigned major;
  unsigned minor;
  std::string name;
};

/** The block device `file_path` lives on (its name from /sys/dev/block, "" where unknown). */
inline BlockDeviceInfo get_block_device_info(std::string const& file_path)
{
  struct stat st {};
  if (stat(file_path.c_str(), &st) == -1) {
    throw GenericSystemError("Unable to stat " + file_path);
  }
  BlockDeviceInfo info{st.st_dev, major(st.st_dev), minor(st.st_dev), {}};
  std::ifstream uevent("/sys/dev/block/" + std::to_string(info.major) + ":" +
                       std::to_string(info.minor) + "/uevent");
  std::string line;
  while (std::getline(uevent, line)) {
    if (line.rfind("DEVNAME=", 0) == 0) { info.name = line.substr(8); }
  }
  return info;
}

}  // namespace kvikio
