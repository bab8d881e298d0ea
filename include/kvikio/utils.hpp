/*
 * KvikIO's utilities, served by gpufile.
 */
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <limits>
#include <stdexcept>
#include <sys/types.h>
#include <type_traits>

#include <gpufile/gpufile.hpp>
#include <kvikio/error.hpp>
#include <kvikio/shim/cuda.hpp>

namespace kvikio {

/** The OS page size. */
inline std::size_t get_page_size()
{
  static std::size_t const page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

[[nodiscard]] inline off_t convert_size2off(std::size_t x)
{
  KVIKIO_EXPECT(x < static_cast<std::size_t>(std::numeric_limits<off_t>::max()),
                "size_t argument too large to fit off_t",
                std::overflow_error);
  return static_cast<off_t>(x);
}

[[nodiscard]] inline ssize_t convert_size2ssize(std::size_t x)
{
  KVIKIO_EXPECT(x < static_cast<std::size_t>(std::numeric_limits<ssize_t>::max()),
                "size_t argument too large to fit ssize_t",
                std::overflow_error);
  return static_cast<ssize_t>(x);
}

[[nodiscard]] inline CUdeviceptr convert_void2deviceptr(void const* devPtr)
{
  return reinterpret_cast<CUdeviceptr>(devPtr);
}

template <typename T, std::enable_if_t<std::is_integral_v<T>>* = nullptr>
[[nodiscard]] std::int64_t convert_to_64bit(T value)
{
  if constexpr (std::numeric_limits<T>::max() > std::numeric_limits<std::int64_t>::max()) {
    KVIKIO_EXPECT(value <= std::numeric_limits<std::int64_t>::max(),
                  "convert_to_64bit(x): x too large to fit std::int64_t",
                  std::overflow_error);
  }
  return std::int64_t(value);
}
[[nodiscard]] inline std::uint64_t convert_to_64bit(std::uint64_t value) { return value; }
template <typename T, std::enable_if_t<std::is_floating_point_v<T>>* = nullptr>
[[nodiscard]] double convert_to_64bit(T value)
{
  return double(value);
}

/** Whether `ptr` is host memory (not device or managed memory; asked of the CUDA driver). */
inline bool is_host_memory(void const* ptr)
{
  return !detail::as_kvikio([&] { return gpufile::is_device_memory(ptr); });
}

/** A future holding `t` already. */
template <typename T>
std::future<std::decay_t<T>> make_ready_future(T&& t)
{
  std::promise<std::decay_t<T>> p;
  auto fut = p.get_future();
  p.set_value(std::forward<T>(t));
  return fut;
}

/** Whether `future` is ready (it must be valid). */
template <typename T>
bool is_future_done(T const& future)
{
  KVIKIO_EXPECT(future.valid(),
                "The future object does not refer to a valid shared state.",
                std::invalid_argument);
  return future.wait_for(std::chrono::seconds(0)) != std::future_status::timeout;
}

}  // namespace kvikio
