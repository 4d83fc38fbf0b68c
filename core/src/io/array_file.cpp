// Array files over the HDF5 C API, with the checkpoint code's lock, handles and stored types.
#include "megatron/io/array_file.h"

#include <vector>

#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_io.h"
#include "megatron/error.h"

namespace megatron::io {

namespace {

using checkpoint::detail::Handle;
using checkpoint::detail::hdf5_reason;
using checkpoint::detail::Hdf5Lock;

DType dtype_of(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) return size == 8 ? DType::f64 : DType::f32;
  if (cls == H5T_INTEGER) {
    if (size == 1) return DType::u8;
    return size == 8 ? DType::i64 : DType::i32;
  }
  throw Error("unsupported element type");
}

Handle open_file(const std::filesystem::path& file) {
  if (!std::filesystem::is_regular_file(file)) throw Error(file.string() + ": no such file");
  Handle access = checkpoint::detail::file_access_properties();
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, access.get()), H5Fclose);
  if (!f.valid()) throw Error(file.string() + ": not a readable HDF5 file" + hdf5_reason());
  return f;
}

Handle open_array(hid_t f, const std::filesystem::path& file, const std::string& name) {
  if (H5Lexists(f, name.c_str(), H5P_DEFAULT) <= 0)
    throw Error(file.string() + ": no array '" + name + "'");
  Handle d(H5Dopen2(f, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error(file.string() + ": cannot open array '" + name + "'" + hdf5_reason());
  return d;
}

Shape shape_of(hid_t dataset) {
  Handle space(H5Dget_space(dataset), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  Shape shape;
  for (hsize_t d : dims)
    shape.push_back(static_cast<std::int64_t>(d));
  return shape;
}

}  // namespace

void write_array_file(const std::filesystem::path& file,
                      const std::map<std::string, Tensor>& arrays,
                      const std::map<std::string, std::string>& attributes) {
  Hdf5Lock lock;
  std::filesystem::create_directories(file.parent_path());
  checkpoint::detail::PartialFile partial(file.string() + ".partial");
  {
    Handle access = checkpoint::detail::file_access_properties();
    // No modification times (root group, datasets): the same arrays give the same bytes, so a
    // resumed stage's outputs equal an uninterrupted one's.
    Handle file_creation(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
    H5Pset_obj_track_times(file_creation.get(), false);
    Handle creation(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_obj_track_times(creation.get(), false);
    Handle f(H5Fcreate(partial.path().c_str(), H5F_ACC_TRUNC, file_creation.get(), access.get()),
             H5Fclose);
    if (!f.valid()) throw Error(file.string() + ": cannot create" + hdf5_reason());
    for (const auto& [name, tensor] : arrays) {
      const Tensor data = tensor.contiguous();
      const checkpoint::detail::StoredTypes types = checkpoint::detail::stored_types(data.dtype());
      std::vector<hsize_t> dims;
      for (std::int64_t d : data.shape())
        dims.push_back(static_cast<hsize_t>(d));
      Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
      Handle d(H5Dcreate2(f.get(), name.c_str(), types.file, space.get(), H5P_DEFAULT,
                          creation.get(), H5P_DEFAULT),
               H5Dclose);
      if (!d.valid() || (data.numel() > 0 && H5Dwrite(d.get(), types.memory, H5S_ALL, H5S_ALL,
                                                      H5P_DEFAULT, data.raw_data()) < 0)) {
        throw Error(file.string() + ": cannot write array '" + name + "'" + hdf5_reason());
      }
    }
    for (const auto& [key, value] : attributes)
      checkpoint::detail::write_string_attribute(f.get(), key, value);
    if (!f.reset()) throw Error(file.string() + ": cannot close" + hdf5_reason());
  }
  checkpoint::detail::fsync_path(partial.path(), false);
  std::filesystem::rename(partial.path(), file);
  partial.done();
  checkpoint::detail::fsync_path(file.parent_path(), true);
}

Tensor read_array_rows(const std::filesystem::path& file, const std::string& name,
                       std::int64_t first, std::int64_t count) {
  Hdf5Lock lock;
  Handle f = open_file(file);
  Handle d = open_array(f.get(), file, name);
  Shape shape = shape_of(d.get());
  if (shape.empty() || first < 0 || count < 0 || first + count > shape[0]) {
    throw Error(file.string() + ": rows [" + std::to_string(first) + ", " +
                std::to_string(first + count) + ") of array '" + name + "' of shape " +
                shape_str(shape) + " do not exist");
  }
  Handle type(H5Dget_type(d.get()), H5Tclose);
  const DType dtype = dtype_of(type.get());
  shape[0] = count;
  Tensor out = Tensor::empty(shape, dtype);
  if (count == 0) return out;
  std::vector<hsize_t> start(shape.size(), 0), extent;
  start[0] = static_cast<hsize_t>(first);
  for (std::int64_t e : shape)
    extent.push_back(static_cast<hsize_t>(e));
  Handle space(H5Dget_space(d.get()), H5Sclose);
  H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr);
  Handle memory(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr),
                H5Sclose);
  if (H5Dread(d.get(), checkpoint::detail::stored_types(dtype).memory, memory.get(), space.get(),
              H5P_DEFAULT, out.raw_data()) < 0) {
    throw Error(file.string() + ": cannot read array '" + name + "'" + hdf5_reason());
  }
  return out;
}

Shape array_shape(const std::filesystem::path& file, const std::string& name) {
  Hdf5Lock lock;
  Handle f = open_file(file);
  return shape_of(open_array(f.get(), file, name).get());
}

Tensor read_array(const std::filesystem::path& file, const std::string& name) {
  const Shape shape = array_shape(file, name);
  if (shape.empty()) throw Error(file.string() + ": array '" + name + "' is a scalar");
  return read_array_rows(file, name, 0, shape[0]);
}

std::map<std::string, std::string> read_array_attributes(const std::filesystem::path& file) {
  Hdf5Lock lock;
  Handle f = open_file(file);
  std::map<std::string, std::string> out;
  H5O_info_t info;
  if (H5Oget_info2(f.get(), &info, H5O_INFO_NUM_ATTRS) < 0)
    throw Error(file.string() + ": cannot read attributes" + hdf5_reason());
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    const ssize_t length =
        H5Aget_name_by_idx(f.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string name(static_cast<std::size_t>(length), '\0');
    H5Aget_name_by_idx(f.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1,
                       H5P_DEFAULT);
    if (auto value = checkpoint::detail::read_string_attribute(f.get(), name)) out[name] = *value;
  }
  return out;
}

}  // namespace megatron::io
