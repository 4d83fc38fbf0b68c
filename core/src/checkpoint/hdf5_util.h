// Small RAII and error helpers over the HDF5 C API, shared by checkpoint saving and loading.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>

namespace megatron::checkpoint::detail {

// The HDF5 build is not thread-safe: every use of the library holds this lock. It also turns
// HDF5's automatic error-stack printing off, so failures surface only as megatron::Error.
class Hdf5Lock {
 public:
  Hdf5Lock();

 private:
  std::lock_guard<std::mutex> guard_;
};

// Owns one HDF5 identifier (file, group, dataset, attribute, dataspace, datatype or property
// list) and closes it with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; returns false when HDF5 reports the close failed (e.g. a failed final flush).
  bool reset();

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// The most specific message on HDF5's current error stack (e.g. "truncated file: eof = ...");
// clears the stack. Empty when the stack is empty.
std::string hdf5_error_detail();
// " (HDF5: <detail>)" or "" — appended to megatron::Error messages.
std::string hdf5_reason();

// File access properties: sec2 driver, closing the file closes every object in it, HDF5 1.8+
// object formats (dense attribute storage, checksummed metadata).
Handle file_access_properties();
#ifdef H5_HAVE_PARALLEL
// The same over MPI-IO on `comm` (parallel HDF5): file creation, attributes and dataset creation
// become collective over comm; raw-data transfers stay independent unless asked otherwise.
Handle file_access_properties_mpio(MPI_Comm comm);
#endif

// Scalar attributes on an object (the root group of a checkpoint).
void write_int_attribute(hid_t object, const std::string& name, std::int64_t value);
void write_float_attribute(hid_t object, const std::string& name, double value);
void write_string_attribute(hid_t object, const std::string& name, const std::string& value);
// nullopt when the attribute does not exist; throws std::runtime_error when it exists but is not
// a scalar of the expected class (the caller adds the file name).
std::optional<std::int64_t> read_int_attribute(hid_t object, const std::string& name);
std::optional<double> read_float_attribute(hid_t object, const std::string& name);
std::optional<std::string> read_string_attribute(hid_t object, const std::string& name);

// fsync of a file or directory; throws megatron::Error naming the path.
void fsync_path(const std::filesystem::path& path, bool directory);

}  // namespace megatron::checkpoint::detail
