/*
 * KvikIO's RemoteHandle and its endpoint types, served by gpufile (gpufile-remote through the
 * C API). gpufile talks HTTP itself (no libcurl): an endpoint here names the object and its
 * credentials, and RemoteHandle opens it with gpufile. An endpoint class written by the user
 * (a RemoteEndpoint subclass of its own) can be held, and reads of 0 bytes from it succeed;
 * other reads through it are refused (std::runtime_error): gpufile has no libcurl handle to
 * give its setopt().
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gpufile/gpufile.hpp>
#include <kvikio/defaults.hpp>
#include <kvikio/detail/in_monitor.hpp>
#include <kvikio/error.hpp>
#include <kvikio/threadpool_wrapper.hpp>

namespace kvikio {

/** What libcurl handle a user's endpoint would configure (gpufile gives none out). */
class CurlHandle;

/** The kinds of remote endpoint (KvikIO's values). */
enum class RemoteEndpointType : std::uint8_t {
  AUTO,
  S3,
  S3_PUBLIC,
  S3_PRESIGNED_URL,
  WEBHDFS,
  HTTP,
};

namespace detail {
inline bool url_is_valid(RemoteEndpointType type, std::string const& url) noexcept
{
  int ok = 0;
  return gpufile_remote_url_is_valid(static_cast<int>(type), url.c_str(), &ok) == GPUFILE_OK &&
         ok != 0;
}
/** gpufile's errors of opening remote objects are std::runtime_error, as KvikIO's. */
template <typename F>
decltype(auto) remote_call(F&& f)
{
  try {
    return std::forward<F>(f)();
  } catch (gpufile::Error const& e) {
    throw std::runtime_error(e.what());
  }
}
}  // namespace detail

/** A remote object's address and credentials. */
class RemoteEndpoint {
 protected:
  RemoteEndpointType _remote_endpoint_type{RemoteEndpointType::AUTO};
  RemoteEndpoint(RemoteEndpointType remote_endpoint_type)
    : _remote_endpoint_type(remote_endpoint_type)
  {
  }

 public:
  virtual ~RemoteEndpoint() = default;
  virtual void setopt(CurlHandle& curl) = 0;
  [[nodiscard]] virtual std::string str() const = 0;
  virtual std::size_t get_file_size()           = 0;
  virtual void setup_range_request(CurlHandle& curl, std::size_t file_offset, std::size_t size) = 0;
  [[nodiscard]] RemoteEndpointType remote_endpoint_type() const noexcept
  {
    return _remote_endpoint_type;
  }
  /** gpufile's open of this endpoint (empty for a user's own endpoint class). */
  [[nodiscard]] virtual std::optional<gpufile::RemoteFile> gpufile_open(
    std::optional<std::size_t> /*nbytes*/) const
  {
    return std::nullopt;
  }
};

namespace detail {
/** An endpoint gpufile opens by URL and type. */
class UrlEndpoint : public RemoteEndpoint {
 public:
  UrlEndpoint(RemoteEndpointType type, std::string url) : RemoteEndpoint(type), _url(std::move(url))
  {
  }
  void setopt(CurlHandle&) override {}
  void setup_range_request(CurlHandle&, std::size_t, std::size_t) override {}
  [[nodiscard]] std::string str() const override { return _url; }
  std::size_t get_file_size() override { return gpufile_open(std::nullopt)->nbytes(); }
  [[nodiscard]] std::optional<gpufile::RemoteFile> gpufile_open(
    std::optional<std::size_t> nbytes) const override
  {
    auto type = static_cast<gpufile::RemoteEndpointType>(_remote_endpoint_type);
    return remote_call([&] {
      return gpufile::RemoteFile::open(
        _url, type, std::vector<gpufile::RemoteEndpointType>{type}, nbytes);
    });
  }

 protected:
  std::string _url;
};
}  // namespace detail

/** Any HTTP(S) server that answers ranged GETs. */
class HttpEndpoint : public detail::UrlEndpoint {
 public:
  HttpEndpoint(std::string url) : UrlEndpoint(RemoteEndpointType::HTTP, std::move(url))
  {
    if (!is_url_valid(_url)) { throw std::runtime_error("Invalid URL for HTTP endpoint: " + _url); }
  }
  static bool is_url_valid(std::string const& url) noexcept
  {
    return detail::url_is_valid(RemoteEndpointType::HTTP, url);
  }
};

