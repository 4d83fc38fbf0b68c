// load_checkpoint: opens a checkpoint file (or a directory's latest), checks that it is a
// megatron-app checkpoint this build can read, and reads its attributes and tensors.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint/chunk_io.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_layout.h"
#include "checkpoint/transfer_helper.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"

namespace megatron::checkpoint {

namespace fs = std::filesystem;
using detail::Handle;
using detail::hdf5_reason;

namespace {

const std::vector<std::string> kRequiredIntegers = {"iteration", "consumed_train_samples",
                                                    "consumed_valid_samples", "skipped_iterations"};

herr_t collect_attribute(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

herr_t collect_link(hid_t, const char* name, const H5L_info_t* info, void* data) {
  if (info->type == H5L_TYPE_HARD) static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

bool skipped(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const auto& prefix : prefixes) {
    if (name.starts_with(prefix)) return true;
  }
  return false;
}

// The DType a stored dataset type maps to; throws for anything a checkpoint never holds.
DType stored_dtype(hid_t type, const std::string& name) {
  const H5T_class_t type_class = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (type_class == H5T_FLOAT && size == 4) return DType::f32;
  if (type_class == H5T_FLOAT && size == 8) return DType::f64;
  if (type_class == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (is_signed && size == 4) return DType::i32;
    if (is_signed && size == 8) return DType::i64;
    if (!is_signed && size == 1) return DType::u8;
  }
  throw std::runtime_error("dataset '" + name + "' has an unsupported element type (HDF5 class " +
                           std::to_string(int(type_class)) + ", " + std::to_string(size) +
                           " bytes); expected float32/64, int32/64 or uint8");
}

hid_t memory_type(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return H5T_NATIVE_DOUBLE;
    case DType::i32:
      return H5T_NATIVE_INT32;
    case DType::i64:
      return H5T_NATIVE_INT64;
    case DType::u8:
      return H5T_NATIVE_UINT8;
    default:
      return H5T_NATIVE_FLOAT;
  }
}

// Why shard runs cannot be read into one output (overlapping rows, rows placed outside it), or "".
std::string runs_problem(int dim, const std::vector<ShardRun>& runs) {
  if (dim < 0) return "";
  std::int64_t rows = 0;
  for (const ShardRun& run : runs)
    rows += run.length;
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  for (const ShardRun& run : runs) {
    if (run.local_offset < 0 || run.length < 0 || run.local_offset + run.length > rows)
      return "a run places rows outside the destination";
    if (run.length > 0) spans.emplace_back(run.global_offset, run.global_offset + run.length);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) return "two runs read the same rows";
  }
  return "";
}

}  // namespace

