/*
 * KvikIO's ThreadPool type. gpufile runs every request on its own engine's workers (their
 * number is the thread_pool_nthreads setting): a ThreadPool here only records the size it
 * was made with, so that code passing one builds; requests given one run on gpufile's pool.
 */
#pragma once

#include <cstddef>

namespace kvikio {

/** A thread-pool handle (see above: gpufile's engine runs the work). */
class ThreadPool {
 public:
  explicit ThreadPool(unsigned int nthreads = 1) : _nthreads(nthreads) {}
  [[nodiscard]] unsigned int get_thread_count() const noexcept { return _nthreads; }
  void reset(unsigned int nthreads) { _nthreads = nthreads; }
  void wait() const noexcept {}

 private:
  unsigned int _nthreads;
};

}  // namespace kvikio
