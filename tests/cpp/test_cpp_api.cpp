// The C++ API (gpufile.hpp) and KvikIO's C++ names (kvikio/*.hpp) on CPU: RAII handles,
// std::future results, the exception types with their messages and paths, scoped settings,
// Mmap, RemoteFile from a local HTTP server, the path report and observe.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gpufile/gpufile.hpp"
#include "kvikio/defaults.hpp"
#include "kvikio/file_handle.hpp"
#include "kvikio/file_utils.hpp"
#include "kvikio/mmap.hpp"
#include "kvikio/remote_handle.hpp"
#include "support.hpp"

namespace {

class CppApi : public ::testing::Test {
 protected:
  void SetUp() override
  {
    data = support::pattern(1 << 20);
    path = dir.file("data.bin");
    support::write_file(path, data);
  }
  support::TempDir dir;
  std::vector<unsigned char> data;
  std::string path;
};

}  // namespace

TEST_F(CppApi, pread_and_pwrite_return_std_futures_of_the_bytes)
{
  auto const out = dir.file("out.bin");
  {
    gpufile::File f(out, "w");
    std::future<std::size_t> n = f.pwrite(data.data(), data.size(), 0, {4096, -1, -1});
    EXPECT_EQ(n.get(), data.size());
  }
  gpufile::File f(out, "r");
  EXPECT_EQ(f.nbytes(), data.size());
  std::vector<unsigned char> buf(data.size());
  auto fut = f.pread(buf.data(), buf.size());
  EXPECT_EQ(fut.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(fut.get(), data.size());
  EXPECT_EQ(buf, data);
  EXPECT_EQ(f.read(buf.data(), 10, 5), 10u);
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 5, 10));
}

TEST_F(CppApi, errors_are_typed_exceptions_with_status_errno_and_path)
{
  auto const missing = dir.file("missing.bin");
  try {
    gpufile::File f(missing, "r");
    FAIL() << "opened a missing file";
  } catch (gpufile::NotFoundError const& e) {
    EXPECT_EQ(e.status(), GPUFILE_NOT_FOUND);
    EXPECT_EQ(e.errno_value(), 2);
    EXPECT_EQ(e.path(), missing);
  }
  gpufile::File f(path, "r");
  std::vector<unsigned char> buf(100, 7);
  try {
    (void)f.pread(buf.data(), buf.size(), data.size() - 1);
    FAIL() << "read past the end";
  } catch (gpufile::EndOfFileError const& e) {
    EXPECT_EQ(e.path(), path);
  }
  EXPECT_EQ(buf, std::vector<unsigned char>(100, 7));
  EXPECT_THROW(gpufile::File(path, "x"), gpufile::BadArgumentError);
  EXPECT_THROW(gpufile::File(dir.path().string(), "r"), gpufile::IsADirectoryError);
  EXPECT_THROW((void)f.write(buf.data(), 1, 0), gpufile::PermissionError);
  gpufile::File closed;
  EXPECT_THROW((void)closed.nbytes(), gpufile::BadArgumentError);
}

TEST_F(CppApi, a_moved_from_file_is_closed_and_the_moved_to_one_reads)
{
  gpufile::File a(path, "r");
  gpufile::File b = std::move(a);
  EXPECT_TRUE(a.closed());
  EXPECT_FALSE(b.closed());
  EXPECT_EQ(b.nbytes(), data.size());
}

TEST_F(CppApi, scoped_settings_are_restored_on_scope_exit_also_by_an_exception)
{
  auto const before = gpufile::settings::get_int("task_size");
  try {
    gpufile::ScopedSettings s{{"task_size", "64KiB"}, {"compat_mode", "ON"}};
    EXPECT_EQ(gpufile::settings::get_int("task_size"), 65536);
    EXPECT_EQ(gpufile::settings::get_str("compat_mode"), "ON");
    throw std::runtime_error("leave the scope");
  } catch (std::runtime_error const&) {
  }
  EXPECT_EQ(gpufile::settings::get_int("task_size"), before);
  EXPECT_THROW(gpufile::ScopedSettings({{"no_such_setting", "1"}}), gpufile::BadArgumentError);
  EXPECT_EQ(gpufile::settings::get_int("task_size"), before);
}

