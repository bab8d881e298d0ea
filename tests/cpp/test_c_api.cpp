// The C API (gpufile.h) on CPU: host memory, many-range requests, Mmap, remote objects from a
// local HTTP server, the path reports, check and observe, and every bad input the issue names,
// each asserting the status, the errno where it says something, and the message.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpufile/gpufile.h"
#include "support.hpp"

using support::last_error;

namespace {

/** Asserts the last call failed with `status` and a message containing `text`. */
void expect_error(gpufile_status got, gpufile_status want, std::string const& text)
{
  EXPECT_EQ(got, want);
  auto const e = last_error();
  EXPECT_EQ(e.type, want);
  EXPECT_NE(e.message.find(text), std::string::npos) << "message: " << e.message;
}

class CApi : public ::testing::Test {
 protected:
  void SetUp() override
  {
    data = support::pattern(1 << 20);
    path = dir.file("data.bin");
    support::write_file(path, data);
    ASSERT_EQ(gpufile_file_open(path.c_str(), "r", &file), GPUFILE_OK);
  }
  void TearDown() override
  {
    if (file != nullptr) { gpufile_file_close(file); }
  }
  support::TempDir dir;
  std::vector<unsigned char> data;
  std::string path;
  gpufile_file* file{nullptr};
};

}  // namespace

TEST_F(CApi, abi_version_matches_the_header)
{
  EXPECT_EQ(gpufile_abi_version(), static_cast<uint32_t>(GPUFILE_ABI_VERSION));
}

TEST_F(CApi, blocking_and_future_reads_give_the_file_s_bytes)
{
  std::vector<unsigned char> buf(data.size());
  size_t n = 0;
  ASSERT_EQ(gpufile_file_read(file, buf.data(), buf.size(), 0, &n), GPUFILE_OK);
  EXPECT_EQ(n, data.size());
  EXPECT_EQ(buf, data);

  std::vector<unsigned char> part(1000);
  gpufile_future* fut = nullptr;
  ASSERT_EQ(gpufile_file_pread(file, part.data(), part.size(), 4097, &fut), GPUFILE_OK);
  ASSERT_EQ(gpufile_future_wait(fut, &n), GPUFILE_OK);
  EXPECT_EQ(n, 1000u);
  EXPECT_EQ(0, std::memcmp(part.data(), data.data() + 4097, 1000));
  EXPECT_EQ(gpufile_future_free(fut), GPUFILE_OK);
}

TEST_F(CApi, stream_ordered_calls_without_a_driver_wait_for_the_caller_and_say_so)
{
  // No CUDA driver here (or host memory and the legacy stream on a GPU machine): the transfer
  // still runs in stream order; without a driver the call itself waits, as the order says.
  std::vector<unsigned char> buf(5000, 0);
  gpufile_future* fut       = nullptr;
  gpufile_stream_order order = GPUFILE_STREAM_STAGED;
  ASSERT_EQ(gpufile_file_read_async(file, buf.data(), buf.size(), 123, nullptr, &fut, &order),
            GPUFILE_OK);
  size_t n = 0;
  ASSERT_EQ(gpufile_future_wait(fut, &n), GPUFILE_OK);
  EXPECT_EQ(n, buf.size());
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 123, buf.size()));
  EXPECT_NE(order, GPUFILE_STREAM_STAGED);  // host memory is never staged
  ASSERT_EQ(gpufile_future_free(fut), GPUFILE_OK);

  auto const out = dir.file("async.bin");
  gpufile_file* w = nullptr;
  ASSERT_EQ(gpufile_file_open(out.c_str(), "w", &w), GPUFILE_OK);
  ASSERT_EQ(gpufile_file_write_async(w, data.data(), 4096, 10, nullptr, &fut, nullptr), GPUFILE_OK);
  ASSERT_EQ(gpufile_future_wait(fut, &n), GPUFILE_OK);
  EXPECT_EQ(n, 4096u);
  ASSERT_EQ(gpufile_future_free(fut), GPUFILE_OK);
  ASSERT_EQ(gpufile_file_close(w), GPUFILE_OK);
  auto const written = support::read_file(out);
  ASSERT_EQ(written.size(), 4106u);
  EXPECT_EQ(0, std::memcmp(written.data() + 10, data.data(), 4096));

  // A read past the end of the file as it is at the call fails the call, with nothing queued;
  // so do bad arguments.
  expect_error(gpufile_file_read_async(file, buf.data(), buf.size(), data.size() - 10, nullptr,
                                       &fut, nullptr),
               GPUFILE_END_OF_FILE,
               "");
  expect_error(gpufile_file_read_async(file, buf.data(), buf.size(), 0, nullptr, nullptr, nullptr),
               GPUFILE_BAD_ARGUMENT,
               "out");
  expect_error(gpufile_file_read_async(file, nullptr, buf.size(), 0, nullptr, &fut, nullptr),
               GPUFILE_BAD_ARGUMENT,
               "buf is NULL");
  expect_error(gpufile_file_write_async(w, data.data(), 10, 0, nullptr, &fut, nullptr),
               GPUFILE_BAD_ARGUMENT,
               "is not an open gpufile_file");
}