namespace detail {

std::string damage_message(const std::string& name) {
  std::string detail = hdf5_error_detail();
  std::replace(detail.begin(), detail.end(), '\n', ' ');
  const bool checksum = detail.find("Fletcher32") != std::string::npos;
  return "tensor '" + name + "' is damaged: " +
         (checksum ? "its data fails the checksum written when it was saved"
                   : "its data cannot be read back") +
         (detail.empty() ? "" : " (HDF5: " + detail + ")");
}

namespace {

// Every chunk of a chunked dataset must be present, inside the file, and no larger than its
// data plus the 4-byte checksum: HDF5 allocates what the chunk index claims before it reads (a
// mutated size made it allocate 4 GiB in fuzz/fuzz_checkpoint). Looked up by coordinate
// (logarithmic in the chunk count) over the chunk grid, which size_damage has bounded by the
// file's size.
std::string chunk_damage(hid_t dataset, const std::string& name, const std::vector<hsize_t>& dims,
                         std::size_t element_bytes, std::uintmax_t file_bytes) {
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return "";
  const int rank = static_cast<int>(dims.size());
  std::vector<hsize_t> chunk(dims.size());
  if (rank == 0 || H5Pget_chunk(dcpl.get(), rank, chunk.data()) != rank)
    return damage_message(name);
  hsize_t chunk_bytes = element_bytes;
  for (const hsize_t c : chunk) {
    if (c == 0) return damage_message(name);
    chunk_bytes *= c;
  }
  const hsize_t limit = chunk_bytes + (has_checksum(dataset) ? 4 : 0);
  std::vector<hsize_t> offset(dims.size(), 0);
  for (;;) {
    unsigned mask = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t size = 0;
    const bool found =
        H5Dget_chunk_info_by_coord(dataset, offset.data(), &mask, &address, &size) >= 0;
    hdf5_error_detail();  // clears the stack of a failed lookup
    const std::string where = detail::chunk_origin_text(offset);
    if (!found || address == HADDR_UNDEF) {
      return fmt::format("tensor '{}' is damaged: its chunk at {} is missing", name, where);
    }
    if (size > limit || address > file_bytes || size > file_bytes - address) {
      return fmt::format(
          "tensor '{}' is damaged: its chunk at {} claims {} bytes at offset {} "
          "(at most {} bytes, within the file's {})",
          name, where, size, address, limit, file_bytes);
    }
    // The next chunk's origin, last dimension fastest.
    int d = rank - 1;
    for (; d >= 0; --d) {
      offset[std::size_t(d)] += chunk[std::size_t(d)];
      if (offset[std::size_t(d)] < dims[std::size_t(d)]) break;
      offset[std::size_t(d)] = 0;
    }
    if (d < 0) return "";
  }
}

}  // namespace

std::string size_damage(hid_t dataset, const std::string& name) {
  Handle type(H5Dget_type(dataset), H5Tclose);
  Handle space(H5Dget_space(dataset), H5Sclose);
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (!type.valid() || rank < 0) return damage_message(name);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  // In double: damaged dimensions may overflow any integer product.
  double needed = static_cast<double>(H5Tget_size(type.get()));
  std::string shape;
  for (const hsize_t d : dims) {
    needed *= static_cast<double>(d);
    shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  }
  if (needed == 0) return "";
  std::error_code error;
  const std::vector<char> file_name = [&] {
    std::vector<char> buffer(
        static_cast<std::size_t>(std::max<ssize_t>(0, H5Fget_name(dataset, nullptr, 0))) + 1);
    H5Fget_name(dataset, buffer.data(), buffer.size());
    return buffer;
  }();
  const auto file_bytes = std::filesystem::file_size(file_name.data(), error);
  if (!error && needed > static_cast<double>(file_bytes)) {
    return fmt::format(
        "tensor '{}' is damaged: its shape [{}] needs {:.0f} bytes, more than the "
        "whole file holds ({} bytes)",
        name, shape, needed, file_bytes);
  }
  const double stored = static_cast<double>(H5Dget_storage_size(dataset));
  if (stored < needed) {
    return fmt::format(
        "tensor '{}' is damaged: only {:.0f} of the {:.0f} bytes of its shape [{}] "
        "are stored",
        name, stored, needed, shape);
  }
  return error ? "" : chunk_damage(dataset, name, dims, H5Tget_size(type.get()), file_bytes);
}

}  // namespace detail

