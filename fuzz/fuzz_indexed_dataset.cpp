// libFuzzer target: Megatron's .idx/.bin pair. The input is [u32 idx size][idx bytes][bin bytes];
// the reader must refuse a damaged pair with megatron::Error or read every sequence in bounds.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_support.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/error.h"

namespace {

// Seeds: small valid datasets of every token dtype, written by the project's writer.
void write_seeds() {
  const auto dir = megatron::fuzz::seed_dir();
  if (!dir) return;
  using megatron::IndexDType;
  int n = 0;
  for (const IndexDType dtype :
       {IndexDType::u8, IndexDType::u16, IndexDType::i32, IndexDType::i64}) {
    const auto prefix = megatron::fuzz::scratch_dir() / "seed";
    {
      megatron::IndexedDatasetWriter writer(megatron::bin_path(prefix), dtype);
      const std::vector<std::int32_t> a{1, 2, 3, 4, 5}, b{7, 8};
      const std::vector<std::int64_t> lengths_a{2, 3}, lengths_b{2};
      writer.add_document(a, lengths_a);
      writer.add_document({}, {});
      writer.add_document(b, lengths_b);
      writer.finalize(megatron::idx_path(prefix));
    }
    const std::string idx = megatron::fuzz::read_bytes(megatron::idx_path(prefix));
    const std::string bin = megatron::fuzz::read_bytes(megatron::bin_path(prefix));
    std::string packed(4, '\0');
    const std::uint32_t idx_size = static_cast<std::uint32_t>(idx.size());
    std::memcpy(packed.data(), &idx_size, 4);
    megatron::fuzz::write_seed(*dir, "dataset_" + std::to_string(n++), packed + idx + bin);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  write_seeds();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  std::uint32_t idx_size;
  std::memcpy(&idx_size, data, 4);
  idx_size = static_cast<std::uint32_t>(std::min<std::size_t>(idx_size, size - 4));
  const auto idx = megatron::fuzz::write_scratch("data.idx", data + 4, idx_size);
  const auto bin =
      megatron::fuzz::write_scratch("data.bin", data + 4 + idx_size, size - 4 - idx_size);
  try {
    const megatron::IndexedDataset dataset(idx, bin);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < dataset.size(); ++i) {
      const std::int32_t length = dataset.sequence_length(i);
      const std::vector<std::int64_t> tokens = dataset.get(i);
      if (tokens.size() != static_cast<std::size_t>(length)) std::abort();
      if (length > 0) {
        // A middle slice as the GPT sample builder reads it.
        std::vector<std::int32_t> out(static_cast<std::size_t>(length) / 2);
        dataset.read(i, static_cast<std::size_t>(length) - out.size(), out);
      }
      if (dataset.has_sequence_modes()) (void)dataset.sequence_mode(i);
      total += length;
    }
    for (std::size_t k = 0; k <= dataset.document_count(); ++k)
      (void)dataset.document_index(k);
    (void)total;
  } catch (const megatron::Error&) {
  }
  return 0;
}
