// libFuzzer target: the .npy reader of the dataset index cache (Megatron's doc/sample/shuffle
// index files). A damaged file is refused with megatron::Error; an accepted one round-trips.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "fuzz_support.h"
#include "megatron/data/npy.h"
#include "megatron/error.h"

namespace {

void write_seeds() {
  const auto dir = megatron::fuzz::seed_dir();
  if (!dir) return;
  using megatron::data::IndexArray;
  const IndexArray arrays[] = {
      IndexArray(std::vector<std::int32_t>{3, 1, 2, 0}, {4}),
      IndexArray(std::vector<std::int64_t>{0, 0, 1, 5, 2, 7}, {3, 2}),
      IndexArray(std::vector<std::int16_t>{1, 2}, {2}),
      IndexArray(std::vector<std::uint32_t>{}, {0}),
  };
  int n = 0;
  for (const IndexArray& array : arrays) {
    const auto path = megatron::fuzz::scratch_dir() / "seed.npy";
    megatron::data::write_npy(path, array);
    megatron::fuzz::write_seed(*dir, "index_" + std::to_string(n++) + ".npy",
                               megatron::fuzz::read_bytes(path));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  write_seeds();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = megatron::fuzz::write_scratch("input.npy", data, size);
  megatron::data::IndexArray array;
  try {
    array = megatron::data::read_npy(path);
  } catch (const megatron::Error&) {
    return 0;
  }
  // What was accepted is written as numpy would and reads back equal.
  const auto again = megatron::fuzz::scratch_dir() / "again.npy";
  megatron::data::write_npy(again, array);
  if (!(megatron::data::read_npy(again) == array)) std::abort();
  return 0;
}