namespace {

template <typename Half>
Tensor narrow(const Tensor& wide, DType dtype) {
  Tensor out = Tensor::empty(wide.shape(), dtype);
  const float* src = wide.data<float>();
  Half* dst = static_cast<Half*>(out.raw_data());
  for (std::int64_t i = 0; i < wide.numel(); ++i)
    dst[i] = Half(src[i]);
  return out;
}

// Copies the f32 `target` a half-precision `out` was read into back into `out` (nothing when the
// read went straight into `out`).
void narrow_into(Tensor& out, const Tensor& target, bool half) {
  if (!half) return;
  Tensor narrowed = out.dtype() == DType::bf16 ? narrow<bf16>(target, DType::bf16)
                                               : narrow<f16>(target, DType::f16);
  std::memcpy(out.raw_data(), narrowed.raw_data(), out.nbytes());
}

// Reads a dataset into a new tensor, checking its checksums (a whole tensor on the helper too,
// and the check of one read from the disk may still run there: its verdict comes from
// helper.finish(); Note [Paired reads]).
Tensor read_tensor(std::optional<int> fd, hid_t dataset, const std::string& name,
                   int format_version, detail::TransferHelper& helper) {
  Handle type(H5Dget_type(dataset), H5Tclose);
  Handle space(H5Dget_space(dataset), H5Sclose);
  if (!type.valid() || !space.valid()) {
    throw std::runtime_error("cannot read the type of dataset '" + name + "'" + hdf5_reason());
  }
  const DType dtype = stored_dtype(type.get(), name);
  Shape shape;
  const H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
  if (space_class == H5S_SIMPLE && !detail::stored_scalar(dataset)) {
    std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space.get())));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    shape.assign(dims.begin(), dims.end());
  } else if (space_class != H5S_SCALAR && space_class != H5S_SIMPLE) {
    throw std::runtime_error("dataset '" + name + "' has no shape (a null dataspace)");
  }
  if (const std::string damage = detail::size_damage(dataset, name); !damage.empty())
    throw CheckpointDamagedError(damage);
  if (const std::string damage = detail::missing_checksums(dataset, name, format_version);
      !damage.empty()) {
    throw CheckpointDamagedError(damage);
  }
  Tensor tensor = Tensor::empty(shape, dtype);
  std::optional<std::string> direct;
  if (tensor.numel() > 0 && detail::has_tile_digests(dataset)) {
    direct = detail::read_tiles(fd, dataset, name, detail::stored_dims(shape), tensor.raw_data(),
                                -1, {}, &helper, tensor.storage());
    if (!direct->empty()) throw CheckpointDamagedError(*direct);
  } else if (tensor.numel() > 0 && detail::direct_chunks(dataset, memory_type(dtype))) {
    const std::vector<hsize_t> dims = detail::stored_dims(shape);
    direct = detail::read_chunks(dataset, name, dims, tensor.element_size(), tensor.raw_data());
    if (direct && !direct->empty()) throw CheckpointDamagedError(*direct);
  }
  if (tensor.numel() > 0 && !direct &&
      H5Dread(dataset, memory_type(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.raw_data()) < 0) {
    throw CheckpointDamagedError(detail::damage_message(name));
  }
  const std::optional<std::string> original = detail::read_string_attribute(dataset, "dtype");
  if (!original) return tensor;
  if (dtype == DType::f32 && *original == dtype_name(DType::bf16)) {
    return narrow<bf16>(tensor, DType::bf16);
  }
  if (dtype == DType::f32 && *original == dtype_name(DType::f16)) {
    return narrow<f16>(tensor, DType::f16);
  }
  throw std::runtime_error("dataset '" + name + "' of " + std::string(dtype_name(dtype)) +
                           " has attribute dtype = '" + *original +
                           "'; expected 'bfloat16' or 'float16' on a float32 dataset");
}

void read_root_attributes(hid_t root, const std::string& where, CheckpointState& state) {
  for (const auto& key : kRequiredIntegers) {
    const std::optional<std::int64_t> value = detail::read_int_attribute(root, key);
    if (!value) throw std::runtime_error("the root attribute '" + key + "' is missing");
    if (key == "iteration") state.iteration = *value;
    if (key == "consumed_train_samples") state.consumed_train_samples = *value;
    if (key == "consumed_valid_samples") state.consumed_valid_samples = *value;
    if (key == "skipped_iterations") state.skipped_iterations = *value;
  }
  const std::optional<std::string> config = detail::read_string_attribute(root, "config");
  if (!config) throw std::runtime_error("the root attribute 'config' is missing");
  state.config_toml = *config;

  std::vector<std::string> names;
  if (H5Aiterate2(root, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_attribute, &names) < 0) {
    throw Error(where + "cannot list the root attributes" + hdf5_reason());
  }
  for (const auto& name : names) {
    if (name.starts_with("int.")) {
      state.int_attributes[name.substr(4)] = *detail::read_int_attribute(root, name);
    } else if (name.starts_with("float.")) {
      state.float_attributes[name.substr(6)] = *detail::read_float_attribute(root, name);
    }
  }
}

