/*
 * gpufile's C++ API: header-only, C++17, over the C API of gpufile.h (libgpufile).
 *
 *   gpufile::File f("data.bin", "r");
 *   gpufile::Future n = f.pread(buf, size, offset);   // host or device memory
 *   n.get();                                           // bytes, or throws
 *
 * Errors are exceptions that mirror Python's (gpufile::NotFoundError, EndOfFileError, ...), all
 * deriving from gpufile::Error (a std::runtime_error carrying the status, errno and path).
 * See docs/cpp.md.
 */
#ifndef GPUFILE_HPP
#define GPUFILE_HPP

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpufile/gpufile.h"

namespace gpufile {

/** A failed call: its status, errno, message and the file it is about (may be empty). */
class Error : public std::runtime_error {
 public:
  Error(gpufile_status status, int errno_value, const std::string& message, std::string path)
    : std::runtime_error(message), status_(status), errno_(errno_value), path_(std::move(path))
  {
  }
  /** The C API's status (GPUFILE_NOT_FOUND, ...). */
  [[nodiscard]] gpufile_status status() const noexcept { return status_; }
  /** The OS error number (2 for a missing file; EINVAL for bad arguments; 0 where none). */
  [[nodiscard]] int errno_value() const noexcept { return errno_; }
  /** The file the error is about, or "". */
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  gpufile_status status_;
  int errno_;
  std::string path_;
};

/** The file does not exist (Python's FileNotFoundError). */
class NotFoundError : public Error {
  using Error::Error;
};
/** The OS refused, or the handle is not open for the operation (PermissionError). */
class PermissionError : public Error {
  using Error::Error;
};
/** The path is a directory (IsADirectoryError). */
class IsADirectoryError : public Error {
  using Error::Error;
};
/** A read past the end of the file (gpufile.EndOfFileError). */
class EndOfFileError : public Error {
  using Error::Error;
};
/** A null pointer, bad size, flag, handle, setting name or value (ValueError). */
class BadArgumentError : public Error {
  using Error::Error;
};
/**
 * A range outside what an object covers: an Mmap region or offset past the end of the file, a
 * read outside the mapped region (Python's IndexError). A BadArgumentError too, so a handler of
 * bad arguments catches it.
 */
class OutOfRangeError : public BadArgumentError {
  using BadArgumentError::BadArgumentError;
};
/** The CUDA driver failed (gpufile.CudaError). */
class CudaError : public Error {
  using Error::Error;
};
/** cuFile failed or cannot be used where the settings require it (gpufile.CufileError). */
class CufileError : public Error {
  using Error::Error;
};
/** A wait gave up before the request ended (TimeoutError). */
class TimeoutError : public Error {
  using Error::Error;
};
/** A remote server or the network failed. */
class RemoteError : public Error {
  using Error::Error;
};

namespace detail {

/** Text a C call copies out with the (buf, len) -> needed convention. */
template <typename Call>
std::string copy_text(Call&& call, std::size_t first_size = 256)
{
  std::string text(first_size, '\0');
  std::size_t needed = call(text.data(), text.size());
  if (needed > text.size()) {
    text.assign(needed, '\0');
    needed = call(text.data(), text.size());
  }
  text.resize(needed > 0 ? needed - 1 : 0);
  return text;
}

/** The calling thread's last error as the exception of its type. */
[[noreturn]] inline void throw_last_error()
{
  auto const status = gpufile_last_error_type();
  auto const err    = gpufile_last_error_errno();
  auto message =
    copy_text([](char* b, std::size_t n) { return gpufile_last_error_message(b, n); });
  auto path = copy_text([](char* b, std::size_t n) { return gpufile_last_error_path(b, n); });
  switch (status) {
    case GPUFILE_NOT_FOUND: throw NotFoundError(status, err, message, path);
    case GPUFILE_PERMISSION: throw PermissionError(status, err, message, path);
    case GPUFILE_IS_A_DIRECTORY: throw IsADirectoryError(status, err, message, path);
    case GPUFILE_END_OF_FILE: throw EndOfFileError(status, err, message, path);
    case GPUFILE_BAD_ARGUMENT: throw BadArgumentError(status, err, message, path);
    case GPUFILE_OUT_OF_RANGE: throw OutOfRangeError(status, err, message, path);
    case GPUFILE_CUDA: throw CudaError(status, err, message, path);
    case GPUFILE_CUFILE: throw CufileError(status, err, message, path);
    case GPUFILE_TIMEOUT: throw TimeoutError(status, err, message, path);
    case GPUFILE_REMOTE: throw RemoteError(status, err, message, path);
    default: throw Error(status, err, message, path);
  }
}

/** Throws the last error unless `status` is GPUFILE_OK. */
inline void check(gpufile_status status)
{
  if (status != GPUFILE_OK) { throw_last_error(); }
}

/** Owns a gpufile_future: freeing waits for the request (its buffer is then unused). */
struct FutureHandle {
  gpufile_future* fut;
  explicit FutureHandle(gpufile_future* f) : fut(f) {}
  FutureHandle(FutureHandle const&)            = delete;
  FutureHandle& operator=(FutureHandle const&) = delete;
  ~FutureHandle() { gpufile_future_free(fut); }
  std::size_t wait() const
  {
    std::size_t n = 0;
    check(gpufile_future_wait(fut, &n));
    return n;
  }
};

/** A started request and the promise its completion settles. */
struct Pending {
  explicit Pending(gpufile_future* raw) : handle(raw) {}
  FutureHandle handle;
  std::promise<std::size_t> promise;
};

}  // namespace detail

/**
 * A std::future of a started request, settled by the request's completion (a callback of the
 * core on the thread that ends it: no thread per pending request). Its destructor waits for the
 * request, as the std::future of std::async does, so a buffer is never used after its future
 * is gone. Moved into a plain std::future (a container of them, say) it is KvikIO's future: that
 * one's destructor does not wait.
 */
class Future : public std::future<std::size_t> {
 public:
  Future() noexcept = default;
  /** `f`, whose destructor is to wait for it. */
  explicit Future(std::future<std::size_t>&& f) noexcept : std::future<std::size_t>(std::move(f))
  {
  }
  Future(Future&&) noexcept = default;
  Future& operator=(Future&& o) noexcept
  {
    if (this != &o) {
      finish();
      std::future<std::size_t>::operator=(std::move(o));
    }
    return *this;
  }
  Future(Future const&)            = delete;
  Future& operator=(Future const&) = delete;
  ~Future() { finish(); }

