// libFuzzer target: the HDF5 checkpoint loader on mutated small checkpoints. Every input must be
// refused with megatron::Error (CheckpointDamagedError for failed checksums) or load completely;
// verify_checkpoint and the piecewise CheckpointReader agree with load_checkpoint.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"

namespace {

namespace ckpt = megatron::checkpoint;
using megatron::DType;
using megatron::Tensor;

// Seeds: checkpoints as the trainer writes them (tensors of each stored dtype, a scalar, a tensor
// spanning several tiles, a uint8 one in a Fletcher32 chunk, attributes, a config), one with
// damaged data.
void write_seeds() {
  const auto dir = megatron::fuzz::seed_dir();
  if (!dir) return;
  ckpt::CheckpointState state;
  state.iteration = 7;
  state.consumed_train_samples = 56;
  state.config_toml = "[training]\nmicro_batch_size = 2\n";
  state.int_attributes["rng.seed"] = 1234;
  state.float_attributes["loss_scale"] = 65536.0;
  std::vector<float> ramp(3 * 5);
  for (std::size_t i = 0; i < ramp.size(); ++i)
    ramp[i] = 0.25f * static_cast<float>(i);
  state.tensors["model/decoder.layers.0.weight"] = Tensor::from(ramp, {3, 5});
  state.tensors["model/bias"] = Tensor::full({4}, DType::bf16, 1.5);
  state.tensors["model/half"] = Tensor::full({2, 2}, DType::f16, -2.0);
  state.tensors["optimizer/step"] = Tensor::full({}, DType::i64, 3);
  state.tensors["optimizer/exp_avg/bias"] = Tensor::full({4}, DType::f64, 0.125);
  state.tensors["data/mask"] = Tensor::full({6}, DType::u8, 1);
  // Two tiles of 1024 along the last dimension (Note [Tile digests]).
  state.tensors["model/wide"] = Tensor::full({1, 1500}, DType::i32, 9);
  const auto seed_ckpt = megatron::fuzz::scratch_dir() / "seed_ckpt";
  const auto file = ckpt::save_checkpoint(seed_ckpt, state);
  std::string bytes = megatron::fuzz::read_bytes(file);
  megatron::fuzz::write_seed(*dir, "checkpoint.h5", bytes);
  // The same file with a few bytes of tensor data flipped near its end (data follows metadata).
  for (std::size_t i = bytes.size() - 64; i < bytes.size() - 56; ++i)
    bytes[i] ^= 0x5a;
  megatron::fuzz::write_seed(*dir, "checkpoint_flipped.h5", bytes);
}

// Reads every tensor through CheckpointReader (as an any-layout load does), each whole.
void read_piecewise(const std::filesystem::path& path) {
  const ckpt::CheckpointReader reader(path);
  for (const std::string& name : reader.names()) {
    const megatron::Shape shape = reader.shape(name);
    Tensor out = Tensor::empty(shape, DType::f32);
    reader.read_slice(name, -1, {}, out);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  write_seeds();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = megatron::fuzz::write_scratch("iter_0000001.h5", data, size);
  bool loaded = false, damaged = false;
  try {
    const ckpt::CheckpointState state = ckpt::load_checkpoint(path);
    for (const auto& [name, tensor] : state.tensors) {
      if (!tensor.defined()) std::abort();
    }
    loaded = true;
  } catch (const megatron::CheckpointDamagedError&) {
    damaged = true;
  } catch (const megatron::Error&) {
  }
  try {
    const ckpt::VerifyReport report = ckpt::verify_checkpoint(path);
    // A file that loads has no damaged tensor, and one refused as damaged reports it.
    if (loaded && !report.intact()) std::abort();
    if (damaged && report.intact()) std::abort();
  } catch (const megatron::Error&) {
    if (loaded) std::abort();  // load_checkpoint accepted what verify refused to open
  }
  try {
    read_piecewise(path);
  } catch (const megatron::Error&) {
  }
  return 0;
}