TEST_F(CApi, a_many_range_read_gathers_each_range_at_its_buffer_offset)
{
  std::vector<unsigned char> buf(300, 0xEE);
  gpufile_range ranges[] = {{900000, 100, 200}, {7, 100, 0}, {65536, 50, 100}};
  gpufile_io_options opts{16, -1, -1};  // tasks of 16 bytes: several per range
  gpufile_future* fut = nullptr;
  ASSERT_EQ(gpufile_file_pread_ranges(file, buf.data(), buf.size(), ranges, 3, &opts, &fut),
            GPUFILE_OK);
  size_t n = 0;
  ASSERT_EQ(gpufile_future_wait(fut, &n), GPUFILE_OK);
  gpufile_future_free(fut);
  EXPECT_EQ(n, 250u);
  EXPECT_EQ(0, std::memcmp(buf.data() + 200, data.data() + 900000, 100));
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 7, 100));
  EXPECT_EQ(0, std::memcmp(buf.data() + 100, data.data() + 65536, 50));
  EXPECT_EQ(buf[150], 0xEE);  // the gap between ranges is left as it was
}

TEST_F(CApi, a_many_range_write_scatters_the_buffer_into_the_file)
{
  auto const out = dir.file("out.bin");
  gpufile_file* w = nullptr;
  ASSERT_EQ(gpufile_file_open(out.c_str(), "w+", &w), GPUFILE_OK);
  std::vector<unsigned char> buf = support::pattern(64);
  gpufile_range ranges[] = {{100, 32, 32}, {0, 32, 0}};
  gpufile_future* fut = nullptr;
  ASSERT_EQ(gpufile_file_pwrite_ranges(w, buf.data(), buf.size(), ranges, 2, nullptr, &fut),
            GPUFILE_OK);
  size_t n = 0;
  ASSERT_EQ(gpufile_future_wait(fut, &n), GPUFILE_OK);
  gpufile_future_free(fut);
  gpufile_file_close(w);
  auto got = support::read_file(out);
  ASSERT_EQ(got.size(), 132u);
  EXPECT_EQ(0, std::memcmp(got.data(), buf.data(), 32));
  EXPECT_EQ(0, std::memcmp(got.data() + 100, buf.data() + 32, 32));
}

