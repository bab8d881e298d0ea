// KvikIO 26.10's observation and statistics API (kvikio/observation.hpp,
// kvikio/statistics/*.hpp) over gpufile: what a monitor is told of real reads (gpufile's path
// and reason in each observation), a SummaryMonitor around reads, a summary through bytes and
// back, the counters, and a reported operation reaching a summary.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvikio/detail/observation_recorder.hpp"
#include "kvikio/file_handle.hpp"
#include "kvikio/observation.hpp"
#include "kvikio/statistics/counters.hpp"
#include "kvikio/statistics/summary.hpp"
#include "support.hpp"

namespace {

using kvikio::IoBackend;
using kvikio::Observation;
using kvikio::statistics::Summary;
using kvikio::statistics::SummaryMonitor;

/** What a monitor kept of one observation: the copies outlive the callback. */
struct Seen {
  std::uint64_t id{};
  std::size_t size{};
  std::size_t bytes_transferred{};
  IoBackend backend{};
  bool ok{};
  std::string source, path, reason;
};

class Keeper final : public kvikio::Monitor {
 public:
  Keeper() : _id{kvikio::register_monitor(this)} {}
  ~Keeper() override { kvikio::unregister_monitor(_id); }
  Keeper(Keeper const&)            = delete;
  Keeper& operator=(Keeper const&) = delete;

  void on_start(Observation const& o) noexcept override
  {
    std::lock_guard const lock{_mutex};
    _starts.push_back(o.id);
  }
  void on_finish(Observation const& o) noexcept override
  {
    std::lock_guard const lock{_mutex};
    _finishes.push_back(Seen{o.id,
                             o.size,
                             o.bytes_transferred,
                             o.backend,
                             o.ok,
                             std::string{o.source},
                             std::string{o.path},
                             std::string{o.reason}});
  }
  [[nodiscard]] std::vector<Seen> finishes() const
  {
    std::lock_guard const lock{_mutex};
    return _finishes;
  }
  [[nodiscard]] std::vector<std::uint64_t> starts() const
  {
    std::lock_guard const lock{_mutex};
    return _starts;
  }

 private:
  mutable std::mutex _mutex;
  std::vector<std::uint64_t> _starts;
  std::vector<Seen> _finishes;
  std::uint64_t _id;
};

class KvikioStatistics : public ::testing::Test {
 protected:
  void SetUp() override
  {
    data = support::pattern(3 << 20);
    path = dir.file("data.bin");
    support::write_file(path, data);
  }
  support::TempDir dir;
  std::vector<unsigned char> data;
  std::string path;
};

TEST_F(KvikioStatistics, a_monitor_sees_one_observation_per_read_with_gpufiles_path_and_reason)
{
  std::vector<unsigned char> buf(data.size());
  std::vector<Seen> seen;
  std::vector<std::uint64_t> starts;
  {
    Keeper keeper;
    kvikio::FileHandle f{path, "r"};
    // 3 MiB in 1 MiB tasks: three tasks, one call, one observation.
    EXPECT_EQ(f.pread(buf.data(), buf.size(), 0, 1 << 20).get(), buf.size());
    std::vector<unsigned char> small(4096);
    EXPECT_EQ(f.pread(small.data(), small.size(), 8192).get(), small.size());
    EXPECT_TRUE(std::equal(small.begin(), small.end(), data.begin() + 8192));
    seen   = keeper.finishes();
    starts = keeper.starts();
  }
  EXPECT_EQ(buf, data);
  ASSERT_EQ(seen.size(), 2u);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[0], seen[0].id);
  EXPECT_NE(seen[0].id, seen[1].id);
  EXPECT_EQ(seen[0].size, data.size());
  EXPECT_EQ(seen[0].bytes_transferred, data.size());
  EXPECT_EQ(seen[1].bytes_transferred, 4096u);
  for (auto const& s : seen) {
    EXPECT_TRUE(s.ok);
    EXPECT_EQ(s.backend, IoBackend::POSIX);
    EXPECT_EQ(s.source, path);
    // gpufile's addition: which path moved the bytes, and why.
    EXPECT_EQ(s.path, "gpufile-posix");
    EXPECT_NE(s.reason.find("host buffer"), std::string::npos) << s.reason;
  }
}