// Reads every dataset not skipped, whole tensors on two threads (Note [Paired reads]); the
// first damage in file order is thrown, once the checks left to the helper are done.
void read_tensors(std::optional<int> fd, hid_t root, const std::string& where,
                  const std::vector<std::string>& skip, CheckpointState& state) {
  detail::TransferHelper helper;
  std::vector<std::string> links;
  if (H5Lvisit(root, H5_INDEX_NAME, H5_ITER_INC, collect_link, &links) < 0) {
    throw Error(where + "the file is corrupt: cannot list its datasets" + hdf5_reason());
  }
  for (const auto& name : links) {
    if (skipped(name, skip)) continue;
    Handle object(H5Oopen(root, name.c_str(), H5P_DEFAULT), H5Oclose);
    if (!object.valid()) {
      throw std::runtime_error("cannot open object '" + name + "'" + hdf5_reason());
    }
    if (H5Iget_type(object.get()) != H5I_DATASET) continue;
    try {
      state.tensors.emplace(name,
                            read_tensor(fd, object.get(), name, state.format_version, helper));
    } catch (const CheckpointDamagedError&) {
      // The damage of a tensor read before, found by a check left to the helper, comes first.
      if (const std::string earlier = helper.finish(); !earlier.empty())
        throw CheckpointDamagedError(earlier);
      throw;
    }
  }
  if (const std::string damage = helper.finish(); !damage.empty())
    throw CheckpointDamagedError(damage);
}

}  // namespace

namespace {

struct OpenedCheckpoint {
  fs::path file;
  Handle hdf5_file;
  Handle root;
  std::optional<int> fd;  // detail::file_descriptor(): the file's, for the tensors' checks
  CheckpointState state;
};

// Opens and checks a checkpoint and reads its root attributes (caller holds the HDF5 lock).
OpenedCheckpoint open_checked(const fs::path& path) {
  OpenedCheckpoint o;
  o.file = resolve_checkpoint(path);
  const fs::path& file = o.file;
  const std::string where = file.string() + ": ";
#if H5_VERSION_GE(1, 12, 0)
  const htri_t is_hdf5 = H5Fis_accessible(file.c_str(), H5P_DEFAULT);
#else
  const htri_t is_hdf5 = H5Fis_hdf5(file.c_str());
#endif
  if (is_hdf5 == 0) throw Error(where + "not an HDF5 file, so not a megatron-app checkpoint");
  if (is_hdf5 < 0) throw Error(where + "cannot read the file" + hdf5_reason());

  Handle fapl = detail::file_access_properties();
  o.hdf5_file = Handle(H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!o.hdf5_file.valid()) {
    throw Error(where + "cannot open the checkpoint: the file is truncated or corrupt" +
                hdf5_reason());
  }
  o.root = Handle(H5Gopen2(o.hdf5_file.get(), "/", H5P_DEFAULT), H5Gclose);
  if (!o.root.valid()) {
    throw Error(where + "the file is corrupt: cannot open its root group" + hdf5_reason());
  }
  o.fd = detail::file_descriptor(o.root.get());
  CheckpointState& state = o.state;
  try {
    const std::optional<std::int64_t> version =
        detail::read_int_attribute(o.root.get(), "format_version");
    if (!version) {
      throw Error(where +
                  "an HDF5 file but not a megatron-app checkpoint: it has no format_version "
                  "attribute");
    }
    if (*version > kFormatVersion) {
      throw Error(where + "checkpoint format version " + std::to_string(*version) +
                  " is newer than this megatron-app reads (up to " +
                  std::to_string(kFormatVersion) + "); use a newer megatron-app");
    }
    if (*version < 1) {
      throw Error(where + "invalid checkpoint format_version " + std::to_string(*version));
    }
    state.format_version = int(*version);
    read_root_attributes(o.root.get(), where, state);
  } catch (const Error&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw Error(where + "the checkpoint is corrupt: " + e.what());
  }
  return o;
}

}  // namespace

CheckpointState load_checkpoint(const fs::path& path,
                                const std::vector<std::string>& skip_prefixes) {
  detail::Hdf5Lock lock;
  OpenedCheckpoint o = open_checked(path);
  const std::string where = o.file.string() + ": ";
  try {
    read_tensors(o.fd, o.root.get(), where, skip_prefixes, o.state);
  } catch (const CheckpointDamagedError& e) {
    throw CheckpointDamagedError("checkpoint " + where + e.what());
  } catch (const Error&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw Error(where + "the checkpoint is corrupt: " + e.what());
  }
  return std::move(o.state);
}