 private:
  /** The promise is settled once the request has ended: after this no worker uses the buffer. */
  void finish() noexcept
  {
    if (valid()) { wait(); }
  }
};

namespace detail {

/** The Future of a started request, settled by the core's completion callback. */
inline Future to_future(gpufile_future* raw)
{
  auto pending = std::make_shared<Pending>(raw);
  // The callback owns a reference until it has run (on a worker, or here where the request has
  // ended already); it must not throw into the C library.
  auto ctx = std::make_unique<std::shared_ptr<Pending>>(pending);
  void (*const on_done)(void*) = [](void* c) {
    std::unique_ptr<std::shared_ptr<Pending>> own(static_cast<std::shared_ptr<Pending>*>(c));
    auto& p = **own;
    try {
      p.promise.set_value(p.handle.wait());
    } catch (...) {
      try {
        p.promise.set_exception(std::current_exception());
      } catch (...) {
      }
    }
  };
  Future fut(pending->promise.get_future());
  if (gpufile_future_on_done(raw, on_done, ctx.get()) != GPUFILE_OK) {
    try {
      throw_last_error();
    } catch (...) {
      // No callback will settle it: settled here, so that `fut`'s destructor does not wait.
      pending->promise.set_exception(std::current_exception());
      throw;
    }
  }
  (void)ctx.release();  // the callback owns it now
  return fut;
}

}  // namespace detail

/** What moves a request's bytes. */
enum class Backend { Posix = GPUFILE_BACKEND_POSIX, Cufile = GPUFILE_BACKEND_CUFILE };

/** How the work queued on a stream after a stream-ordered transfer waits for it. */
enum class StreamOrder {
  WaitValue    = GPUFILE_STREAM_WAIT_VALUE,
  HostFunction = GPUFILE_STREAM_HOST_FUNCTION,
  Staged       = GPUFILE_STREAM_STAGED,
  CallerWaits  = GPUFILE_STREAM_CALLER_WAITS,
};

/** A transfer queued on a CUDA stream: its bytes (a future) and how the stream waits. */
struct StreamTransfer {
  Future bytes;
  StreamOrder order;
};

/** The kind of memory a path report is asked for. */
enum class Memory { Host = GPUFILE_MEMORY_HOST, Device = GPUFILE_MEMORY_DEVICE };

/** A path decision: the backend and why. */
struct IoPath {
  Backend backend;
  std::string reason;
  [[nodiscard]] std::string backend_name() const
  {
    return backend == Backend::Cufile ? "cufile" : "gpufile-posix";
  }
};

/** One range of a many-range request. */
using Range = gpufile_range;

/**
 * Per-request options: task size (0: the setting), gds_threshold (-1: the setting) and
 * compat_mode (OFF 0, ON 1, AUTO 2; -1: the setting).
 */
struct IoOptions {
  std::size_t task_size{0};
  std::int64_t gds_threshold{-1};
  std::int32_t compat_mode{-1};
  [[nodiscard]] gpufile_io_options c() const
  {
    return gpufile_io_options{task_size, gds_threshold, compat_mode};
  }
};

/** The kind of memory at `ptr` as requests see it (asked of the CUDA driver). */
inline bool is_device_memory(void const* ptr)
{
  int kind = 0;
  detail::check(gpufile_memory_kind(ptr, &kind));
  return kind == GPUFILE_MEMORY_DEVICE;
}

/** An open local file, closed by the destructor (requests still running keep it open). */
class File {
 public:
  File() noexcept = default;
  /** Opens `path` with KvikIO's flags ("r", "r+", "w", "w+"); a file it creates gets 0644. */
  File(std::string const& path, std::string const& flags = "r")
  {
    detail::check(gpufile_file_open(path.c_str(), flags.c_str(), &file_));
  }
  /**
   * As above, a file the open creates getting `mode` as open(2) gives it (the umask applies);
   * an existing file's mode is left alone. Bits outside 07777 are a BadArgumentError.
   */
  File(std::string const& path, std::string const& flags, std::uint32_t mode)
  {
    detail::check(gpufile_file_open_mode(path.c_str(), flags.c_str(), mode, &file_));
  }
  File(File const&)            = delete;
  File& operator=(File const&) = delete;
  File(File&& o) noexcept : file_(std::exchange(o.file_, nullptr)) {}
  File& operator=(File&& o) noexcept
  {
    if (this != &o) {
      close();
      file_ = std::exchange(o.file_, nullptr);
    }
    return *this;
  }
  ~File() noexcept { close(); }

