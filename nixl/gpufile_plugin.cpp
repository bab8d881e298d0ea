// The entry points NIXL's plugin manager looks up in libplugin_GPUFILE.so.
#include "backend/backend_plugin.h"
#include "gpufile_engine.h"

#ifndef GPUFILE_NIXL_VERSION
#define GPUFILE_NIXL_VERSION "0"
#endif

namespace {

// The backend's parameters: gpufile's settings by name, each with the value it has when NIXL
// loads the plugin (its default, or its GPUFILE_*/KVIKIO_* environment variable). An empty
// value given to create_backend leaves the setting as gpufile has it.
nixl_b_params_t options() { return gpufile_nixl::current_settings(); }

}  // namespace

extern "C" {

NIXL_PLUGIN_EXPORT nixlBackendPlugin *nixl_plugin_init() {
  return nixlBackendPluginCreator<gpufile_nixl::Engine>::create(
      NIXL_PLUGIN_API_VERSION, "GPUFILE", GPUFILE_NIXL_VERSION, options(),
      {DRAM_SEG, VRAM_SEG, FILE_SEG, OBJ_SEG});
}

NIXL_PLUGIN_EXPORT void nixl_plugin_fini() {}
}
