/*
 * KvikIO 26.10's observation API (kvikio/observation.hpp), served by gpufile: one Observation
 * per user-facing call, delivered to the registered Monitors at its start and its end, with
 * gpufile's path and reason (gpufile's addition) in every one. Over the C ABI's
 * gpufile_monitor_register.
 */
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include <gpufile/gpufile.h>
#include <gpufile/gpufile.hpp>
#include <kvikio/detail/in_monitor.hpp>
#include <kvikio/error.hpp>

namespace kvikio {

/** The clock observations are stamped with (CLOCK_MONOTONIC, as gpufile's). */
using Clock = std::chrono::steady_clock;
/** A point in time on `Clock`. */
using TimePoint = Clock::time_point;
/** A length of time, in nanoseconds. */
using Duration = std::chrono::nanoseconds;

namespace detail {

/** `ns` on CLOCK_MONOTONIC as a `TimePoint`. */
[[nodiscard]] inline TimePoint time_point_of(std::uint64_t ns) noexcept
{
  return TimePoint{
    std::chrono::duration_cast<Clock::duration>(Duration{static_cast<Duration::rep>(ns)})};
}

/** `t` as ns on CLOCK_MONOTONIC (0 before it). */
[[nodiscard]] inline std::uint64_t ns_of(TimePoint t) noexcept
{
  auto const ns = std::chrono::duration_cast<Duration>(t.time_since_epoch()).count();
  return ns > 0 ? static_cast<std::uint64_t>(ns) : 0;
}

}  // namespace detail

/** A reading of `Clock` and of the wall clock, taken together. */
struct ClockAnchor {
  /// The reading of `Clock`.
  TimePoint steady{};
  /// The reading of the wall clock, taken at the same moment.
  std::chrono::system_clock::time_point wall{};

  /** Reads both clocks, one immediately after the other. */
  [[nodiscard]] static ClockAnchor now() noexcept
  {
    std::uint64_t steady_ns = 0;
    std::int64_t wall_ns    = 0;
    if (gpufile_clock_anchor(&steady_ns, &wall_ns) != GPUFILE_OK) { return {}; }
    return ClockAnchor{detail::time_point_of(steady_ns),
                       std::chrono::system_clock::time_point{
                         std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           Duration{wall_ns})}};
  }

  /** `time` on the wall clock. */
  [[nodiscard]] std::chrono::system_clock::time_point to_wall_clock(TimePoint time) const noexcept
  {
    static_assert(std::is_integral_v<TimePoint::rep>);
    static_assert(std::is_integral_v<std::chrono::system_clock::rep>);
    return wall + std::chrono::duration_cast<std::chrono::system_clock::duration>(time - steady);
  }
};

/** The I/O backend that carried out an operation (KvikIO's order, as gpufile's C ABI). */
enum class IoBackend : std::uint8_t {
  POSIX = 0,    ///< POSIX reads and writes: gpufile's own path, page-cache DMA, the GPU's gather.
  GDS,          ///< cuFile (its accelerated path or its own compat path).
  MMAP,         ///< A memory-mapped file.
  REMOTE_HTTP,  ///< HTTP(S), S3, Google Cloud Storage.
  REMOTE_HDFS   ///< WebHDFS.
};

/** Number of `IoBackend` values. */
constexpr std::size_t num_io_backends = static_cast<std::size_t>(IoBackend::REMOTE_HDFS) + 1;

/** The direction of an I/O operation. */
enum class TransferDirection : std::uint8_t {
  READ = 0,  ///< From the file or endpoint into the buffer.
  WRITE      ///< From the buffer into the file or endpoint.
};

/** The kind of memory the caller's buffer lives in. */
enum class MemoryKind : std::uint8_t {
  HOST = 0,  ///< Host memory.
  DEVICE     ///< Device memory.
};

/** What layer an observation describes. */
enum class ObservationKind : std::uint8_t {
  LOGICAL = 0  ///< One user-facing call.
};

/** "POSIX", "GDS", "MMAP", "REMOTE_HTTP" or "REMOTE_HDFS". */
[[nodiscard]] inline std::string_view to_string(IoBackend backend) noexcept
{
  char const* name = gpufile_io_backend_name(static_cast<std::uint8_t>(backend));
  return name != nullptr ? std::string_view{name} : std::string_view{"UNKNOWN"};
}

/** "READ" or "WRITE". */
[[nodiscard]] inline std::string_view to_string(TransferDirection direction) noexcept
{
  return direction == TransferDirection::READ ? "READ" : "WRITE";
}

/** "HOST" or "DEVICE". */
[[nodiscard]] inline std::string_view to_string(MemoryKind memory_kind) noexcept
{
  return memory_kind == MemoryKind::HOST ? "HOST" : "DEVICE";
}

/** "LOGICAL". */
[[nodiscard]] inline std::string_view to_string(ObservationKind) noexcept { return "LOGICAL"; }

/** One I/O operation, as observed; `[start, end)` covers it from issue to completion. */
struct Observation {
  /// When the operation started.
  TimePoint start{};
  /// When it finished (zero in `Monitor::on_start`).
  TimePoint end{};
  /// Byte offset into the file or object.
  std::size_t offset{};
  /// Bytes requested.
  std::size_t size{};
  /// Bytes transferred (zero at the start and for a failed operation).
  std::size_t bytes_transferred{};
  /// Unique within the process.
  std::uint64_t id{};
  /// "GET" or "PUT" for a remote object, null for local I/O.
  char const* http_method{nullptr};
  /// The file path or URL, owned by the handle: valid while it is open.
  std::string_view source{};

