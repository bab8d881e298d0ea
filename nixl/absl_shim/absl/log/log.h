// A stand-in for Abseil's logging header, which NIXL's backend headers include for their
// NIXL_* logging macros. The GPUFILE plugin reports through its own functions (nixl/README in
// docs/nixl.md), never through these macros, so NIXL's headers only need them to parse: the
// plugin then needs no Abseil headers or libraries of the exact version NIXL was built with.
#ifndef GPUFILE_NIXL_ABSL_SHIM_LOG_H
#define GPUFILE_NIXL_ABSL_SHIM_LOG_H

namespace gpufile_nixl_shim {
// Swallows what a NIXL_* macro streams into it.
struct Sink {
  template <class T>
  Sink &operator<<(const T &) { return *this; }
  Sink &WithPerror() { return *this; }
};
}  // namespace gpufile_nixl_shim

#define LOG(severity) ::gpufile_nixl_shim::Sink()
#define VLOG(level) ::gpufile_nixl_shim::Sink()
#define DVLOG(level) ::gpufile_nixl_shim::Sink()

#endif
