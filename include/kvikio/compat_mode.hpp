/*
 * KvikIO's CompatMode, served by gpufile (the values are gpufile's compat_mode numbers).
 */
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kvikio {

/** Whether I/O uses cuFile (OFF), gpufile's POSIX path (ON), or decides (AUTO). */
enum class CompatMode : std::uint8_t {
  OFF,
  ON,
  AUTO,
};

namespace detail {

inline std::string lower(std::string_view s)
{
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  return out;
}

/** "on"/"true"/"yes"/"1", "off"/"false"/"no"/"0", "auto" (any case); else invalid_argument. */
inline CompatMode parse_compat_mode_str(std::string_view compat_mode_str)
{
  auto const s = lower(compat_mode_str);
  if (s == "on" || s == "true" || s == "yes" || s == "1") { return CompatMode::ON; }
  if (s == "off" || s == "false" || s == "no" || s == "0") { return CompatMode::OFF; }
  if (s == "auto") { return CompatMode::AUTO; }
  throw std::invalid_argument("Unknown compatibility mode: " + std::string{compat_mode_str});
}

}  // namespace detail
}  // namespace kvikio