TEST_F(CApi, null_pointers_are_bad_arguments_named_in_the_message)
{
  gpufile_file* f = nullptr;
  expect_error(gpufile_file_open(nullptr, "r", &f), GPUFILE_BAD_ARGUMENT, "path is NULL");
  expect_error(gpufile_file_open(path.c_str(), nullptr, &f), GPUFILE_BAD_ARGUMENT, "flags is NULL");
  expect_error(gpufile_file_open(path.c_str(), "r", nullptr), GPUFILE_BAD_ARGUMENT, "out is NULL");
  EXPECT_EQ(gpufile_last_error_errno(), EINVAL);
  size_t n = 0;
  expect_error(gpufile_file_read(file, nullptr, 10, 0, &n), GPUFILE_BAD_ARGUMENT, "buf is NULL");
  expect_error(gpufile_file_read(nullptr, &n, 1, 0, &n), GPUFILE_BAD_ARGUMENT, "file is NULL");
  gpufile_future* fut = nullptr;
  expect_error(gpufile_file_pread_ranges(file, &n, 8, nullptr, 2, nullptr, &fut),
               GPUFILE_BAD_ARGUMENT,
               "ranges is NULL (nranges 2)");
  expect_error(gpufile_settings_set_int(nullptr, 1), GPUFILE_BAD_ARGUMENT, "name is NULL");
  expect_error(gpufile_future_wait(nullptr, &n), GPUFILE_BAD_ARGUMENT, "future is NULL");
}

TEST_F(CApi, a_length_past_the_buffer_is_refused_and_the_buffer_is_left_alone)
{
  std::vector<unsigned char> buf(100, 0x5A);
  gpufile_range past[] = {{0, 60, 50}};
  gpufile_future* fut = nullptr;
  expect_error(gpufile_file_pread_ranges(file, buf.data(), buf.size(), past, 1, nullptr, &fut),
               GPUFILE_BAD_ARGUMENT,
               "a range of 60 bytes at buffer offset 50 runs past the buffer (100 bytes)");
  gpufile_range overlap[] = {{0, 60, 0}, {100, 60, 30}};
  expect_error(gpufile_file_pread_ranges(file, buf.data(), buf.size(), overlap, 2, nullptr, &fut),
               GPUFILE_BAD_ARGUMENT,
               "ranges overlap in the buffer");
  size_t n = 0;
  expect_error(gpufile_file_read(file, buf.data(), SIZE_MAX, 0, &n),
               GPUFILE_BAD_ARGUMENT,
               "goes past the end of the address space");
  EXPECT_EQ(buf, std::vector<unsigned char>(100, 0x5A));
}

TEST_F(CApi, a_read_past_the_end_of_the_file_names_the_file)
{
  std::vector<unsigned char> buf(100, 1);
  size_t n = 0;
  expect_error(
    gpufile_file_read(file, buf.data(), buf.size(), data.size() - 10, &n), GPUFILE_END_OF_FILE, "");
  EXPECT_EQ(last_error().path, path);
  EXPECT_EQ(buf, std::vector<unsigned char>(100, 1));
}

TEST_F(CApi, a_missing_file_is_not_found_with_errno_2_and_its_path)
{
  gpufile_file* f = nullptr;
  auto const missing = dir.file("missing.bin");
  expect_error(gpufile_file_open(missing.c_str(), "r", &f), GPUFILE_NOT_FOUND, "");
  EXPECT_EQ(last_error().errno_value, 2);
  EXPECT_EQ(last_error().path, missing);
}

TEST_F(CApi, closed_and_freed_handles_are_refused_not_used)
{
  gpufile_file* f = nullptr;
  ASSERT_EQ(gpufile_file_open(path.c_str(), "r", &f), GPUFILE_OK);
  ASSERT_EQ(gpufile_file_close(f), GPUFILE_OK);
  expect_error(gpufile_file_close(f), GPUFILE_BAD_ARGUMENT, "is not an open gpufile_file");
  uint64_t size = 0;
  expect_error(gpufile_file_nbytes(f, &size), GPUFILE_BAD_ARGUMENT, "closed or freed already");
  // A pointer gpufile never gave out.
  int on_the_stack = 0;
  expect_error(gpufile_file_nbytes(reinterpret_cast<gpufile_file*>(&on_the_stack), &size),
               GPUFILE_BAD_ARGUMENT,
               "never given out by gpufile");

  unsigned char b[8];
  gpufile_future* fut = nullptr;
  ASSERT_EQ(gpufile_file_pread(file, b, sizeof b, 0, &fut), GPUFILE_OK);
  size_t n = 0;
  ASSERT_EQ(gpufile_future_wait(fut, &n), GPUFILE_OK);
  // Waiting again gives the same answer; after the free it is refused.
  ASSERT_EQ(gpufile_future_wait(fut, &n), GPUFILE_OK);
  EXPECT_EQ(n, 8u);
  ASSERT_EQ(gpufile_future_free(fut), GPUFILE_OK);
  expect_error(gpufile_future_free(fut), GPUFILE_BAD_ARGUMENT, "is not an open gpufile_future");
  expect_error(gpufile_future_wait(fut, &n), GPUFILE_BAD_ARGUMENT, "is not an open gpufile_future");
}