struct CheckpointReader::Impl {
  Handle hdf5_file;
  Handle root;
  std::optional<int> fd;
  detail::TransferHelper helper;  // reads whole tensors with the calling thread (checks never left)
};

CheckpointReader::CheckpointReader(const fs::path& path) : impl_(std::make_unique<Impl>()) {
  detail::Hdf5Lock lock;
  OpenedCheckpoint o = open_checked(path);
  file_ = o.file;
  attributes_ = std::move(o.state);
  impl_->hdf5_file = std::move(o.hdf5_file);
  impl_->root = std::move(o.root);
  impl_->fd = o.fd;
  std::vector<std::string> links;
  if (H5Lvisit(impl_->root.get(), H5_INDEX_NAME, H5_ITER_INC, collect_link, &links) < 0) {
    throw Error(file_.string() + ": the file is corrupt: cannot list its datasets" + hdf5_reason());
  }
  for (const auto& name : links) {
    Handle object(H5Oopen(impl_->root.get(), name.c_str(), H5P_DEFAULT), H5Oclose);
    if (object.valid() && H5Iget_type(object.get()) == H5I_DATASET) names_.push_back(name);
  }
  std::sort(names_.begin(), names_.end());
}

CheckpointReader::~CheckpointReader() {
  detail::Hdf5Lock lock;
  impl_->root.reset();
  impl_->hdf5_file.reset();
}

bool CheckpointReader::has(const std::string& name) const {
  return std::binary_search(names_.begin(), names_.end(), name);
}