TEST_F(CppApi, many_ranges_and_the_path_report)
{
  gpufile::File f(path, "r");
  std::vector<unsigned char> buf(64);
  std::vector<gpufile::Range> ranges{{1000, 32, 32}, {0, 32, 0}};
  EXPECT_EQ(f.pread_ranges(buf.data(), buf.size(), ranges).get(), 64u);
  EXPECT_EQ(0, std::memcmp(buf.data() + 32, data.data() + 1000, 32));
  auto const p = f.io_path(gpufile::Memory::Host, 1 << 20);
  EXPECT_EQ(p.backend, gpufile::Backend::Posix);
  EXPECT_EQ(p.backend_name(), "gpufile-posix");
  EXPECT_FALSE(p.reason.empty());
  auto const q = f.io_path(false, buf.data(), buf.size(), ranges);
  EXPECT_EQ(q.backend, gpufile::Backend::Posix);
}

TEST_F(CppApi, mmap_reads_and_refuses_out_of_bound)
{
  gpufile::Mmap m(path, "r");
  EXPECT_EQ(m.initial_map_size(), data.size());
  std::vector<unsigned char> buf(100);
  EXPECT_EQ(m.read(buf.data(), buf.size(), 100, 777), 100u);
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 777, 100));
  EXPECT_THROW((void)m.read(buf.data(), buf.size(), 100, data.size()), gpufile::OutOfRangeError);
  try {
    (void)m.read(buf.data(), buf.size(), 0, data.size() + 1);
    FAIL() << "read past the end of the file";
  } catch (gpufile::BadArgumentError const& e) {  // an OutOfRangeError is one too
    EXPECT_EQ(e.status(), GPUFILE_OUT_OF_RANGE);
    EXPECT_EQ(e.errno_value(), EINVAL);
    EXPECT_NE(std::string(e.what()).find("Offset is past the end of file"), std::string::npos);
  }
  EXPECT_THROW(gpufile::Mmap(path, "r", data.size() + 1), gpufile::OutOfRangeError);
  EXPECT_THROW(gpufile::Mmap(path, "r", std::nullopt, data.size()), gpufile::OutOfRangeError);
  EXPECT_THROW(gpufile::Mmap(path, "r", 0), gpufile::BadArgumentError);
}

TEST_F(CppApi, remote_file_reads_a_local_server_and_observe_counts_it)
{
  support::HttpServer server(dir.path().string());
  auto obs = gpufile::observe();
  auto r = gpufile::RemoteFile::open(server.url() + "/data.bin");
  EXPECT_EQ(r.nbytes(), data.size());
  EXPECT_EQ(r.remote_endpoint_type(), gpufile::RemoteEndpointType::HTTP);
  std::vector<unsigned char> buf(data.size());
  EXPECT_EQ(r.pread(buf.data(), buf.size(), 0, 1 << 18).get(), data.size());
  EXPECT_EQ(buf, data);
  auto const report = obs.end();
  EXPECT_EQ(report.front(), '{');
  EXPECT_THROW(gpufile::RemoteFile::open(server.url() + "/data.bin",
                                         gpufile::RemoteEndpointType::HTTP,
                                         std::vector<gpufile::RemoteEndpointType>{}),
               gpufile::BadArgumentError);
  EXPECT_THROW(gpufile::RemoteFile::open(server.url() + "/missing"), gpufile::RemoteError);
}

TEST_F(CppApi, remote_file_says_where_its_credentials_come_from_never_the_credentials)
{
  support::HttpServer server(dir.path().string());
  EXPECT_EQ(gpufile::RemoteFile::open(server.url() + "/data.bin").credentials_source(), "");
  gpufile::S3Options o;
  o.region            = "us-east-1";
  o.access_key_id     = "AKIDEXAMPLE";
  o.secret_access_key = "wJalrXUtnFEMI-secret";
  o.endpoint_url      = server.url();
  // With its size given, opening asks the server nothing.
  auto r = gpufile::RemoteFile::open_s3("s3://bkt/data.bin", o, data.size());
  auto const source = r.credentials_source();
  EXPECT_EQ(source, "arguments or environment");
  EXPECT_EQ(source.find("wJalr"), std::string::npos);
  EXPECT_EQ(r.url().find("wJalr"), std::string::npos);
}

