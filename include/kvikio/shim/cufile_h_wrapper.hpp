/*
 * The cuFile types KvikIO's C++ names use: cufile.h's where it is on the include path, else
 * the same names declared here (gpufile loads cuFile at run time and needs no cufile.h).
 */
#pragma once

#include <cstddef>

#if defined(__has_include)
#if __has_include(<cufile.h>)
#include <cufile.h>
#define GPUFILE_KVIKIO_HAVE_CUFILE_H 1
#endif
#endif

#ifndef GPUFILE_KVIKIO_HAVE_CUFILE_H
typedef void* CUfileHandle_t;
typedef void* CUfileBatchHandle_t;
typedef enum CUfileOpcode { CUFILE_READ = 0, CUFILE_WRITE } CUfileOpcode_t;
typedef enum CUFILEStatus_enum {
  CUFILE_WAITING  = 0x000001,
  CUFILE_PENDING  = 0x000002,
  CUFILE_INVALID  = 0x000004,
  CUFILE_CANCELED = 0x000008,
  CUFILE_COMPLETE = 0x0000010,
  CUFILE_TIMEOUT  = 0x0000020,
  CUFILE_FAILED   = 0x0000040
} CUfileStatus_t;
typedef struct {
  void* cookie;
  CUfileStatus_t status;
  size_t ret;
} CUfileIOEvents_t;
#endif
