// The C++ layers under pressure and refusal: a new file's mode as open(2) gives it, scoped
// settings undone when a later entry is refused, many pending futures without a thread each
// (also under a low RLIMIT_NPROC), and a batch refused before any of its operations starts.
#include <fcntl.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpufile/gpufile.hpp"
#include "kvikio/batch.hpp"
#include "kvikio/file_handle.hpp"
#include "support.hpp"

namespace {

/** Sets the umask for a scope. */
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }
  ScopedUmask(ScopedUmask const&)            = delete;
  ScopedUmask& operator=(ScopedUmask const&) = delete;

 private:
  mode_t old_;
};

/** The permission and set-id bits of `path`. */
mode_t mode_of(std::string const& path)
{
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) { throw std::runtime_error("stat failed: " + path); }
  return st.st_mode & 07777;
}

/** The mode open(2) gives a file it creates with `mode` under the current umask. */
mode_t mode_open2_gives(std::string const& path, mode_t mode)
{
  int const fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (fd < 0) { throw std::runtime_error("open failed: " + path); }
  ::close(fd);
  return mode_of(path);
}

/** The threads of this process now. */
std::size_t threads_now()
{
  std::size_t n = 0;
  for ([[maybe_unused]] auto const& e : std::filesystem::directory_iterator("/proc/self/task")) {
    ++n;
  }
  return n;
}

/** The tasks (threads of every process) whose real user is `uid`, from /proc. */
std::size_t tasks_of_user(uid_t uid)
{
  std::size_t n = 0;
  for (auto const& e : std::filesystem::directory_iterator("/proc")) {
    auto const name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) { continue; }
    std::ifstream status(e.path() / "status");
    std::string line;
    long real_uid = -1, threads = 0;
    while (std::getline(status, line)) {
      if (line.rfind("Uid:", 0) == 0) { real_uid = std::stol(line.substr(4)); }
      if (line.rfind("Threads:", 0) == 0) { threads = std::stol(line.substr(8)); }
    }
    if (real_uid == static_cast<long>(uid)) { n += static_cast<std::size_t>(threads); }
  }
  return n;
}

constexpr std::size_t kPending = 300;
constexpr std::size_t kEach    = 1 << 20;
constexpr std::size_t kFile    = 16 << 20;

/**
 * Starts kPending reads of kEach bytes (offsets going round the file) and checks every byte;
 * the most threads the process had while they were pending, over `before`, is in `*extra`.
 */
void many_pending_reads(gpufile::File const& f,
                        std::vector<unsigned char> const& data,
                        std::size_t before,
                        std::size_t* extra)
{
  std::vector<unsigned char> buf(kPending * kEach);
  std::vector<gpufile::Future> futures;
  futures.reserve(kPending);
  std::size_t most = before;
  for (std::size_t i = 0; i < kPending; ++i) {
    futures.push_back(f.pread(buf.data() + i * kEach, kEach, (i * kEach) % kFile));
    if (i % 25 == 24) { most = std::max(most, threads_now()); }
  }
  most = std::max(most, threads_now());
  for (std::size_t i = 0; i < kPending; ++i) {
    ASSERT_EQ(futures[i].get(), kEach) << "read " << i;
    ASSERT_EQ(0, std::memcmp(buf.data() + i * kEach, data.data() + (i * kEach) % kFile, kEach))
      << "read " << i;
  }
  *extra = most - before;
}

/**
 * The body of the child process: kPending reads with RLIMIT_NPROC a little above the tasks
 * its user runs now; exits 0 when every read gave its bytes.
 */
[[noreturn]] void reads_under_a_process_limit(std::filesystem::path const& dir,
                                              std::string const& path,
                                              std::vector<unsigned char> const& data)
{
  gpufile::File f(path, "r");
  // The child leaves by _Exit, past every destructor, and as nobody could not remove root's
  // folder later: the folder it made for itself goes now (the open file stays readable).
  std::filesystem::remove_all(dir);
  // RLIMIT_NPROC does not bind root: the reads run as nobody (the file is open already).
  if (::geteuid() == 0 &&
      (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) {
    std::fprintf(stderr, "cannot become nobody\n");
    std::_Exit(2);
  }
  // Room for the engine's workers, not for a thread per pending request.
  rlim_t const limit = tasks_of_user(::getuid()) + 48;
  struct rlimit const rl {limit, limit};
  if (::setrlimit(RLIMIT_NPROC, &rl) != 0) { std::_Exit(3); }
  try {
    std::size_t extra = 0;
    many_pending_reads(f, data, threads_now(), &extra);
    std::_Exit(::testing::Test::HasFailure() ? 4 : 0);
  } catch (std::exception const& e) {
    std::fprintf(
      stderr, "under RLIMIT_NPROC %lu: %s\n", static_cast<unsigned long>(limit), e.what());
    std::_Exit(5);
  }
}

class CppReliability : public ::testing::Test {
 protected:
  support::TempDir dir;
};

}  // namespace

