/*
 * KvikIO's observation plumbing (kvikio::detail), served by gpufile for code that runs an
 * operation itself and reports it: the clock, whether anyone is watching, and the recorder
 * that delivers a start and a finish to the registered monitors (the SummaryMonitors among
 * them) through gpufile_monitor_report. gpufile's own I/O is observed inside the library;
 * nothing in the shim needs these.
 */
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <string>
#include <string_view>

#include <gpufile/gpufile.h>
#include <kvikio/detail/in_monitor.hpp>
#include <kvikio/observation.hpp>

namespace kvikio::detail {

/** `Clock` now. */
[[nodiscard]] inline TimePoint now() noexcept { return Clock::now(); }

/** Whether any monitor is registered. */
[[nodiscard]] inline bool monitoring_enabled() noexcept { return gpufile_monitor_active() != 0; }

/** `o` for the C ABI (its strings borrowed from `o`). */
[[nodiscard]] inline gpufile_io_observation c_observation_of(Observation const& o) noexcept
{
  gpufile_io_observation c{};
  c.id                = o.id;
  c.start_ns          = ns_of(o.start);
  c.end_ns            = ns_of(o.end);
  c.offset            = o.offset;
  c.size              = o.size;
  c.bytes_transferred = o.bytes_transferred;
  c.http_method       = o.http_method;
  c.source            = o.source.data();
  c.source_len        = o.source.size();
  c.backend           = static_cast<std::uint8_t>(o.backend);
  c.direction         = static_cast<std::uint8_t>(o.direction);
  c.memory_kind       = static_cast<std::uint8_t>(o.memory_kind);
  c.ok                = o.ok ? 1 : 0;
  return c;
}

/** Delivers `o`'s start to the monitors (a zero id gets a fresh one, for this delivery). */
inline void notify_started(Observation const& observation) noexcept
{
  auto c = c_observation_of(observation);
  (void)gpufile_monitor_report(&c, 0);
}

/** Delivers `o`'s finish to the monitors. */
inline void notify_finished(Observation const& observation) noexcept
{
  auto c = c_observation_of(observation);
  (void)gpufile_monitor_report(&c, 1);
}

/**
 * Records one logical operation that the caller runs itself: the start is delivered on
 * construction (where a monitor is registered), the finish by `finish()` /
 * `finish_with_failure()`, or by the destructor (the whole size, or a failure where the scope
 * is left by an exception).
 */
class LogicalObservationRecorder {
 public:
  LogicalObservationRecorder(IoBackend backend,
                             TransferDirection direction,
                             MemoryKind memory_kind,
                             std::size_t offset,
                             std::size_t size,
                             std::string_view source = {},
                             char const* http_method = nullptr) noexcept
    : _exceptions{std::uncaught_exceptions()}
  {
    if (!monitoring_enabled()) { return; }
    try {
      _source = std::string{source};
    } catch (...) {
      return;
    }
    _observation.backend     = backend;
    _observation.direction   = direction;
    _observation.memory_kind = memory_kind;
    _observation.offset      = offset;
    _observation.size        = size;
    _observation.source      = _source;
    _observation.http_method = http_method;
    _observation.start       = now();
    auto c                   = c_observation_of(_observation);
    if (gpufile_monitor_report(&c, 0) != GPUFILE_OK) { return; }
    _observation.id = c.id;
    _active         = true;
  }

  ~LogicalObservationRecorder()
  {
    if (!_active || _emitted.load()) { return; }
    if (std::uncaught_exceptions() > _exceptions) {
      finish_with_failure();
    } else {
      finish(_observation.size);
    }
  }

  LogicalObservationRecorder(LogicalObservationRecorder const&)            = delete;
  LogicalObservationRecorder& operator=(LogicalObservationRecorder const&) = delete;
  LogicalObservationRecorder(LogicalObservationRecorder&&)                 = delete;
  LogicalObservationRecorder& operator=(LogicalObservationRecorder&&)      = delete;

  /** The operation ended, `bytes_transferred` moved. Once; later calls do nothing. */
  void finish(std::size_t bytes_transferred) noexcept
  {
    _observation.bytes_transferred = bytes_transferred;
    _observation.ok                = true;
    emit();
  }

  /** The operation failed. Once; later calls do nothing. */
  void finish_with_failure() noexcept
  {
    _observation.bytes_transferred = 0;
    _observation.ok                = false;
    emit();
  }

 private:
  void emit() noexcept
  {
    if (!_active || _emitted.exchange(true)) { return; }
    _observation.end = now();
    notify_finished(_observation);
  }

  Observation _observation{};
  std::string _source;
  int _exceptions;
  bool _active{false};
  std::atomic<bool> _emitted{false};
};

}  // namespace kvikio::detail
