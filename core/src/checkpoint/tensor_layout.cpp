// Checkpoint tensor layout: stored dimensions, chunk tiles and the Fletcher32 filter.
#include "checkpoint/tensor_layout.h"

#include <algorithm>

#include "megatron/error.h"

namespace megatron::checkpoint::detail {

std::vector<hsize_t> stored_dims(const Shape& shape) {
  if (shape.empty()) return {1};
  return std::vector<hsize_t>(shape.begin(), shape.end());
}

std::string chunk_origin_text(const std::vector<hsize_t>& origin) {
  std::string text;
  for (const hsize_t o : origin)
    text += (text.empty() ? "" : ", ") + std::to_string(o);
  return "[" + text + "]";
}

std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims, std::size_t element_bytes) {
  const hsize_t budget =
      std::max<hsize_t>(1, kChunkBytes / std::max<std::size_t>(1, element_bytes));
  std::vector<hsize_t> chunk(dims.size(), 1);
  const std::size_t last = dims.size() - 1;
  chunk[last] = std::min(dims[last], dims.size() > 1 ? std::min(kChunkColumns, budget) : budget);
  hsize_t elements = chunk[last];
  for (std::size_t d = last; d-- > 0;) {
    chunk[d] = std::clamp<hsize_t>(budget / elements, 1, dims[d]);
    elements *= chunk[d];
  }
  return chunk;
}

Handle tensor_creation_properties(const std::vector<hsize_t>& dims, std::size_t element_bytes) {
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!dcpl.valid() || H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER) < 0) {
    throw Error("cannot set up dataset properties" + hdf5_reason());
  }
  const bool empty = std::find(dims.begin(), dims.end(), hsize_t(0)) != dims.end();
  if (empty) return dcpl;
  const std::vector<hsize_t> chunk = chunk_dims(dims, element_bytes);
  if (H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data()) < 0 ||
      H5Pset_fletcher32(dcpl.get()) < 0) {
    throw Error("cannot set up checksummed chunks" + hdf5_reason());
  }
  return dcpl;
}

void write_layout_attributes(hid_t dataset, const Shape& shape) {
  if (shape.empty()) write_int_attribute(dataset, kScalarAttribute, 1);
}

bool has_checksum(hid_t dataset) {
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  if (!dcpl.valid()) return false;
  const int filters = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0;
    std::size_t count = 0;
    unsigned config = 0;
    if (H5Pget_filter2(dcpl.get(), unsigned(i), &flags, &count, nullptr, 0, nullptr, &config) ==
        H5Z_FILTER_FLETCHER32) {
      return true;
    }
  }
  return false;
}

bool stored_scalar(hid_t dataset) {
  return H5Aexists(dataset, kScalarAttribute) > 0;
}

}  // namespace megatron::checkpoint::detail
