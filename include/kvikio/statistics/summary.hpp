/*
 * KvikIO 26.10's I/O summary (kvikio/statistics/summary.hpp), served by gpufile: a
 * SummaryMonitor counts every logical operation of the process while it exists, and a Summary
 * is a reading of it, with gpufile's path and reason for each backend (gpufile's addition).
 * Over the C ABI's gpufile_summary_monitor_* and gpufile_summary_*: the counting, the
 * differencing, the report, the JSON and the bytes are the library's, one source with
 * Python's gpufile.SummaryMonitor and gpufile.observe().
 */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gpufile/gpufile.h>
#include <gpufile/gpufile.hpp>
#include <kvikio/detail/in_monitor.hpp>
#include <kvikio/error.hpp>
#include <kvikio/observation.hpp>
#include <kvikio/statistics/counters.hpp>

namespace kvikio {
namespace statistics {

class SummaryMonitor;

/** Running totals of the logical operations a monitor's span saw. */
struct Summary {
  /// When counting started, or was last reset.
  TimePoint start{};
  /// When the summary was read (or the monitor stopped).
  TimePoint end{};
  /// What relates `start` and `end` to the wall clock (taken when the monitor was made).
  ClockAnchor anchor{};

  /// User-facing operations, and of them reads and writes.
  std::uint64_t num_ops{};
  std::uint64_t num_reads{};
  std::uint64_t num_writes{};
  /// Bytes asked for.
  std::uint64_t bytes_requested{};
  /// Bytes moved, and of them read and written.
  std::uint64_t bytes_transferred{};
  std::uint64_t bytes_read{};
  std::uint64_t bytes_written{};
  /// Operations that failed.
  std::uint64_t num_errors{};

  /** What one backend carried. */
  struct BackendTotals {
    std::uint64_t num_ops{};
    std::uint64_t bytes_transferred{};
    /// The durations added up.
    Duration total_duration{};
    std::uint64_t num_errors{};
    /// gpufile's addition: gpufile's paths that carried these operations ("gpufile-posix",
    /// "page-cache-dma", "gpu-gather", "cufile-nvfs", "cufile-compat", "mmap", "remote";
    /// "+"-joined), empty for an unused backend or a summary built by hand.
    std::string path{};
    /// gpufile's addition: why those paths ("; "-joined).
    std::string reason{};
  };

  /// What each backend carried, indexed by `IoBackend`.
  std::array<BackendTotals, num_io_backends> by_backend{};
  /// The part of the process's counters that fell in the span.
  Counters counters{};
  /// The operations' durations added up.
  Duration total_duration{};
  /// Time with at least one operation in flight (the union of their spans; never past
  /// `wall()`).
  Duration busy{};

  /** `end - start`, or zero for a degenerate span. */
  [[nodiscard]] Duration wall() const noexcept
  {
    return end > start ? std::chrono::duration_cast<Duration>(end - start) : Duration::zero();
  }

  /** Bytes per second while busy (zero if never busy). */
  [[nodiscard]] double busy_bytes_per_sec() const noexcept
  {
    auto const seconds = std::chrono::duration<double>{busy}.count();
    return seconds > 0.0 ? static_cast<double>(bytes_transferred) / seconds : 0.0;
  }

  /** Share of the span with an operation in flight (zero for a degenerate span). */
  [[nodiscard]] double busy_fraction() const noexcept
  {
    auto const w = wall();
    return w > Duration::zero() ? static_cast<double>(busy.count()) / w.count() : 0.0;
  }

  /** `total_duration / num_ops`, or zero. */
  [[nodiscard]] Duration mean_duration() const noexcept
  {
    return num_ops > 0 ? total_duration / static_cast<Duration::rep>(num_ops) : Duration::zero();
  }

  /**
   * The interval between `previous`, an earlier reading of the same span, and this one.
   * std::invalid_argument where `previous` is not one (an interval, a reading of another
   * monitor or from before a reset, a later reading, a summary built or edited by hand).
   */
  [[nodiscard]] Summary since(Summary const& previous) const
  {
    auto const mine   = reading();
    auto const theirs = previous.reading();
    gpufile_summary* out = nullptr;
    detail::as_kvikio(
      [&] { gpufile::detail::check(gpufile_summary_since(mine.get(), theirs.get(), &out)); });
    return from_handle(out);
  }

  /** KvikIO's JSON object (wall-clock `start_unix_ns`/`end_unix_ns`), with gpufile's `path`
   * and `reason` in each `by_backend` row and its `by_path` rows. */
  [[nodiscard]] std::string to_json() const { return text(0); }

