/*
 * gpufile's C++ checkpoints (included by gpufile/gpufile.hpp): saving one safetensors file, or
 * a Hugging Face sharded checkpoint, from tensors in host or device memory, as
 * gpufile_save_file and gpufile_save_checkpoint write them; loading one into the caller's
 * buffers, as gpufile_load_checkpoint (and `gpufile load`) reads it.
 *
 *   std::vector<gpufile::TensorView> t = {{"w", "F32", {1000}, ptr, 4000}};
 *   gpufile::save_file("out/model.safetensors", t, {{"format", "pt"}});
 *   gpufile::save_checkpoint("out/ck", t, "5GB", {{"step", "7"}});
 *   gpufile::load_checkpoint("out/ck", {{"w", dst, 4000}});
 *
 * See docs/cpp.md and docs/checkpoints.md.
 */
#ifndef GPUFILE_CHECKPOINT_HPP
#define GPUFILE_CHECKPOINT_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpufile/gpufile.hpp"

namespace gpufile {

/** One tensor to save: name, safetensors dtype ("F32", "BF16", ...), shape, and its bytes. */
struct TensorView {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  void const* data = nullptr;  // host or device memory, C order
  std::size_t size = 0;        // bytes
};

namespace detail {

/** The C rows of `tensors` (they point into `tensors`). */
inline std::vector<gpufile_tensor> tensor_rows(std::vector<TensorView> const& tensors)
{
  std::vector<gpufile_tensor> rows;
  rows.reserve(tensors.size());
  for (auto const& t : tensors) {
    rows.push_back(gpufile_tensor{
      t.name.c_str(), t.dtype.c_str(), t.shape.data(), t.shape.size(), t.data, t.size});
  }
  return rows;
}

/** The C metadata of `metadata`: key, value, ..., nullptr (they point into `metadata`). */
inline std::vector<char const*> metadata_pairs(std::map<std::string, std::string> const& metadata)
{
  std::vector<char const*> kv;
  for (auto const& [k, v] : metadata) {
    kv.push_back(k.c_str());
    kv.push_back(v.c_str());
  }
  kv.push_back(nullptr);
  return kv;
}

}  // namespace detail

/**
 * Saves `tensors` as one safetensors file at `path`, the bytes the safetensors package writes
 * (metadata keys sorted), written under a temporary name and renamed over `path`: `path` holds
 * its old file or the new one at every moment. `metadata` empty: no `__metadata__`. Throws
 * gpufile::Error (BadArgumentError for a refused tensor, the file then as it was).
 */
inline void save_file(std::string const& path,
                      std::vector<TensorView> const& tensors,
                      std::map<std::string, std::string> const& metadata = {},
                      bool durable = true)
{
  auto const rows = detail::tensor_rows(tensors);
  auto const kv = detail::metadata_pairs(metadata);
  detail::check(gpufile_save_file(path.c_str(),
                                  rows.data(),
                                  rows.size(),
                                  metadata.empty() ? nullptr : kv.data(),
                                  durable ? 1 : 0));
}

/**
 * Saves `tensors` as a Hugging Face checkpoint in `dir` (created where missing):
 * model.safetensors, or shards of at most `max_shard_size` ("5GB", "500MB", or bytes as
 * "1000000") and model.safetensors.index.json. The directory holds the old checkpoint or the
 * new one at every moment. Throws gpufile::Error (BadArgumentError for a refused tensor).
 */
inline void save_checkpoint(std::string const& dir,
                            std::vector<TensorView> const& tensors,
                            std::string const& max_shard_size = "5GB",
                            std::map<std::string, std::string> const& metadata = {},
                            bool durable = true)
{
  auto const rows = detail::tensor_rows(tensors);
  auto const kv = detail::metadata_pairs(metadata);
  detail::check(gpufile_save_checkpoint(dir.c_str(),
                                        rows.data(),
                                        rows.size(),
                                        max_shard_size.c_str(),
                                        metadata.empty() ? nullptr : kv.data(),
                                        durable ? 1 : 0));
}

/** Where one tensor of a checkpoint is loaded: its name, and exactly its bytes of memory. */
struct TensorBuffer {
  std::string name;
  void* data = nullptr;  // host or device memory
  std::size_t size = 0;  // bytes: the tensor's byte length
};

/**
 * Loads `tensors` of the checkpoint at `path` (a .safetensors file, an index, a directory of
 * shards, or the URL of one) into their buffers, every range of every file as one batch of
 * requests (buffers back to back in memory take tensors adjacent in a file as one request).
 * Throws gpufile::Error (BadArgumentError for a name the checkpoint lacks or a size other than
 * the tensor's, nothing then read).
 */
inline void load_checkpoint(std::string const& path, std::vector<TensorBuffer> const& tensors)
{
  std::vector<gpufile_tensor_buffer> rows;
  rows.reserve(tensors.size());
  for (auto const& t : tensors) {
    rows.push_back(gpufile_tensor_buffer{t.name.c_str(), t.data, t.size});
  }
  detail::check(gpufile_load_checkpoint(path.c_str(), rows.data(), rows.size()));
}

}  // namespace gpufile

#endif  // GPUFILE_CHECKPOINT_HPP