Shape CheckpointReader::shape(const std::string& name) const {
  if (!has(name)) throw Error("checkpoint " + file_.string() + " has no tensor '" + name + "'");
  detail::Hdf5Lock lock;
  Handle dataset(H5Dopen2(impl_->root.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle space(dataset.valid() ? H5Dget_space(dataset.get()) : H5I_INVALID_HID, H5Sclose);
  if (!space.valid()) {
    throw Error("checkpoint " + file_.string() + ": cannot open tensor '" + name + "'" +
                hdf5_reason());
  }
  if (const std::string damage = detail::size_damage(dataset.get(), name); !damage.empty())
    throw CheckpointDamagedError("checkpoint " + file_.string() + ": " + damage);
  if (detail::stored_scalar(dataset.get())) return {};
  std::vector<hsize_t> dims(
      static_cast<std::size_t>(std::max(0, H5Sget_simple_extent_ndims(space.get()))));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return Shape(dims.begin(), dims.end());
}

namespace {

// Reads the whole tensor or the runs' rows of a dataset of `global` shape into `raw` (of `local`
// shape and the stored dtype), checking the checksums it carries.
void read_stored(const fs::path& path, std::optional<int> fd, hid_t dataset, hid_t file_space,
                 const std::string& name, const Shape& global, const Shape& local,
                 int partition_dim, const std::vector<ShardRun>& runs, Tensor& raw,
                 detail::TransferHelper& helper) {
  const std::string file = "checkpoint " + path.string() + ": ";
  if (detail::has_tile_digests(dataset)) {
    const std::string damage = detail::read_tiles(fd, dataset, name, detail::stored_dims(global),
                                                  raw.raw_data(), partition_dim, runs, &helper);
    if (!damage.empty()) throw CheckpointDamagedError(file + damage);
    return;
  }
  if (detail::direct_chunks(dataset, memory_type(raw.dtype()))) {
    const std::optional<std::string> damage =
        detail::read_chunks(dataset, name, detail::stored_dims(global), raw.element_size(),
                            raw.raw_data(), partition_dim, runs);
    if (damage && !damage->empty()) throw CheckpointDamagedError(file + *damage);
    if (damage) return;
  }
  // Through HDF5: the whole tensor, or one hyperslab per run (a single read of their union would
  // place the rows in file order, not at each run's local offset).
  if (partition_dim < 0) {
    if (H5Dread(dataset, memory_type(raw.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.raw_data()) <
        0) {
      throw CheckpointDamagedError(file + detail::damage_message(name));
    }
    return;
  }
  const std::vector<hsize_t> local_dims(local.begin(), local.end());
  Handle memory_space(H5Screate_simple(int(local_dims.size()), local_dims.data(), nullptr),
                      H5Sclose);
  const auto d = static_cast<std::size_t>(partition_dim);
  for (const ShardRun& run : runs) {
    if (run.length == 0) continue;
    std::vector<hsize_t> start(global.size(), 0), count(global.begin(), global.end());
    start[d] = static_cast<hsize_t>(run.global_offset);
    count[d] = static_cast<hsize_t>(run.length);
    std::vector<hsize_t> at(global.size(), 0);
    at[d] = static_cast<hsize_t>(run.local_offset);
    if (!memory_space.valid() ||
        H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(),
                            nullptr) < 0 ||
        H5Sselect_hyperslab(memory_space.get(), H5S_SELECT_SET, at.data(), nullptr, count.data(),
                            nullptr) < 0) {
      throw Error(file + "tensor '" + name + "': cannot select a slice" + hdf5_reason());
    }
    if (H5Dread(dataset, memory_type(raw.dtype()), memory_space.get(), file_space, H5P_DEFAULT,
                raw.raw_data()) < 0) {
      throw CheckpointDamagedError(file + detail::damage_message(name));
    }
  }
}

}  // namespace

void CheckpointReader::read_slice(const std::string& name, int partition_dim,
                                  const std::vector<ShardRun>& runs, Tensor& out) const {
  const std::string where = "checkpoint " + file_.string() + ", tensor '" + name + "': ";
  const Shape global = shape(name);
  Shape local = global;
  if (partition_dim >= 0) {
    if (partition_dim >= static_cast<int>(global.size())) {
      throw Error(where + "cannot cut dimension " + std::to_string(partition_dim) + " of " +
                  shape_str(global));
    }
    std::int64_t rows = 0;
    for (const ShardRun& run : runs) {
      if (run.global_offset < 0 || run.length < 0 ||
          run.global_offset + run.length > global[static_cast<std::size_t>(partition_dim)]) {
        throw Error(where + "rows [" + std::to_string(run.global_offset) + ", " +
                    std::to_string(run.global_offset + run.length) + ") are outside " +
                    shape_str(global));
      }
      rows += run.length;
    }
    local[static_cast<std::size_t>(partition_dim)] = rows;
  }
  if (out.shape() != local || !out.is_contiguous() || !out.device().is_cpu()) {
    throw Error(where + "the destination is " + out.describe() + ", expected a contiguous host " +
                shape_str(local));
  }
  if (out.numel() == 0) return;
  const bool half = out.dtype() == DType::bf16 || out.dtype() == DType::f16;
  Tensor target = half ? Tensor::empty(local, DType::f32) : out;
  detail::Hdf5Lock lock;
  Handle dataset(H5Dopen2(impl_->root.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle file_space(dataset.valid() ? H5Dget_space(dataset.get()) : H5I_INVALID_HID, H5Sclose);
  if (!file_space.valid()) throw Error(where + "cannot open it" + hdf5_reason());
  if (const std::string damage =
          detail::missing_checksums(dataset.get(), name, attributes_.format_version);
      !damage.empty()) {
    throw CheckpointDamagedError("checkpoint " + file_.string() + ": " + damage);
  }
  if (const std::string problem = runs_problem(partition_dim, runs); !problem.empty())
    throw Error(where + problem);
  // Read as stored, then converted (an f32 tensor into f64, as H5Dread would).
  Handle type(H5Dget_type(dataset.get()), H5Tclose);
  const DType stored = stored_dtype(type.get(), name);
  Tensor raw = stored == target.dtype() ? target : Tensor::empty(local, stored);
  read_stored(file_, impl_->fd, dataset.get(), file_space.get(), name, global, local, partition_dim,
              runs, raw, impl_->helper);
  if (stored != target.dtype()) {
    const Tensor converted = raw.to(target.dtype());
    std::memcpy(target.raw_data(), converted.raw_data(), target.nbytes());
  }
  narrow_into(out, target, half);
}

}  // namespace megatron::checkpoint
