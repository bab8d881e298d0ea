/*
 * Small helpers of KvikIO's detail namespace that its public tests use.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace kvikio::detail {

/** Whether `value` is a multiple of `alignment`. */
inline bool is_aligned(std::size_t value, std::size_t alignment)
{
  return alignment != 0 && value % alignment == 0;
}
/** Whether the address `addr` is a multiple of `alignment`. */
inline bool is_aligned(void* addr, std::size_t alignment)
{
  return is_aligned(reinterpret_cast<std::uintptr_t>(addr), alignment);
}

/** Calls its callable when it goes out of scope (exceptions from it are swallowed). */
template <typename F>
class ScopeExit {
  static_assert(std::is_invocable_v<F>, "ScopeExit callable must be invocable with no arguments");

 public:
  [[nodiscard]] explicit ScopeExit(F&& cleanup) : _cleanup(std::move(cleanup)) {}
  ~ScopeExit() noexcept
  {
    try {
      _cleanup();
    } catch (...) {
    }
  }
  ScopeExit(ScopeExit const&)            = delete;
  ScopeExit& operator=(ScopeExit const&) = delete;

 private:
  F _cleanup;
};

}  // namespace kvikio::detail