/** S3 with credentials (arguments, else the AWS_* environment variables). */
class S3Endpoint : public RemoteEndpoint {
 public:
  /** The URL of `bucket_name`/`object_name` at `aws_endpoint_url` or AWS in `aws_region`. */
  static std::string url_from_bucket_and_object(std::string bucket_name,
                                                std::string object_name,
                                                std::optional<std::string> aws_region,
                                                std::optional<std::string> aws_endpoint_url)
  {
    return object_url(nullptr, bucket_name.c_str(), object_name.c_str(), aws_region, aws_endpoint_url);
  }
  /** ("bucket", "key") of "s3://bucket/key". */
  [[nodiscard]] static std::pair<std::string, std::string> parse_s3_url(std::string const& s3_url)
  {
    auto const prefix = std::string{"s3://"};
    auto const slash  = s3_url.find('/', prefix.size());
    if (s3_url.rfind(prefix, 0) != 0 || slash == std::string::npos || slash == prefix.size() ||
        slash + 1 >= s3_url.size()) {
      throw std::invalid_argument("Input string does not match the expected S3 URL format.");
    }
    return {s3_url.substr(prefix.size(), slash - prefix.size()), s3_url.substr(slash + 1)};
  }

  S3Endpoint(std::string url,
             std::optional<std::string> aws_region            = std::nullopt,
             std::optional<std::string> aws_access_key        = std::nullopt,
             std::optional<std::string> aws_secret_access_key = std::nullopt,
             std::optional<std::string> aws_session_token     = std::nullopt)
    : RemoteEndpoint(RemoteEndpointType::S3), _url(std::move(url))
  {
    _options.region            = std::move(aws_region);
    _options.access_key_id     = std::move(aws_access_key);
    _options.secret_access_key = std::move(aws_secret_access_key);
    _options.session_token     = std::move(aws_session_token);
    _shown = object_url(_url.c_str(), nullptr, nullptr, _options.region, std::nullopt);
  }
  S3Endpoint(std::pair<std::string, std::string> bucket_and_object_names,
             std::optional<std::string> aws_region            = std::nullopt,
             std::optional<std::string> aws_access_key        = std::nullopt,
             std::optional<std::string> aws_secret_access_key = std::nullopt,
             std::optional<std::string> aws_endpoint_url      = std::nullopt,
             std::optional<std::string> aws_session_token     = std::nullopt)
    : S3Endpoint(url_from_bucket_and_object(bucket_and_object_names.first,
                                            bucket_and_object_names.second,
                                            aws_region,
                                            aws_endpoint_url),
                 aws_region,
                 std::move(aws_access_key),
                 std::move(aws_secret_access_key),
                 std::move(aws_session_token))
  {
  }
  ~S3Endpoint() override = default;
  void setopt(CurlHandle&) override {}
  void setup_range_request(CurlHandle&, std::size_t, std::size_t) override {}
  [[nodiscard]] std::string str() const override { return _shown; }
  std::size_t get_file_size() override { return gpufile_open(std::nullopt)->nbytes(); }
  static bool is_url_valid(std::string const& url) noexcept
  {
    return detail::url_is_valid(RemoteEndpointType::S3, url);
  }
  [[nodiscard]] std::optional<gpufile::RemoteFile> gpufile_open(
    std::optional<std::size_t> nbytes) const override
  {
    return detail::remote_call([&] {
      return gpufile::RemoteFile::open_s3(
        _url, _options, nbytes ? std::optional<std::uint64_t>(*nbytes) : std::nullopt);
    });
  }

 private:
  static std::string object_url(char const* url,
                                char const* bucket,
                                char const* object,
                                std::optional<std::string> const& region,
                                std::optional<std::string> const& endpoint_url)
  {
    return detail::remote_call([&] {
      return gpufile::detail::copy_text([&](char* b, std::size_t len) {
        std::size_t needed = 0;
        gpufile::detail::check(gpufile_remote_s3_object_url(url,
                                                            bucket,
                                                            object,
                                                            region ? region->c_str() : nullptr,
                                                            endpoint_url ? endpoint_url->c_str()
                                                                         : nullptr,
                                                            b,
                                                            len,
                                                            &needed));
        return needed;
      });
    });
  }
  std::string _url;
  std::string _shown;
  gpufile::S3Options _options;
};

/** S3 objects anyone may read (no signing). */
class S3PublicEndpoint : public detail::UrlEndpoint {
 public:
  explicit S3PublicEndpoint(std::string url)
    : UrlEndpoint(RemoteEndpointType::S3_PUBLIC, std::move(url))
  {
  }
  static bool is_url_valid(std::string const& url) noexcept
  {
    return detail::url_is_valid(RemoteEndpointType::S3_PUBLIC, url);
  }
};

/** An S3 URL signed in advance. */
class S3EndpointWithPresignedUrl : public detail::UrlEndpoint {
 public:
  explicit S3EndpointWithPresignedUrl(std::string presigned_url)
    : UrlEndpoint(RemoteEndpointType::S3_PRESIGNED_URL, std::move(presigned_url))
  {
  }
  static bool is_url_valid(std::string const& url) noexcept
  {
    return detail::url_is_valid(RemoteEndpointType::S3_PRESIGNED_URL, url);
  }
};

