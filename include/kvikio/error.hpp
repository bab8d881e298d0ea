/*
 * KvikIO's C++ names served by gpufile (namespace kvikio): errors and the checking macros.
 * Part of gpufile's kvikio headers (see docs/cpp.md); written for gpufile, over gpufile.hpp.
 */
#pragma once

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include <gpufile/gpufile.hpp>
#include <kvikio/shim/cuda.hpp>
#include <kvikio/shim/cufile_h_wrapper.hpp>

#define KVIKIO_STRINGIFY_DETAIL(x) #x
#define KVIKIO_STRINGIFY(x)        KVIKIO_STRINGIFY_DETAIL(x)

namespace kvikio {

/** What KvikIO throws for cuFile, CUDA and its own failures. */
struct CUfileException : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

/** An OS error: a std::system_error of the generic category (errno). */
class GenericSystemError : public std::system_error {
 public:
  GenericSystemError(int err_code, std::string const& msg)
    : std::system_error(err_code, std::generic_category(), msg)
  {
  }
  GenericSystemError(int err_code, char const* msg)
    : std::system_error(err_code, std::generic_category(), msg)
  {
  }
  /** With the calling thread's errno. */
  GenericSystemError(std::string const& msg) : GenericSystemError(errno, msg) {}
  GenericSystemError(char const* msg) : GenericSystemError(errno, msg) {}
  GenericSystemError(GenericSystemError const& other)            = default;
  GenericSystemError& operator=(GenericSystemError const& other) = default;
  ~GenericSystemError() noexcept override                        = default;
};

namespace detail {

template <typename Exception, typename MsgFunc>
[[noreturn]] void kvikio_fail(MsgFunc&& msg_func, int line_number, char const* filename)
{
  std::string const msg = std::forward<MsgFunc>(msg_func)();
  throw Exception{std::string{"KvikIO failure at: "} + filename + ":" +
                  std::to_string(line_number) + ": " + (msg.empty() ? "(no message)" : msg)};
}

[[noreturn]] inline void handle_linux_call_error(int line_number,
                                                 char const* filename,
                                                 std::string_view extra_msg)
{
  int const err = errno;
  std::string msg{extra_msg};
  if (!msg.empty()) { msg += " "; }
  msg += std::string{"Linux system/library function call error at: "} + filename + ":" +
         std::to_string(line_number);
  throw GenericSystemError(err, msg);
}

inline void check_linux_call(long return_value,
                             int line_number,
                             char const* filename,
                             std::string_view extra_msg = "",
                             long error_value           = -1)
{
  if (return_value == error_value) { handle_linux_call_error(line_number, filename, extra_msg); }
}

template <typename T>
void check_linux_call(
  T return_value, int line_number, char const* filename, std::string_view extra_msg, T error_value)
{
  if (return_value == error_value) { handle_linux_call_error(line_number, filename, extra_msg); }
}

template <typename Exception>
void cufile_check_bytes_done(ssize_t nbytes_done, int line_number, char const* filename)
{
  if (nbytes_done < 0) {
    auto const err = static_cast<int>(-nbytes_done);
    throw Exception{std::string{"cuFile error at: "} + filename + ":" +
                    std::to_string(line_number) + ": " + std::strerror(err)};
  }
}

template <typename Exception>
void cuda_driver_try(CUresult error, int line_number, char const* filename)
{
  if (error != CUDA_SUCCESS) {
    throw Exception{std::string{"CUDA error at: "} + filename + ":" + std::to_string(line_number) +
                    ": CUresult " + std::to_string(static_cast<int>(error))};
  }
}

/**
 * The GenericSystemError of gpufile's OS error `e`, with errno `err`. std::system_error appends
 * the errno's text to the message it is given, and gpufile's message ends with that text
 * already ("open PATH: No such file or directory"), so the message loses it first: the text
 * appears once.
 */
inline GenericSystemError system_error_of(gpufile::Error const& e, int err)
{
  std::string msg          = e.what();
  std::string const suffix = ": " + std::generic_category().message(err);
  if (msg.size() >= suffix.size() &&
      msg.compare(msg.size() - suffix.size(), suffix.size(), suffix) == 0) {
    msg.resize(msg.size() - suffix.size());
  }
  return GenericSystemError(err, msg);
}

/**
 * Calls `f`, turning gpufile's errors into what KvikIO throws for the same failure: an OS
 * error is a GenericSystemError (errno kept), a range outside a mapping std::out_of_range, a bad
 * argument std::invalid_argument, an end of file or anything else a CUfileException (KvikIO's
 * type for its failures).
 */
template <typename F>
decltype(auto) as_kvikio(F&& f)
{
  try {
    return std::forward<F>(f)();
  } catch (gpufile::OutOfRangeError const& e) {
    throw std::out_of_range(e.what());
  } catch (gpufile::BadArgumentError const& e) {
    throw std::invalid_argument(e.what());
  } catch (gpufile::NotFoundError const& e) {
    throw system_error_of(e, e.errno_value());
  } catch (gpufile::PermissionError const& e) {
    throw system_error_of(e, e.errno_value() != 0 ? e.errno_value() : EBADF);
  } catch (gpufile::IsADirectoryError const& e) {
    throw system_error_of(e, e.errno_value());
  } catch (gpufile::RemoteError const& e) {
    throw std::runtime_error(e.what());
  } catch (gpufile::Error const& e) {
    if (e.status() == GPUFILE_OTHER && e.errno_value() != 0) {
      throw system_error_of(e, e.errno_value());
    }
    throw CUfileException(e.what());
  }
}

}  // namespace detail
}  // namespace kvikio

