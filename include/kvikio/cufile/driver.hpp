/*
 * KvikIO's cuFile driver classes, served by gpufile (cuFile is loaded at run time: on a
 * machine without it these throw CUfileException).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <gpufile/gpufile.hpp>
#include <kvikio/error.hpp>

namespace kvikio {

/** Opens cuFile's driver for its lifetime. */
class DriverInitializer {
 public:
  DriverInitializer()
  {
    if (gpufile_cufile_driver_open() != GPUFILE_OK) {
      detail::as_kvikio([] { gpufile::detail::throw_last_error(); });
    }
  }
  DriverInitializer(DriverInitializer const&)                = delete;
  DriverInitializer& operator=(DriverInitializer const&)     = delete;
  DriverInitializer(DriverInitializer&&) noexcept            = delete;
  DriverInitializer& operator=(DriverInitializer&&) noexcept = delete;
  ~DriverInitializer() noexcept { gpufile_cufile_driver_close(); }
};

/** cuFile's driver properties (read when asked; sizes in KiB). */
class DriverProperties {
 public:
  DriverProperties() = default;
  bool is_gds_available()
  {
    std::int64_t v = 0;
    return gpufile_cufile_driver_get("is_gds_available", &v) == GPUFILE_OK && v != 0;
  }
  [[nodiscard]] unsigned int get_nvfs_major_version() { return get("major_version"); }
  [[nodiscard]] unsigned int get_nvfs_minor_version() { return get("minor_version"); }
  [[nodiscard]] bool get_nvfs_allow_compat_mode() { return get("allow_compat_mode") != 0; }
  [[nodiscard]] bool get_nvfs_poll_mode() { return get("poll_mode") != 0; }
  [[nodiscard]] std::size_t get_nvfs_poll_thresh_size() { return get("poll_thresh_size"); }
  void set_nvfs_poll_mode(bool enable) { set("poll_mode", enable ? 1 : 0); }
  void set_nvfs_poll_thresh_size(std::size_t size_in_kb) { set("poll_thresh_size", size_in_kb); }
  [[nodiscard]] std::size_t get_max_device_cache_size() { return get("max_device_cache_size"); }
  void set_max_device_cache_size(std::size_t size_in_kb)
  {
    set("max_device_cache_size", size_in_kb);
  }
  [[nodiscard]] std::size_t get_per_buffer_cache_size() { return get("per_buffer_cache_size"); }
  [[nodiscard]] std::size_t get_max_pinned_memory_size() { return get("max_pinned_memory_size"); }
  void set_max_pinned_memory_size(std::size_t size_in_kb)
  {
    set("max_pinned_memory_size", size_in_kb);
  }
  /** gpufile submits batches as requests of its engine: no cuFile batch limit applies. */
  [[nodiscard]] std::size_t get_max_batch_io_size() { return 0; }

 private:
  static std::uint64_t get(char const* name)
  {
    std::int64_t v = 0;
    if (gpufile_cufile_driver_get(name, &v) != GPUFILE_OK) {
      detail::as_kvikio([] { gpufile::detail::throw_last_error(); });
    }
    return static_cast<std::uint64_t>(v);
  }
  static void set(char const* name, std::size_t value)
  {
    if (gpufile_cufile_driver_set(name, static_cast<std::int64_t>(value)) != GPUFILE_OK) {
      detail::as_kvikio([] { gpufile::detail::throw_last_error(); });
    }
  }
};

}  // namespace kvikio
