/*
 * KvikIO 26.10's process counters (kvikio/statistics/counters.hpp), served by gpufile: work
 * that belongs to no single operation (remote size probes, HTTP connections with their DNS,
 * TCP and TLS time, HTTP retries with their back-off), counted by gpufile's remote crate where
 * each event happens, from the process's start. Over gpufile_counters_get.
 */
#pragma once

#include <cstdint>
#include <string>

#include <gpufile/gpufile.h>
#include <gpufile/gpufile.hpp>
#include <kvikio/error.hpp>
#include <kvikio/observation.hpp>

namespace kvikio {
namespace statistics {

/** Which rows `report()` prints. */
enum class ReportRows : std::uint8_t {
  /// Only the backends and counter groups the run used.
  USED,
  /// Every row, the unused ones included.
  ALL,
};

/** Totals of work that belongs to no single operation; every field is eight bytes wide. */
struct Counters {
  /// Remote sizes asked for (an HTTP round trip each).
  std::uint64_t remote_size_probes{};
  /// Time spent waiting for them.
  Duration remote_size_probing{};
  /// HTTP connections opened (not reused).
  std::uint64_t http_connections{};
  /// Time those connections spent resolving, connecting and shaking hands.
  Duration http_dns{};
  Duration http_tcp{};
  Duration http_tls{};
  /// Requests turned away with a retryable error (each retry counts), and the time slept.
  std::uint64_t http_retries{};
  Duration http_retry_backoff{};

  /** What was counted since `previous`, each counter saturating at zero. */
  [[nodiscard]] Counters since(Counters const& previous) const noexcept
  {
    auto const n = [](std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; };
    auto const d = [](Duration a, Duration b) { return a > b ? a - b : Duration::zero(); };
    Counters c;
    c.remote_size_probes  = n(remote_size_probes, previous.remote_size_probes);
    c.remote_size_probing = d(remote_size_probing, previous.remote_size_probing);
    c.http_connections    = n(http_connections, previous.http_connections);
    c.http_dns            = d(http_dns, previous.http_dns);
    c.http_tcp            = d(http_tcp, previous.http_tcp);
    c.http_tls            = d(http_tls, previous.http_tls);
    c.http_retries        = n(http_retries, previous.http_retries);
    c.http_retry_backoff  = d(http_retry_backoff, previous.http_retry_backoff);
    return c;
  }

  /** Whether every counter is zero. */
  [[nodiscard]] bool empty() const noexcept
  {
    return remote_size_probes == 0 && remote_size_probing == Duration::zero() &&
           http_connections == 0 && http_dns == Duration::zero() &&
           http_tcp == Duration::zero() && http_tls == Duration::zero() && http_retries == 0 &&
           http_retry_backoff == Duration::zero();
  }

  /** Every counter as a JSON object (durations as `..._ns`), whatever was used. */
  [[nodiscard]] std::string to_json() const { return text(0); }

  /**
   * One line per counter group, newline-terminated; under `ReportRows::USED` only the groups
   * counted, so an empty reading is "".
   */
  [[nodiscard]] std::string report(ReportRows rows = ReportRows::USED) const
  {
    return text(rows == ReportRows::ALL ? 2 : 1);
  }

  /** As the C ABI's struct. */
  [[nodiscard]] gpufile_counters to_c() const noexcept
  {
    auto const ns = [](Duration d) {
      return d.count() > 0 ? static_cast<std::uint64_t>(d.count()) : std::uint64_t{0};
    };
    return gpufile_counters{remote_size_probes,
                            ns(remote_size_probing),
                            http_connections,
                            ns(http_dns),
                            ns(http_tcp),
                            ns(http_tls),
                            http_retries,
                            ns(http_retry_backoff)};
  }

  /** From the C ABI's struct. */
  [[nodiscard]] static Counters from_c(gpufile_counters const& c) noexcept
  {
    auto const d = [](std::uint64_t ns) { return Duration{static_cast<Duration::rep>(ns)}; };
    Counters out;
    out.remote_size_probes  = c.remote_size_probes;
    out.remote_size_probing = d(c.remote_size_probing_ns);
    out.http_connections    = c.http_connections;
    out.http_dns            = d(c.http_dns_ns);
    out.http_tcp            = d(c.http_tcp_ns);
    out.http_tls            = d(c.http_tls_ns);
    out.http_retries        = c.http_retries;
    out.http_retry_backoff  = d(c.http_retry_backoff_ns);
    return out;
  }

 private:
  [[nodiscard]] std::string text(int what) const
  {
    auto const c = to_c();
    return detail::as_kvikio([&] {
      return gpufile::detail::copy_text([&](char* b, std::size_t n) {
        std::size_t needed = 0;
        gpufile::detail::check(gpufile_counters_text(&c, what, b, n, &needed));
        return needed;
      });
    });
  }
};

/** Every counter as it stands now (zeros where they cannot be read). */
[[nodiscard]] inline Counters counters() noexcept
{
  gpufile_counters c{};
  if (gpufile_counters_get(&c) != GPUFILE_OK) { return {}; }
  return Counters::from_c(c);
}

}  // namespace statistics
}  // namespace kvikio
