// save_checkpoint: checks the state, writes iter_XXXXXXX.h5.partial, renames it into place, then
// updates the latest marker (see Note [Checkpoint file layout] in checkpoint.h).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/chunk_io.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_io.h"
#include "checkpoint/tensor_layout.h"
#include "checkpoint/tile_digests.h"
#include "checkpoint/transfer_helper.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"

namespace megatron::checkpoint {

namespace fs = std::filesystem;
using detail::Handle;
using detail::hdf5_reason;

namespace {

using detail::PartialFile;
using detail::stored_form;
using detail::stored_types;
using detail::StoredTypes;
using detail::tensor_problem;

// A tensor whose digests the helper is still summing: written into its attribute once it is done.
struct PendingDigests {
  Handle dataset;
  std::shared_ptr<detail::HelperSums> sums;
};

// Creates and writes one tensor's dataset; a whole tensor summed on the helper (Note [Summed
// beside the writes]) is added to `pending`. `fd`: detail::file_descriptor(file).
void write_tensor(hid_t file, std::optional<int> fd, hid_t link_properties, const std::string& name,
                  const Tensor& tensor, detail::TransferHelper& helper,
                  std::vector<PendingDigests>& pending) {
  const Tensor data = stored_form(tensor);
  const StoredTypes types = stored_types(tensor.dtype());

  const std::vector<hsize_t> dims = detail::stored_dims(tensor.shape());
  Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  if (!space.valid()) {
    throw Error("cannot store tensor '" + name + "' of shape " + shape_str(tensor.shape()) +
                hdf5_reason());
  }
  Handle dcpl = detail::tensor_creation_properties(dims, H5Tget_size(types.file));
  Handle dataset(H5Dcreate2(file, name.c_str(), types.file, space.get(), link_properties,
                            dcpl.get(), H5P_DEFAULT),
                 H5Dclose);
  if (!dataset.valid()) {
    throw Error("cannot create dataset '" + name + "' " + shape_str(tensor.shape()) +
                hdf5_reason());
  }
  detail::write_layout_attributes(dataset.get(), tensor.shape());
  if (tensor.dtype() == DType::bf16 || tensor.dtype() == DType::f16) {
    detail::write_string_attribute(dataset.get(), "dtype", std::string(dtype_name(tensor.dtype())));
  }
  const std::size_t element_bytes = H5Tget_size(types.file);
  if (data.numel() > 0 && detail::uses_tile_digests(element_bytes)) {
    // Note [Tile digests]: the data written straight into the file.
    const haddr_t offset = H5Dget_offset(dataset.get());
    if (!fd || offset == HADDR_UNDEF)
      throw Error("cannot find where dataset '" + name + "' is stored" + hdf5_reason());
    const detail::TileGrid grid = detail::tile_grid_for(dims, element_bytes);
    if (detail::helper_takes_whole(grid, &helper)) {
      // The digests' attribute is made now, in the dataset's header, and filled in at the end.
      detail::write_tile_attributes(dataset.get(), grid,
                                    std::vector<std::uint32_t>(std::size_t(grid.count()), 0));
      auto sums = detail::write_while_helper_sums(*fd, offset, grid, data.raw_data(), name, helper,
                                                  data.storage());
      pending.push_back({std::move(dataset), std::move(sums)});
    } else {
      detail::TileDigests sums(grid);
      detail::write_with_digests(*fd, offset, sums, data.raw_data(), name);
      detail::write_tile_attributes(dataset.get(), sums.grid(), sums.digests());
    }
  } else if (data.numel() > 0 && detail::direct_chunks(dataset.get(), types.memory)) {
    detail::write_chunks(dataset.get(), name, dims, element_bytes, data.raw_data());
  } else if (data.numel() > 0 && H5Dwrite(dataset.get(), types.memory, H5S_ALL, H5S_ALL,
                                          H5P_DEFAULT, data.raw_data()) < 0) {
    throw Error("cannot write dataset '" + name + "'" + hdf5_reason());
  }
}

void write_contents(hid_t file, const CheckpointState& state) {
  detail::write_state_attributes(file, state);  // on the file id: the root group

  Handle link_properties(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  if (!link_properties.valid() || H5Pset_create_intermediate_group(link_properties.get(), 1) < 0 ||
      H5Pset_char_encoding(link_properties.get(), H5T_CSET_UTF8) < 0) {
    throw Error("cannot set up link properties" + hdf5_reason());
  }
  const std::optional<int> fd = detail::file_descriptor(file);
  detail::TransferHelper helper;
  std::vector<PendingDigests> pending;
  for (const auto& [name, tensor] : state.tensors)
    write_tensor(file, fd, link_properties.get(), name, tensor, helper, pending);
  helper.finish();  // the sums have no verdict: "" always
  for (PendingDigests& p : pending)
    detail::rewrite_tile_digests(p.dataset.get(), p.sums->digests());
  if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) throw Error("cannot flush" + hdf5_reason());
}

}  // namespace

namespace detail {

void write_state_attributes(hid_t root, const CheckpointState& state) {
  write_int_attribute(root, "format_version", kFormatVersion);
  write_int_attribute(root, "iteration", state.iteration);
  write_int_attribute(root, "consumed_train_samples", state.consumed_train_samples);
  write_int_attribute(root, "consumed_valid_samples", state.consumed_valid_samples);
  write_int_attribute(root, "skipped_iterations", state.skipped_iterations);
  write_string_attribute(root, "config", state.config_toml);
  for (const auto& [key, value] : state.int_attributes)
    write_int_attribute(root, "int." + key, value);
  for (const auto& [key, value] : state.float_attributes)
    write_float_attribute(root, "float." + key, value);
}

// Why a tensor path or tensor cannot be stored; empty when it can.
std::string tensor_problem(const std::string& name, const Tensor& tensor,
                           const std::map<std::string, Tensor>& all) {
  if (name.empty()) return "a tensor has an empty name";
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = name.find('/', start);
    const std::string part = name.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") {
      return "tensor '" + name + "': empty, '.' or '..' path component";
    }
    if (slash == std::string::npos) break;
    if (all.count(name.substr(0, slash))) {
      return "tensor '" + name.substr(0, slash) + "' is also a group holding '" + name + "'";
    }
    start = slash + 1;
  }
  if (!tensor.defined()) return "tensor '" + name + "' is undefined (never allocated)";
  if (!tensor.device().is_cpu()) {
    return "tensor '" + name + "' is " + tensor.describe() +
           "; checkpoints take host tensors (copy it to the cpu first)";
  }
  return "";
}