  /** Closes the file (a closed file is left as it is). */
  void close() noexcept
  {
    if (file_ != nullptr) { gpufile_file_close(std::exchange(file_, nullptr)); }
  }
  [[nodiscard]] bool closed() const noexcept { return file_ == nullptr; }
  /** The C handle (NULL once closed). */
  [[nodiscard]] gpufile_file* handle() const noexcept { return file_; }
  /** The file's descriptor (the O_DIRECT one with `o_direct`; -1 where there is none). */
  [[nodiscard]] int fd(bool o_direct = false) const
  {
    int fd = -1;
    detail::check(gpufile_file_fd(file_, o_direct ? 1 : 0, &fd));
    return fd;
  }

  /** The file's size now. */
  [[nodiscard]] std::uint64_t nbytes() const
  {
    std::uint64_t n = 0;
    detail::check(gpufile_file_nbytes(file_, &n));
    return n;
  }

  /** Reads `size` bytes at `offset` into `buf` (host or device memory); blocks. */
  std::size_t read(void* buf, std::size_t size, std::uint64_t offset = 0) const
  {
    std::size_t n = 0;
    detail::check(gpufile_file_read(file_, buf, size, offset, &n));
    return n;
  }
  /** Writes `size` bytes of `buf` at `offset`; blocks. */
  std::size_t write(void const* buf, std::size_t size, std::uint64_t offset = 0) const
  {
    std::size_t n = 0;
    detail::check(gpufile_file_write(file_, buf, size, offset, &n));
    return n;
  }

