// The entry points NIXL's plugin manager looks up in libplugin_GPUFILE.so.
#include "backend/backend_plugin.h"
#include "gpufile_engine.h"

#ifndef GPUFILE_NIXL_VERSION
#define GPUFILE_NIXL_VERSION "0"
#endif

namespace {

// The backend's parameters: gpufile's settings by name. An empty value leaves the setting as
// gpufile has it (its default, or its GPUFILE_*/KVIKIO_* environment variable).
nixl_b_params_t options() {
  nixl_b_params_t params;
  for (const auto &name : gpufile_nixl::setting_names()) params[name] = "";
  return params;
}

}  // namespace

extern "C" {

NIXL_PLUGIN_EXPORT nixlBackendPlugin *nixl_plugin_init() {
  return nixlBackendPluginCreator<gpufile_nixl::Engine>::create(
      NIXL_PLUGIN_API_VERSION, "GPUFILE", GPUFILE_NIXL_VERSION, options(),
      {DRAM_SEG, VRAM_SEG, FILE_SEG, OBJ_SEG});
}

NIXL_PLUGIN_EXPORT void nixl_plugin_fini() {}
}