  /**
   * The exact bytes `deserialize` reads back (anchor and monotonic timestamps included, so the
   * result is still a baseline for `since`); only this build of gpufile reads them.
   */
  [[nodiscard]] std::vector<std::byte> serialize() const
  {
    auto const r = reading();
    std::size_t needed = 0;
    detail::as_kvikio(
      [&] { gpufile::detail::check(gpufile_summary_serialize(r.get(), nullptr, 0, &needed)); });
    std::vector<std::byte> bytes(needed);
    detail::as_kvikio([&] {
      gpufile::detail::check(gpufile_summary_serialize(
        r.get(), reinterpret_cast<std::uint8_t*>(bytes.data()), bytes.size(), &needed));
    });
    return bytes;
  }

  /** A summary from `serialize()`'s bytes; std::invalid_argument for anything else. */
  [[nodiscard]] static Summary deserialize(std::vector<std::byte> const& bytes)
  {
    static std::uint8_t const none = 0;
    auto const* data = bytes.empty() ? &none : reinterpret_cast<std::uint8_t const*>(bytes.data());
    gpufile_summary* out = nullptr;
    detail::as_kvikio([&] {
      gpufile::detail::check(gpufile_summary_deserialize(data, bytes.size(), &out));
    });
    return from_handle(out);
  }

  /**
   * KvikIO's report, one field a line with scaled units, then gpufile's rows (one per path
   * that carried operations, each with its reasons). Under `ReportRows::USED` the backends and
   * counter groups never used are left out.
   */
  [[nodiscard]] std::string report(ReportRows rows = ReportRows::USED) const
  {
    return text(rows == ReportRows::ALL ? 2 : 1);
  }

 private:
  friend class SummaryMonitor;

  using Handle = std::shared_ptr<gpufile_summary>;

  /** Takes ownership of `h`, a new reading, and reads its fields. */
  [[nodiscard]] static Summary from_handle(gpufile_summary* h)
  {
    Handle handle{h, [](gpufile_summary* s) { (void)gpufile_summary_free(s); }};
    gpufile_summary_values v{};
    detail::as_kvikio([&] { gpufile::detail::check(gpufile_summary_values_get(h, &v)); });
    Summary s;
    s.start = detail::time_point_of(v.start_ns);
    s.end   = detail::time_point_of(v.end_ns);
    s.anchor.steady = detail::time_point_of(v.anchor_steady_ns);
    s.anchor.wall   = std::chrono::system_clock::time_point{
      std::chrono::duration_cast<std::chrono::system_clock::duration>(Duration{v.anchor_wall_ns})};
    s.num_ops           = v.num_ops;
    s.num_reads         = v.num_reads;
    s.num_writes        = v.num_writes;
    s.bytes_requested   = v.bytes_requested;
    s.bytes_transferred = v.bytes_transferred;
    s.bytes_read        = v.bytes_read;
    s.bytes_written     = v.bytes_written;
    s.num_errors        = v.num_errors;
    for (std::size_t i = 0; i < num_io_backends; ++i) {
      auto& b             = s.by_backend[i];
      b.num_ops           = v.by_backend[i].num_ops;
      b.bytes_transferred = v.by_backend[i].bytes_transferred;
      b.total_duration    = Duration{static_cast<Duration::rep>(v.by_backend[i].total_duration_ns)};
      b.num_errors        = v.by_backend[i].num_errors;
      if (b.num_ops == 0) { continue; }
      b.path   = backend_text(h, i, 0);
      b.reason = backend_text(h, i, 1);
    }
    s.counters       = Counters::from_c(v.counters);
    s.total_duration = Duration{static_cast<Duration::rep>(v.total_duration_ns)};
    s.busy           = Duration{static_cast<Duration::rep>(v.busy_ns)};
    s._reading       = std::move(handle);
    return s;
  }

  [[nodiscard]] static std::string backend_text(gpufile_summary* h, std::size_t backend, int what)
  {
    return detail::as_kvikio([&] {
      return gpufile::detail::copy_text([&](char* b, std::size_t n) {
        std::size_t needed = 0;
        gpufile::detail::check(gpufile_summary_backend_path(
          h, static_cast<std::uint8_t>(backend), what, b, n, &needed));
        return needed;
      });
    });
  }

  /** The numbers of this summary, as the C ABI has them (derived values zero). */
  [[nodiscard]] gpufile_summary_values values() const noexcept
  {
    auto const ns = [](Duration d) {
      return d.count() > 0 ? static_cast<std::uint64_t>(d.count()) : std::uint64_t{0};
    };
    gpufile_summary_values v{};
    v.start_ns         = detail::ns_of(start);
    v.end_ns           = detail::ns_of(end);
    v.anchor_steady_ns = detail::ns_of(anchor.steady);
    v.anchor_wall_ns =
      std::chrono::duration_cast<Duration>(anchor.wall.time_since_epoch()).count();
    v.num_ops           = num_ops;
    v.num_reads         = num_reads;
    v.num_writes        = num_writes;
    v.bytes_requested   = bytes_requested;
    v.bytes_transferred = bytes_transferred;
    v.bytes_read        = bytes_read;
    v.bytes_written     = bytes_written;
    v.num_errors        = num_errors;
    for (std::size_t i = 0; i < num_io_backends; ++i) {
      v.by_backend[i] = gpufile_backend_totals{by_backend[i].num_ops,
                                               by_backend[i].bytes_transferred,
                                               ns(by_backend[i].total_duration),
                                               by_backend[i].num_errors};
    }
    v.counters          = counters.to_c();
    v.total_duration_ns = ns(total_duration);
    v.busy_ns           = ns(busy);
    return v;
  }