namespace {

// A contiguous copy made byte by byte, so every value (int64 beyond 2^53, NaN payloads) is kept.
Tensor exact_contiguous(const Tensor& tensor) {
  if (tensor.is_contiguous()) return tensor;
  Tensor out = Tensor::empty(tensor.shape(), tensor.dtype());
  const std::size_t size = tensor.element_size();
  const char* src = static_cast<const char*>(tensor.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  const int rank = tensor.dim();
  std::vector<std::int64_t> counter(static_cast<std::size_t>(rank), 0);
  std::int64_t index = 0;
  for (std::int64_t i = 0; i < tensor.numel(); ++i) {
    std::memcpy(dst + i * std::int64_t(size), src + index * std::int64_t(size), size);
    for (int d = rank - 1; d >= 0; --d) {
      if (++counter[d] < tensor.shape()[d]) {
        index += tensor.strides()[d];
        break;
      }
      index -= tensor.strides()[d] * (tensor.shape()[d] - 1);
      counter[d] = 0;
    }
  }
  return out;
}

// bf16/f16 widened to f32 exactly (no detour through double).
template <typename Half>
Tensor widen_impl(const Tensor& tensor) {
  Tensor out = Tensor::empty(tensor.shape(), DType::f32);
  const Half* src = static_cast<const Half*>(tensor.raw_data());
  float* dst = out.data<float>();
  for (std::int64_t i = 0; i < tensor.numel(); ++i)
    dst[i] = static_cast<float>(src[i]);
  return out;
}

}  // namespace

StoredTypes stored_types(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE};
    case DType::i32:
      return {H5T_STD_I32LE, H5T_NATIVE_INT32};
    case DType::i64:
      return {H5T_STD_I64LE, H5T_NATIVE_INT64};
    case DType::u8:
      return {H5T_STD_U8LE, H5T_NATIVE_UINT8};
    case DType::f32:
    case DType::bf16:
    case DType::f16:
      break;
  }
  return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
}

Tensor stored_form(const Tensor& tensor) {
  Tensor data = exact_contiguous(tensor);
  if (tensor.dtype() == DType::bf16) data = widen_impl<bf16>(data);
  if (tensor.dtype() == DType::f16) data = widen_impl<f16>(data);
  return data;
}

}  // namespace detail

fs::path save_checkpoint(const fs::path& dir, const CheckpointState& state) {
  const fs::path final_path = checkpoint_file(dir, state.iteration);
  const std::string failure = final_path.string() + ": cannot save checkpoint: ";
  if (state.iteration < 0) {
    throw Error(failure + "negative iteration " + std::to_string(state.iteration));
  }
  for (const auto& [name, tensor] : state.tensors) {
    if (const std::string problem = tensor_problem(name, tensor, state.tensors); !problem.empty())
      throw Error(failure + problem);
  }
  if (state.int_attributes.count("") || state.float_attributes.count("")) {
    throw Error(failure + "an attribute has an empty name");
  }

  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw Error(dir.string() + ": cannot create checkpoint directory: " + error.message());
  detail::remove_stale_partials(dir);

  PartialFile partial(final_path.string() + detail::kPartialSuffix);
  {
    detail::Hdf5Lock lock;
    Handle fapl = detail::file_access_properties();
    Handle file(H5Fcreate(partial.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
                H5Fclose);
    if (!file.valid()) {
      throw Error(partial.path().string() + ": cannot create checkpoint file" + hdf5_reason());
    }
    try {
      write_contents(file.get(), state);
    } catch (const Error& e) {
      throw Error(partial.path().string() + ": " + e.what());
    }
    if (!file.reset()) {
      throw Error(partial.path().string() + ": cannot close checkpoint file" + hdf5_reason());
    }
  }
  detail::durable_rename(partial.path(), final_path);
  partial.done();
  detail::write_latest_marker(dir, state.iteration);
  return final_path;
}

}  // namespace megatron::checkpoint
