/*
 * Whether this thread is inside a kvikio::Monitor's callback: what refuses, as KvikIO does,
 * calls back into the library from one (they would be observed again, inside the delivery).
 */
#pragma once

#include <stdexcept>
#include <string>

namespace kvikio::detail {

/** Set while this thread runs a C++ monitor's callback. */
inline thread_local bool in_monitor_callback = false;

/** Sets the flag for a scope (nested deliveries restore what they found). */
class InMonitorScope {
 public:
  InMonitorScope() noexcept : _before{in_monitor_callback} { in_monitor_callback = true; }
  ~InMonitorScope() { in_monitor_callback = _before; }
  InMonitorScope(InMonitorScope const&)            = delete;
  InMonitorScope& operator=(InMonitorScope const&) = delete;

 private:
  bool _before;
};

/**
 * KvikIO's check at each entry point: std::runtime_error inside a monitor's callback.
 *
 * @param what What was attempted, for the message.
 */
inline void expect_not_in_monitor(char const* what = "call into KvikIO")
{
  if (in_monitor_callback) {
    throw std::runtime_error(std::string{"cannot "} + what +
                             " from inside a monitor callback (kvikio::Monitor)");
  }
}

}  // namespace kvikio::detail
