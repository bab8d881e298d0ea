/*
 * KvikIO's buffer registration with cuFile, served by gpufile (host memory is left alone).
 */
#pragma once

#include <cstddef>
#include <vector>

#include <gpufile/gpufile.hpp>
#include <kvikio/error.hpp>

namespace kvikio {

namespace detail {
inline void registration(gpufile_status status)
{
  if (status != GPUFILE_OK) {
    detail::as_kvikio([] { gpufile::detail::throw_last_error(); });
  }
}
}  // namespace detail

/** Registers `size` bytes of device memory at `devPtr_base` with cuFile. */
inline void buffer_register(void const* devPtr_base,
                            std::size_t size,
                            int /*flags*/                                = 0,
                            std::vector<int> const& /*errors_to_ignore*/ = std::vector<int>())
{
  detail::registration(gpufile_buffer_register(devPtr_base, size));
}

inline void buffer_deregister(void const* devPtr_base)
{
  detail::registration(gpufile_buffer_deregister(devPtr_base, 0));
}

/** Registers the whole device allocation holding `devPtr` with cuFile. */
inline void memory_register(void const* devPtr,
                            int /*flags*/                                = 0,
                            std::vector<int> const& /*errors_to_ignore*/ = {})
{
  detail::registration(gpufile_buffer_register(devPtr, 0));
}

inline void memory_deregister(void const* devPtr)
{
  detail::registration(gpufile_buffer_deregister(devPtr, 1));
}

}  // namespace kvikio