TEST_F(CApi, unknown_settings_and_values_of_the_wrong_type_are_refused_and_change_nothing)
{
  int64_t before = 0;
  ASSERT_EQ(gpufile_settings_get_int("task_size", &before), GPUFILE_OK);
  expect_error(gpufile_settings_set_int("no_such_setting", 1), GPUFILE_BAD_ARGUMENT, "no_such_setting");
  expect_error(gpufile_settings_set_str("task_size", "many"), GPUFILE_BAD_ARGUMENT, "task_size");
  expect_error(gpufile_settings_set_int("task_size", 0), GPUFILE_BAD_ARGUMENT, "task_size");
  int64_t v = 0;
  expect_error(gpufile_settings_get_int("http_status_codes", &v),
               GPUFILE_BAD_ARGUMENT,
               "is a list, not an integer");
  int64_t after = 0;
  ASSERT_EQ(gpufile_settings_get_int("task_size", &after), GPUFILE_OK);
  EXPECT_EQ(before, after);
  gpufile_io_options bad{0, -5, -1};
  gpufile_range r{0, 8, 0};
  gpufile_future* fut = nullptr;
  unsigned char b[8];
  expect_error(gpufile_file_pread_ranges(file, b, 8, &r, 1, &bad, &fut),
               GPUFILE_BAD_ARGUMENT,
               "gds_threshold -5 is negative");
}

TEST_F(CApi, settings_round_trip_as_text_and_integers)
{
  char text[64];
  size_t needed = 0;
  ASSERT_EQ(gpufile_settings_get_str("compat_mode", text, sizeof text, &needed), GPUFILE_OK);
  std::string const old = text;
  ASSERT_EQ(gpufile_settings_set_str("compat_mode", "ON"), GPUFILE_OK);
  int64_t mode = -1;
  ASSERT_EQ(gpufile_settings_get_int("compat_mode", &mode), GPUFILE_OK);
  EXPECT_EQ(mode, 1);
  ASSERT_EQ(gpufile_settings_set_str("compat_mode", old.c_str()), GPUFILE_OK);
}

TEST_F(CApi, the_path_reports_of_a_file_and_of_a_request_say_posix_for_host_memory)
{
  gpufile_backend backend = GPUFILE_BACKEND_CUFILE;
  char reason[256];
  size_t needed = 0;
  ASSERT_EQ(gpufile_file_io_path(file, GPUFILE_MEMORY_HOST, 4096, &backend, reason, sizeof reason,
                                 &needed),
            GPUFILE_OK);
  EXPECT_EQ(backend, GPUFILE_BACKEND_POSIX);
  EXPECT_GT(needed, 1u);

  std::vector<unsigned char> buf(64);
  gpufile_range ranges[] = {{0, 32, 0}, {100, 32, 32}};
  backend = GPUFILE_BACKEND_CUFILE;
  ASSERT_EQ(gpufile_file_request_io_path(file, 0, buf.data(), buf.size(), ranges, 2, nullptr,
                                         &backend, reason, sizeof reason, &needed),
            GPUFILE_OK);
  EXPECT_EQ(backend, GPUFILE_BACKEND_POSIX);
  EXPECT_GT(std::strlen(reason), 0u);
  expect_error(gpufile_file_request_io_path(file, 2, buf.data(), buf.size(), ranges, 2, nullptr,
                                            &backend, reason, sizeof reason, &needed),
               GPUFILE_BAD_ARGUMENT,
               "is_write 2 is neither 0");
}

