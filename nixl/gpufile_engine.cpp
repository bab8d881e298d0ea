// The GPUFILE backend: registrations, transfers as gpufile batches, file queries.
#include "gpufile_engine.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <cstring>
#include <sstream>

#include "gpufile/gpufile.h"

namespace gpufile_nixl {
namespace {

std::mutex g_report_mutex;
std::string g_last_error;
std::string g_last_path;

// The calling thread's last gpufile error, as text naming its status.
std::string gpufile_error(const char *doing) {
  std::string msg(gpufile_last_error_message(nullptr, 0), '\0');
  gpufile_last_error_message(msg.data(), msg.size());
  msg.resize(std::strlen(msg.c_str()));
  return std::string(doing) + ": " + msg;
}

// What one registered region or file is to the backend.
class Md : public nixlBackendMD {
 public:
  Md(nixl_mem_t kind, uintptr_t base, size_t len)
      : nixlBackendMD(true), kind(kind), base(base), len(len) {}
  ~Md() override {
    if (file != nullptr) gpufile_file_close(file);
    if (remote != nullptr) gpufile_remote_close(remote);
  }
  nixl_mem_t kind;
  uintptr_t base;  // DRAM/VRAM: the region's start
  size_t len;
  gpufile_file *file = nullptr;            // FILE: gpufile's handle on it
  gpufile_remote_file *remote = nullptr;   // OBJ: gpufile's handle on the object
  uint64_t nbytes = 0;                     // OBJ: its size
  std::string name;                        // FILE: its path, or "fd N"; OBJ: its URL
  bool by_path = false;
  uint64_t dev_id = 0;
  bool sync = false;  // path mode's "sync": a write transfer ends with fsync
  FileKey key{};      // FILE: which file it is, for queryMem's gpufile_path
};

// One transfer: the operations of its descriptor list, submitted as one gpufile batch.
class Req : public nixlBackendReqH {
 public:
  ~Req() override { release(); }
  // Cancels what has not started, waits for what runs (no worker touches the buffers after
  // this), frees the futures.
  void release() {
    for (gpufile_future *f : futures) gpufile_future_cancel(f);
    for (gpufile_future *f : futures) gpufile_future_free(f);
    futures.clear();
  }
  std::vector<gpufile_batch_op> ops;
  std::vector<const Md *> objects;  // OBJ: ops[i] reads from objects[i]
  std::vector<gpufile_future *> futures;
  std::vector<size_t> group;
  std::vector<const Md *> sync_files;  // files to fsync once a write ends
  bool is_write = false;
  bool posted = false;
  nixl_status_t result = NIXL_IN_PROG;
  std::string path;  // what gpufile runs each request of it as, and why
  std::map<FileKey, std::string> file_paths;  // the lines of `path` of each file
};

// gpufile's path report of each request a batch of `ops` becomes (one per file, buffer and
// direction): "N ranges: POSIX|CUFILE: reason", one a line; `files` gives each file's key, and
// `per_file` gets the lines of each.
std::string path_report(const std::vector<gpufile_batch_op> &ops,
                        const std::map<const gpufile_file *, FileKey> &files,
                        std::map<FileKey, std::string> &per_file) {
  std::map<std::pair<const gpufile_file *, void *>, std::vector<gpufile_range>> groups;
  for (const auto &op : ops) {
    groups[{op.file, op.buf}].push_back({op.file_offset, op.size, op.buf_offset});
  }
  std::string out;
  for (const auto &[key, ranges] : groups) {
    size_t buf_size = 0;
    for (const auto &r : ranges) buf_size = std::max(buf_size, r.buf_offset + r.size);
    gpufile_backend backend = GPUFILE_BACKEND_POSIX;
    char reason[512] = {0};
    size_t needed = 0;
    if (gpufile_file_request_io_path(key.first, ops[0].is_write, key.second, buf_size,
                                     ranges.data(), ranges.size(), nullptr, &backend, reason,
                                     sizeof reason, &needed) != GPUFILE_OK) {
      out += gpufile_error("path") + "\n";
      continue;
    }
    std::string line = std::to_string(ranges.size()) + " ranges: ";
    line += backend == GPUFILE_BACKEND_CUFILE ? "CUFILE: " : "POSIX: ";
    line += reason;
    line += "\n";
    out += line;
    per_file[files.at(key.first)] += line;
  }
  return out;
}

// Path mode ("ro|rw[,flag]*:/path"): the access, flags and path, or false where `meta` is not
// in that form (the descriptor's devId is then a caller-owned fd).
struct PathMode {
  bool writable = false;
  bool create = false;
  bool sync = false;
  std::string path;
  std::string bad_flag;
};

bool parse_path_mode(const std::string &meta, PathMode &out) {
  const auto colon = meta.find(':');
  if (colon == std::string::npos) return false;
  std::vector<std::string> tokens;
  std::stringstream modes(meta.substr(0, colon));
  for (std::string t; std::getline(modes, t, ',');) tokens.push_back(t);
  if (tokens.empty() || (tokens[0] != "ro" && tokens[0] != "rw")) return false;
  out.writable = tokens[0] == "rw";
  for (size_t i = 1; i < tokens.size(); ++i) {
    if (tokens[i] == "create") {
      out.create = true;
    } else if (tokens[i] == "sync") {
      out.sync = true;
    } else if (tokens[i] == "direct" || tokens[i] == "noatime") {
      // gpufile chooses O_DIRECT per request from its settings; atime is the mount's.
    } else {
      out.bad_flag = tokens[i];
    }
  }
  out.path = meta.substr(colon + 1);
  return true;
}

// What errors call the file of descriptor `fd`: its path where /proc tells it, else "fd N".
std::string fd_name(uint64_t fd) {
  char target[4096];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  if (n <= 0 || target[0] != '/') return "fd " + std::to_string(fd);
  return std::string(target, static_cast<size_t>(n));
}

const char *mem_name(nixl_mem_t m) {
  switch (m) {
    case DRAM_SEG: return "DRAM";
    case VRAM_SEG: return "VRAM";
    case BLK_SEG: return "BLK";
    case OBJ_SEG: return "OBJ";
    case FILE_SEG: return "FILE";
  }
  return "?";
}

}  // namespace

const std::vector<std::string> &setting_names() {
  static const std::vector<std::string> names = {
      "compat_mode", "num_threads", "task_size", "gds_threshold", "bounce_buffer_size",
      "auto_direct_io_read", "auto_direct_io_write", "require_gds", "direct_io_uncached",
      "io_uring", "dma_cache_size", "http_max_attempts", "http_status_codes", "http_timeout",
      "remote_io_backend", "remote_io_num_reactors", "remote_io_reactor_dispatch",
      "remote_io_max_concurrent_requests", "remote_part_size", "async_save_pinned_limit",
      "async_save_device_limit"};
  return names;
}

nixl_b_params_t current_settings() {
  nixl_b_params_t out;
  for (const auto &name : setting_names()) {
    size_t needed = 0;
    if (gpufile_settings_get_str(name.c_str(), nullptr, 0, &needed) != GPUFILE_OK) continue;
    std::string value(needed, '\0');
    if (gpufile_settings_get_str(name.c_str(), value.data(), value.size(), nullptr) != GPUFILE_OK)
      continue;
    value.resize(std::strlen(value.c_str()));
    out[name] = value;
  }
  return out;
}

void report_error(const std::string &text) {
  {
    std::lock_guard<std::mutex> lock(g_report_mutex);
    g_last_error = text;
  }
  std::fprintf(stderr, "GPUFILE backend: %s\n", text.c_str());
}

void report_path(const std::string &text) {
  std::lock_guard<std::mutex> lock(g_report_mutex);
  g_last_path = text;
}

Engine::Engine(const nixlBackendInitParams *init_params) : nixlBackendEngine(init_params) {
  // The backend's parameters are gpufile's settings (process-wide, as gpufile's are).
  for (const auto &[key, value] : getCustomParams()) {
    if (value.empty()) continue;
    if (gpufile_settings_set_str(key.c_str(), value.c_str()) != GPUFILE_OK) {
      report_error(gpufile_error(("backend parameter " + key + "=" + value).c_str()));
      initErr = true;
      return;
    }
  }
  // The settings not given are listed with the values they have now, so that the agent's
  // backend parameters (`get_backend_params`) say what the backend runs with. The base class
  // only adds keys: a setting given (an empty value included) keeps its text.
  for (const auto &[key, value] : current_settings()) (void)setInitParam(key, value);
}

nixl_mem_list_t Engine::getSupportedMems() const {
  return {DRAM_SEG, VRAM_SEG, FILE_SEG, OBJ_SEG};
}

nixl_status_t Engine::registerMem(const nixlBlobDesc &mem, const nixl_mem_t &nixl_mem,
                                  nixlBackendMD *&out) {
  out = nullptr;
  if (nixl_mem == DRAM_SEG || nixl_mem == VRAM_SEG) {
    out = new Md(nixl_mem, mem.addr, mem.len);
    return NIXL_SUCCESS;
  }
  if (nixl_mem == OBJ_SEG) {
    // metaInfo is the object's URL: s3://, gs://, http(s)://, webhdfs:// (gpufile's
    // credential chains apply).
    auto md = std::make_unique<Md>(nixl_mem, mem.addr, mem.len);
    md->dev_id = mem.devId;
    md->name = mem.metaInfo;
    if (gpufile_remote_open(mem.metaInfo.c_str(), GPUFILE_REMOTE_AUTO, nullptr, 0, -1,
                            &md->remote) != GPUFILE_OK ||
        gpufile_remote_nbytes(md->remote, &md->nbytes) != GPUFILE_OK) {
      report_error(gpufile_error("registerMem"));
      return NIXL_ERR_BACKEND;
    }
    out = md.release();
    return NIXL_SUCCESS;
  }
  if (nixl_mem != FILE_SEG) {
    report_error(std::string("registerMem: ") + mem_name(nixl_mem) + " is not supported");
    return NIXL_ERR_NOT_SUPPORTED;
  }
  auto md = std::make_unique<Md>(nixl_mem, mem.addr, mem.len);
  md->dev_id = mem.devId;
  PathMode pm;
  if (parse_path_mode(mem.metaInfo, pm)) {
    if (!pm.bad_flag.empty()) {
      report_error("registerMem: unknown path-mode flag \"" + pm.bad_flag + "\" in \"" +
                   mem.metaInfo + "\" (flags: direct, sync, noatime, create)");
      return NIXL_ERR_INVALID_PARAM;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (path_dev_ids_.count(mem.devId) != 0) {
      report_error("registerMem: devId " + std::to_string(mem.devId) +
                   " is registered by path already: each file by path needs its own devId");
      return NIXL_ERR_INVALID_PARAM;
    }
    if (pm.create) {
      // O_CREAT without O_TRUNC: an existing file keeps its bytes.
      int fd = ::open(pm.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) {
        report_error("registerMem: create " + pm.path + ": " + std::strerror(errno));
        return NIXL_ERR_BACKEND;
      }
      ::close(fd);
    }
    if (gpufile_file_open(pm.path.c_str(), pm.writable ? "r+" : "r", &md->file) != GPUFILE_OK) {
      report_error(gpufile_error("registerMem"));
      return NIXL_ERR_BACKEND;
    }
    md->name = pm.path;
    md->by_path = true;
    md->sync = pm.sync;
    path_dev_ids_.insert(mem.devId);
  } else {
    md->name = mem.metaInfo.empty() ? fd_name(mem.devId) : mem.metaInfo;
    if (mem.devId > static_cast<uint64_t>(INT32_MAX) ||
        gpufile_file_from_fd(static_cast<int>(mem.devId), md->name.c_str(), &md->file) !=
            GPUFILE_OK) {
      report_error(mem.devId > static_cast<uint64_t>(INT32_MAX)
                       ? "registerMem: devId " + std::to_string(mem.devId) + " is not an fd"
                       : gpufile_error("registerMem"));
      return NIXL_ERR_BACKEND;
    }
  }
  int fd = -1;
  struct stat st {};
  if (gpufile_file_fd(md->file, 0, &fd) == GPUFILE_OK && ::fstat(fd, &st) == 0) {
    md->key = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++file_regs_[md->key];
  }
  out = md.release();
  return NIXL_SUCCESS;
}

nixl_status_t Engine::deregisterMem(nixlBackendMD *meta) {
  auto *md = static_cast<Md *>(meta);
  if (md != nullptr && md->kind == FILE_SEG) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (md->by_path) path_dev_ids_.erase(md->dev_id);
    // Kept while a registration of the file lasts: the map stays as small as the files
    // registered.
    if (--file_regs_[md->key] == 0) {
      file_regs_.erase(md->key);
      last_paths_.erase(md->key);
    }
  }
  delete md;  // closes gpufile's handle; requests still running keep the file open
  return NIXL_SUCCESS;
}

nixl_status_t Engine::prepXfer(const nixl_xfer_op_t &operation, const nixl_meta_dlist_t &local,
                               const nixl_meta_dlist_t &remote, const std::string &,
                               nixlBackendReqH *&handle, const nixl_opt_b_args_t *) const {
  const bool local_ok = local.getType() == DRAM_SEG || local.getType() == VRAM_SEG;
  const bool object = remote.getType() == OBJ_SEG;
  if (!local_ok || (remote.getType() != FILE_SEG && !object)) {
    report_error(std::string("prepXfer: ") + mem_name(local.getType()) + " <-> " +
                 mem_name(remote.getType()) + " is not supported (DRAM or VRAM <-> FILE or OBJ)");
    return NIXL_ERR_NOT_SUPPORTED;
  }
  if (object && operation == NIXL_WRITE) {
    report_error("prepXfer: writes to objects are not supported by the GPUFILE backend yet");
    return NIXL_ERR_NOT_SUPPORTED;
  }
  if (local.descCount() != remote.descCount()) {
    report_error("prepXfer: " + std::to_string(local.descCount()) + " local and " +
                 std::to_string(remote.descCount()) + " remote descriptors");
    return NIXL_ERR_INVALID_PARAM;
  }
  auto req = std::make_unique<Req>();
  req->is_write = operation == NIXL_WRITE;
  req->ops.reserve(local.descCount());
  for (int i = 0; i < local.descCount(); ++i) {
    const nixlMetaDesc &l = local[i];
    const nixlMetaDesc &r = remote[i];
    const auto *lmd = static_cast<const Md *>(l.metadataP);
    const auto *rmd = static_cast<const Md *>(r.metadataP);
    if (l.len != r.len) {
      report_error("prepXfer: descriptor " + std::to_string(i) + " is " + std::to_string(l.len) +
                   " bytes in memory and " + std::to_string(r.len) + " in the file");
      return NIXL_ERR_INVALID_PARAM;
    }
    if (lmd == nullptr || rmd == nullptr || (rmd->file == nullptr && rmd->remote == nullptr)) {
      report_error("prepXfer: descriptor " + std::to_string(i) + " is not registered with GPUFILE");
      return NIXL_ERR_INVALID_PARAM;
    }
    // One buffer per registered region: the ranges of a list into one region and one file
    // become one gpufile request of many ranges.
    if (object && (r.addr > rmd->nbytes || l.len > rmd->nbytes - r.addr)) {
      report_error("prepXfer: descriptor " + std::to_string(i) + " reads " +
                   std::to_string(l.len) + " bytes at offset " + std::to_string(r.addr) +
                   " of " + rmd->name + ", past its end (" + std::to_string(rmd->nbytes) +
                   " bytes)");
      return NIXL_ERR_INVALID_PARAM;
    }
    if (object) req->objects.push_back(rmd);
    gpufile_batch_op op{};
    op.file = rmd->file;
    op.buf = reinterpret_cast<void *>(lmd->base);
    op.buf_offset = l.addr - lmd->base;
    op.file_offset = r.addr;
    op.size = l.len;
    op.is_write = req->is_write ? 1 : 0;
    req->ops.push_back(op);
    if (req->is_write && rmd->sync &&
        (req->sync_files.empty() || req->sync_files.back() != rmd)) {
      req->sync_files.push_back(rmd);
    }
  }
  if (object) {
    req->path = std::to_string(req->ops.size()) + " ranges: remote\n";
  } else {
    std::map<const gpufile_file *, FileKey> files;
    for (int i = 0; i < remote.descCount(); ++i) {
      const auto *rmd = static_cast<const Md *>(remote[i].metadataP);
      files[rmd->file] = rmd->key;
    }
    req->path = path_report(req->ops, files, req->file_paths);
  }
  handle = req.release();
  return NIXL_SUCCESS;
}

nixl_status_t Engine::postXfer(const nixl_xfer_op_t &, const nixl_meta_dlist_t &,
                               const nixl_meta_dlist_t &, const std::string &,
                               nixlBackendReqH *&handle, const nixl_opt_b_args_t *) const {
  auto *req = static_cast<Req *>(handle);
  req->release();  // a handle posted again: its earlier transfer has ended (NIXL checks)
  req->result = NIXL_IN_PROG;
  const size_t n = req->ops.size();
  if (n == 0) {
    req->result = NIXL_SUCCESS;
    return NIXL_SUCCESS;
  }
  if (!req->objects.empty()) {
    // One gpufile request per object range (the C API reads a remote object one range at
    // a time); the ranges were checked against the objects' sizes by prepXfer.
    for (size_t i = 0; i < n; ++i) {
      const gpufile_batch_op &op = req->ops[i];
      gpufile_future *f = nullptr;
      if (gpufile_remote_pread(req->objects[i]->remote,
                               static_cast<char *>(op.buf) + op.buf_offset, op.size,
                               op.file_offset, 0, &f) != GPUFILE_OK) {
        report_error(gpufile_error("postXfer"));
        req->release();
        req->result = NIXL_ERR_BACKEND;
        return NIXL_ERR_BACKEND;
      }
      req->futures.push_back(f);
    }
    req->posted = true;
    return NIXL_IN_PROG;
  }
  std::vector<gpufile_future *> futures(n, nullptr);
  req->group.assign(n, 0);
  size_t ngroups = 0;
  if (gpufile_batch_submit(req->ops.data(), n, nullptr, futures.data(), req->group.data(),
                           &ngroups) != GPUFILE_OK) {
    report_error(gpufile_error("postXfer"));
    req->result = NIXL_ERR_BACKEND;
    return NIXL_ERR_BACKEND;
  }
  futures.resize(ngroups);
  req->futures = std::move(futures);
  req->posted = true;
  return NIXL_IN_PROG;
}

nixl_status_t Engine::checkXfer(nixlBackendReqH *handle) const {
  auto *req = static_cast<Req *>(handle);
  if (req->result != NIXL_IN_PROG) return req->result;
  for (gpufile_future *f : req->futures) {
    int done = 0;
    if (gpufile_future_done(f, &done) != GPUFILE_OK) {
      report_error(gpufile_error("checkXfer"));
      return req->result = NIXL_ERR_BACKEND;
    }
    if (done == 0) {
      // A caller polling without pause would hold a core gpufile's workers need (on a small
      // machine, every core): give it to them before answering.
      sched_yield();
      return NIXL_IN_PROG;
    }
  }
  for (gpufile_future *f : req->futures) {
    if (gpufile_future_wait(f, nullptr) != GPUFILE_OK) {
      report_error(gpufile_error(req->is_write ? "write" : "read"));
      return req->result = NIXL_ERR_BACKEND;
    }
  }
  for (const Md *md : req->sync_files) {
    int fd = -1;
    if (gpufile_file_fd(md->file, 0, &fd) != GPUFILE_OK || ::fsync(fd) != 0) {
      report_error("fsync " + md->name + ": " + std::strerror(errno));
      return req->result = NIXL_ERR_BACKEND;
    }
  }
  report_path(req->path);
  if (!req->file_paths.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto &[key, text] : req->file_paths) {
      if (file_regs_.count(key) != 0) last_paths_[key] = text;
    }
  }
  return req->result = NIXL_SUCCESS;
}

