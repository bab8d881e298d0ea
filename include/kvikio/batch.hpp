/*
 * KvikIO's BatchHandle and BatchOp, served by gpufile: each operation of a batch is one
 * request of gpufile's engine (cuFile's batch API is not used); status() reports them as
 * cuFile's batch status does.
 */
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <ctime>
#include <future>
#include <stdexcept>
#include <vector>

#include <kvikio/error.hpp>
#include <kvikio/file_handle.hpp>
#include <kvikio/shim/cufile_h_wrapper.hpp>

namespace kvikio {

/** One read or write of a batch. */
struct BatchOp {
  FileHandle& file_handle;
  void* devPtr_base;
  off_t file_offset;
  off_t devPtr_offset;
  size_t size;
  CUfileOpcode_t opcode;
};

/** A batch of reads and writes, of at most `max_num_events` operations at a time. */
class BatchHandle {
 public:
  BatchHandle() noexcept = default;
  BatchHandle(int max_num_events) : _initialized(true), _max_num_events(max_num_events) {}
  BatchHandle(BatchHandle const&)            = delete;
  BatchHandle& operator=(BatchHandle const&) = delete;
  BatchHandle(BatchHandle&& o) noexcept      = default;
  ~BatchHandle() noexcept { close(); }

  [[nodiscard]] bool closed() const noexcept { return !_initialized; }
  /** Waits for what is still running and closes the batch. */
  void close() noexcept
  {
    for (auto& op : _pending) {
      try {
        if (op.valid()) { op.wait(); }
      } catch (...) {
      }
    }
    _pending.clear();
    _initialized = false;
  }

  /**
   * Starts every operation of `operations`. Each is checked first (offsets, handle, direction,
   * a read past the end, the buffer): a refused operation throws before any starts, so a
   * refused batch moves no byte.
   */
  void submit(std::vector<BatchOp> const& operations)
  {
    KVIKIO_EXPECT(_initialized, "cannot submit to a closed BatchHandle", std::invalid_argument);
    KVIKIO_EXPECT(static_cast<int>(_pending.size() + operations.size()) <= _max_num_events,
                  "cannot submit more than max_num_events",
                  std::invalid_argument);
    for (auto const& op : operations) {
      KVIKIO_EXPECT(op.file_offset >= 0 && op.devPtr_offset >= 0,
                    "file_offset and devPtr_offset must not be negative",
                    std::invalid_argument);
      op.file_handle.check_request(
        op.opcode == CUFILE_WRITE, buffer_of(op), op.size, offset_of(op), task_of(op));
    }
    _pending.reserve(_pending.size() + operations.size());
    std::vector<gpufile::Future> started;
    started.reserve(operations.size());
    // A start refused after the checks (a file truncated meanwhile by another process) throws
    // with the operations started so far waited for (their Futures' destructors), so none uses
    // a buffer once the caller has the exception.
    for (auto const& op : operations) {
      auto* buf = buffer_of(op);
      started.push_back(op.opcode == CUFILE_READ
                          ? op.file_handle.pread(buf, op.size, offset_of(op), task_of(op))
                          : op.file_handle.pwrite(buf, op.size, offset_of(op), task_of(op)));
    }
    for (auto& f : started) {
      _pending.push_back(std::move(f));
    }
  }

  /**
   * Waits until at least `min_nr` operations ended (or `timeout` passed), then reports up to
   * `max_nr` ended ones (in submission order); each is reported once.
   */
  std::vector<CUfileIOEvents_t> status(unsigned min_nr,
                                       unsigned max_nr,
                                       struct timespec* timeout = nullptr)
  {
    auto const deadline =
      timeout == nullptr
        ? std::chrono::steady_clock::time_point::max()
        : std::chrono::steady_clock::now() + std::chrono::seconds(timeout->tv_sec) +
            std::chrono::nanoseconds(timeout->tv_nsec);
    std::vector<CUfileIOEvents_t> events;
    for (std::size_t i = 0; i < _pending.size() && events.size() < max_nr;) {
      auto& fut      = _pending[i];
      bool const must_wait = events.size() < min_nr;
      bool ready = fut.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      if (!ready && must_wait) { ready = fut.wait_until(deadline) == std::future_status::ready; }
      if (!ready) {
        ++i;
        continue;
      }
      CUfileIOEvents_t ev{};
      ev.cookie = nullptr;
      try {
        ev.ret    = fut.get();
        ev.status = CUFILE_COMPLETE;
      } catch (...) {
        ev.ret    = 0;
        ev.status = CUFILE_FAILED;
      }
      events.push_back(ev);
      _pending.erase(_pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return events;
  }

  /** Waits for the operations still running (gpufile's requests are not cancelled half-way). */
  void cancel()
  {
    for (auto& op : _pending) {
      if (op.valid()) { op.wait(); }
    }
    _pending.clear();
  }

 private:
  static char* buffer_of(BatchOp const& op)
  {
    return static_cast<char*>(op.devPtr_base) + op.devPtr_offset;
  }
  static std::size_t offset_of(BatchOp const& op)
  {
    return static_cast<std::size_t>(op.file_offset);
  }
  /** One task per operation, as one cuFile batch entry is one I/O. */
  static std::size_t task_of(BatchOp const& op) { return op.size > 0 ? op.size : 1; }

  bool _initialized{false};
  int _max_num_events{};
  std::vector<gpufile::Future> _pending;
};

}  // namespace kvikio
