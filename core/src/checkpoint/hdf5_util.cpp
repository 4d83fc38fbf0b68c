// HDF5 helpers for checkpoints: the library lock, handles, error-stack text, scalar attributes.
#include "checkpoint/hdf5_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "checkpoint/global_heap_check.h"
#include "megatron/error.h"

namespace megatron::checkpoint::detail {

namespace {

std::mutex& hdf5_mutex() {
  static std::mutex mutex;
  return mutex;
}

// HDF5 closes whatever is still open from an atexit handler. A file whose write failed for lack
// of space (EFBIG/ENOSPC) cannot be flushed, and HDF5 1.10's second attempt to close it there
// crashes (H5F__close_cb) after the save already failed cleanly. Files are always closed by their
// handles here, so that handler has nothing to do: it is turned off as the library loads, before
// any other HDF5 call (H5dont_atexit's requirement).
const bool kNoAtexitClose = [] {
  H5dont_atexit();
  return true;
}();

herr_t innermost_error(unsigned /*n*/, const H5E_error2_t* error, void* data) {
  auto* text = static_cast<std::string*>(data);
  // Walking upward visits the most specific entry first; keep the first one with text.
  if (text->empty() && error->desc && *error->desc) *text = error->desc;
  return 0;
}

Handle scalar_space() {
  return Handle(H5Screate(H5S_SCALAR), H5Sclose);
}

void write_scalar(hid_t object, const std::string& name, hid_t file_type, hid_t memory_type,
                  const void* value) {
  Handle space = scalar_space();
  Handle attribute(
      H5Acreate2(object, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid() || H5Awrite(attribute.get(), memory_type, value) < 0) {
    throw Error("cannot write attribute '" + name + "'" + hdf5_reason());
  }
}

// Opens a scalar attribute of the given type class; an invalid handle when it does not exist.
Handle open_scalar(hid_t object, const std::string& name, H5T_class_t wanted, const char* what) {
  const htri_t exists = H5Aexists(object, name.c_str());
  if (exists < 0) throw std::runtime_error("cannot read attribute '" + name + "'" + hdf5_reason());
  if (exists == 0) return {};
  Handle attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) {
    throw std::runtime_error("cannot open attribute '" + name + "'" + hdf5_reason());
  }
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  Handle space(H5Aget_space(attribute.get()), H5Sclose);
  if (!type.valid() || !space.valid() || H5Tget_class(type.get()) != wanted ||
      H5Sget_simple_extent_type(space.get()) != H5S_SCALAR) {
    throw std::runtime_error("attribute '" + name + "' is not a scalar " + what);
  }
  return attribute;
}

}  // namespace

Hdf5Lock::Hdf5Lock() : guard_(hdf5_mutex()) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_, closer_ = other.closer_;
    other.id_ = -1;
  }
  return *this;
}

bool Handle::reset() {
  bool ok = true;
  if (id_ >= 0 && closer_) ok = closer_(id_) >= 0;
  id_ = -1;
  return ok;
}

std::string hdf5_error_detail() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &text);
  H5Eclear2(H5E_DEFAULT);
  return text;
}

std::string hdf5_reason() {
  std::string detail = hdf5_error_detail();
  // The sec2 driver's write-failure text has a line break in it; messages stay one line.
  std::replace(detail.begin(), detail.end(), '\n', ' ');
  return detail.empty() ? "" : " (HDF5: " + detail + ")";
}

namespace {

// Tensor chunks (about 1 MiB each, followed by their 4-byte checksum) start on 4 KiB boundaries
// of the file. Packed back to back, chunk k would start 4k bytes past a boundary, and the
// kernel's copy between the page cache and a tensor runs at a quarter of its speed when the two
// are not 32-byte aligned alike (measured: 1 MiB preads into a buffer offset by 4 bytes take 4x
// as long; bench/RESULTS.md). Costs at most 4 KiB of padding per chunk (0.4%).
bool align_large_objects(hid_t fapl) {
  return H5Pset_alignment(fapl, 64 * 1024, 4096) >= 0;
}

}  // namespace

Handle file_access_properties() {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.valid() || H5Pset_fapl_sec2(fapl.get()) < 0 ||
      H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0 ||
      H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0 ||
      !align_large_objects(fapl.get())) {
    throw Error("cannot set up HDF5 file access properties" + hdf5_reason());
  }
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
  // Lock files where the file system supports it, and carry on where it does not (NFS, Lustre).
  H5Pset_file_locking(fapl.get(), true, true);
