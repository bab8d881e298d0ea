/*
 * KvikIO's FileHandle, served by gpufile: each call is one request of gpufile's engine
 * (gpufile.hpp over the C API), under the file's compat mode and the call's task size and
 * gds_threshold. The ThreadPool argument is accepted and the request runs on gpufile's pool.
 */
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <future>
#include <string>
#include <utility>

#include <gpufile/gpufile.hpp>
#include <kvikio/compat_mode.hpp>
#include <kvikio/defaults.hpp>
#include <kvikio/detail/in_monitor.hpp>
#include <kvikio/error.hpp>
#include <kvikio/file_utils.hpp>
#include <kvikio/shim/cufile_h_wrapper.hpp>
#include <kvikio/stream.hpp>
#include <kvikio/threadpool_wrapper.hpp>
#include <kvikio/utils.hpp>

namespace kvikio {

/** An open file read and written from host or device memory. */
class FileHandle {
 public:
  static constexpr mode_t m644 = S_IRUSR | S_IWUSR | S_IRGRP | S_IROTH;

  FileHandle() noexcept = default;
  /**
   * Opens `file_path` with KvikIO's `flags`. A file the open creates gets `mode` as KvikIO's
   * open(2) gives it: masked by the umask, set-id bits as the kernel keeps them; an existing
   * file's mode is left alone. Bits outside 07777 are std::invalid_argument, nothing opened.
   */
  FileHandle(std::string const& file_path,
             std::string const& flags = "r",
             mode_t mode              = m644,
             CompatMode compat_mode   = defaults::compat_mode())
    : _compat_mode(compat_mode), _file_path(file_path)
  {
    _file = detail::as_kvikio([&] {
      return gpufile::File(file_path, flags, static_cast<std::uint32_t>(mode));
    });
  }
  FileHandle(FileHandle const&)            = delete;
  FileHandle& operator=(FileHandle const&) = delete;
  FileHandle(FileHandle&& o) noexcept      = default;
  FileHandle& operator=(FileHandle&& o) noexcept = default;
  ~FileHandle() noexcept                         = default;

  [[nodiscard]] bool closed() const noexcept { return _file.closed(); }
  void close() noexcept { _file.close(); }

  /** gpufile registers files with cuFile itself and gives out no CUfileHandle_t. */
  [[nodiscard]] CUfileHandle_t handle()
  {
    throw CUfileException(
      "gpufile registers files with cuFile itself: FileHandle::handle() gives no CUfileHandle_t");
  }

  /** The descriptor (the O_DIRECT one with `o_direct`, -1 where there is none). */
  [[nodiscard]] int fd(bool o_direct = false) const noexcept
  {
    if (closed()) { return -1; }
    int out = -1;
    return gpufile_file_fd(_file.handle(), o_direct ? 1 : 0, &out) == GPUFILE_OK ? out : -1;
  }
  [[nodiscard]] int fd_open_flags(bool o_direct = false) const { return open_flags(fd(o_direct)); }

  /** The file's size now. */
  [[nodiscard]] std::size_t nbytes() const
  {
    if (closed()) { return 0; }
    return detail::as_kvikio([&] { return _file.nbytes(); });
  }

  /** Reads `size` bytes at `file_offset` into `devPtr_base + devPtr_offset`; blocks. */
  std::size_t read(void* devPtr_base,
                   std::size_t size,
                   std::size_t file_offset,
                   std::size_t devPtr_offset,
                   bool sync_default_stream = true)
  {
    auto* buf = static_cast<char*>(devPtr_base) + devPtr_offset;
    return blocking(false, buf, size, file_offset, sync_default_stream);
  }

  /** Writes `size` bytes of `devPtr_base + devPtr_offset` at `file_offset`; blocks. */
  std::size_t write(void const* devPtr_base,
                    std::size_t size,
                    std::size_t file_offset,
                    std::size_t devPtr_offset,
                    bool sync_default_stream = true)
  {
    auto* buf = static_cast<char const*>(devPtr_base) + devPtr_offset;
    return blocking(true, const_cast<char*>(buf), size, file_offset, sync_default_stream);
  }

