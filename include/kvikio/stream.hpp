/*
 * KvikIO's StreamFuture, served by gpufile: the result of read_async/write_async. The
 * by-value calls queue the transfer on the stream and hand the StreamFuture gpufile's future
 * of it; the by-reference calls run as KvikIO's compat mode does (the stream is synchronized,
 * then the transfer runs), so their bytes are known once the call returns.
 */
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include <gpufile/gpufile.hpp>
#include <kvikio/error.hpp>
#include <kvikio/shim/cuda.hpp>

namespace kvikio {

/** The arguments and result of a stream-ordered read or write. */
class StreamFuture {
 public:
  StreamFuture() noexcept = default;
  StreamFuture(
    void* devPtr_base, std::size_t size, off_t file_offset, off_t devPtr_offset, CUstream stream)
    : _devPtr_base(devPtr_base),
      _stream(stream),
      _val(std::make_unique<ArgByVal>(ArgByVal{size, file_offset, devPtr_offset, -1}))
  {
  }
  /** A queued transfer's arguments and gpufile's future of it. */
  StreamFuture(void* devPtr_base,
               std::size_t size,
               off_t file_offset,
               off_t devPtr_offset,
               CUstream stream,
               std::shared_ptr<gpufile::detail::FutureHandle> pending)
    : StreamFuture(devPtr_base, size, file_offset, devPtr_offset, stream)
  {
    _pending = std::move(pending);
  }
  StreamFuture(StreamFuture const&)            = delete;
  StreamFuture& operator=(StreamFuture& other) = delete;
  StreamFuture(StreamFuture&& other) noexcept  = default;
  StreamFuture& operator=(StreamFuture&& other) noexcept = default;
  ~StreamFuture() noexcept                               = default;

  /** Pointers to the arguments (KvikIO's by-reference form), and the stream. */
  [[nodiscard]] std::tuple<void*, std::size_t*, off_t*, off_t*, ssize_t*, CUstream> get_args()
    const
  {
    KVIKIO_EXPECT(_val != nullptr, "cannot get arguments from an uninitialized StreamFuture");
    return {_devPtr_base,
            &_val->size,
            &_val->file_offset,
            &_val->devPtr_offset,
            &_val->bytes_done,
            _stream};
  }

  /**
   * The bytes moved, once the transfer has ended (a queued one is waited for); throws a
   * CUfileException where the operation failed.
   */
  std::size_t check_bytes_done()
  {
    KVIKIO_EXPECT(_val != nullptr, "cannot check bytes done on an uninitialized StreamFuture");
    if (_pending) {
      auto pending = std::move(_pending);
      try {
        _val->bytes_done = static_cast<ssize_t>(pending->wait());
      } catch (std::exception const& e) {
        _val->bytes_done = -static_cast<ssize_t>(EIO);
        throw CUfileException(std::string("stream-ordered transfer failed: ") + e.what());
      }
    }
    KVIKIO_CUFILE_CHECK_BYTES_DONE(_val->bytes_done);
    return static_cast<std::size_t>(_val->bytes_done);
  }

 private:
  struct ArgByVal {
    std::size_t size;
    off_t file_offset;
    off_t devPtr_offset;
    ssize_t bytes_done;
  };
  void* _devPtr_base{nullptr};
  CUstream _stream{nullptr};
  std::unique_ptr<ArgByVal> _val;
  /** gpufile's future of a queued transfer; freeing it waits for the transfer. */
  std::shared_ptr<gpufile::detail::FutureHandle> _pending;
};

/** cuFile's stream registration has no meaning for compat-mode stream I/O: nothing to do. */
inline void stream_register(CUstream, unsigned) {}
inline void stream_deregister(CUstream) {}

}  // namespace kvikio
