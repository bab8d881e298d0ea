/*
 * The CUDA driver types KvikIO's C++ names use, and the few driver calls its compat-mode
 * stream functions need, loaded at run time (libcuda.so.1): gpufile's kvikio headers need no
 * CUDA at build time, and a program built with them runs on a machine without a GPU.
 */
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__has_include)
#if __has_include(<cuda.h>)
#include <cuda.h>
#define GPUFILE_KVIKIO_HAVE_CUDA_H 1
#endif
#endif

#ifndef GPUFILE_KVIKIO_HAVE_CUDA_H
// The driver API's own declarations, as cuda.h spells them (so that a later cuda.h agrees).
typedef int CUresult;
#define CUDA_SUCCESS 0
typedef struct CUstream_st* CUstream;
typedef struct CUctx_st* CUcontext;
typedef unsigned long long CUdeviceptr;
#define CU_STREAM_NON_BLOCKING 0x1
#endif

namespace kvikio {

/** The driver calls gpufile's kvikio headers make themselves, loaded on first use. */
class cudaAPI {
 public:
  using StreamSynchronize_t = CUresult (*)(CUstream);
  using StreamCreate_t      = CUresult (*)(CUstream*, unsigned int);
  using StreamDestroy_t     = CUresult (*)(CUstream);

  StreamSynchronize_t StreamSynchronize{nullptr};
  StreamCreate_t StreamCreate{nullptr};
  StreamDestroy_t StreamDestroy{nullptr};

  /** The process's instance; throws std::runtime_error where libcuda.so.1 does not load. */
  static cudaAPI& instance()
  {
    static cudaAPI api;
    if (api._lib == nullptr) { throw std::runtime_error("cannot load libcuda.so.1: " + api._why); }
    return api;
  }

 private:
  cudaAPI()
  {
    _lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (_lib == nullptr) {
      char const* e = dlerror();
      _why          = e != nullptr ? e : "unknown";
      return;
    }
    StreamSynchronize = load<StreamSynchronize_t>("cuStreamSynchronize");
    StreamCreate      = load<StreamCreate_t>("cuStreamCreate");
    StreamDestroy     = load<StreamDestroy_t>("cuStreamDestroy_v2");
  }
  template <typename T>
  T load(char const* name)
  {
    return reinterpret_cast<T>(dlsym(_lib, name));
  }
  void* _lib{nullptr};
  std::string _why;
};

namespace detail {
/** Waits for `stream` (nullptr: the legacy default stream); throws on a driver error. */
inline void stream_synchronize(CUstream stream)
{
  auto& api = cudaAPI::instance();
  if (api.StreamSynchronize == nullptr) {
    throw std::runtime_error("libcuda.so.1 has no cuStreamSynchronize");
  }
  CUresult const r = api.StreamSynchronize(stream);
  if (r != CUDA_SUCCESS) {
    throw std::runtime_error("cuStreamSynchronize failed: CUresult " +
                             std::to_string(static_cast<int>(r)));
  }
}
}  // namespace detail

}  // namespace kvikio