  /** Starts reading `size` bytes at `file_offset` into `buf` (host or device memory). */
  gpufile::Future pread(void* buf,
                                 std::size_t size,
                                 std::size_t file_offset   = 0,
                                 std::size_t task_size     = defaults::task_size(),
                                 std::size_t gds_threshold = defaults::gds_threshold(),
                                 bool sync_default_stream  = true,
                                 ThreadPool* /*thread_pool*/ = &defaults::thread_pool())
  {
    detail::expect_not_in_monitor("read");
    // KvikIO refuses it before anything starts: no operation, so no observation.
    KVIKIO_EXPECT(task_size > 0, "`task_size` must be positive", std::invalid_argument);
    sync_if_device(buf, sync_default_stream);
    auto opts = options(task_size, gds_threshold);
    return detail::as_kvikio([&] { return _file.pread(buf, size, file_offset, opts); });
  }

  /** Starts writing `size` bytes of `buf` at `file_offset`. */
  gpufile::Future pwrite(void const* buf,
                                  std::size_t size,
                                  std::size_t file_offset   = 0,
                                  std::size_t task_size     = defaults::task_size(),
                                  std::size_t gds_threshold = defaults::gds_threshold(),
                                  bool sync_default_stream  = true,
                                  ThreadPool* /*thread_pool*/ = &defaults::thread_pool())
  {
    detail::expect_not_in_monitor("write");
    // KvikIO refuses it before anything starts: no operation, so no observation.
    KVIKIO_EXPECT(task_size > 0, "`task_size` must be positive", std::invalid_argument);
    sync_if_device(buf, sync_default_stream);
    auto opts = options(task_size, gds_threshold);
    return detail::as_kvikio([&] { return _file.pwrite(buf, size, file_offset, opts); });
  }

  /**
   * KvikIO's stream-ordered read with its arguments by reference, as its compat mode runs it:
   * `stream` is synchronized, then the read runs; `*bytes_read_p` is the bytes read, or a
   * negated errno where it failed.
   */
  void read_async(void* devPtr_base,
                  std::size_t* size_p,
                  off_t* file_offset_p,
                  off_t* devPtr_offset_p,
                  ssize_t* bytes_read_p,
                  CUstream stream)
  {
    stream_ordered(false, devPtr_base, size_p, file_offset_p, devPtr_offset_p, bytes_read_p, stream);
  }

  /**
   * KvikIO's stream-ordered read, queued on `stream` and returning at once (gpufile's
   * `gpufile_file_read_async`): the read starts after the work queued on the stream before
   * the call, the work queued after it sees the bytes; `check_bytes_done()` waits for it.
   */
  [[nodiscard]] StreamFuture read_async(void* devPtr_base,
                                        std::size_t size,
                                        off_t file_offset   = 0,
                                        off_t devPtr_offset = 0,
                                        CUstream stream     = nullptr)
  {
    return queued(false, devPtr_base, size, file_offset, devPtr_offset, stream);
  }

  void write_async(void* devPtr_base,
                   std::size_t* size_p,
                   off_t* file_offset_p,
                   off_t* devPtr_offset_p,
                   ssize_t* bytes_written_p,
                   CUstream stream)
  {
    stream_ordered(
      true, devPtr_base, size_p, file_offset_p, devPtr_offset_p, bytes_written_p, stream);
  }

  /**
   * KvikIO's stream-ordered write, queued on `stream` and returning at once: the stream copies
   * the source after the work queued before the call and goes on (the work queued after it may
   * change the source); `check_bytes_done()` waits for the file write.
   */
  [[nodiscard]] StreamFuture write_async(void* devPtr_base,
                                         std::size_t size,
                                         off_t file_offset   = 0,
                                         off_t devPtr_offset = 0,
                                         CUstream stream     = nullptr)
  {
    return queued(true, devPtr_base, size, file_offset, devPtr_offset, stream);
  }

  /** Whether device I/O on this file takes gpufile's POSIX path rather than cuFile. */
  [[nodiscard]] bool is_compat_mode_preferred() const noexcept
  {
    return defaults::is_compat_mode_preferred(_compat_mode);
  }

  /** Whether the file can be read with O_DIRECT. */
  [[nodiscard]] bool is_direct_io_supported() const noexcept
  {
    int yes = 0;
    return !closed() &&
           gpufile_file_is_direct_io_supported(_file.handle(), &yes) == GPUFILE_OK && yes != 0;
  }

  /**
   * Checks a `pwrite` (`write`) or `pread` of these arguments as starting it would, starting
   * nothing: throws what the call would throw (gpufile's addition; BatchHandle::submit checks
   * every operation before it starts one).
   */
  void check_request(bool write,
                     void const* buf,
                     std::size_t size,
                     std::size_t file_offset,
                     std::size_t task_size     = defaults::task_size(),
                     std::size_t gds_threshold = defaults::gds_threshold()) const
  {
    gpufile::Range range{file_offset, size, 0};
    auto const opts   = options(task_size, gds_threshold).c();
    auto const status = gpufile_file_check_request(
      _file.handle(), write ? 1 : 0, buf, size, &range, 1, &opts);
    detail::as_kvikio([&] { gpufile::detail::check(status); });
  }