TEST_F(KvikioStatistics, a_monitor_callback_cannot_call_back_into_kvikio)
{
  class Nested final : public kvikio::Monitor {
   public:
    explicit Nested(std::string p) : _path{std::move(p)} {}
    void on_start(Observation const&) noexcept override {}
    void on_finish(Observation const&) noexcept override
    {
      try {
        kvikio::FileHandle f{_path, "r"};
        char b[8];
        f.pread(b, sizeof b, 0).get();
      } catch (std::runtime_error const& e) {
        if (std::string{e.what()}.find("monitor") != std::string::npos) { ++refused; }
      }
      try {
        (void)kvikio::register_monitor(this);
      } catch (std::runtime_error const&) {
        ++refused;
      }
    }
    std::atomic<int> refused{0};

   private:
    std::string _path;
  };
  Nested nested{path};
  auto const id = kvikio::register_monitor(&nested);
  {
    kvikio::FileHandle f{path, "r"};
    std::vector<unsigned char> buf(4096);
    f.pread(buf.data(), buf.size(), 0).get();
  }
  kvikio::unregister_monitor(id);
  EXPECT_EQ(nested.refused.load(), 2);
  EXPECT_THROW((void)kvikio::register_monitor(nullptr), std::invalid_argument);
}

TEST_F(KvikioStatistics, a_summary_monitor_around_reads_counts_them_by_backend_and_path)
{
  std::vector<unsigned char> buf(data.size());
  Summary at_end;
  {
    SummaryMonitor const monitor{[&](Summary const& s) { at_end = s; }};
    kvikio::FileHandle f{path, "r"};
    f.pread(buf.data(), buf.size(), 0).get();
    f.pread(buf.data(), 1024, 0).get();
    auto const s = monitor.get();
    EXPECT_EQ(s.num_ops, 2u);
    EXPECT_EQ(s.num_reads, 2u);
    EXPECT_EQ(s.bytes_read, data.size() + 1024);
    auto const& posix = s.by_backend[static_cast<std::size_t>(IoBackend::POSIX)];
    EXPECT_EQ(posix.num_ops, 2u);
    EXPECT_EQ(posix.path, "gpufile-posix");
    EXPECT_NE(posix.reason.find("host buffer"), std::string::npos) << posix.reason;
    EXPECT_TRUE(s.by_backend[static_cast<std::size_t>(IoBackend::GDS)].path.empty());
    EXPECT_GT(s.busy, kvikio::Duration::zero());
    EXPECT_LE(s.busy, s.wall());
    auto const report = s.report();
    EXPECT_NE(report.find("KvikIO I/O summary"), std::string::npos) << report;
    EXPECT_NE(report.find("path gpufile-posix"), std::string::npos) << report;
    EXPECT_NE(s.to_json().find("\"path\": \"gpufile-posix\""), std::string::npos);
    // An interval holds the read made after its baseline only.
    auto const before = monitor.get();
    f.pread(buf.data(), 100, 0).get();
    auto const interval = monitor.since(before);
    EXPECT_EQ(interval.num_ops, 1u);
    EXPECT_EQ(interval.bytes_transferred, 100u);
    EXPECT_THROW((void)monitor.since(interval), std::invalid_argument);
  }
  // The destructor handed over the final totals.
  EXPECT_EQ(at_end.num_ops, 3u);
}