  /** Starts reading `size` bytes at `offset` into `buf`; argument errors throw here. */
  Future pread(void* buf,
                                 std::size_t size,
                                 std::uint64_t offset = 0,
                                 IoOptions opts       = {}) const
  {
    Range r{offset, size, 0};
    return pread_ranges(buf, size, &r, 1, opts);
  }
  /** Starts writing `size` bytes of `buf` at `offset`. */
  Future pwrite(void const* buf,
                                  std::size_t size,
                                  std::uint64_t offset = 0,
                                  IoOptions opts       = {}) const
  {
    Range r{offset, size, 0};
    return pwrite_ranges(buf, size, &r, 1, opts);
  }

  /**
   * Queues a read of `size` bytes at `offset` into `buf` on `cuda_stream` (a CUstream /
   * cudaStream_t; nullptr: the legacy default stream) and returns at once: the read starts
   * after the work queued on the stream before the call, the work queued after it sees the
   * bytes. What is known at the call (the file's mode, a read past its end with no write
   * pending on the stream) throws here, with nothing queued; errors found when the stream gets
   * there come from `bytes.get()`, and the bytes the read did not read keep their values.
   */
  StreamTransfer read_async(void* buf,
                            std::size_t size,
                            std::uint64_t offset,
                            void* cuda_stream) const
  {
    gpufile_future* fut       = nullptr;
    gpufile_stream_order order = GPUFILE_STREAM_CALLER_WAITS;
    detail::check(gpufile_file_read_async(file_, buf, size, offset, cuda_stream, &fut, &order));
    return {detail::to_future(fut), static_cast<StreamOrder>(order)};
  }
  /**
   * Queues a write of `size` bytes of `buf` at `offset` on `cuda_stream`, returning at once.
   * From device memory it is staged: the stream copies `buf` and goes on (later work may
   * change it at once); `bytes` is ready when the file has the bytes.
   */
  StreamTransfer write_async(void const* buf,
                             std::size_t size,
                             std::uint64_t offset,
                             void* cuda_stream) const
  {
    gpufile_future* fut       = nullptr;
    gpufile_stream_order order = GPUFILE_STREAM_CALLER_WAITS;
    detail::check(gpufile_file_write_async(file_, buf, size, offset, cuda_stream, &fut, &order));
    return {detail::to_future(fut), static_cast<StreamOrder>(order)};
  }

  /** One read of many ranges of the file into one buffer of `buf_size` bytes. */
  Future pread_ranges(void* buf,
                                        std::size_t buf_size,
                                        Range const* ranges,
                                        std::size_t n,
                                        IoOptions opts = {}) const
  {
    auto o                = opts.c();
    gpufile_future* fut   = nullptr;
    detail::check(gpufile_file_pread_ranges(file_, buf, buf_size, ranges, n, &o, &fut));
    return detail::to_future(fut);
  }
  Future pread_ranges(void* buf,
                                        std::size_t buf_size,
                                        std::vector<Range> const& ranges,
                                        IoOptions opts = {}) const
  {
    return pread_ranges(buf, buf_size, ranges.data(), ranges.size(), opts);
  }
  /** One write of many ranges of one buffer. */
  Future pwrite_ranges(void const* buf,
                                         std::size_t buf_size,
                                         Range const* ranges,
                                         std::size_t n,
                                         IoOptions opts = {}) const
  {
    auto o              = opts.c();
    gpufile_future* fut = nullptr;
    detail::check(gpufile_file_pwrite_ranges(file_, buf, buf_size, ranges, n, &o, &fut));
    return detail::to_future(fut);
  }
  Future pwrite_ranges(void const* buf,
                                         std::size_t buf_size,
                                         std::vector<Range> const& ranges,
                                         IoOptions opts = {}) const
  {
    return pwrite_ranges(buf, buf_size, ranges.data(), ranges.size(), opts);
  }