TEST_F(CppApi, check_reports_json)
{
  auto const json = gpufile::check(path);
  ASSERT_FALSE(json.empty());
  EXPECT_EQ(json.front(), '{');
}

TEST_F(CppApi, stream_ordered_reads_and_writes_of_host_memory)
{
  gpufile::File f(path, "r");
  std::vector<unsigned char> buf(3000);
  auto t = f.read_async(buf.data(), buf.size(), 77, nullptr);
  EXPECT_EQ(t.bytes.get(), buf.size());
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 77, buf.size()));
  EXPECT_NE(t.order, gpufile::StreamOrder::Staged);  // host memory is never staged
  // Past the end of the file as it is at the call: refused at the call, the buffer untouched.
  std::fill(buf.begin(), buf.end(), 7);
  EXPECT_THROW(f.read_async(buf.data(), buf.size(), data.size() - 1, nullptr),
               gpufile::EndOfFileError);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](unsigned char c) { return c == 7; }));

  // KvikIO's by-value stream-ordered calls: StreamFuture waits for the queued transfer.
  auto const out = dir.file("sk.bin");
  {
    kvikio::FileHandle w(out, "w", kvikio::FileHandle::m644, kvikio::CompatMode::ON);
    auto wf = w.write_async(data.data(), 4096, 100, 0, nullptr);
    EXPECT_EQ(wf.check_bytes_done(), 4096u);
    EXPECT_EQ(wf.check_bytes_done(), 4096u);  // asked again: the same answer
  }
  kvikio::FileHandle r(out, "r");
  std::vector<unsigned char> back(4096);
  auto rf = r.read_async(back.data(), back.size(), 100, 0, nullptr);
  EXPECT_EQ(rf.check_bytes_done(), 4096u);
  EXPECT_EQ(0, std::memcmp(back.data(), data.data(), back.size()));
  // Past the end at the call: thrown by the call (as KvikIO's compat path, which reads there).
  EXPECT_THROW((void)r.read_async(back.data(), back.size(), 1000, 0, nullptr),
               kvikio::CUfileException);
  EXPECT_THROW((void)r.read_async(back.data(), 8, -1, 0, nullptr), std::invalid_argument);
}

TEST_F(CppApi, kvikio_file_handle_reads_writes_and_reports_like_kvikio)
{
  auto const out = dir.file("k.bin");
  {
    kvikio::FileHandle f(out, "w", kvikio::FileHandle::m644, kvikio::CompatMode::ON);
    EXPECT_EQ(f.pwrite(data.data(), data.size(), 0, 1 << 16).get(), data.size());
    EXPECT_TRUE(f.is_compat_mode_preferred());
    EXPECT_GE(f.fd(), 0);
  }
  kvikio::FileHandle f(out, "r");
  EXPECT_EQ(f.nbytes(), data.size());
  std::vector<unsigned char> buf(data.size());
  EXPECT_EQ(f.pread(buf.data(), buf.size()).get(), data.size());
  EXPECT_EQ(buf, data);
  EXPECT_EQ(f.read(buf.data(), 100, 10, 0), 100u);
  EXPECT_TRUE(kvikio::is_host_memory(buf.data()));
  f.close();
  EXPECT_TRUE(f.closed());
  EXPECT_THROW(kvikio::FileHandle(dir.file("missing"), "r"), kvikio::GenericSystemError);
  EXPECT_THROW(kvikio::defaults::set_task_size(0), std::invalid_argument);
  auto const [cached, total] = kvikio::get_page_cache_info(out);
  EXPECT_EQ(total, (data.size() + kvikio::get_page_size() - 1) / kvikio::get_page_size());
  EXPECT_LE(cached, total);
}

namespace {
/** How often `needle` occurs in `text`. */
std::size_t occurrences(std::string const& text, std::string const& needle)
{
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}
}  // namespace