  /** gpufile's File underneath (for its path report and many-range requests). */
  [[nodiscard]] gpufile::File const& gpufile_file() const noexcept { return _file; }

 private:
  friend class BatchHandle;  // submits through gpufile_batch_submit, by compat mode

  [[nodiscard]] gpufile::IoOptions options(std::size_t task_size, std::size_t gds_threshold) const
  {
    gpufile::IoOptions opts;
    opts.task_size     = task_size;
    opts.gds_threshold = static_cast<std::int64_t>(gds_threshold);
    opts.compat_mode   = static_cast<std::int32_t>(_compat_mode);
    return opts;
  }

  /** KvikIO waits for the default stream before device I/O (sync_default_stream). */
  static void sync_if_device(void const* buf, bool sync_default_stream)
  {
    if (sync_default_stream && buf != nullptr) {
      int kind = GPUFILE_MEMORY_HOST;
      if (gpufile_memory_kind(buf, &kind) == GPUFILE_OK && kind == GPUFILE_MEMORY_DEVICE) {
        detail::stream_synchronize(nullptr);
      }
    }
  }

  std::size_t blocking(
    bool write, void* buf, std::size_t size, std::size_t file_offset, bool sync_default_stream)
  {
    detail::expect_not_in_monitor(write ? "write" : "read");
    sync_if_device(buf, sync_default_stream);
    gpufile::Range range{file_offset, size, 0};
    auto opts               = options(0, defaults::gds_threshold()).c();
    gpufile_future* raw     = nullptr;
    auto const start_status = write ? gpufile_file_pwrite_ranges(
                                        _file.handle(), buf, size, &range, 1, &opts, &raw)
                                    : gpufile_file_pread_ranges(
                                        _file.handle(), buf, size, &range, 1, &opts, &raw);
    return detail::as_kvikio([&] {
      gpufile::detail::check(start_status);
      gpufile::detail::FutureHandle fut(raw);
      return fut.wait();
    });
  }

  StreamFuture queued(bool write,
                      void* devPtr_base,
                      std::size_t size,
                      off_t file_offset,
                      off_t devPtr_offset,
                      CUstream stream)
  {
    KVIKIO_EXPECT(file_offset >= 0 && devPtr_offset >= 0,
                  "file_offset and devPtr_offset must not be negative",
                  std::invalid_argument);
    detail::expect_not_in_monitor(write ? "write" : "read");
    void* buf           = static_cast<char*>(devPtr_base) + devPtr_offset;
    gpufile_future* raw = nullptr;
    auto const status   = write ? gpufile_file_write_async(_file.handle(),
                                                         buf,
                                                         size,
                                                         static_cast<std::uint64_t>(file_offset),
                                                         static_cast<void*>(stream),
                                                         &raw,
                                                         nullptr)
                                : gpufile_file_read_async(_file.handle(),
                                                        buf,
                                                        size,
                                                        static_cast<std::uint64_t>(file_offset),
                                                        static_cast<void*>(stream),
                                                        &raw,
                                                        nullptr);
    detail::as_kvikio([&] { gpufile::detail::check(status); });
    return StreamFuture(devPtr_base,
                        size,
                        file_offset,
                        devPtr_offset,
                        stream,
                        std::make_shared<gpufile::detail::FutureHandle>(raw));
  }

  void stream_ordered(bool write,
                      void* devPtr_base,
                      std::size_t* size_p,
                      off_t* file_offset_p,
                      off_t* devPtr_offset_p,
                      ssize_t* bytes_done_p,
                      CUstream stream)
  {
    detail::stream_synchronize(stream);
    try {
      auto const n = blocking(write,
                              static_cast<char*>(devPtr_base) + *devPtr_offset_p,
                              *size_p,
                              static_cast<std::size_t>(*file_offset_p),
                              false);
      *bytes_done_p = static_cast<ssize_t>(n);
    } catch (GenericSystemError const& e) {
      *bytes_done_p = -static_cast<ssize_t>(e.code().value());
    } catch (std::exception const&) {
      *bytes_done_p = -static_cast<ssize_t>(EIO);
    }
  }

  gpufile::File _file;
  CompatMode _compat_mode{CompatMode::AUTO};
  std::string _file_path;
};

}  // namespace kvikio
