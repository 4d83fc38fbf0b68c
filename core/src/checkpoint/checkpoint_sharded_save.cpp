// save_checkpoint_sharded: every rank writes its hyperslabs of the global tensors into one HDF5
// file (parallel HDF5 over MPI-IO), then rank 0 renames it into place and updates the marker.
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/chunk_io.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_io.h"
#include "checkpoint/tensor_layout.h"
#include "checkpoint/tile_digests.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "parallel/mpi_communicator.h"

namespace megatron::checkpoint {

namespace fs = std::filesystem;
using detail::Handle;
using detail::hdf5_reason;

namespace {

struct Declared {
  Shape shape;
  DType dtype;
};

// "name\0dtype\0rank\0d0\0d1..." entries, for the manifest exchange.
std::string encode(const std::map<std::string, TensorSlice>& slices) {
  std::string out;
  for (const auto& [name, slice] : slices) {
    out += name + '\0' + std::to_string(static_cast<int>(slice.dtype)) + '\0' +
           std::to_string(slice.global_shape.size()) + '\0';
    for (std::int64_t d : slice.global_shape)
      out += std::to_string(d) + '\0';
  }
  return out;
}

void decode_into(const std::string& text, int from, std::map<std::string, Declared>& all) {
  std::size_t pos = 0;
  auto next = [&] {
    const std::size_t end = text.find('\0', pos);
    std::string field = text.substr(pos, end - pos);
    pos = end + 1;
    return field;
  };
  while (pos < text.size()) {
    const std::string name = next();
    Declared d;
    d.dtype = static_cast<DType>(std::stoi(next()));
    const std::size_t rank = std::stoul(next());
    for (std::size_t i = 0; i < rank; ++i)
      d.shape.push_back(std::stoll(next()));
    const auto [it, added] = all.emplace(name, d);
    if (!added && (it->second.shape != d.shape || it->second.dtype != d.dtype)) {
      throw Error("tensor '" + name + "' is " + shape_str(d.shape) + " " +
                  std::string(dtype_name(d.dtype)) + " on world rank " + std::to_string(from) +
                  " but " + shape_str(it->second.shape) + " " +
                  std::string(dtype_name(it->second.dtype)) + " on another rank");
    }
  }
}

// The union of every rank's tensors, the same on every rank (each rank broadcasts its list).
std::map<std::string, Declared> exchange_manifest(const std::map<std::string, TensorSlice>& slices,
                                                  Communicator& world) {
  const std::string mine = encode(slices);
  std::map<std::string, Declared> all;
  for (int r = 0; r < world.size(); ++r) {
    std::int64_t length = r == world.rank() ? static_cast<std::int64_t>(mine.size()) : 0;
    world.broadcast(&length, 1, DType::i64, r);
    std::string text =
        r == world.rank() ? mine : std::string(static_cast<std::size_t>(length), '\0');
    if (length > 0) world.broadcast(text.data(), text.size(), DType::u8, r);
    decode_into(text, world.global_ranks()[static_cast<std::size_t>(r)], all);
  }
  return all;
}

// Agrees on failure: every rank learns whether any rank failed (so none is left waiting in a
// collective), and throws with its own message or the lowest failing rank's number.
void agree(Communicator& world, const std::string& problem, const std::string& failure) {
  const std::int64_t mine = problem.empty() ? world.size() : world.rank();
  const std::int64_t first = world.all_reduce_value(mine, ReduceOp::min);
  if (first == world.size()) return;
  if (!problem.empty()) throw Error(failure + problem);
  throw Error(failure + "world rank " +
              std::to_string(world.global_ranks()[static_cast<std::size_t>(first)]) +
              " failed (the error is reported there)");
}

Handle file_access(Communicator& world) {
  if (world.size() == 1) return detail::file_access_properties();
#ifdef H5_HAVE_PARALLEL
  auto* mpi = dynamic_cast<megatron::detail::MpiCommunicator*>(&world);
  if (mpi) return detail::file_access_properties_mpio(mpi->handle());
#endif
  throw Error("a checkpoint of " + std::to_string(world.size()) +
              " ranks needs parallel HDF5 over an MPI communicator");
}

Handle create_dataset(hid_t file, hid_t link_properties, const std::string& name,
                      const Declared& d) {
  const std::vector<hsize_t> dims = detail::stored_dims(d.shape);
  Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  const detail::StoredTypes types = detail::stored_types(d.dtype);
  // Every element is written by exactly one rank, so HDF5 need not write fill values first.
  Handle dcpl = detail::tensor_creation_properties(dims, H5Tget_size(types.file));
  Handle dataset(space.valid() ? H5Dcreate2(file, name.c_str(), types.file, space.get(),
                                            link_properties, dcpl.get(), H5P_DEFAULT)
                               : H5I_INVALID_HID,
                 H5Dclose);
  if (!dataset.valid()) {
    throw Error("cannot create dataset '" + name + "' " + shape_str(d.shape) + hdf5_reason());
  }
  detail::write_layout_attributes(dataset.get(), d.shape);
  if (d.dtype == DType::bf16 || d.dtype == DType::f16) {
    detail::write_string_attribute(dataset.get(), "dtype", std::string(dtype_name(d.dtype)));
  }
  return dataset;
}

// The local shape a slice must have.
Shape slice_shape(const std::string& name, const TensorSlice& s) {
  Shape shape = s.global_shape;
  if (s.partition_dim < 0) return shape;
  if (s.partition_dim >= static_cast<int>(shape.size())) {
    throw Error("tensor '" + name + "': partition_dim " + std::to_string(s.partition_dim) +
                " is out of range for " + shape_str(shape));
  }
  const auto d = static_cast<std::size_t>(s.partition_dim);
  std::int64_t rows = 0;
  for (const ShardRun& run : s.runs) {
    if (run.global_offset < 0 || run.length < 0 || run.global_offset + run.length > shape[d]) {
      throw Error("tensor '" + name + "': run [" + std::to_string(run.global_offset) + ", " +
                  std::to_string(run.global_offset + run.length) + ") is outside dimension " +
                  std::to_string(d) + " of " + shape_str(shape));
    }
    rows += run.length;
  }
  shape[d] = rows;
  return shape;
}

// Whether a slice's rows sit in the tensor where they sit in the slice (no partition, or runs
// whose local and global offsets agree).
bool in_file_order(const TensorSlice& s) {
  for (const ShardRun& run : s.runs) {
    if (s.partition_dim >= 0 && run.length > 0 && run.local_offset != run.global_offset)
      return false;
  }
  return true;
}

// Dataset transfer properties: collective under MPI, because HDF5 writes checksummed (filtered)
// chunks only collectively; it merges the pieces several ranks give one chunk.
Handle transfer_properties([[maybe_unused]] bool collective) {
  Handle dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  if (!dxpl.valid()) throw Error("cannot set up dataset transfer properties" + hdf5_reason());
#ifdef H5_HAVE_PARALLEL
  if (collective && H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE) < 0) {
    throw Error("cannot set up collective transfers" + hdf5_reason());
  }
#endif
  return dxpl;
}

// Writes this rank's part of one dataset (nothing when `s` is null) through the handle every
// rank opened at creation. In a collective transfer every rank calls H5Dwrite for every dataset
// in the same order, those with nothing to give selecting none, so this calls it whatever
// happens and returns what went wrong instead of throwing.
// With tile digests (`sums` not null), this rank's runs are added to `sums`.
std::string write_slice(hid_t dataset, const std::string& name, const Declared& declared,
                        const TensorSlice* s, hid_t transfer, bool collective,
                        detail::TileDigests* sums) {
  std::string problem;
  Tensor data;
  Handle file_space(H5Dget_space(dataset), H5Sclose);
  Handle memory_space;
  if (s) {
    try {
      const Shape local_shape = slice_shape(name, *s);
      if (s->local.shape() != local_shape) {
        throw Error("tensor '" + name + "': this rank's part is " + shape_str(s->local.shape()) +
                    ", expected " + shape_str(local_shape));
      }
      data = detail::stored_form(s->local);
      if (sums && data.numel() > 0) {
        // One process holding the whole tensor writes it straight into the file, summed as it
        // goes (Note [Tile digests]); otherwise HDF5 writes each rank's part below, and each
        // rank sums its own runs for the all-reduce.
        const std::optional<int> fd = collective ? std::nullopt : detail::file_descriptor(dataset);
        const haddr_t offset = H5Dget_offset(dataset);
        if (fd && offset != HADDR_UNDEF && local_shape == s->global_shape && in_file_order(*s)) {
          detail::write_with_digests(*fd, offset, *sums, data.raw_data(), name);
          return problem;
        }
        const char* bytes = static_cast<const char*>(data.raw_data());
        detail::for_each_selected_run(
            sums->grid(), s->partition_dim, s->runs,
            [&](const detail::Run& run, std::size_t at) { sums->add(run, bytes + at); });
      }
      // One process holding the whole tensor in the file's order writes its chunks directly
      // (Note [Direct chunk I/O]); HDF5 1.10 has no direct chunk I/O over MPI-IO.
      if (!collective && data.numel() > 0 && local_shape == s->global_shape && in_file_order(*s) &&
          detail::direct_chunks(dataset, detail::stored_types(declared.dtype).memory)) {
        const std::vector<hsize_t> dims = detail::stored_dims(s->global_shape);
        detail::write_chunks(dataset, name, dims, data.element_size(), data.raw_data());
        return problem;
      }
      if (s->partition_dim >= 0 && data.numel() > 0) {
        std::vector<hsize_t> start(s->global_shape.size(), 0),
            count(s->global_shape.begin(), s->global_shape.end());
        bool first = true;
        for (const ShardRun& run : s->runs) {
          if (run.length == 0) continue;
          start[static_cast<std::size_t>(s->partition_dim)] = hsize_t(run.global_offset);
          count[static_cast<std::size_t>(s->partition_dim)] = hsize_t(run.length);
          if (H5Sselect_hyperslab(file_space.get(), first ? H5S_SELECT_SET : H5S_SELECT_OR,
                                  start.data(), nullptr, count.data(), nullptr) < 0) {
            throw Error("cannot select a slice of dataset '" + name + "'" + hdf5_reason());
          }
          first = false;
        }
        const std::vector<hsize_t> dims(local_shape.begin(), local_shape.end());
        memory_space = Handle(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
      } else if (data.numel() > 0) {
        memory_space = Handle(H5Scopy(file_space.get()), H5Sclose);  // the whole dataset
      }
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  const bool writes = problem.empty() && memory_space.valid();
  if (!writes && !collective) return problem;
  if (!writes) {
    const hsize_t one = 1;
    memory_space = Handle(H5Screate_simple(1, &one, nullptr), H5Sclose);
    H5Sselect_none(memory_space.get());
    H5Sselect_none(file_space.get());
  }
  const float nothing = 0;
  const void* buffer = writes ? data.raw_data() : &nothing;
  if (H5Dwrite(dataset, detail::stored_types(declared.dtype).memory, memory_space.get(),
               file_space.get(), transfer, buffer) < 0 &&
      problem.empty()) {
    problem = "cannot write dataset '" + name + "'" + hdf5_reason();
  }
  return problem;
}

}  // namespace

fs::path save_checkpoint_sharded(const fs::path& dir, const CheckpointState& state,
                                 const std::map<std::string, TensorSlice>& slices,
                                 Communicator& world) {
  const fs::path final_path = checkpoint_file(dir, state.iteration);
  const std::string failure = final_path.string() + ": cannot save checkpoint: ";
  const bool root_rank = world.rank() == 0;

  // Everything checkable is checked on every rank before anything is written.
  std::string problem;
  if (state.iteration < 0) problem = "negative iteration " + std::to_string(state.iteration);
  if (!state.tensors.empty()) problem = "sharded saves take tensors as slices, not state.tensors";
  std::map<std::string, Tensor> names;
  for (const auto& [name, slice] : slices)
    names.emplace(name, Tensor());
  for (const auto& [name, slice] : slices) {
    if (!problem.empty()) break;
    const Tensor probe = slice.write ? slice.local : Tensor::empty({}, slice.dtype);
    problem = detail::tensor_problem(name, probe, names);
    if (problem.empty() && slice.write && slice.local.dtype() != slice.dtype) {
      problem = "tensor '" + name + "' is " + slice.local.describe() + ", declared " +
                std::string(dtype_name(slice.dtype));
    }
    if (problem.empty() && slice.write) {
      try {
        if (slice.local.shape() != slice_shape(name, slice)) {
          problem = "tensor '" + name + "': this rank's part is " + shape_str(slice.local.shape()) +
                    ", expected " + shape_str(slice_shape(name, slice));
        }
      } catch (const Error& e) {
        problem = e.what();
      }
    }
  }
  agree(world, problem, failure);
  std::map<std::string, Declared> manifest;
  try {
    manifest = exchange_manifest(slices, world);
  } catch (const Error& e) {
    throw Error(failure + e.what());  // every rank decodes the same lists, so all throw
  }

  if (root_rank) {
    try {
      std::error_code error;
      fs::create_directories(dir, error);
      if (error)
        throw Error(dir.string() + ": cannot create checkpoint directory: " + error.message());
      detail::remove_stale_partials(dir);
      problem.clear();
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  agree(world, problem, "");

  detail::PartialFile partial(final_path.string() + detail::kPartialSuffix, root_rank);
  {
    detail::Hdf5Lock lock;
    Handle fapl = file_access(world);
    // Collective: creating the file, attributes and datasets are metadata every rank writes alike.
    std::map<std::string, Handle> datasets;  // closed before the file, the same on every rank
    Handle file(H5Fcreate(partial.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
                H5Fclose);
    if (!file.valid()) {
      throw Error(partial.path().string() + ": cannot create checkpoint file" + hdf5_reason());
    }
    try {
      detail::write_state_attributes(file.get(), state);
      Handle link_properties(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
      if (!link_properties.valid() ||
          H5Pset_create_intermediate_group(link_properties.get(), 1) < 0 ||
          H5Pset_char_encoding(link_properties.get(), H5T_CSET_UTF8) < 0) {
        throw Error("cannot set up link properties" + hdf5_reason());
      }
      for (const auto& [name, declared] : manifest)
        datasets.emplace(name, create_dataset(file.get(), link_properties.get(), name, declared));
    } catch (const Error& e) {
      throw Error(partial.path().string() + ": " + e.what());
    }
    problem.clear();
    std::map<std::string, detail::TileDigests> digests;
    for (const auto& [name, declared] : manifest) {
      const std::vector<hsize_t> dims = detail::stored_dims(declared.shape);
      const std::size_t element_bytes = H5Tget_size(detail::stored_types(declared.dtype).file);
      if (shape_numel(declared.shape) > 0 && detail::uses_tile_digests(element_bytes)) {
        digests.emplace(name, detail::tile_grid_for(dims, element_bytes));
      }
    }
    try {
      const bool collective = world.size() > 1;
      Handle transfer = transfer_properties(collective);
      for (const auto& [name, declared] : manifest) {
        const auto it = slices.find(name);
        const TensorSlice* mine = it != slices.end() && it->second.write ? &it->second : nullptr;
        const auto sums = digests.find(name);
        std::string failed =
            write_slice(datasets.at(name).get(), name, declared, mine, transfer.get(), collective,
                        sums == digests.end() ? nullptr : &sums->second);
        if (problem.empty() && !failed.empty()) problem = partial.path().string() + ": " + failed;
      }
    } catch (const Error& e) {
      problem = partial.path().string() + ": " + e.what();
    }
    // Every rank summed the runs it wrote; one all-reduce adds them into each tile's sums, and
    // every rank writes the same attributes (collective metadata under MPI-IO).
    try {
      std::vector<std::int64_t> all;
      for (auto& [name, sums] : digests) {
        for (const detail::TileSums& t : sums.sums()) {
          all.push_back(t.a);
          all.push_back(t.b);
        }
      }
      if (world.size() > 1 && !all.empty()) world.all_reduce(all, ReduceOp::sum);
      std::size_t k = 0;
      for (auto& [name, sums] : digests) {
        for (detail::TileSums& t : sums.sums()) {
          t.a = all[k++];
          t.b = all[k++];
        }
        sums.normalize();
        detail::write_tile_attributes(datasets.at(name).get(), sums.grid(), sums.digests());
      }
    } catch (const Error& e) {
      if (problem.empty()) problem = partial.path().string() + ": " + e.what();
    }
    // Closing is collective (and flushes); it must happen on every rank whatever happened above.
    for (auto& [name, dataset] : datasets)
      dataset.reset();
    if (!file.reset() && problem.empty()) {
      problem = partial.path().string() + ": cannot close checkpoint file" + hdf5_reason();
    }
  }
  agree(world, problem, "");
  if (root_rank) {
    try {
      detail::durable_rename(partial.path(), final_path);
      partial.done();
      detail::write_latest_marker(dir, state.iteration);
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  // Nobody returns before the file and marker are in place (or everyone knows they are not).
  agree(world, problem, "");
  return final_path;
}

}  // namespace megatron::checkpoint
