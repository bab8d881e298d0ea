// The GPUFILE backend of NIXL: a NIXL storage engine whose transfers are gpufile requests
// (docs/nixl.md). Local only, no notifications, as NIXL's storage backends are.
#ifndef GPUFILE_NIXL_ENGINE_H
#define GPUFILE_NIXL_ENGINE_H

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backend/backend_engine.h"

namespace gpufile_nixl {

// A file as the kernel knows it (st_dev, st_ino): registrations by path and by descriptor of
// one file, and queryMem's path or path mode, name the same one.
using FileKey = std::pair<uint64_t, uint64_t>;

// The gpufile settings the backend takes as NIXL backend parameters (all of gpufile's).
const std::vector<std::string> &setting_names();

// Those of `setting_names` that gpufile's C API reads, with their current values as text
// (`gpufile_settings_get_str`): the backend's options and their defaults.
nixl_b_params_t current_settings();

// Records the text of a failure (what `gpufile_nixl_last_error` gives) and prints it on
// stderr, as NIXL's own backends log theirs.
void report_error(const std::string &text);

// Records what the last transfer ran as (`gpufile_nixl_last_path`).
void report_path(const std::string &text);

class Engine : public nixlBackendEngine {
 public:
  explicit Engine(const nixlBackendInitParams *init_params);
  ~Engine() override = default;

  bool supportsRemote() const override { return false; }
  bool supportsLocal() const override { return true; }
  bool supportsNotif() const override { return false; }
  nixl_mem_list_t getSupportedMems() const override;

  nixl_status_t registerMem(const nixlBlobDesc &mem, const nixl_mem_t &nixl_mem,
                            nixlBackendMD *&out) override;
  nixl_status_t deregisterMem(nixlBackendMD *meta) override;
  nixl_status_t connect(const std::string &) override { return NIXL_SUCCESS; }
  nixl_status_t disconnect(const std::string &) override { return NIXL_SUCCESS; }
  nixl_status_t unloadMD(nixlBackendMD *) override { return NIXL_SUCCESS; }
  nixl_status_t loadLocalMD(nixlBackendMD *input, nixlBackendMD *&output) override {
    output = input;
    return NIXL_SUCCESS;
  }

  nixl_status_t prepXfer(const nixl_xfer_op_t &operation, const nixl_meta_dlist_t &local,
                         const nixl_meta_dlist_t &remote, const std::string &remote_agent,
                         nixlBackendReqH *&handle,
                         const nixl_opt_b_args_t *opt_args = nullptr) const override;
  nixl_status_t postXfer(const nixl_xfer_op_t &operation, const nixl_meta_dlist_t &local,
                         const nixl_meta_dlist_t &remote, const std::string &remote_agent,
                         nixlBackendReqH *&handle,
                         const nixl_opt_b_args_t *opt_args = nullptr) const override;
  nixl_status_t checkXfer(nixlBackendReqH *handle) const override;
  nixl_status_t releaseReqH(nixlBackendReqH *handle) const override;

  nixl_status_t queryMem(const nixl_reg_dlist_t &descs,
                         std::vector<nixl_query_resp_t> &resp) const override;

 private:
  // devIds of the files registered by path: the agent finds a descriptor's registration by
  // its devId and range, so two files by path under one devId would be ambiguous.
  mutable std::mutex mutex_;
  std::set<uint64_t> path_dev_ids_;
  // Registrations of each file, and the path report (gpufile_path in queryMem's answer) of the
  // last transfer that ended well on it, kept while the file is registered.
  std::map<FileKey, size_t> file_regs_;
  mutable std::map<FileKey, std::string> last_paths_;
};

}  // namespace gpufile_nixl

#endif