TEST_F(CppApi, an_os_error_names_the_path_once_and_the_errno_text_once)
{
  // std::system_error appends the errno's text to the message it is given, so KvikIO's
  // GenericSystemError must be given gpufile's message without that text.
  auto const missing       = dir.file("missing.bin");
  std::string const enoent = std::strerror(ENOENT);
  std::string const eisdir = std::strerror(EISDIR);
  auto expect_once = [](std::string const& what, std::string const& p, std::string const& text) {
    EXPECT_EQ(occurrences(what, p), 1u) << what;
    EXPECT_EQ(occurrences(what, text), 1u) << what;
  };
  try {
    gpufile::File f(missing, "r");
    FAIL() << "opened a missing file";
  } catch (gpufile::NotFoundError const& e) {
    expect_once(e.what(), missing, enoent);
  }
  try {
    kvikio::FileHandle f(missing, "r");
    FAIL() << "opened a missing file";
  } catch (kvikio::GenericSystemError const& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    expect_once(e.what(), missing, enoent);
  }
  try {
    kvikio::FileHandle f(dir.path().string(), "r");
    FAIL() << "opened a directory";
  } catch (kvikio::GenericSystemError const& e) {
    EXPECT_EQ(e.code(), std::errc::is_a_directory);
    expect_once(e.what(), dir.path().string(), eisdir);
  }
  try {
    (void)kvikio::get_page_cache_info(missing);
    FAIL() << "a missing file's page cache";
  } catch (kvikio::GenericSystemError const& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    expect_once(e.what(), missing, enoent);
  }
}

TEST_F(CppApi, kvikio_page_cache_helpers_refuse_a_fifo_at_once)
{
  auto const fifo = dir.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  alarm(30);  // an open that waits for a writer ends the program instead of hanging it
  try {
    (void)kvikio::get_page_cache_info(fifo);
    ADD_FAILURE() << "a FIFO was taken";
  } catch (kvikio::GenericSystemError const& e) {
    EXPECT_EQ(e.code().value(), ESPIPE);
    EXPECT_NE(std::string(e.what()).find("is a FIFO"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kvikio::drop_file_page_cache(fifo), kvikio::GenericSystemError);
  alarm(0);
}

TEST_F(CppApi, kvikio_mmap_and_remote_handle)
{
  kvikio::MmapHandle m(path, "r", 8192, 0);
  std::vector<unsigned char> buf(8192);
  EXPECT_EQ(m.read(buf.data(), 8192), 8192u);
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data(), 8192));
  support::HttpServer server(dir.path().string());
  auto r = kvikio::RemoteHandle::open(server.url() + "/data.bin");
  EXPECT_EQ(r.remote_endpoint_type(), kvikio::RemoteEndpointType::HTTP);
  EXPECT_EQ(r.read(buf.data(), 4096, 100), 4096u);
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 100, 4096));
  EXPECT_THROW((void)r.read(buf.data(), 100, data.size()), std::invalid_argument);
  // An offset whose sum with the size wraps past SIZE_MAX is refused the same way, before any
  // request (the check compared the wrapped sum, and the read went on).
  EXPECT_THROW((void)r.read(buf.data(), 4, std::numeric_limits<std::size_t>::max() - 1),
               std::invalid_argument);
  kvikio::RemoteHandle h(std::make_unique<kvikio::HttpEndpoint>(server.url() + "/data.bin"));
  EXPECT_EQ(h.nbytes(), data.size());
}

namespace {

/** Runs `f`, expecting an exception of type E whose what() holds `text`. */
template <typename E>
void expect_throw(std::function<void()> const& f, std::string const& text)
{
  try {
    f();
    ADD_FAILURE() << "nothing thrown; expected: " << text;
  } catch (E const& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "what(): " << e.what();
  } catch (std::exception const& e) {
    ADD_FAILURE() << "another exception type: " << e.what();
  }
}

}  // namespace

