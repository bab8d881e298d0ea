// KvikIO's BatchHandle on CPU: a batch runs as one request per file handle, buffer and direction
// (gpufile_batch_submit, the core's batch), with KvikIO's events and status/cancel semantics.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpufile/gpufile.hpp"
#include "kvikio/batch.hpp"
#include "kvikio/file_handle.hpp"
#include "support.hpp"

namespace {

class KvikioBatch : public ::testing::Test {
 protected:
  support::TempDir dir;
};

/** The `ops` count of gpufile's own path in an observation's JSON: its requests. */
long posix_requests(std::string const& json)
{
  auto at = json.find("\"gpufile-posix\":{");
  if (at == std::string::npos) { return -1; }
  at = json.find("\"ops\":", at);
  return at == std::string::npos ? -1 : std::strtol(json.c_str() + at + 6, nullptr, 10);
}

/** `n` bytes of the support pattern, each xor `seed`. */
std::vector<unsigned char> pattern(std::size_t n, unsigned char seed)
{
  auto v = support::pattern(n);
  for (auto& b : v) {
    b ^= seed;
  }
  return v;
}

}  // namespace

TEST_F(KvikioBatch, a_batch_runs_as_one_request_per_file_buffer_and_direction)
{
  auto const a_bytes = pattern(1 << 20, 0);
  auto const b_bytes = pattern(1 << 20, 0x5C);
  support::write_file(dir.file("a.bin"), a_bytes);
  support::write_file(dir.file("b.bin"), b_bytes);
  support::write_file(dir.file("w.bin"), std::vector<unsigned char>(1 << 16));
  kvikio::FileHandle a(dir.file("a.bin"), "r");
  kvikio::FileHandle b(dir.file("b.bin"), "r");
  kvikio::FileHandle w(dir.file("w.bin"), "r+");
  std::vector<unsigned char> into_a(64 * 4096), into_b(8 * 1000), src(3 * 512, 0xC3);
  std::vector<kvikio::BatchOp> ops;
  std::vector<std::size_t> a_at;
  for (int i = 0; i < 64; ++i) {
    a_at.push_back(static_cast<std::size_t>(i * 7919 % 250) * 4096);
    ops.push_back({a, into_a.data(), static_cast<off_t>(a_at.back()), i * 4096, 4096, CUFILE_READ});
    if (i % 8 == 3) {
      ops.push_back({b, into_b.data(), 12345 + i / 8 * 3000, i / 8 * 1000, 1000, CUFILE_READ});
    }
    if (i % 20 == 5) {
      ops.push_back({w, src.data(), 9000 + i / 20 * 1000, i / 20 * 512, 512, CUFILE_WRITE});
    }
  }
  ASSERT_EQ(ops.size(), 75u);
  auto obs = gpufile::observe();
  kvikio::BatchHandle batch(128);
  batch.submit(ops);
  auto const events = batch.status(75, 75);
  auto const report = obs.end();
  // Three requests (one per file, buffer and direction), not one per operation.
  EXPECT_EQ(posix_requests(report), 3) << report;
  ASSERT_EQ(events.size(), ops.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].status, CUFILE_COMPLETE) << i;
    EXPECT_EQ(events[i].ret, ops[i].size) << i;
  }
  EXPECT_TRUE(batch.status(0, 10).empty());  // each operation is reported once
  for (std::size_t i = 0; i < 64; ++i) {
    EXPECT_EQ(std::memcmp(into_a.data() + i * 4096, a_bytes.data() + a_at[i], 4096), 0) << i;
  }
  for (std::size_t k = 0; k < 8; ++k) {
    EXPECT_EQ(std::memcmp(into_b.data() + k * 1000, b_bytes.data() + 12345 + k * 3000, 1000), 0);
  }
  auto const written = support::read_file(dir.file("w.bin"));
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(std::memcmp(written.data() + 9000 + k * 1000, src.data(), 512), 0) << k;
  }
}

