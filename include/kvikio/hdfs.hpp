/*
 * KvikIO's WebHdfsEndpoint, served by gpufile.
 */
#pragma once

#include <optional>
#include <string>

#include <kvikio/remote_handle.hpp>

namespace kvikio {

/** An Apache Hadoop WebHDFS file (`user.name` from the URL, `username`, or
 * KVIKIO_WEBHDFS_USERNAME). */
class WebHdfsEndpoint : public detail::UrlEndpoint {
 public:
  explicit WebHdfsEndpoint(std::string url, std::optional<std::string> username = std::nullopt)
    : UrlEndpoint(RemoteEndpointType::WEBHDFS, with_user(std::move(url), username))
  {
  }
  explicit WebHdfsEndpoint(std::string host,
                           std::string port,
                           std::string remote_file_path,
                           std::optional<std::string> username = std::nullopt)
    : WebHdfsEndpoint("http://" + host + ":" + port + "/webhdfs/v1" + remote_file_path, username)
  {
  }
  ~WebHdfsEndpoint() override = default;
  static bool is_url_valid(std::string const& url) noexcept
  {
    return detail::url_is_valid(RemoteEndpointType::WEBHDFS, url);
  }

 private:
  static std::string with_user(std::string url, std::optional<std::string> const& username)
  {
    if (!username || url.find("user.name=") != std::string::npos) { return url; }
    return url + (url.find('?') == std::string::npos ? "?" : "&") + "user.name=" + *username;
  }
};

}  // namespace kvikio