  /**
   * The library's summary these fields render from: the reading they came from while they
   * are unchanged, else one built from them (no paths, no baseline for `since`).
   */
  [[nodiscard]] Handle reading() const
  {
    auto mine = values();
    if (_reading) {
      gpufile_summary_values theirs{};
      if (gpufile_summary_values_get(_reading.get(), &theirs) == GPUFILE_OK) {
        theirs.wall_ns = theirs.mean_duration_ns = 0;
        theirs.busy_bytes_per_sec = theirs.busy_fraction = 0.0;
        if (std::memcmp(&mine, &theirs, sizeof mine) == 0) { return _reading; }
      }
    }
    gpufile_summary* built = nullptr;
    detail::as_kvikio(
      [&] { gpufile::detail::check(gpufile_summary_from_values(&mine, &built)); });
    return Handle{built, [](gpufile_summary* s) { (void)gpufile_summary_free(s); }};
  }

  [[nodiscard]] std::string text(int what) const
  {
    auto const r = reading();
    return detail::as_kvikio([&] {
      return gpufile::detail::copy_text([&](char* b, std::size_t n) {
        std::size_t needed = 0;
        gpufile::detail::check(gpufile_summary_text(r.get(), what, b, n, &needed));
        return needed;
      }, 4096);
    });
  }

  /// The library's reading these fields came from (shared by copies; immutable).
  Handle _reading{};
};

/**
 * Counts every logical operation of the process while it exists (not a scope: every thread's
 * I/O). Any number at once, each with its own span; an operation already in flight when it is
 * made (or reset) is not counted. Thread-safe.
 */
class SummaryMonitor final {
 public:
  /// Called with the final totals when the monitor is destroyed.
  using Callback = std::function<void(Summary const&)>;

  /** Starts counting. */
  SummaryMonitor() : SummaryMonitor(Callback{}) {}

  /** Starts counting; `on_destruction` gets the final totals from the destructor (what it
   * throws is caught and written to stderr). */
  explicit SummaryMonitor(Callback on_destruction) : _on_destruction{std::move(on_destruction)}
  {
    detail::expect_not_in_monitor("create a SummaryMonitor");
    detail::as_kvikio([&] { gpufile::detail::check(gpufile_summary_monitor_new(&_monitor)); });
  }

  /** Stops counting, calls the callback with the final totals, and frees the monitor. */
  ~SummaryMonitor()
  {
    try {
      stop();
      if (_on_destruction) { _on_destruction(get()); }
    } catch (std::exception const& e) {
      std::cerr << "kvikio::statistics::SummaryMonitor: the on-destruction callback threw: "
                << e.what() << '\n';
    } catch (...) {
      std::cerr << "kvikio::statistics::SummaryMonitor: the on-destruction callback threw\n";
    }
    (void)gpufile_summary_monitor_free(_monitor);
  }

  SummaryMonitor(SummaryMonitor const&)            = delete;
  SummaryMonitor& operator=(SummaryMonitor const&) = delete;
  SummaryMonitor(SummaryMonitor&&)                 = delete;
  SummaryMonitor& operator=(SummaryMonitor&&)      = delete;

  /** The totals since construction or the last reset. */
  [[nodiscard]] Summary get() const { return read(nullptr); }

  /** Zeroes the totals and restarts the span now. */
  void reset()
  {
    detail::as_kvikio(
      [&] { gpufile::detail::check(gpufile_summary_monitor_reset_or_stop(_monitor, 1)); });
  }

  /** `get().since(previous)` (std::invalid_argument where `previous` is no earlier reading). */
  [[nodiscard]] Summary since(Summary const& previous) const
  {
    auto const baseline = previous.reading();
    return read(baseline.get());
  }

  /** Stops counting (idempotent, one-way): the totals and the span are final. */
  void stop()
  {
    detail::as_kvikio(
      [&] { gpufile::detail::check(gpufile_summary_monitor_reset_or_stop(_monitor, 0)); });
  }

 private:
  [[nodiscard]] Summary read(gpufile_summary const* since) const
  {
    gpufile_summary* out = nullptr;
    detail::as_kvikio(
      [&] { gpufile::detail::check(gpufile_summary_monitor_get(_monitor, since, &out)); });
    return Summary::from_handle(out);
  }

  gpufile_summary_monitor* _monitor{nullptr};
  Callback _on_destruction;
};

}  // namespace statistics
}  // namespace kvikio
