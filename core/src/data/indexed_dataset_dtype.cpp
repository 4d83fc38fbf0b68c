// Dtype codes of the indexed dataset, Megatron's choice of dtype, and the .idx/.bin file names.
#include "data/indexed_dataset_format.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/error.h"

namespace megatron {

namespace idx_format {

bool is_known_dtype(std::uint8_t code) {
  return code >= 1 && code <= 8;
}

}  // namespace idx_format

std::size_t index_dtype_size(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::u8:
    case IndexDType::i8:
      return 1;
    case IndexDType::i16:
    case IndexDType::u16:
      return 2;
    case IndexDType::i32:
    case IndexDType::f32:
      return 4;
    case IndexDType::i64:
    case IndexDType::f64:
      return 8;
  }
  throw Error("unknown indexed dataset dtype code " + std::to_string(int(dtype)));
}

std::string_view index_dtype_name(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::u8:
      return "uint8";
    case IndexDType::i8:
      return "int8";
    case IndexDType::i16:
      return "int16";
    case IndexDType::i32:
      return "int32";
    case IndexDType::i64:
      return "int64";
    case IndexDType::f64:
      return "float64";
    case IndexDType::f32:
      return "float32";
    case IndexDType::u16:
      return "uint16";
  }
  return "unknown";
}

IndexDType optimal_index_dtype(std::size_t vocab_size) {
  return vocab_size < 65500 ? IndexDType::u16 : IndexDType::i32;
}

std::filesystem::path idx_path(const std::string& prefix) {
  return prefix + ".idx";
}
std::filesystem::path bin_path(const std::string& prefix) {
  return prefix + ".bin";
}

}  // namespace megatron