TEST_F(CApi, mmap_reads_the_region_and_refuses_reads_outside_it)
{
  gpufile_mmap* m = nullptr;
  ASSERT_EQ(gpufile_mmap_open(path.c_str(), "r", 8192, 4096, 0644, 0, &m), GPUFILE_OK);
  uint64_t size = 0, offset = 0, file_size = 0;
  ASSERT_EQ(gpufile_mmap_info(m, &size, &offset, &file_size), GPUFILE_OK);
  EXPECT_EQ(size, 8192u);
  EXPECT_EQ(offset, 4096u);
  EXPECT_EQ(file_size, data.size());
  std::vector<unsigned char> buf(100);
  gpufile_future* fut = nullptr;
  ASSERT_EQ(gpufile_mmap_pread(m, buf.data(), buf.size(), 100, 5000, 0, &fut), GPUFILE_OK);
  size_t n = 0;
  ASSERT_EQ(gpufile_future_wait(fut, &n), GPUFILE_OK);
  gpufile_future_free(fut);
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 5000, 100));
  std::fill(buf.begin(), buf.end(), 7);
  expect_error(gpufile_mmap_pread(m, buf.data(), buf.size(), 100, 0, 0, &fut),
               GPUFILE_OUT_OF_RANGE,
               "Read is out of bound");
  EXPECT_EQ(gpufile_last_error_errno(), EINVAL);
  expect_error(gpufile_mmap_pread(m, buf.data(), buf.size(), 0, 4096 + 8192 + 1, 0, &fut),
               GPUFILE_OUT_OF_RANGE,
               "Read is out of bound");
  expect_error(gpufile_mmap_pread(m, buf.data(), buf.size(), 0, data.size() + 1, 0, &fut),
               GPUFILE_OUT_OF_RANGE,
               "Offset is past the end of file");
  EXPECT_EQ(buf, std::vector<unsigned char>(100, 7));
  expect_error(gpufile_mmap_pread(m, buf.data(), 10, 100, 5000, 0, &fut),
               GPUFILE_BAD_ARGUMENT,
               "larger than the buffer (10 bytes)");
  ASSERT_EQ(gpufile_mmap_close(m), GPUFILE_OK);
  expect_error(gpufile_mmap_close(m), GPUFILE_BAD_ARGUMENT, "is not an open gpufile_mmap");
  expect_error(gpufile_mmap_open(path.c_str(), "r", 0, 0, 0644, 0, &m),
               GPUFILE_BAD_ARGUMENT,
               "should not be zero byte");
  auto const past_end = static_cast<int64_t>(data.size()) + 1;
  expect_error(gpufile_mmap_open(path.c_str(), "r", past_end, 0, 0644, 0, &m),
               GPUFILE_OUT_OF_RANGE,
               "Mapped region is past the end of file");
  expect_error(gpufile_mmap_open(path.c_str(), "r", -1, data.size(), 0644, 0, &m),
               GPUFILE_OUT_OF_RANGE,
               "Offset must be less than the file size");
  expect_error(gpufile_mmap_open(path.c_str(), "r", -1, 0, 0644, -1, &m),
               GPUFILE_BAD_ARGUMENT,
               "map_flags 0xffffffff");
}

