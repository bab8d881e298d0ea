// See log.h: the conditions of NIXL's assertion macros are not evaluated by the plugin.
#ifndef GPUFILE_NIXL_ABSL_SHIM_CHECK_H
#define GPUFILE_NIXL_ABSL_SHIM_CHECK_H
#include "absl/log/log.h"
#define CHECK(condition) \
  while (false && (condition)) ::gpufile_nixl_shim::Sink()
#define DCHECK(condition) CHECK(condition)
#endif