TEST_F(KvikioBatch, status_reports_each_operation_once_and_at_most_max_nr)
{
  auto const bytes = pattern(1 << 20, 3);
  support::write_file(dir.file("d.bin"), bytes);
  kvikio::FileHandle f(dir.file("d.bin"), "r");
  std::vector<unsigned char> out(10 * 4096);
  std::vector<kvikio::BatchOp> ops;
  for (int i = 0; i < 10; ++i) {
    ops.push_back({f, out.data(), i * 8192, i * 4096, 4096, CUFILE_READ});
  }
  kvikio::BatchHandle batch(12);
  batch.submit(ops);
  // A second submission while the first is pending, within max_num_events.
  std::vector<unsigned char> more(2 * 100);
  batch.submit(
    {{f, more.data(), 7, 0, 100, CUFILE_READ}, {f, more.data(), 999, 100, 100, CUFILE_READ}});
  EXPECT_THROW(batch.submit({{f, more.data(), 0, 0, 1, CUFILE_READ}}), std::invalid_argument);
  auto const first = batch.status(4, 4);
  ASSERT_EQ(first.size(), 4u);
  auto const rest = batch.status(8, 20);
  ASSERT_EQ(rest.size(), 8u);
  for (auto const& e : rest) {
    EXPECT_EQ(e.status, CUFILE_COMPLETE);
  }
  EXPECT_EQ(rest.back().ret, 100u);
  EXPECT_TRUE(batch.status(1, 1).empty());
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(std::memcmp(out.data() + i * 4096, bytes.data() + i * 8192, 4096), 0) << i;
  }
  EXPECT_EQ(std::memcmp(more.data(), bytes.data() + 7, 100), 0);
  EXPECT_EQ(std::memcmp(more.data() + 100, bytes.data() + 999, 100), 0);
  // cancel() waits for what runs and drops the events not reported.
  batch.submit(ops);
  batch.cancel();
  EXPECT_TRUE(batch.status(0, 20).empty());
  batch.close();
  EXPECT_TRUE(batch.closed());
  EXPECT_THROW(batch.submit(ops), std::invalid_argument);
}

TEST_F(KvikioBatch, files_of_different_compat_modes_share_a_batch)
{
  auto const bytes = pattern(1 << 16, 9);
  support::write_file(dir.file("c.bin"), bytes);
  kvikio::FileHandle on(dir.file("c.bin"), "r", kvikio::FileHandle::m644, kvikio::CompatMode::ON);
  kvikio::FileHandle automatic(dir.file("c.bin"), "r", kvikio::FileHandle::m644,
                               kvikio::CompatMode::AUTO);
  std::vector<unsigned char> out(3 * 1000, 0x5A);
  kvikio::BatchHandle batch(4);
  // Reads into overlapping bytes through the two handles are refused, nothing read.
  EXPECT_THROW(batch.submit({{on, out.data(), 0, 0, 1000, CUFILE_READ},
                             {automatic, out.data(), 0, 500, 1000, CUFILE_READ}}),
               std::invalid_argument);
  EXPECT_EQ(out, std::vector<unsigned char>(3 * 1000, 0x5A));
  batch.submit({{on, out.data(), 100, 0, 1000, CUFILE_READ},
                {automatic, out.data(), 5000, 1000, 1000, CUFILE_READ},
                {on, out.data(), 20000, 2000, 1000, CUFILE_READ}});
  auto const events = batch.status(3, 3);
  ASSERT_EQ(events.size(), 3u);
  for (auto const& e : events) {
    EXPECT_EQ(e.status, CUFILE_COMPLETE);
    EXPECT_EQ(e.ret, 1000u);
  }
  EXPECT_EQ(std::memcmp(out.data(), bytes.data() + 100, 1000), 0);
  EXPECT_EQ(std::memcmp(out.data() + 1000, bytes.data() + 5000, 1000), 0);
  EXPECT_EQ(std::memcmp(out.data() + 2000, bytes.data() + 20000, 1000), 0);
}
