/*
 * KvikIO's posix_host_io (a detail its public tests use), written for gpufile: a POSIX read
 * or write of host memory, through the O_DIRECT descriptor where one is given and the offset
 * and size are page-aligned (an unaligned buffer goes through an aligned bounce buffer).
 */
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <sys/types.h>

#include <kvikio/detail/utils.hpp>
#include <kvikio/error.hpp>
#include <kvikio/utils.hpp>

namespace kvikio::detail {

enum class IOOperationType : std::uint8_t {
  READ,
  WRITE,
};

enum class PartialIO : std::uint8_t {
  YES,  ///< One system call, which may move fewer bytes than asked.
  NO,   ///< System calls until every byte moved (a read stops at the end of the file).
};

template <IOOperationType Operation, PartialIO PartialIOStatus>
ssize_t posix_host_io(
  int fd_direct_off, void const* buf, std::size_t count, std::size_t offset, int fd_direct_on = -1)
{
  auto const page = get_page_size();
  bool const direct =
    fd_direct_on != -1 && is_aligned(offset, page) && is_aligned(count, page);
  int const fd = direct ? fd_direct_on : fd_direct_off;
  std::unique_ptr<void, decltype(&std::free)> bounce{nullptr, &std::free};
  char* io_buf = static_cast<char*>(const_cast<void*>(buf));
  if (direct && !is_aligned(const_cast<void*>(buf), page)) {
    bounce.reset(std::aligned_alloc(page, count));
    if (bounce == nullptr) { throw std::bad_alloc(); }
    io_buf = static_cast<char*>(bounce.get());
    if constexpr (Operation == IOOperationType::WRITE) { std::memcpy(io_buf, buf, count); }
  }
  std::size_t done = 0;
  while (done < count) {
    ssize_t n = 0;
    if constexpr (Operation == IOOperationType::READ) {
      n = ::pread(fd, io_buf + done, count - done, convert_size2off(offset + done));
    } else {
      n = ::pwrite(fd, io_buf + done, count - done, convert_size2off(offset + done));
    }
    if (n == -1) {
      if (errno == EINTR) { continue; }
      throw CUfileException(std::string{"POSIX error: "} + std::strerror(errno));
    }
    if (n == 0) { break; }
    done += static_cast<std::size_t>(n);
    if constexpr (PartialIOStatus == PartialIO::YES) { break; }
  }
  if (bounce != nullptr) {
    if constexpr (Operation == IOOperationType::READ) {
      std::memcpy(const_cast<void*>(buf), io_buf, done);
    }
  }
  return static_cast<ssize_t>(done);
}

}  // namespace kvikio::detail