  /** What would move a read of `size` bytes into `memory`, and why. */
  [[nodiscard]] IoPath io_path(Memory memory, std::size_t size) const
  {
    gpufile_backend backend{};
    auto reason = detail::copy_text([&](char* b, std::size_t len) {
      std::size_t needed = 0;
      detail::check(
        gpufile_file_io_path(file_, static_cast<int>(memory), size, &backend, b, len, &needed));
      return needed;
    });
    return IoPath{static_cast<Backend>(backend), reason};
  }
  /** The path report of a request of `ranges` with the buffer at `buf` (asked of the driver). */
  [[nodiscard]] IoPath io_path(bool write,
                               void const* buf,
                               std::size_t buf_size,
                               std::vector<Range> const& ranges,
                               IoOptions opts = {}) const
  {
    gpufile_backend backend{};
    auto o      = opts.c();
    auto reason = detail::copy_text([&](char* b, std::size_t len) {
      std::size_t needed = 0;
      detail::check(gpufile_file_request_io_path(file_,
                                                 write ? 1 : 0,
                                                 buf,
                                                 buf_size,
                                                 ranges.data(),
                                                 ranges.size(),
                                                 &o,
                                                 &backend,
                                                 b,
                                                 len,
                                                 &needed));
      return needed;
    });
    return IoPath{static_cast<Backend>(backend), reason};
  }

 private:
  gpufile_file* file_{nullptr};
};

/** A file region mapped read-only (KvikIO's MmapHandle), unmapped by the destructor. */
class Mmap {
 public:
  Mmap() noexcept = default;
  Mmap(std::string const& path,
       std::string const& flags                      = "r",
       std::optional<std::uint64_t> initial_map_size = std::nullopt,
       std::uint64_t initial_map_offset              = 0,
       std::uint32_t mode                            = 0644,
       int map_flags                                 = 0)
  {
    detail::check(gpufile_mmap_open(
      path.c_str(),
      flags.c_str(),
      initial_map_size ? static_cast<std::int64_t>(*initial_map_size) : -1,
      initial_map_offset,
      mode,
      map_flags,
      &m_));
  }
  Mmap(Mmap const&)            = delete;
  Mmap& operator=(Mmap const&) = delete;
  Mmap(Mmap&& o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
  Mmap& operator=(Mmap&& o) noexcept
  {
    if (this != &o) {
      close();
      m_ = std::exchange(o.m_, nullptr);
    }
    return *this;
  }
  ~Mmap() noexcept { close(); }
  void close() noexcept
  {
    if (m_ != nullptr) { gpufile_mmap_close(std::exchange(m_, nullptr)); }
  }
  [[nodiscard]] bool closed() const noexcept { return m_ == nullptr; }
  [[nodiscard]] std::uint64_t initial_map_size() const { return info(0); }
  [[nodiscard]] std::uint64_t initial_map_offset() const { return info(1); }
  [[nodiscard]] std::uint64_t file_size() const { return info(2); }

  /** Starts reading `size` bytes (nullopt: to the end of the file) at `offset`. */
  Future pread(void* buf,
                                 std::size_t buf_size,
                                 std::optional<std::size_t> size = std::nullopt,
                                 std::uint64_t offset            = 0,
                                 std::size_t task_size           = 0) const
  {
    gpufile_future* fut = nullptr;
    detail::check(gpufile_mmap_pread(m_,
                                     buf,
                                     buf_size,
                                     size ? static_cast<std::int64_t>(*size) : -1,
                                     offset,
                                     task_size,
                                     &fut));
    return detail::to_future(fut);
  }
  std::size_t read(void* buf,
                   std::size_t buf_size,
                   std::optional<std::size_t> size = std::nullopt,
                   std::uint64_t offset            = 0) const
  {
    return pread(buf, buf_size, size, offset).get();
  }

 private:
  [[nodiscard]] std::uint64_t info(int which) const
  {
    std::uint64_t v[3] = {0, 0, 0};
    detail::check(gpufile_mmap_info(m_, &v[0], &v[1], &v[2]));
    return v[which];
  }
  gpufile_mmap* m_{nullptr};
};

/** The process settings by name (Python's gpufile.defaults). */
namespace settings {
inline std::int64_t get_int(std::string const& name)
{
  std::int64_t v = 0;
  detail::check(gpufile_settings_get_int(name.c_str(), &v));
  return v;
}
inline std::string get_str(std::string const& name)
{
  return detail::copy_text([&](char* b, std::size_t len) {
    std::size_t needed = 0;
    detail::check(gpufile_settings_get_str(name.c_str(), b, len, &needed));
    return needed;
  });
}
inline void set(std::string const& name, std::int64_t value)
{
  detail::check(gpufile_settings_set_int(name.c_str(), value));
}
inline void set(std::string const& name, std::string const& value)
{
  detail::check(gpufile_settings_set_str(name.c_str(), value.c_str()));
}
inline void set(std::string const& name, char const* value) { set(name, std::string(value)); }
}  // namespace settings

/**
 * Settings changed for a scope: each is set (as text, as the environment variables are read)
 * when it is made, and every one is restored when it ends, also by an exception. An entry
 * refused (an unknown name, a bad value) throws from the constructor, the entries before it
 * restored first: a refused ScopedSettings changes nothing.
 */
class ScopedSettings {
 public:
  ScopedSettings(std::initializer_list<std::pair<std::string, std::string>> values)
  {
    try {
      for (auto const& [name, value] : values) {
        std::pair<std::string, std::string> entry{name, settings::get_str(name)};
        saved_.reserve(saved_.size() + 1);  // nothing can fail once the value is set
        settings::set(name, value);
        saved_.push_back(std::move(entry));
      }
    } catch (...) {
      restore();  // the destructor of an object whose constructor threw does not run
      throw;
    }
  }
  ScopedSettings(ScopedSettings const&)            = delete;
  ScopedSettings& operator=(ScopedSettings const&) = delete;
  ~ScopedSettings() noexcept { restore(); }

