// What the C and C++ API tests share: a temporary folder, files of known bytes, the last
// error of the C API, and a local HTTP server with Range support (python/gpufile/_http_server.py,
// loaded by path so that the Python extension need not be built).
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpufile/gpufile.h"

namespace support {

/** A temporary folder, removed with its files. */
class TempDir {
 public:
  TempDir()
  {
    std::string tpl = (std::filesystem::temp_directory_path() / "gpufile-cpp.XXXXXX").string();
    if (mkdtemp(tpl.data()) == nullptr) { throw std::runtime_error("mkdtemp failed"); }
    path_ = tpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(TempDir const&)            = delete;
  TempDir& operator=(TempDir const&) = delete;
  [[nodiscard]] std::filesystem::path const& path() const { return path_; }
  [[nodiscard]] std::string file(std::string const& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

/** `n` bytes, byte i being (i * 7 + 3) mod 251 (no period of a power of two). */
inline std::vector<unsigned char> pattern(std::size_t n)
{
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<unsigned char>((i * 7 + 3) % 251);
  }
  return v;
}

inline void write_file(std::string const& path, std::vector<unsigned char> const& bytes)
{
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<char const*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<unsigned char> read_file(std::string const& path)
{
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/** The calling thread's last error of the C API. */
struct LastError {
  gpufile_status type;
  int errno_value;
  std::string message;
  std::string path;
};

inline LastError last_error()
{
  char message[1024], path[1024];
  gpufile_last_error_message(message, sizeof message);
  gpufile_last_error_path(path, sizeof path);
  return {gpufile_last_error_type(), gpufile_last_error_errno(), message, path};
}

/** A local HTTP server over a folder (Python's http.server with Range support). */
class HttpServer {
 public:
  explicit HttpServer(std::string const& root)
  {
    int out[2];
    if (pipe(out) != 0) { throw std::runtime_error("pipe failed"); }
    std::string const script =
      "import functools, importlib.util, sys\n"
      "from http.server import ThreadingHTTPServer\n"
      "spec = importlib.util.spec_from_file_location('srv', sys.argv[1])\n"
      "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
      "h = ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(m.RangeRequestHandler, "
      "directory=sys.argv[2]))\n"
      "h.daemon_threads = True\n"
      "print(h.server_address[1], flush=True)\n"
      "h.serve_forever()\n";
    std::string const module = std::string(GPUFILE_SOURCE_DIR) + "/python/gpufile/_http_server.py";
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      execlp("python3", "python3", "-c", script.c_str(), module.c_str(), root.c_str(), nullptr);
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    int port = 0;
    if (f == nullptr || fscanf(f, "%d", &port) != 1) {
      throw std::runtime_error("the HTTP server did not start (python3 missing?)");
    }
    fclose(f);
    url_ = "http://127.0.0.1:" + std::to_string(port);
  }
  ~HttpServer()
  {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  HttpServer(HttpServer const&)            = delete;
  HttpServer& operator=(HttpServer const&) = delete;
  [[nodiscard]] std::string const& url() const { return url_; }

 private:
  pid_t pid_{-1};
  std::string url_;
};

}  // namespace support
