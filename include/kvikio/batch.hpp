/*
 * KvikIO's BatchHandle and BatchOp, served by gpufile: a submission goes to the core's batch
 * (gpufile_batch_submit), where the operations on one file handle, one buffer and one direction
 * are one request of many ranges, every one checked before any byte moves (cuFile's batch API
 * is not used); status() reports each operation as cuFile's batch status does.
 */
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gpufile/gpufile.hpp>
#include <kvikio/compat_mode.hpp>
#include <kvikio/error.hpp>
#include <kvikio/file_handle.hpp>
#include <kvikio/shim/cufile_h_wrapper.hpp>
#include <kvikio/stream.hpp>

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
    wait_all();
    _initialized = false;
  }

  /**
   * Starts every operation of `operations`: those on one file handle, one `devPtr_base` and
   * one direction as one request. All are checked first (offsets, handle, direction, a read
   * past the end, a NULL buffer, reads whose destinations overlap): a refused operation throws
   * before any starts, so a refused batch moves no byte.
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
    }
    if (operations.empty()) { return; }
    // One submission per compat mode (the core takes one set of settings per submission):
    // where the files' modes differ, every operation is checked before the first starts.
    std::vector<CompatMode> modes;
    for (auto const& op : operations) {
      if (std::find(modes.begin(), modes.end(), op.file_handle._compat_mode) == modes.end()) {
        modes.push_back(op.file_handle._compat_mode);
      }
    }
    if (modes.size() > 1) { check_each(operations); }
    sync_if_device(operations);
    std::vector<PendingOp> started(operations.size());
    // A start refused after the checks (a file truncated meanwhile by another process) throws
    // with the groups started so far waited for (their Futures' destructors, as `started`
    // goes), so none uses a buffer once the caller has the exception.
    for (auto const mode : modes) {
      start(operations, mode, started);
    }
    _pending.reserve(_pending.size() + started.size());
    for (auto& p : started) {
      _pending.push_back(std::move(p));
    }
  }

  /**
   * Waits until at least `min_nr` operations ended (or `timeout` passed), then reports up to
   * `max_nr` ended ones (in submission order); each is reported once. An operation ends with
   * its group's request: COMPLETE with its size, or FAILED (ret 0) where the request failed.
   */
  std::vector<CUfileIOEvents_t> status(unsigned min_nr,
                                       unsigned max_nr,
                                       struct timespec* timeout = nullptr)
  {
    auto const forever = timeout == nullptr;
    auto const deadline =
      forever ? std::chrono::steady_clock::time_point::max()
              : std::chrono::steady_clock::now() + std::chrono::seconds(timeout->tv_sec) +
                  std::chrono::nanoseconds(timeout->tv_nsec);
    std::vector<CUfileIOEvents_t> events;
    std::vector<PendingOp> kept;
    kept.reserve(_pending.size());
    for (auto& op : _pending) {
      bool const must_wait = events.size() < min_nr;
      if (events.size() >= max_nr || !op.group->ended(must_wait, forever, deadline)) {
        kept.push_back(std::move(op));
        continue;
      }
      CUfileIOEvents_t ev{};
      ev.cookie = nullptr;
      ev.status = op.group->ok ? CUFILE_COMPLETE : CUFILE_FAILED;
      ev.ret    = op.group->ok ? op.size : 0;
      events.push_back(ev);
    }
    _pending = std::move(kept);
    return events;
  }

  /** Waits for the operations still running (gpufile's requests are not cancelled half-way). */
  void cancel() { wait_all(); }

 private:
  /** One request of a submission: its future, and once ended whether it succeeded. */
  struct Group {
    explicit Group(gpufile::Future f) : fut(std::move(f)) {}
    gpufile::Future fut;
    bool done{false};
    bool ok{false};
    /** Whether the request has ended: looked at now, or waited for until `deadline`. */
    bool ended(bool wait, bool forever, std::chrono::steady_clock::time_point deadline)
    {
      if (done) { return true; }
      if (!wait) {
        if (fut.wait_for(std::chrono::seconds(0)) != std::future_status::ready) { return false; }
      } else if (forever) {
        fut.wait();
      } else if (fut.wait_until(deadline) != std::future_status::ready) {
        return false;
      }
      try {
        fut.get();
        ok = true;
      } catch (...) {
        ok = false;
      }
      done = true;
      return true;
    }
  };
  /** An operation not reported yet: its group and its size. */
  struct PendingOp {
    std::shared_ptr<Group> group;
    std::size_t size{0};
  };

  static char* buffer_of(BatchOp const& op)
  {
    return static_cast<char*>(op.devPtr_base) + op.devPtr_offset;
  }

  /**
   * Checks every operation as starting it alone would, and refuses reads whose destinations
   * overlap: what one submission checks, for operations that go to several.
   */
  static void check_each(std::vector<BatchOp> const& operations)
  {
    std::vector<std::tuple<std::uintptr_t, std::uintptr_t, std::size_t>> reads;
    for (std::size_t i = 0; i < operations.size(); ++i) {
      auto const& op = operations[i];
      op.file_handle.check_request(op.opcode == CUFILE_WRITE,
                                   buffer_of(op),
                                   op.size,
                                   static_cast<std::size_t>(op.file_offset));
      auto const at = reinterpret_cast<std::uintptr_t>(buffer_of(op));
      if (op.opcode == CUFILE_READ && op.size > 0) { reads.emplace_back(at, at + op.size, i); }
    }
    std::sort(reads.begin(), reads.end());
    for (std::size_t k = 1; k < reads.size(); ++k) {
      auto const& [start, end, i] = reads[k - 1];
      auto const& [next, next_end, j] = reads[k];
      (void)start;
      (void)next_end;
      KVIKIO_EXPECT(next >= end,
                    "operations " + std::to_string(std::min(i, j)) + " and " +
                      std::to_string(std::max(i, j)) +
                      " of the batch overlap in the buffer: reads may not share destination bytes",
                    std::invalid_argument);
    }
  }

  /** KvikIO waits for the default stream before device I/O (as FileHandle::pread does). */
  static void sync_if_device(std::vector<BatchOp> const& operations)
  {
    void const* last = nullptr;
    for (auto const& op : operations) {
      if (op.devPtr_base == nullptr || op.devPtr_base == last) { continue; }
      last     = op.devPtr_base;
      int kind = GPUFILE_MEMORY_HOST;
      if (gpufile_memory_kind(last, &kind) == GPUFILE_OK && kind == GPUFILE_MEMORY_DEVICE) {
        detail::stream_synchronize(nullptr);
        return;
      }
    }
  }

  /** Starts the operations on files of `mode` as one core submission, into `started`. */
  static void start(std::vector<BatchOp> const& operations,
                    CompatMode mode,
                    std::vector<PendingOp>& started)
  {
    std::vector<gpufile_batch_op> ops;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < operations.size(); ++i) {
      auto const& op = operations[i];
      if (op.file_handle._compat_mode != mode) { continue; }
      ops.push_back(gpufile_batch_op{op.file_handle._file.handle(),
                                     op.devPtr_base,
                                     static_cast<std::uint64_t>(op.file_offset),
                                     static_cast<std::size_t>(op.devPtr_offset),
                                     op.size,
                                     op.opcode == CUFILE_WRITE ? 1 : 0});
      index.push_back(i);
    }
    gpufile_io_options const opts{0, -1, static_cast<std::int32_t>(mode)};
    std::vector<gpufile_future*> raw(ops.size(), nullptr);
    std::vector<std::size_t> group(ops.size(), 0);
    std::size_t ngroups = 0;
    auto const status =
      gpufile_batch_submit(ops.data(), ops.size(), &opts, raw.data(), group.data(), &ngroups);
    detail::as_kvikio([&] { gpufile::detail::check(status); });
    std::vector<std::shared_ptr<Group>> groups;
    groups.reserve(ngroups);
    std::size_t g = 0;
    try {
      for (; g < ngroups; ++g) {
        groups.push_back(std::make_shared<Group>(gpufile::detail::to_future(raw[g])));
      }
    } catch (...) {
      // The group whose Future failed is freed by it; those after it are freed (waited) here.
      for (std::size_t k = g + 1; k < ngroups; ++k) {
        gpufile_future_free(raw[k]);
      }
      throw;
    }
    for (std::size_t k = 0; k < ops.size(); ++k) {
      started[index[k]] = PendingOp{groups[group[k]], ops[k].size};
    }
  }

  /** Waits for every request and drops the events not reported. */
  void wait_all() noexcept
  {
    for (auto& op : _pending) {
      try {
        if (op.group && op.group->fut.valid()) { op.group->fut.wait(); }
      } catch (...) {
      }
    }
    _pending.clear();
  }

  bool _initialized{false};
  int _max_num_events{};
  std::vector<PendingOp> _pending;
};

}  // namespace kvikio