#define KVIKIO_VA_SELECT_3(_1, _2, _3, NAME, ...) NAME
#define KVIKIO_VA_SELECT_2(_1, _2, NAME, ...)     NAME

#define KVIKIO_EXPECT(...) \
  KVIKIO_VA_SELECT_3(__VA_ARGS__, KVIKIO_EXPECT_3, KVIKIO_EXPECT_2)(__VA_ARGS__)
#define KVIKIO_EXPECT_3(_condition, _msg, _exception_type)          \
  do {                                                              \
    if (!(_condition)) {                                            \
      kvikio::detail::kvikio_fail<_exception_type>(                 \
        [&]() -> std::string { return _msg; }, __LINE__, __FILE__); \
    }                                                               \
  } while (0)
#define KVIKIO_EXPECT_2(_condition, _msg) KVIKIO_EXPECT_3(_condition, _msg, kvikio::CUfileException)

#define KVIKIO_FAIL(...) KVIKIO_VA_SELECT_2(__VA_ARGS__, KVIKIO_FAIL_2, KVIKIO_FAIL_1)(__VA_ARGS__)
#define KVIKIO_FAIL_2(_msg, _exception_type)    \
  kvikio::detail::kvikio_fail<_exception_type>( \
    [&]() -> std::string { return _msg; }, __LINE__, __FILE__)
#define KVIKIO_FAIL_1(_msg) KVIKIO_FAIL_2(_msg, kvikio::CUfileException)

#define KVIKIO_SYSCALL_CHECK(...)                                                        \
  KVIKIO_VA_SELECT_3(                                                                    \
    __VA_ARGS__, KVIKIO_SYSCALL_CHECK_3, KVIKIO_SYSCALL_CHECK_2, KVIKIO_SYSCALL_CHECK_1) \
  (__VA_ARGS__)
#define KVIKIO_SYSCALL_CHECK_1(_return_value)                            \
  do {                                                                   \
    kvikio::detail::check_linux_call(_return_value, __LINE__, __FILE__); \
  } while (0)
#define KVIKIO_SYSCALL_CHECK_2(_return_value, _extra_msg)                            \
  do {                                                                               \
    kvikio::detail::check_linux_call(_return_value, __LINE__, __FILE__, _extra_msg); \
  } while (0)
#define KVIKIO_SYSCALL_CHECK_3(_return_value, _extra_msg, _error_value)                            \
  do {                                                                                             \
    kvikio::detail::check_linux_call(_return_value, __LINE__, __FILE__, _extra_msg, _error_value); \
  } while (0)

#define KVIKIO_CUFILE_CHECK_BYTES_DONE(...)                                          \
  KVIKIO_VA_SELECT_2(                                                                \
    __VA_ARGS__, KVIKIO_CUFILE_CHECK_BYTES_DONE_2, KVIKIO_CUFILE_CHECK_BYTES_DONE_1) \
  (__VA_ARGS__)
#define KVIKIO_CUFILE_CHECK_BYTES_DONE_2(_nbytes_done, _exception_type)                         \
  do {                                                                                          \
    kvikio::detail::cufile_check_bytes_done<_exception_type>(_nbytes_done, __LINE__, __FILE__); \
  } while (0)
#define KVIKIO_CUFILE_CHECK_BYTES_DONE_1(_call) \
  KVIKIO_CUFILE_CHECK_BYTES_DONE_2(_call, kvikio::CUfileException)

#define KVIKIO_CUDA_DRIVER_TRY(...)                                                   \
  KVIKIO_VA_SELECT_2(__VA_ARGS__, KVIKIO_CUDA_DRIVER_TRY_2, KVIKIO_CUDA_DRIVER_TRY_1) \
  (__VA_ARGS__)
#define KVIKIO_CUDA_DRIVER_TRY_2(_call, _exception_type)                         \
  do {                                                                           \
    kvikio::detail::cuda_driver_try<_exception_type>(_call, __LINE__, __FILE__); \
  } while (0)
#define KVIKIO_CUDA_DRIVER_TRY_1(_call) KVIKIO_CUDA_DRIVER_TRY_2(_call, kvikio::CUfileException)