TEST_F(KvikioStatistics, a_summary_survives_serialize_and_deserialize)
{
  std::vector<unsigned char> buf(8192);
  SummaryMonitor const monitor;
  kvikio::FileHandle f{path, "r"};
  f.pread(buf.data(), buf.size(), 0).get();
  auto const before = monitor.get();
  auto const bytes  = before.serialize();
  auto const after  = Summary::deserialize(bytes);
  EXPECT_EQ(after.serialize(), bytes);
  EXPECT_EQ(after.to_json(), before.to_json());
  EXPECT_EQ(after.report(), before.report());
  EXPECT_EQ(after.num_ops, 1u);
  EXPECT_EQ(after.start, before.start);
  EXPECT_EQ(after.by_backend[0].path, "gpufile-posix");
  // Still a reading of the monitor: a baseline for an interval.
  f.pread(buf.data(), buf.size(), 0).get();
  EXPECT_EQ(monitor.since(after).num_ops, 1u);

  auto broken = bytes;
  broken[0]   = std::byte{'X'};
  EXPECT_THROW((void)Summary::deserialize(broken), std::invalid_argument);
  EXPECT_THROW((void)Summary::deserialize({}), std::invalid_argument);
  // A summary edited by hand renders what it holds, and is no baseline.
  auto edited    = before;
  edited.num_ops = 41;
  EXPECT_NE(edited.to_json().find("\"num_ops\": 41"), std::string::npos);
  EXPECT_THROW((void)monitor.since(edited), std::invalid_argument);
}

TEST_F(KvikioStatistics, a_reported_operation_reaches_the_summaries_once_they_watch)
{
  // Nothing is watching: a recorder reports nothing and costs nothing.
  EXPECT_FALSE(kvikio::detail::monitoring_enabled());
  SummaryMonitor const monitor;
  EXPECT_TRUE(kvikio::detail::monitoring_enabled());
  {
    kvikio::detail::LogicalObservationRecorder gds{
      IoBackend::GDS, kvikio::TransferDirection::READ, kvikio::MemoryKind::DEVICE, 0, 1024};
    gds.finish(1000);
    kvikio::detail::LogicalObservationRecorder failed{
      IoBackend::MMAP, kvikio::TransferDirection::READ, kvikio::MemoryKind::HOST, 0, 64};
    failed.finish_with_failure();
  }
  auto const s = monitor.get();
  EXPECT_EQ(s.num_ops, 2u);
  EXPECT_EQ(s.num_errors, 1u);
  EXPECT_EQ(s.bytes_requested, 1024u + 64u);
  EXPECT_EQ(s.bytes_transferred, 1000u);
  auto const& gds = s.by_backend[static_cast<std::size_t>(IoBackend::GDS)];
  EXPECT_EQ(gds.num_ops, 1u);
  EXPECT_EQ(gds.path, "cufile-nvfs");
  EXPECT_NE(gds.reason.find("reported by the caller"), std::string::npos) << gds.reason;
}

TEST(KvikioCounters, counters_difference_saturate_and_format)
{
  auto const now = kvikio::statistics::counters();
  EXPECT_TRUE(now.since(now).empty());
  kvikio::statistics::Counters c;
  EXPECT_EQ(c.report(), "");
  EXPECT_NE(c.report(kvikio::statistics::ReportRows::ALL).find("http retries"), std::string::npos);
  c.http_retries       = 3;
  c.http_retry_backoff = std::chrono::milliseconds{250};
  EXPECT_NE(c.report().find("3 retries, 250 ms backoff"), std::string::npos) << c.report();
  EXPECT_NE(c.to_json().find("\"http_retry_backoff_ns\": 250000000"), std::string::npos);
  EXPECT_TRUE(kvikio::statistics::Counters{}.since(c).empty());
}

TEST(KvikioObservation, names_and_the_clock_anchor)
{
  EXPECT_EQ(kvikio::to_string(IoBackend::REMOTE_HDFS), "REMOTE_HDFS");
  EXPECT_EQ(kvikio::to_string(kvikio::MemoryKind::HOST), "HOST");
  auto const anchor = kvikio::ClockAnchor::now();
  // The steady reading is this process's std::chrono::steady_clock.
  auto const gap = kvikio::Clock::now() - anchor.steady;
  EXPECT_GE(gap, kvikio::Clock::duration::zero());
  EXPECT_LT(gap, std::chrono::seconds{1});
  EXPECT_EQ(anchor.to_wall_clock(anchor.steady + std::chrono::seconds{2}) - anchor.wall,
            std::chrono::seconds{2});
}

}  // namespace