TEST_F(CApi, a_remote_object_reads_from_a_local_server_and_the_allow_list_refuses)
{
  support::HttpServer server(dir.path().string());
  auto const url = server.url() + "/data.bin";
  gpufile_remote_file* r = nullptr;
  ASSERT_EQ(gpufile_remote_open(url.c_str(), GPUFILE_REMOTE_AUTO, nullptr, 0, -1, &r), GPUFILE_OK)
    << last_error().message;
  uint64_t size = 0;
  ASSERT_EQ(gpufile_remote_nbytes(r, &size), GPUFILE_OK);
  EXPECT_EQ(size, data.size());
  int type = -1;
  ASSERT_EQ(gpufile_remote_endpoint_type(r, &type), GPUFILE_OK);
  EXPECT_EQ(type, GPUFILE_REMOTE_HTTP);
  std::vector<unsigned char> buf(300000);
  gpufile_future* fut = nullptr;
  ASSERT_EQ(gpufile_remote_pread(r, buf.data(), buf.size(), 12345, 65536, &fut), GPUFILE_OK);
  size_t n = 0;
  ASSERT_EQ(gpufile_future_wait(fut, &n), GPUFILE_OK) << last_error().message;
  gpufile_future_free(fut);
  EXPECT_EQ(n, buf.size());
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 12345, buf.size()));
  expect_error(gpufile_remote_pread(r, buf.data(), 100, data.size() - 10, 0, &fut),
               GPUFILE_BAD_ARGUMENT,
               "cannot read");
  char source[64] = "x";
  size_t needed   = 0;
  ASSERT_EQ(gpufile_remote_credentials_source(r, source, sizeof source, &needed), GPUFILE_OK);
  EXPECT_STREQ(source, "") << "an HTTP object is read without credentials";
  EXPECT_EQ(needed, 1u);
  ASSERT_EQ(gpufile_remote_close(r), GPUFILE_OK);
  expect_error(gpufile_remote_close(r), GPUFILE_BAD_ARGUMENT, "is not an open gpufile_remote");
  expect_error(gpufile_remote_credentials_source(r, source, sizeof source, &needed),
               GPUFILE_BAD_ARGUMENT,
               "is not an open gpufile_remote");

  int const only_s3[] = {GPUFILE_REMOTE_S3};
  expect_error(gpufile_remote_open(url.c_str(), GPUFILE_REMOTE_HTTP, only_s3, 1, -1, &r),
               GPUFILE_BAD_ARGUMENT,
               "is not in the allowlist");
  expect_error(gpufile_remote_open(url.c_str(), 9, nullptr, 0, -1, &r),
               GPUFILE_BAD_ARGUMENT,
               "remote_endpoint_type 9 is not a remote endpoint type");
  auto const missing = server.url() + "/missing.bin";
  EXPECT_EQ(gpufile_remote_open(missing.c_str(), GPUFILE_REMOTE_HTTP, nullptr, 0, -1, &r),
            GPUFILE_REMOTE);
  EXPECT_NE(last_error().message.find("404"), std::string::npos) << last_error().message;
}

TEST_F(CApi, check_and_observe_report_json)
{
  size_t needed = 0;
  ASSERT_EQ(gpufile_check(nullptr, nullptr, 0, &needed), GPUFILE_OK);
  std::string json(needed + 4096, '\0');
  ASSERT_EQ(gpufile_check(path.c_str(), json.data(), json.size(), &needed), GPUFILE_OK);
  EXPECT_EQ(json[0], '{');

  gpufile_observation* obs = nullptr;
  ASSERT_EQ(gpufile_observe_begin(&obs), GPUFILE_OK);
  std::vector<unsigned char> buf(4096);
  size_t n = 0;
  ASSERT_EQ(gpufile_file_read(file, buf.data(), buf.size(), 0, &n), GPUFILE_OK);
  std::string report(1 << 16, '\0');
  ASSERT_EQ(gpufile_observe_end(obs, report.data(), report.size(), &needed), GPUFILE_OK);
  EXPECT_NE(report.find("\"gpufile-posix\":{\"bytes\":4096"), std::string::npos) << report.c_str();
  expect_error(gpufile_observe_end(obs, nullptr, 0, nullptr),
               GPUFILE_BAD_ARGUMENT,
               "is not an open gpufile_observation");
}

TEST_F(CApi, host_memory_is_host_memory_without_a_driver)
{
  int kind = -1;
  ASSERT_EQ(gpufile_memory_kind(data.data(), &kind), GPUFILE_OK);
  EXPECT_EQ(kind, GPUFILE_MEMORY_HOST);
  int fd = -1;
  ASSERT_EQ(gpufile_file_fd(file, 0, &fd), GPUFILE_OK);
  EXPECT_GE(fd, 0);
}