TEST_F(CppApi, kvikio_mmap_handle_refuses_bad_regions_and_flags_with_kvikios_types)
{
  auto const size = data.size();
  expect_throw<std::out_of_range>([&] { kvikio::MmapHandle(path, "r", size + 1); },
                                  "Mapped region is past the end of file");
  expect_throw<std::out_of_range>([&] { kvikio::MmapHandle(path, "r", std::nullopt, size); },
                                  "Offset must be less than the file size");
  expect_throw<std::invalid_argument>([&] { kvikio::MmapHandle(path, "r", 0); },
                                      "Mapped region should not be zero byte");
  // No mapping type: what mmap(2) answers (EINVAL), as KvikIO hands the flags to it.
  for (int flags : {-1, 0, MAP_POPULATE}) {
    try {
      kvikio::MmapHandle(path, "r", std::nullopt, 0, kvikio::FileHandle::m644, flags);
      ADD_FAILURE() << "map_flags " << flags << " accepted";
    } catch (kvikio::GenericSystemError const& e) {
      EXPECT_EQ(e.code().value(), EINVAL);
      EXPECT_NE(std::string(e.what()).find("Invalid argument"), std::string::npos) << e.what();
    }
  }
  // A mapping type with a flag gpufile refuses: the core's bad argument.
  expect_throw<std::invalid_argument>(
    [&] {
      kvikio::MmapHandle(path, "r", std::nullopt, 0, kvikio::FileHandle::m644,
                         MAP_PRIVATE | MAP_FIXED);
    },
    "MAP_FIXED");
  kvikio::MmapHandle shared(path, "r", 4096, 0, kvikio::FileHandle::m644, MAP_SHARED);
  EXPECT_EQ(shared.initial_map_size(), 4096u);

  kvikio::MmapHandle m(path, "r", 1024, 512);
  std::vector<unsigned char> buf(size, 7);
  for (auto [n, offset] : {std::pair<std::size_t, std::size_t>{1024, size},  // right bound
                           {0, 512 + 1024 + 1},                               // left bound
                           {1024, 512 - 128},                                 // before the region
                           {1024 + 128, 512}}) {                              // too long
    expect_throw<std::out_of_range>([&] { m.read(buf.data(), n, offset); }, "Read is out of bound");
  }
  kvikio::MmapHandle whole(path, "r");
  expect_throw<std::out_of_range>([&] { whole.read(buf.data(), 0, size + 1); },
                                  "Offset is past the end of file");
  EXPECT_EQ(buf, std::vector<unsigned char>(size, 7));
  EXPECT_EQ(m.read(buf.data(), 0, 512 + 1024), 0u);
  EXPECT_EQ(whole.read(buf.data(), 0, size), 0u);
}

TEST_F(CppApi, save_file_writes_the_safetensors_bytes_and_a_refusal_keeps_the_file)
{
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  std::vector<std::uint8_t> flags = {1, 0, 1};
  std::vector<gpufile::TensorView> tensors = {
    {"flags", "U8", {3}, flags.data(), flags.size()},
    {"w", "F32", {2, 3}, w.data(), w.size() * sizeof(float)}};
  auto const path = dir.file("model.safetensors");
  gpufile::save_file(path, tensors, {{"format", "pt"}});
  // The header's length, its JSON (as the safetensors package writes it: F32 before U8, the
  // larger alignment first), spaces to a multiple of 8, then the data.
  auto const file = support::read_file(path);
  ASSERT_GE(file.size(), 8u);
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  ASSERT_EQ(file.size(), 8 + n + 27);
  std::string const header(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(header.rfind(R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],)"
                         R"("data_offsets":[0,24]},"flags":{"dtype":"U8","shape":[3],)"
                         R"("data_offsets":[24,27]}})",
                         0),
            0u)
    << header;
  EXPECT_EQ(0, std::memcmp(file.data() + 8 + n, w.data(), 24));
  EXPECT_EQ(0, std::memcmp(file.data() + 8 + n + 24, flags.data(), 3));
  // A size its shape does not make: an exception, and the file as it was.
  std::vector<gpufile::TensorView> bad = {{"w", "F32", {2, 3}, w.data(), 20}};
  EXPECT_THROW(gpufile::save_file(path, bad), gpufile::BadArgumentError);
  EXPECT_EQ(support::read_file(path), file);
}