  /// What layer this describes (always LOGICAL).
  ObservationKind kind{ObservationKind::LOGICAL};
  /// The backend that carried it out.
  IoBackend backend{IoBackend::POSIX};
  /// Read or write.
  TransferDirection direction{TransferDirection::READ};
  /// The caller's memory.
  MemoryKind memory_kind{MemoryKind::HOST};
  /// False if the operation failed.
  bool ok{true};

  /// gpufile's addition: which of gpufile's paths moved the bytes ("gpufile-posix",
  /// "page-cache-dma", "gpu-gather", "cufile-nvfs", "cufile-compat", "mmap", "remote"; static).
  std::string_view path{};
  /// gpufile's addition: why that path (valid only during the callback).
  std::string_view reason{};
  /// gpufile's addition: the tasks the operation ran as.
  std::uint64_t tasks{};
  /// gpufile's addition: of `bytes_transferred`, those copied by DMA from registered page cache.
  std::uint64_t dma_bytes{};

  /** `end - start`, or zero for a degenerate span. */
  [[nodiscard]] Duration duration() const noexcept
  {
    return end > start ? std::chrono::duration_cast<Duration>(end - start) : Duration::zero();
  }

  /** Bytes per second of this one operation (zero without a measurable duration). */
  [[nodiscard]] double bytes_per_sec() const noexcept
  {
    auto const seconds = std::chrono::duration<double>{duration()}.count();
    return seconds > 0.0 ? static_cast<double>(bytes_transferred) / seconds : 0.0;
  }
};

/**
 * Watches operations from start to finish: derive from it and `register_monitor` it. Both
 * callbacks run inline with the I/O, on the thread doing it: keep them light and thread-safe,
 * and do not call back into KvikIO (std::runtime_error). Neither may throw.
 */
class Monitor {
 public:
  Monitor()                          = default;
  virtual ~Monitor()                 = default;
  Monitor(Monitor const&)            = delete;
  Monitor& operator=(Monitor const&) = delete;

  /** An operation started (`end` and `bytes_transferred` zero, `ok` true). */
  virtual void on_start(Observation const& observation) noexcept = 0;
  /** An operation ended (once for every start). */
  virtual void on_finish(Observation const& observation) noexcept = 0;
};

namespace detail {

/** gpufile's observation as KvikIO's (`at_start`: `end` zeroed, as KvikIO's start record). */
[[nodiscard]] inline Observation observation_of(gpufile_io_observation const& o,
                                                bool at_start) noexcept
{
  Observation out{};
  out.start             = time_point_of(o.start_ns);
  out.end               = at_start ? TimePoint{} : time_point_of(o.end_ns);
  out.offset            = static_cast<std::size_t>(o.offset);
  out.size              = static_cast<std::size_t>(o.size);
  out.bytes_transferred = static_cast<std::size_t>(o.bytes_transferred);
  out.id                = o.id;
  out.http_method       = o.http_method;
  out.source            = o.source != nullptr ? std::string_view{o.source, o.source_len}
                                              : std::string_view{};
  out.backend           = static_cast<IoBackend>(o.backend);
  out.direction         = static_cast<TransferDirection>(o.direction);
  out.memory_kind       = static_cast<MemoryKind>(o.memory_kind);
  out.ok                = o.ok != 0;
  out.path              = o.path != nullptr ? std::string_view{o.path} : std::string_view{};
  out.reason = o.reason != nullptr ? std::string_view{o.reason, o.reason_len} : std::string_view{};
  out.tasks  = o.tasks;
  out.dma_bytes = o.dma_bytes;
  return out;
}

/** The C callbacks a registered Monitor is called through. */
inline void monitor_on_start(void* ctx, gpufile_io_observation const* o)
{
  InMonitorScope const scope;
  static_cast<Monitor*>(ctx)->on_start(observation_of(*o, true));
}

inline void monitor_on_finish(void* ctx, gpufile_io_observation const* o)
{
  InMonitorScope const scope;
  static_cast<Monitor*>(ctx)->on_finish(observation_of(*o, false));
}

}  // namespace detail

/**
 * Registers `monitor` (not owned; it must outlive the registration); the id for
 * `unregister_monitor`. std::invalid_argument for a null monitor, std::runtime_error from
 * inside a monitor's callback.
 */
[[nodiscard]] inline std::uint64_t register_monitor(Monitor* monitor,
                                                    ObservationKind /*kind*/ =
                                                      ObservationKind::LOGICAL)
{
  if (monitor == nullptr) { throw std::invalid_argument("register_monitor: monitor is null"); }
  detail::expect_not_in_monitor("register a monitor");
  std::uint64_t id = 0;
  detail::as_kvikio([&] {
    gpufile::detail::check(gpufile_monitor_register(
      &detail::monitor_on_start, &detail::monitor_on_finish, monitor, &id));
  });
  return id;
}

/**
 * Unregisters monitor `id`; returns once no thread is inside its callbacks, so the monitor may
 * be destroyed then. std::runtime_error from inside a monitor's callback.
 */
inline void unregister_monitor(std::uint64_t id)
{
  detail::expect_not_in_monitor("unregister a monitor");
  detail::as_kvikio([&] { gpufile::detail::check(gpufile_monitor_unregister(id)); });
}

}  // namespace kvikio
