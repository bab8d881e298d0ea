/*
 * KvikIO's defaults (settings) and getenv_or, served by gpufile: each setting KvikIO and
 * gpufile share is gpufile's process setting of the same meaning (docs/cpp.md lists them).
 * KvikIO's remote-reactor settings are gpufile's settings of the same names, with KvikIO's
 * rules and no effect (gpufile has no reactor pool); its per-block-device settings, which
 * gpufile has no counterpart for, are kept here and change nothing.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include <gpufile/gpufile.hpp>
#include <kvikio/compat_mode.hpp>
#include <kvikio/error.hpp>
#include <kvikio/threadpool_wrapper.hpp>

namespace kvikio {

/** How remote reads are driven (gpufile's remote_io_backend setting; same values). */
enum class RemoteIOBackend : std::uint8_t {
  EASY_THREADPOOL = 0,
  MULTI_POLL      = 1,
};

/** How a MULTI_POLL read is spread over reactors (gpufile's remote_io_reactor_dispatch
 * setting; same values; no effect in gpufile, which has no reactors). */
enum class RemoteReactorDispatch : std::uint8_t {
  PER_CHUNK = 0,
  PER_PREAD = 1,
};

namespace detail {

/** "429,500" (spaces allowed around items) as status codes; invalid_argument otherwise. */
inline std::vector<int> parse_http_status_codes(std::string_view env_var_name,
                                                std::string const& status_codes)
{
  std::vector<int> out;
  auto bad = [&] {
    throw std::invalid_argument("Invalid HTTP status code list " + std::string{env_var_name} +
                                "=" + status_codes +
                                " (three-digit codes separated by commas)");
  };
  std::size_t start = 0;
  while (true) {
    auto const end = status_codes.find(',', start);
    auto item      = status_codes.substr(start, end == std::string::npos ? end : end - start);
    auto const b   = item.find_first_not_of(" \t");
    auto const e   = item.find_last_not_of(" \t");
    if (b == std::string::npos) { bad(); }
    item = item.substr(b, e - b + 1);
    if (item.size() != 3 || item.find_first_not_of("0123456789") != std::string::npos) { bad(); }
    out.push_back(std::stoi(item));
    if (end == std::string::npos) { break; }
    start = end + 1;
  }
  return out;
}

inline bool parse_bool(std::string_view name, std::string_view value)
{
  auto v = lower(value);
  auto const b = v.find_first_not_of(" \t");
  auto const e = v.find_last_not_of(" \t");
  v = b == std::string::npos ? std::string{} : v.substr(b, e - b + 1);
  if (v == "true" || v == "on" || v == "yes" || v == "1") { return true; }
  if (v == "false" || v == "off" || v == "no" || v == "0") { return false; }
  throw std::invalid_argument("unknown config value " + std::string{name} + "=" +
                              std::string{value});
}

/** KvikIO settings gpufile has no counterpart for (kept so that their setters work). */
struct KvikioOnlySettings {
  std::mutex lock;
  bool auto_direct_io_read_overread{false};
  bool thread_pool_per_block_device{false};
  static KvikioOnlySettings& get()
  {
    static KvikioOnlySettings s;
    return s;
  }
};

/** KvikIO's names of an enum's values, in any case: `names[i]` is the value i. */
template <typename E>
E parse_enum(std::string_view env_var_name,
             std::string_view value,
             std::initializer_list<char const*> names)
{
  auto v       = lower(value);
  auto const b = v.find_first_not_of(" \t");
  auto const e = v.find_last_not_of(" \t");
  v            = b == std::string::npos ? std::string{} : v.substr(b, e - b + 1);
  std::uint8_t i = 0;
  std::string accepted;
  for (auto const* name : names) {
    if (v == lower(name)) { return static_cast<E>(i); }
    accepted += (i > 0 ? " or " : "") + std::string{name};
    ++i;
  }
  throw std::invalid_argument("unknown config value " + std::string{env_var_name} + "=" +
                              std::string{value} + " (expected " + accepted + ", any case)");
}

}  // namespace detail