TEST_F(CppReliability, kvikio_file_handle_passes_its_mode_to_open_under_the_umask)
{
  ScopedUmask mask(077);
  auto const fresh = dir.file("fresh.bin");
  {
    kvikio::FileHandle f(fresh, "w", 0666);
  }
  EXPECT_EQ(mode_of(fresh), 0600u) << "0666 under umask 077";

  // Set-id bits: what open(2) itself keeps of them (the umask masks permission bits only).
  auto const reference = mode_open2_gives(dir.file("reference.bin"), 04666);
  auto const setuid    = dir.file("setuid.bin");
  {
    kvikio::FileHandle f(setuid, "w", 04666);
  }
  EXPECT_EQ(mode_of(setuid), reference) << "open(2) gave " << std::oct << reference;

  // The default mode is KvikIO's m644, under the umask too.
  auto const plain = dir.file("plain.bin");
  {
    kvikio::FileHandle f(plain, "w");
  }
  EXPECT_EQ(mode_of(plain), 0600u);

  // An existing file keeps its mode, as open(2) leaves it.
  ASSERT_EQ(::chmod(fresh.c_str(), 0640), 0);
  {
    kvikio::FileHandle f(fresh, "w", 0666);
  }
  EXPECT_EQ(mode_of(fresh), 0640u);

  // Bits outside the permission and set-id bits are refused, before the file is made.
  auto const bad = dir.file("bad.bin");
  EXPECT_THROW(kvikio::FileHandle(bad, "w", 0100644), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(bad));
}

TEST_F(CppReliability, gpufile_file_open_with_a_mode_is_open2_with_that_mode)
{
  ScopedUmask mask(027);
  auto const path = dir.file("c.bin");
  gpufile_file* f = nullptr;
  ASSERT_EQ(gpufile_file_open_mode(path.c_str(), "w+", 0666, &f), GPUFILE_OK);
  gpufile_file_close(f);
  EXPECT_EQ(mode_of(path), 0640u);
  EXPECT_EQ(gpufile_file_open_mode(dir.file("d.bin").c_str(), "w", 010000, &f),
            GPUFILE_BAD_ARGUMENT);
  EXPECT_NE(support::last_error().message.find("mode"), std::string::npos)
    << support::last_error().message;
}

TEST_F(CppReliability, scoped_settings_refused_part_way_restore_what_they_set)
{
  auto const task_size   = gpufile::settings::get_str("task_size");
  auto const num_threads = gpufile::settings::get_str("num_threads");
  EXPECT_THROW((gpufile::ScopedSettings{{"task_size", "1MiB"}, {"no_such_setting", "1"}}),
               gpufile::BadArgumentError);
  EXPECT_EQ(gpufile::settings::get_str("task_size"), task_size);
  EXPECT_THROW((gpufile::ScopedSettings{
                 {"task_size", "2MiB"}, {"num_threads", "3"}, {"num_threads", "-5"}}),
               gpufile::BadArgumentError);
  EXPECT_EQ(gpufile::settings::get_str("task_size"), task_size);
  EXPECT_EQ(gpufile::settings::get_str("num_threads"), num_threads);
}

TEST_F(CppReliability, hundreds_of_pending_preads_start_no_thread_each_and_read_every_byte)
{
  auto const data = support::pattern(kFile);
  auto const path = dir.file("many.bin");
  support::write_file(path, data);
  gpufile::File f(path, "r");
  // The engine's workers start with the first request.
  std::vector<unsigned char> warm(4096);
  ASSERT_EQ(f.pread(warm.data(), warm.size()).get(), warm.size());
  std::size_t extra = 0;
  many_pending_reads(f, data, threads_now(), &extra);
  // The workers are running already; a few threads more is a worker the engine adds, a thread
  // per pending future is hundreds.
  RecordProperty("threads_started", static_cast<int>(extra));
  EXPECT_LT(extra, 16u) << "threads started while " << kPending << " reads were pending";
}