TEST_F(CppApi, save_checkpoint_writes_hugging_face_shards_and_an_index)
{
  // Three tensors of 4,000 bytes and shards of at most 5,000: one tensor a shard, each file's
  // data its last 4,000 bytes (a safetensors file: header length, header, data).
  std::vector<std::vector<unsigned char>> bytes;
  std::vector<gpufile::TensorView> tensors;
  for (int i = 0; i < 3; ++i) {
    auto b = support::pattern(4000);
    for (auto& c : b) { c = static_cast<unsigned char>(c + i); }
    bytes.push_back(std::move(b));
  }
  for (int i = 0; i < 3; ++i) {
    tensors.push_back(
      {"t" + std::to_string(i), "F32", {1000}, bytes[i].data(), bytes[i].size()});
  }
  auto const ck = dir.file("ck");
  gpufile::save_checkpoint(ck, tensors, "5000", {{"step", "7"}});
  auto const index = support::read_file(ck + "/model.safetensors.index.json");
  std::string const text(index.begin(), index.end());
  EXPECT_NE(text.find("\"step\": \"7\""), std::string::npos) << text;
  for (int i = 0; i < 3; ++i) {
    auto const name = "model-0000" + std::to_string(i + 1) + "-of-00003.safetensors";
    EXPECT_NE(text.find("\"t" + std::to_string(i) + "\": \"" + name + "\""), std::string::npos)
      << text;
    auto const file = support::read_file(ck + "/" + name);
    ASSERT_GE(file.size(), 4008u);
    EXPECT_EQ(0, std::memcmp(file.data() + file.size() - 4000, bytes[i].data(), 4000));
  }
  // A refused tensor: an exception, and the checkpoint as it was.
  std::vector<gpufile::TensorView> bad = {{"x", "NOT_A_DTYPE", {4}, bytes[0].data(), 4}};
  EXPECT_THROW(gpufile::save_checkpoint(ck, bad), gpufile::BadArgumentError);
  EXPECT_EQ(support::read_file(ck + "/model.safetensors.index.json"), index);
}

TEST_F(CppApi, load_checkpoint_fills_the_callers_buffers_and_a_refusal_reads_nothing)
{
  // Three tensors in three shards (as the save test writes them), loaded back into buffers of
  // one arena, back to back, and one alone.
  std::vector<std::vector<unsigned char>> bytes;
  std::vector<gpufile::TensorView> tensors;
  for (int i = 0; i < 3; ++i) {
    auto b = support::pattern(4000);
    for (auto& c : b) { c = static_cast<unsigned char>(c + 3 * i); }
    bytes.push_back(std::move(b));
  }
  for (int i = 0; i < 3; ++i) {
    tensors.push_back(
      {"t" + std::to_string(i), "F32", {1000}, bytes[i].data(), bytes[i].size()});
  }
  auto const ck = dir.file("ck");
  gpufile::save_checkpoint(ck, tensors, "5000");
  std::vector<unsigned char> arena(8000, 0);
  std::vector<unsigned char> alone(4000, 0);
  gpufile::load_checkpoint(ck, {{"t2", arena.data(), 4000},
                                {"t0", arena.data() + 4000, 4000},
                                {"t1", alone.data(), 4000}});
  EXPECT_EQ(0, std::memcmp(arena.data(), bytes[2].data(), 4000));
  EXPECT_EQ(0, std::memcmp(arena.data() + 4000, bytes[0].data(), 4000));
  EXPECT_EQ(alone, bytes[1]);
  // A name the checkpoint lacks, or a size other than the tensor's: an exception naming the
  // tensor, and no byte read.
  std::vector<unsigned char> untouched(4000, 9);
  try {
    gpufile::load_checkpoint(ck, {{"t0", untouched.data(), 4000}, {"nope", alone.data(), 4}});
    ADD_FAILURE() << "no exception";
  } catch (gpufile::BadArgumentError const& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor named \"nope\""), std::string::npos)
      << e.what();
  }
  EXPECT_THROW(gpufile::load_checkpoint(ck, {{"t0", untouched.data(), 3999}}),
               gpufile::BadArgumentError);
  EXPECT_EQ(untouched, std::vector<unsigned char>(4000, 9));
}