 private:
  /** Sets back what was saved, the last change first. */
  void restore() noexcept
  {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      gpufile_settings_set_str(it->first.c_str(), it->second.c_str());
    }
    saved_.clear();
  }

  std::vector<std::pair<std::string, std::string>> saved_;
};

/** What gpufile moved while it lived (Python's gpufile.observe()): end() gives the JSON. */
class Observation {
 public:
  Observation() { detail::check(gpufile_observe_begin(&obs_)); }
  Observation(Observation const&)            = delete;
  Observation& operator=(Observation const&) = delete;
  ~Observation() noexcept
  {
    if (obs_ != nullptr) { gpufile_observe_end(obs_, nullptr, 0, nullptr); }
  }
  /** Ends the observation; its report as JSON (bytes and requests per backend). */
  std::string end()
  {
    std::string text;
    std::size_t needed = 0;
    auto* obs          = std::exchange(obs_, nullptr);
    if (obs == nullptr) { detail::check(gpufile_observe_end(nullptr, nullptr, 0, nullptr)); }
    // The report is copied once: ending frees the observation, so size it generously.
    text.assign(1 << 16, '\0');
    detail::check(gpufile_observe_end(obs, text.data(), text.size(), &needed));
    text.resize(std::min(needed, text.size()) - 1);
    return text;
  }

 private:
  gpufile_observation* obs_{nullptr};
};

/** Starts an observation. */
inline Observation observe() { return Observation(); }

/** `gpufile check --json`: the machine (and `path`, if not empty) probed, as JSON. */
inline std::string check(std::string const& path = "")
{
  return detail::copy_text([&](char* b, std::size_t len) {
    std::size_t needed = 0;
    detail::check(gpufile_check(path.empty() ? nullptr : path.c_str(), b, len, &needed));
    return needed;
  }, 1 << 16);
}

}  // namespace gpufile

#include "gpufile/remote.hpp"      // NOLINT: RemoteFile, over the API above
#include "gpufile/checkpoint.hpp"  // NOLINT: save_file, save_checkpoint, over the API above

#endif  // GPUFILE_HPP