TEST_F(CppReliability, a_future_callback_runs_once_when_its_request_has_ended)
{
  auto const data = support::pattern(kFile);
  auto const path = dir.file("cb.bin");
  support::write_file(path, data);
  gpufile_file* f = nullptr;
  ASSERT_EQ(gpufile_file_open(path.c_str(), "r", &f), GPUFILE_OK);
  std::vector<unsigned char> buf(kFile);
  gpufile_future* fut = nullptr;
  ASSERT_EQ(gpufile_file_pread(f, buf.data(), buf.size(), 0, &fut), GPUFILE_OK);
  struct Seen {
    gpufile_future* fut;
    std::promise<std::size_t> bytes;
    int calls = 0;
  } seen{fut, {}, 0};
  auto const callback = [](void* ctx) {
    auto* s = static_cast<Seen*>(ctx);
    ++s->calls;
    std::size_t n = 0;
    // The request has ended: its result is there at once.
    int done = 0;
    gpufile_future_done(s->fut, &done);
    s->bytes.set_value(done == 1 && gpufile_future_wait(s->fut, &n) == GPUFILE_OK ? n : 0);
  };
  auto answer = seen.bytes.get_future();
  ASSERT_EQ(gpufile_future_on_done(fut, callback, &seen), GPUFILE_OK);
  EXPECT_EQ(answer.get(), kFile);
  EXPECT_TRUE(buf == data);
  // Added once the request has ended, a callback runs at once, on this thread.
  std::promise<std::size_t> again;
  seen.bytes = std::move(again);
  ASSERT_EQ(gpufile_future_on_done(fut, callback, &seen), GPUFILE_OK);
  EXPECT_EQ(seen.calls, 2);
  EXPECT_EQ(gpufile_future_on_done(fut, nullptr, nullptr), GPUFILE_BAD_ARGUMENT);
  EXPECT_EQ(gpufile_future_free(fut), GPUFILE_OK);
  EXPECT_EQ(gpufile_future_on_done(fut, callback, &seen), GPUFILE_BAD_ARGUMENT);
  gpufile_file_close(f);
}

TEST_F(CppReliability, a_dropped_future_waits_for_its_request)
{
  auto const data = support::pattern(kFile);
  auto const path = dir.file("drop.bin");
  support::write_file(path, data);
  gpufile::File f(path, "r");
  for (int round = 0; round < 3; ++round) {
    std::vector<unsigned char> buf(kFile);
    {
      auto fut = f.pread(buf.data(), buf.size());
    }
    // The destructor returned once the request ended: every byte is there.
    EXPECT_TRUE(buf == data) << "round " << round;
  }
}

TEST_F(CppReliability, pending_preads_complete_under_a_low_process_limit)
{
  // A child process: fork and exec of this test, so that the engine starts afresh there.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto const data = support::pattern(kFile);
  auto const path = dir.file("nproc.bin");
  support::write_file(path, data);
  EXPECT_EXIT(reads_under_a_process_limit(dir.path(), path, data), ::testing::ExitedWithCode(0), "");
}

TEST_F(CppReliability, kvikio_batch_submit_refused_by_a_later_op_moves_no_byte)
{
  auto const data = support::pattern(1 << 16);
  auto const path = dir.file("batch.bin");
  auto const ro   = dir.file("batch-ro.bin");
  support::write_file(path, data);
  support::write_file(ro, data);
  kvikio::FileHandle f(path, "r+");
  kvikio::FileHandle readonly(ro, "r");
  kvikio::FileHandle closed(ro, "r");
  closed.close();
  std::vector<unsigned char> fresh(4096, 0xAB), into(4096);
  auto write_first = [&](kvikio::BatchOp bad) {
    return std::vector<kvikio::BatchOp>{
      {f, fresh.data(), 0, 0, fresh.size(), CUFILE_WRITE}, bad};
  };
  std::vector<std::pair<char const*, std::vector<kvikio::BatchOp>>> const refused = {
    {"a read past the end", write_first({f, into.data(), 1 << 16, 0, 4096, CUFILE_READ})},
    {"a write on an \"r\" handle", write_first({readonly, fresh.data(), 0, 0, 4096, CUFILE_WRITE})},
    {"a negative offset", write_first({f, into.data(), -1, 0, 16, CUFILE_READ})},
    {"a null buffer", write_first({f, nullptr, 0, 0, 16, CUFILE_READ})},
    {"a closed handle", write_first({closed, into.data(), 0, 0, 16, CUFILE_READ})},
  };
  for (auto const& [what, ops] : refused) {
    kvikio::BatchHandle batch(8);
    EXPECT_ANY_THROW(batch.submit(ops)) << what;
    batch.close();  // waits for anything started
    EXPECT_TRUE(support::read_file(path) == data) << what << ": the file changed";
  }
  // The same batch without the bad op runs.
  kvikio::BatchHandle batch(8);
  batch.submit({{f, fresh.data(), 0, 0, fresh.size(), CUFILE_WRITE}});
  auto const events = batch.status(1, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].status, CUFILE_COMPLETE);
  EXPECT_EQ(support::read_file(path).at(0), 0xAB);
}