#endif
  return fapl;
}

#ifdef H5_HAVE_PARALLEL
Handle file_access_properties_mpio(MPI_Comm comm) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.valid() || H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL) < 0 ||
      H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0 ||
      H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0 ||
      !align_large_objects(fapl.get())) {
    throw Error("cannot set up parallel HDF5 (MPI-IO) file access" + hdf5_reason());
  }
  // Metadata (attributes, dataset headers) is flushed collectively; every rank made it alike.
  H5Pset_coll_metadata_write(fapl.get(), true);
  return fapl;
}
#endif

void write_int_attribute(hid_t object, const std::string& name, std::int64_t value) {
  write_scalar(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_float_attribute(hid_t object, const std::string& name, double value) {
  write_scalar(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void write_string_attribute(hid_t object, const std::string& name, const std::string& value) {
  if (value.find('\0') != std::string::npos) {
    throw Error("attribute '" + name + "' contains a NUL character");
  }
  // Fixed-length, NUL-terminated: the bytes live in the attribute message itself, under the object
  // header's checksum. A variable-length string lives in the global heap, which has no checksum,
  // and HDF5 1.10 can spin for minutes on a damaged global heap (found by fuzz/fuzz_checkpoint).
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!type.valid() || H5Tset_size(type.get(), value.size() + 1) < 0 ||
      H5Tset_strpad(type.get(), H5T_STR_NULLTERM) < 0 ||
      H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0) {
    throw Error("cannot make a string type" + hdf5_reason());
  }
  write_scalar(object, name, type.get(), type.get(), value.c_str());
}

std::optional<std::int64_t> read_int_attribute(hid_t object, const std::string& name) {
  Handle attribute = open_scalar(object, name, H5T_INTEGER, "integer");
  if (!attribute.valid()) return std::nullopt;
  std::int64_t value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_INT64, &value) < 0) {
    throw std::runtime_error("cannot read attribute '" + name + "'" + hdf5_reason());
  }
  return value;
}

std::optional<double> read_float_attribute(hid_t object, const std::string& name) {
  Handle attribute = open_scalar(object, name, H5T_FLOAT, "floating-point number");
  if (!attribute.valid()) return std::nullopt;
  double value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value) < 0) {
    throw std::runtime_error("cannot read attribute '" + name + "'" + hdf5_reason());
  }
  return value;
}

std::optional<std::string> read_string_attribute(hid_t object, const std::string& name) {
  Handle attribute = open_scalar(object, name, H5T_STRING, "string");
  if (!attribute.valid()) return std::nullopt;
  Handle stored(H5Aget_type(attribute.get()), H5Tclose);
  const std::string failure = "cannot read attribute '" + name + "'";
  if (H5Tis_variable_str(stored.get()) > 0) {
    // Older files: the string is in a global heap, which HDF5 1.10 may never finish decoding if
    // it is damaged (Note [Global heap check]).
    std::vector<char> file(
        static_cast<std::size_t>(std::max<ssize_t>(0, H5Fget_name(object, nullptr, 0))) + 1);
    H5Fget_name(object, file.data(), file.size());
    if (const std::string damage = global_heap_damage(file.data()); !damage.empty()) {
      throw std::runtime_error(failure + ": " + damage);
    }
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5Tget_cset(stored.get()));
    char* text = nullptr;
    if (H5Aread(attribute.get(), type.get(), &text) < 0) {
      throw std::runtime_error(failure + hdf5_reason());
    }
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  // Fixed-length strings (as other tools may write): read the bytes, drop padding NULs.
  const std::size_t size = H5Tget_size(stored.get());
  std::vector<char> buffer(size + 1, '\0');
  if (H5Aread(attribute.get(), stored.get(), buffer.data()) < 0) {
    throw std::runtime_error(failure + hdf5_reason());
  }
  return std::string(buffer.data());
}

void fsync_path(const std::filesystem::path& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw Error(path.string() + ": cannot open to sync: " + std::strerror(errno));
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0) throw Error(path.string() + ": fsync failed: " + std::strerror(error));
}

}  // namespace megatron::checkpoint::detail