// KvikIO 26.10's reactor settings are gpufile's process settings (the C ABI's by name see what
// the shim sets), with KvikIO's defaults, errors and rule: fixed once a remote read has run
// under MULTI_POLL (std::runtime_error), never by a read under EASY_THREADPOOL.
TEST_F(CppApi, kvikio_remote_reactor_settings_are_gpufiles_with_kvikios_rules)
{
  using kvikio::defaults;
  using kvikio::RemoteIOBackend;
  using kvikio::RemoteReactorDispatch;
  EXPECT_EQ(defaults::remote_io_num_reactors(), 1u);
  EXPECT_EQ(defaults::remote_io_reactor_dispatch(), RemoteReactorDispatch::PER_CHUNK);
  EXPECT_EQ(defaults::remote_io_max_concurrent_requests(), 256u);
  defaults::set_remote_io_num_reactors(3);
  EXPECT_EQ(gpufile::settings::get_int("remote_io_num_reactors"), 3);
  defaults::set_remote_io_reactor_dispatch(RemoteReactorDispatch::PER_PREAD);
  EXPECT_EQ(gpufile::settings::get_str("remote_io_reactor_dispatch"), "PER_PREAD");
  EXPECT_EQ(defaults::remote_io_reactor_dispatch(), RemoteReactorDispatch::PER_PREAD);
  defaults::set_remote_io_max_concurrent_requests(0);  // 0: no limit
  EXPECT_EQ(defaults::remote_io_max_concurrent_requests(), 0u);
  EXPECT_THROW(defaults::set_remote_io_num_reactors(0), std::invalid_argument);
  EXPECT_THROW(defaults::set_remote_io_max_concurrent_requests(SIZE_MAX), std::invalid_argument);
  EXPECT_THROW(defaults::set_remote_io_reactor_dispatch(static_cast<RemoteReactorDispatch>(2)),
               std::invalid_argument);
  EXPECT_EQ(defaults::remote_io_num_reactors(), 3u);

  ASSERT_EQ(setenv("TEST_KVIKIO_SHIM_ENUM", " per_pread ", 1), 0);
  EXPECT_EQ(kvikio::getenv_or("TEST_KVIKIO_SHIM_ENUM", RemoteReactorDispatch::PER_CHUNK),
            RemoteReactorDispatch::PER_PREAD);
  ASSERT_EQ(setenv("TEST_KVIKIO_SHIM_ENUM", "Multi_Poll", 1), 0);
  EXPECT_EQ(kvikio::getenv_or("TEST_KVIKIO_SHIM_ENUM", RemoteIOBackend::EASY_THREADPOOL),
            RemoteIOBackend::MULTI_POLL);
  EXPECT_THROW((void)kvikio::getenv_or("TEST_KVIKIO_SHIM_ENUM",
                                       RemoteReactorDispatch::PER_CHUNK),
               std::invalid_argument);
  unsetenv("TEST_KVIKIO_SHIM_ENUM");

  support::HttpServer server(dir.path().string());
  auto r = kvikio::RemoteHandle::open(server.url() + "/data.bin");
  std::vector<unsigned char> buf(4096);
  EXPECT_EQ(r.read(buf.data(), buf.size(), 0), buf.size());  // EASY_THREADPOOL: no pool
  defaults::set_remote_io_num_reactors(2);
  defaults::set_remote_io_backend(RemoteIOBackend::MULTI_POLL);
  EXPECT_EQ(r.read(buf.data(), buf.size(), 0), buf.size());
  expect_throw<std::runtime_error>([] { defaults::set_remote_io_num_reactors(4); },
                                   "remote_io_num_reactors cannot be changed after the "
                                   "MULTI_POLL reactor pool has already started");
  expect_throw<std::runtime_error>(
    [] { defaults::set_remote_io_reactor_dispatch(RemoteReactorDispatch::PER_CHUNK); },
    "remote_io_reactor_dispatch cannot be changed");
  expect_throw<std::runtime_error>([] { defaults::set_remote_io_max_concurrent_requests(8); },
                                   "remote_io_max_concurrent_requests cannot be changed");
  EXPECT_EQ(defaults::remote_io_num_reactors(), 2u);
  defaults::set_remote_io_backend(RemoteIOBackend::EASY_THREADPOOL);  // other settings stay free
  EXPECT_EQ(defaults::remote_io_backend(), RemoteIOBackend::EASY_THREADPOOL);
}