/** The value of environment variable `env_var_name` as a T, or `default_val` where unset. */
template <typename T>
T getenv_or(std::string_view env_var_name, T default_val)
{
  std::string const name{env_var_name};
  auto const* env_val = std::getenv(name.c_str());
  if (env_val == nullptr) { return default_val; }
  if constexpr (std::is_same_v<T, bool>) {
    return detail::parse_bool(env_var_name, env_val);
  } else if constexpr (std::is_same_v<T, CompatMode>) {
    return detail::parse_compat_mode_str(env_val);
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    return detail::parse_http_status_codes(env_var_name, env_val);
  } else if constexpr (std::is_same_v<T, RemoteIOBackend>) {
    return detail::parse_enum<RemoteIOBackend>(
      env_var_name, env_val, {"EASY_THREADPOOL", "MULTI_POLL"});
  } else if constexpr (std::is_same_v<T, RemoteReactorDispatch>) {
    return detail::parse_enum<RemoteReactorDispatch>(
      env_var_name, env_val, {"PER_CHUNK", "PER_PREAD"});
  } else {
    std::stringstream sstream(env_val);
    T converted_val;
    sstream >> converted_val;
    if constexpr (!std::is_same_v<T, std::string>) {
      KVIKIO_EXPECT(!sstream.fail(),
                    "unknown config value " + name + "=" + std::string{env_val},
                    std::invalid_argument);
    }
    return converted_val;
  }
}

/**
 * The first of `env_var_names` that is set (aliases must agree): its name, its value as a T
 * and true; or an empty name, `default_val` and false.
 */
template <typename T>
std::tuple<std::string_view, T, bool> getenv_or(
  std::initializer_list<std::string_view> env_var_names, T default_val)
{
  KVIKIO_EXPECT(env_var_names.size() > 0,
                "`env_var_names` must contain at least one environment variable name.",
                std::invalid_argument);
  std::string_view found_name;
  std::string found_value;
  for (auto const& name : env_var_names) {
    auto const* value = std::getenv(std::string{name}.c_str());
    if (value == nullptr) { continue; }
    if (!found_name.empty() && found_value != value) {
      std::stringstream ss;
      ss << "Environment variable " << name << " (" << value
         << ") has already been set by its alias " << found_name << " (" << found_value
         << ") with a different value.";
      KVIKIO_FAIL(ss.str(), std::invalid_argument);
    }
    found_name  = name;
    found_value = value;
  }
  if (found_name.empty()) { return {found_name, default_val, false}; }
  return {found_name, getenv_or<T>(found_name, default_val), true};
}

/** KvikIO's process settings, over gpufile's (see the file's comment). */
class defaults {
 public:
  [[nodiscard]] static CompatMode compat_mode()
  {
    return static_cast<CompatMode>(get("compat_mode"));
  }
  static void set_compat_mode(CompatMode compat_mode)
  {
    set("compat_mode", static_cast<std::int64_t>(compat_mode));
  }
  /** AUTO becomes ON where device I/O would not use cuFile, else OFF. */
  static CompatMode infer_compat_mode_if_auto(CompatMode compat_mode) noexcept
  {
    if (compat_mode != CompatMode::AUTO) { return compat_mode; }
    return is_compat_mode_preferred(compat_mode) ? CompatMode::ON : CompatMode::OFF;
  }
  static bool is_compat_mode_preferred(CompatMode compat_mode) noexcept
  {
    int preferred = 1;
    if (gpufile_compat_mode_preferred(static_cast<int>(compat_mode), &preferred) != GPUFILE_OK) {
      return true;
    }
    return preferred != 0;
  }
  static bool is_compat_mode_preferred() { return is_compat_mode_preferred(compat_mode()); }

  /** A handle whose size follows thread_pool_nthreads (gpufile's engine runs the work). */
  [[nodiscard]] static ThreadPool& thread_pool()
  {
    static ThreadPool pool{thread_pool_nthreads()};
    pool.reset(thread_pool_nthreads());
    return pool;
  }
  [[nodiscard]] static unsigned int thread_pool_nthreads()
  {
    return static_cast<unsigned int>(get("num_threads"));
  }
  static void set_thread_pool_nthreads(unsigned int nthreads) { set("num_threads", nthreads); }
  [[nodiscard]] static unsigned int num_threads() { return thread_pool_nthreads(); }
  static void set_num_threads(unsigned int nthreads) { set_thread_pool_nthreads(nthreads); }

  [[nodiscard]] static std::size_t task_size() { return get("task_size"); }
  static void set_task_size(std::size_t nbytes) { set("task_size", nbytes); }
  [[nodiscard]] static std::size_t gds_threshold() { return get("gds_threshold"); }
  static void set_gds_threshold(std::size_t nbytes) { set("gds_threshold", nbytes); }
  [[nodiscard]] static std::size_t bounce_buffer_size() { return get("bounce_buffer_size"); }
  static void set_bounce_buffer_size(std::size_t nbytes) { set("bounce_buffer_size", nbytes); }
  [[nodiscard]] static std::size_t http_max_attempts() { return get("http_max_attempts"); }
  static void set_http_max_attempts(std::size_t attempts) { set("http_max_attempts", attempts); }
  [[nodiscard]] static long http_timeout() { return static_cast<long>(get("http_timeout")); }
  static void set_http_timeout(long timeout_seconds) { set("http_timeout", timeout_seconds); }