/** The endpoint type KvikIO infers for `url` (std::runtime_error for a bad one). */
inline RemoteEndpointType infer_remote_endpoint_type(std::string const& url)
{
  return detail::remote_call(
    [&] { return static_cast<RemoteEndpointType>(gpufile::infer_remote_endpoint_type(url)); });
}

/** An open remote object. */
class RemoteHandle {
 public:
  /** Opens `url` as `remote_endpoint_type` (AUTO: inferred, trying `allow_list` in order). */
  static RemoteHandle open(std::string const& url,
                           RemoteEndpointType remote_endpoint_type = RemoteEndpointType::AUTO,
                           std::optional<std::vector<RemoteEndpointType>> allow_list = std::nullopt,
                           std::optional<std::size_t> nbytes = std::nullopt)
  {
    std::optional<std::vector<gpufile::RemoteEndpointType>> allow;
    if (allow_list) {
      allow.emplace();
      for (auto t : *allow_list) {
        allow->push_back(static_cast<gpufile::RemoteEndpointType>(t));
      }
    }
    auto file = detail::remote_call([&] {
      return gpufile::RemoteFile::open(url,
                                       static_cast<gpufile::RemoteEndpointType>(remote_endpoint_type),
                                       allow,
                                       nbytes ? std::optional<std::uint64_t>(*nbytes) : std::nullopt);
    });
    auto type = static_cast<RemoteEndpointType>(file.remote_endpoint_type());
    auto endpoint = std::make_unique<detail::UrlEndpoint>(type, file.url());
    return RemoteHandle(std::move(endpoint), std::move(file));
  }

  RemoteHandle(std::unique_ptr<RemoteEndpoint> endpoint, std::size_t nbytes)
    : _endpoint(std::move(endpoint)), _nbytes(nbytes)
  {
    _file = _endpoint->gpufile_open(nbytes);
  }
  RemoteHandle(std::unique_ptr<RemoteEndpoint> endpoint) : _endpoint(std::move(endpoint))
  {
    _file = _endpoint->gpufile_open(std::nullopt);
    _nbytes = _file ? static_cast<std::size_t>(_file->nbytes()) : _endpoint->get_file_size();
  }
  RemoteHandle(RemoteHandle&& o)               = default;
  RemoteHandle& operator=(RemoteHandle&& o)    = default;
  RemoteHandle(RemoteHandle const&)            = delete;
  RemoteHandle& operator=(RemoteHandle const&) = delete;

  [[nodiscard]] RemoteEndpointType remote_endpoint_type() const noexcept
  {
    return _endpoint->remote_endpoint_type();
  }
  [[nodiscard]] std::size_t nbytes() const noexcept { return _nbytes; }
  [[nodiscard]] RemoteEndpoint const& endpoint() const noexcept { return *_endpoint; }

  /** Reads `size` bytes at `file_offset` into `buf` (host or device memory); blocks. */
  std::size_t read(void* buf, std::size_t size, std::size_t file_offset = 0)
  {
    return pread(buf, size, file_offset).get();
  }

  gpufile::Future pread(void* buf,
                                 std::size_t size,
                                 std::size_t file_offset   = 0,
                                 std::size_t task_size     = defaults::task_size(),
                                 ThreadPool* /*thread_pool*/ = &defaults::thread_pool())
  {
    // Compared without the sum, which wraps for offsets near SIZE_MAX and let them through.
    if (file_offset > _nbytes || size > _nbytes - file_offset) {
      throw std::invalid_argument("cannot read " + std::to_string(file_offset) + "+" +
                                  std::to_string(size) + " bytes into a " +
                                  std::to_string(_nbytes) + " bytes file (" + _endpoint->str() +
                                  ")");
    }
    if (size == 0) { return make_ready(0); }
    detail::expect_not_in_monitor("read");
    if (!_file) {
      throw std::runtime_error(
        "gpufile reads remote objects itself: a RemoteEndpoint subclass of the program's own (" +
        _endpoint->str() + ") cannot be read through");
    }
    return detail::remote_call([&] { return _file->pread(buf, size, file_offset, task_size); });
  }

 private:
  RemoteHandle(std::unique_ptr<RemoteEndpoint> endpoint, gpufile::RemoteFile file)
    : _endpoint(std::move(endpoint)),
      _nbytes(static_cast<std::size_t>(file.nbytes())),
      _file(std::move(file))
  {
  }
  static gpufile::Future make_ready(std::size_t n)
  {
    std::promise<std::size_t> p;
    p.set_value(n);
    return gpufile::Future(p.get_future());
  }
  std::unique_ptr<RemoteEndpoint> _endpoint;
  std::size_t _nbytes{0};
  std::optional<gpufile::RemoteFile> _file;
};

}  // namespace kvikio
