/*
 * gpufile's C++ remote objects (included by gpufile/gpufile.hpp): RemoteFile over HTTP(S), S3,
 * WebHDFS and gs:// URLs, read into host or device memory through the C ABI's remote calls.
 *
 *   gpufile::RemoteFile f = gpufile::RemoteFile::open("s3://bucket/key");
 *   f.read(buf, f.nbytes());
 *
 * See docs/cpp.md and docs/remote.md.
 */
#ifndef GPUFILE_REMOTE_HPP
#define GPUFILE_REMOTE_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "gpufile/gpufile.hpp"

namespace gpufile {

/** Remote endpoint types (KvikIO's RemoteEndpointType values). */
enum class RemoteEndpointType : int {
  AUTO             = GPUFILE_REMOTE_AUTO,
  S3               = GPUFILE_REMOTE_S3,
  S3_PUBLIC        = GPUFILE_REMOTE_S3_PUBLIC,
  S3_PRESIGNED_URL = GPUFILE_REMOTE_S3_PRESIGNED_URL,
  WEBHDFS          = GPUFILE_REMOTE_WEBHDFS,
  HTTP             = GPUFILE_REMOTE_HTTP,
};

/** Optional S3 credentials (unset: the AWS default credential chain). */
struct S3Options {
  std::optional<std::string> region, access_key_id, secret_access_key, endpoint_url,
    session_token;
};

/** An open remote object (HTTP(S), S3, WebHDFS, gs://), read into host or device memory. */
class RemoteFile {
 public:
  RemoteFile() noexcept = default;
  /** KvikIO's RemoteHandle::open: `type` AUTO infers it, trying `allow_list` in order. */
  static RemoteFile open(std::string const& url,
                         RemoteEndpointType type = RemoteEndpointType::AUTO,
                         std::optional<std::vector<RemoteEndpointType>> allow_list = std::nullopt,
                         std::optional<std::uint64_t> nbytes                       = std::nullopt)
  {
    std::vector<int> allow;
    if (allow_list) {
      for (auto t : *allow_list) {
        allow.push_back(static_cast<int>(t));
      }
    }
    // An empty list is a list (it allows nothing); NULL asks for the default list.
    static int const none = 0;
    RemoteFile f;
    detail::check(gpufile_remote_open(url.c_str(),
                                      static_cast<int>(type),
                                      allow_list ? (allow.empty() ? &none : allow.data()) : nullptr,
                                      allow_list ? allow.size() : 0,
                                      nbytes ? static_cast<std::int64_t>(*nbytes) : -1,
                                      &f.remote_));
    return f;
  }
  /** An S3 object with explicit credentials. */
  static RemoteFile open_s3(std::string const& url,
                            S3Options const& o                  = {},
                            std::optional<std::uint64_t> nbytes = std::nullopt)
  {
    auto c = [](std::optional<std::string> const& s) { return s ? s->c_str() : nullptr; };
    RemoteFile f;
    detail::check(gpufile_remote_open_s3(url.c_str(),
                                         c(o.region),
                                         c(o.access_key_id),
                                         c(o.secret_access_key),
                                         c(o.endpoint_url),
                                         c(o.session_token),
                                         nbytes ? static_cast<std::int64_t>(*nbytes) : -1,
                                         &f.remote_));
    return f;
  }
  RemoteFile(RemoteFile const&)            = delete;
  RemoteFile& operator=(RemoteFile const&) = delete;
  RemoteFile(RemoteFile&& o) noexcept : remote_(std::exchange(o.remote_, nullptr)) {}
  RemoteFile& operator=(RemoteFile&& o) noexcept
  {
    if (this != &o) {
      close();
      remote_ = std::exchange(o.remote_, nullptr);
    }
    return *this;
  }
  ~RemoteFile() noexcept { close(); }
  void close() noexcept
  {
    if (remote_ != nullptr) { gpufile_remote_close(std::exchange(remote_, nullptr)); }
  }
  [[nodiscard]] bool closed() const noexcept { return remote_ == nullptr; }

  [[nodiscard]] std::uint64_t nbytes() const
  {
    std::uint64_t n = 0;
    detail::check(gpufile_remote_nbytes(remote_, &n));
    return n;
  }
  [[nodiscard]] RemoteEndpointType remote_endpoint_type() const
  {
    int t = 0;
    detail::check(gpufile_remote_endpoint_type(remote_, &t));
    return static_cast<RemoteEndpointType>(t);
  }
  /** The URL, signatures and credentials redacted. */
  [[nodiscard]] std::string url() const
  {
    return detail::copy_text([&](char* b, std::size_t len) {
      std::size_t needed = 0;
      detail::check(gpufile_remote_url(remote_, b, len, &needed));
      return needed;
    });
  }
  /** Where the object's credentials come from (empty: read without credentials); never the
   * credentials themselves. */
  [[nodiscard]] std::string credentials_source() const
  {
    return detail::copy_text([&](char* b, std::size_t len) {
      std::size_t needed = 0;
      detail::check(gpufile_remote_credentials_source(remote_, b, len, &needed));
      return needed;
    });
  }
  Future pread(void* buf,
                                 std::size_t size,
                                 std::uint64_t offset  = 0,
                                 std::size_t task_size = 0) const
  {
    gpufile_future* fut = nullptr;
    detail::check(gpufile_remote_pread(remote_, buf, size, offset, task_size, &fut));
    return detail::to_future(fut);
  }
  std::size_t read(void* buf, std::size_t size, std::uint64_t offset = 0) const
  {
    return pread(buf, size, offset).get();
  }

 private:
  gpufile_remote_file* remote_{nullptr};
};

/** The endpoint type KvikIO's infer_remote_endpoint_type gives `url`. */
inline RemoteEndpointType infer_remote_endpoint_type(std::string const& url)
{
  int t = 0;
  detail::check(gpufile_remote_infer_endpoint_type(url.c_str(), &t));
  return static_cast<RemoteEndpointType>(t);
}

}  // namespace gpufile

#endif  // GPUFILE_REMOTE_HPP