  [[nodiscard]] static std::vector<int> const& http_status_codes()
  {
    static std::mutex lock;
    static std::vector<int> codes;
    std::lock_guard<std::mutex> g(lock);
    codes = detail::as_kvikio([] {
      return detail::parse_http_status_codes("http_status_codes",
                                             gpufile::settings::get_str("http_status_codes"));
    });
    return codes;
  }
  static void set_http_status_codes(std::vector<int> status_codes)
  {
    std::string text;
    for (std::size_t i = 0; i < status_codes.size(); ++i) {
      text += (i > 0 ? "," : "") + std::to_string(status_codes[i]);
    }
    detail::as_kvikio([&] { gpufile::settings::set("http_status_codes", text); });
  }

  static bool auto_direct_io_read() { return get("auto_direct_io_read") != 0; }
  static void set_auto_direct_io_read(bool flag) { set("auto_direct_io_read", flag ? 1 : 0); }
  static bool auto_direct_io_write() { return get("auto_direct_io_write") != 0; }
  static void set_auto_direct_io_write(bool flag) { set("auto_direct_io_write", flag ? 1 : 0); }

  static bool auto_direct_io_read_overread() { return only().auto_direct_io_read_overread; }
  static void set_auto_direct_io_read_overread(bool flag)
  {
    std::lock_guard<std::mutex> g(only().lock);
    only().auto_direct_io_read_overread = flag;
  }
  static bool thread_pool_per_block_device() { return only().thread_pool_per_block_device; }
  static void set_thread_pool_per_block_device(bool flag)
  {
    std::lock_guard<std::mutex> g(only().lock);
    only().thread_pool_per_block_device = flag;
  }

  [[nodiscard]] static RemoteIOBackend remote_io_backend()
  {
    return static_cast<RemoteIOBackend>(get("remote_io_backend"));
  }
  static void set_remote_io_backend(RemoteIOBackend backend)
  {
    set("remote_io_backend", static_cast<std::int64_t>(backend));
  }
  /*
   * KvikIO's reactor settings (KVIKIO_REMOTE_IO_NUM_REACTORS, _REACTOR_DISPATCH,
   * _MAX_CONCURRENT_REQUESTS): gpufile's process settings of these names, kept with KvikIO's
   * rules and without effect, as gpufile has no reactor pool. A setter throws
   * std::invalid_argument for a bad value (0 reactors), and KvikIO's std::runtime_error
   * (CUfileException) once a remote read has run under remote_io_backend MULTI_POLL, where
   * KvikIO's reactor pool starts and fixes them for the rest of the process.
   */
  [[nodiscard]] static unsigned int remote_io_num_reactors()
  {
    return static_cast<unsigned int>(get("remote_io_num_reactors"));
  }
  static void set_remote_io_num_reactors(unsigned int num_reactors)
  {
    set("remote_io_num_reactors", num_reactors);
  }
  [[nodiscard]] static RemoteReactorDispatch remote_io_reactor_dispatch()
  {
    return static_cast<RemoteReactorDispatch>(get("remote_io_reactor_dispatch"));
  }
  static void set_remote_io_reactor_dispatch(RemoteReactorDispatch dispatch)
  {
    set("remote_io_reactor_dispatch", static_cast<std::int64_t>(dispatch));
  }
  /** 0: no limit (KvikIO's default is 256). */
  [[nodiscard]] static std::size_t remote_io_max_concurrent_requests()
  {
    return static_cast<std::size_t>(get("remote_io_max_concurrent_requests"));
  }
  static void set_remote_io_max_concurrent_requests(std::size_t max_requests)
  {
    // As text: a size_t past INT64_MAX would turn negative as an int64_t.
    detail::as_kvikio([&] {
      gpufile::settings::set("remote_io_max_concurrent_requests", std::to_string(max_requests));
    });
  }

 private:
  static std::int64_t get(char const* name)
  {
    return detail::as_kvikio([&] { return gpufile::settings::get_int(name); });
  }
  template <typename T>
  static void set(char const* name, T value)
  {
    detail::as_kvikio([&] { gpufile::settings::set(name, static_cast<std::int64_t>(value)); });
  }
  static detail::KvikioOnlySettings& only() { return detail::KvikioOnlySettings::get(); }
};

}  // namespace kvikio