nixl_status_t Engine::releaseReqH(nixlBackendReqH *handle) const {
  delete static_cast<Req *>(handle);  // cancels what has not started, waits for what runs
  return NIXL_SUCCESS;
}

nixl_status_t Engine::queryMem(const nixl_reg_dlist_t &descs,
                               std::vector<nixl_query_resp_t> &resp) const {
  resp.clear();
  resp.reserve(descs.descCount());
  for (int i = 0; i < descs.descCount(); ++i) {
    if (descs.getType() == OBJ_SEG) {
      gpufile_remote_file *remote = nullptr;
      uint64_t nbytes = 0;
      const bool ok = gpufile_remote_open(descs[i].metaInfo.c_str(), GPUFILE_REMOTE_AUTO,
                                          nullptr, 0, -1, &remote) == GPUFILE_OK &&
                      gpufile_remote_nbytes(remote, &nbytes) == GPUFILE_OK;
      if (remote != nullptr) gpufile_remote_close(remote);
      if (ok) {
        resp.emplace_back(nixl_b_params_t{{"size", std::to_string(nbytes)}});
      } else {
        resp.emplace_back(std::nullopt);
      }
      continue;
    }
    PathMode pm;
    std::string path = descs[i].metaInfo;
    if (parse_path_mode(path, pm)) path = pm.path;
    struct stat st {};
    if (path.empty() || ::stat(path.c_str(), &st) != 0) {
      resp.emplace_back(std::nullopt);
      continue;
    }
    nixl_b_params_t answer{{"size", std::to_string(st.st_size)},
                           {"mode", std::to_string(st.st_mode)},
                           {"mtime", std::to_string(st.st_mtime)}};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = last_paths_.find(
          {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)});
      if (it != last_paths_.end()) answer["gpufile_path"] = it->second;
    }
    resp.emplace_back(std::move(answer));
  }
  return NIXL_SUCCESS;
}

}  // namespace gpufile_nixl

extern "C" {
// The text of the backend's last failure in this process (gpufile's message, naming the file),
// copied into `buf` (at most `len` bytes, NUL-terminated); returns the bytes the whole text and
// its NUL need. NIXL's agent gives only a status: this is how a caller learns why.
__attribute__((visibility("default"))) size_t gpufile_nixl_last_error(char *buf, size_t len) {
  std::lock_guard<std::mutex> lock(gpufile_nixl::g_report_mutex);
  const std::string &s = gpufile_nixl::g_last_error;
  if (buf != nullptr && len > 0) {
    const size_t n = std::min(len - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return s.size() + 1;
}

// What gpufile ran the requests of the last transfer that ended well as, and why (its path
// report: "N ranges: POSIX|CUFILE: reason", one request a line), copied as
// `gpufile_nixl_last_error` copies.
__attribute__((visibility("default"))) size_t gpufile_nixl_last_path(char *buf, size_t len) {
  std::lock_guard<std::mutex> lock(gpufile_nixl::g_report_mutex);
  const std::string &s = gpufile_nixl::g_last_path;
  if (buf != nullptr && len > 0) {
    const size_t n = std::min(len - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return s.size() + 1;
}
}
