// verify_checkpoint: checks every tile of every tensor of a checkpoint against its checksum (tile
// digests; Fletcher32 chunks of older files chunk by chunk, or through HDF5 piece by piece where
// direct chunk I/O does not apply), and reports the damaged tensors by name.
#include <algorithm>
#include <vector>

#include "checkpoint/chunk_io.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_layout.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"

namespace megatron::checkpoint {

namespace {

using detail::Handle;

// Pieces are whole chunk rows along the first dimension, about this many bytes each, so a huge
// tensor never needs its own size in memory.
constexpr std::size_t kPieceBytes = std::size_t(64) << 20;

// Reads the dataset in pieces; the damage message on the first failed read, empty when intact.
std::string read_all(std::optional<int> fd, hid_t dataset, const std::string& name,
                     int format_version, std::int64_t& bytes) {
  if (std::string damage = detail::size_damage(dataset, name); !damage.empty()) return damage;
  if (std::string damage = detail::missing_checksums(dataset, name, format_version);
      !damage.empty()) {
    return damage;
  }
  Handle type(H5Dget_type(dataset), H5Tclose);
  Handle space(H5Dget_space(dataset), H5Sclose);
  if (!type.valid() || !space.valid()) return detail::damage_message(name);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank <= 0) return "";  // contiguous scalars of files written before checksums: nothing to cut
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  const std::size_t element = H5Tget_size(type.get());
  hsize_t row_bytes = element;
  for (std::size_t d = 1; d < dims.size(); ++d)
    row_bytes *= dims[d];
  if (dims[0] == 0 || row_bytes == 0) return "";
  if (detail::has_tile_digests(dataset)) {
    std::string damage = detail::read_tiles(fd, dataset, name, dims, nullptr);
    if (damage.empty()) bytes += static_cast<std::int64_t>(dims[0] * row_bytes);
    return damage;
  }
  if (detail::direct_chunks(dataset, type.get())) {
    if (std::optional<std::string> damage =
            detail::read_chunks(dataset, name, dims, element, nullptr)) {
      if (damage->empty()) bytes += static_cast<std::int64_t>(dims[0] * row_bytes);
      return *damage;
    }
  }
  // Whole chunks per piece, so no chunk is decoded twice.
  hsize_t chunk_rows = 1;
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  if (dcpl.valid() && H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(dims.size());
    if (H5Pget_chunk(dcpl.get(), rank, chunk.data()) == rank) chunk_rows = chunk[0];
  }
  const hsize_t rows_per_piece =
      std::max<hsize_t>(chunk_rows, kPieceBytes / row_bytes / chunk_rows * chunk_rows);
  std::vector<char> buffer(static_cast<std::size_t>(std::min(rows_per_piece, dims[0]) * row_bytes));
  for (hsize_t first = 0; first < dims[0]; first += rows_per_piece) {
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    start[0] = first;
    count[0] = std::min(rows_per_piece, dims[0] - first);
    Handle file_space(H5Scopy(space.get()), H5Sclose);
    Handle memory_space(H5Screate_simple(rank, count.data(), nullptr), H5Sclose);
    if (!file_space.valid() || !memory_space.valid() ||
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                            nullptr) < 0 ||
        H5Dread(dataset, type.get(), memory_space.get(), file_space.get(), H5P_DEFAULT,
                buffer.data()) < 0) {
      return detail::damage_message(name);
    }
    bytes += static_cast<std::int64_t>(count[0] * row_bytes);
  }
  return "";
}

}  // namespace

VerifyReport verify_checkpoint(const std::filesystem::path& path) {
  const CheckpointReader reader(path);  // checks the file and the attributes as loading does
  VerifyReport report;
  report.file = reader.file();
  report.iteration = reader.attributes().iteration;
  detail::Hdf5Lock lock;
  Handle fapl = detail::file_access_properties();
  Handle file(H5Fopen(report.file.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.valid()) {
    throw Error(report.file.string() + ": cannot open the checkpoint" + detail::hdf5_reason());
  }
  const std::optional<int> fd = detail::file_descriptor(file.get());
  for (const std::string& name : reader.names()) {
    ++report.tensors;
    Handle dataset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) {
      report.damaged.push_back(detail::damage_message(name));
      continue;
    }
    const std::int64_t before = report.bytes;
    std::string damage =
        read_all(fd, dataset.get(), name, reader.attributes().format_version, report.bytes);
    // A tensor without elements has nothing to check.
    if (report.bytes > before && !detail::has_checksum(dataset.get()))
      report.unchecked.push_back(name);
    if (!damage.empty()) report.damaged.push_back(std::move(damage));
  }
  return report;
}

}  // namespace megatron::checkpoint
