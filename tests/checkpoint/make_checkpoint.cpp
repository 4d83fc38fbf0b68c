// make_checkpoint OUTDIR: writes the deterministic checkpoints the inspect and h5ls tests read:
//   a/   iteration 100 of a one-layer GPT (model parameters 648 elements), a.names lists its
//   tensors b/   the same tensors and attributes (diff: identical) c/   one value changed, one
//   tensor removed, one added, one shape and one dtype changed d/   the tensors of a/ saved as
//   iteration 200 (diff: identical tensors, different iteration) not_checkpoint.h5 (HDF5 without
//   format_version), text.txt (not HDF5)
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"

namespace {

namespace fs = std::filesystem;
using megatron::DType;
using megatron::Shape;
using megatron::Tensor;
using megatron::checkpoint::CheckpointState;

constexpr const char* kConfig = R"([parallel]
tensor_model_parallel_size = 1
pipeline_model_parallel_size = 1

[model]
type = "gpt"
num_layers = 1
hidden_size = 8
ffn_hidden_size = 32
num_attention_heads = 2
padded_vocab_size = 16
max_position_embeddings = 4

[training]
micro_batch_size = 2
lr = 0.0003
)";

// Smooth, reproducible values with both signs.
Tensor wave(const Shape& shape, DType dtype, double phase) {
  Tensor t = Tensor::empty(shape, DType::f64);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = 0.02 * std::sin(0.37 * double(i) + phase);
  return t.to(dtype);
}

Tensor ramp(std::int64_t n) {
  Tensor t = Tensor::empty({n}, DType::f32);
  for (std::int64_t i = 0; i < n; ++i)
    t.data<float>()[i] = float(i);
  return t;
}

CheckpointState base_state() {
  CheckpointState s;
  s.iteration = 100;
  s.consumed_train_samples = 1600;
  s.consumed_valid_samples = 64;
  s.skipped_iterations = 2;
  s.config_toml = kConfig;
  s.int_attributes["rng.seed"] = 1234;
  s.float_attributes["loss_scale"] = 65536;
  s.tensors["model/embedding.word_embeddings.weight"] = wave({16, 8}, DType::f32, 0);
  s.tensors["model/embedding.position_embeddings.weight"] = wave({4, 8}, DType::f32, 1);
  s.tensors["model/decoder.layers.0.self_attention.linear_qkv.weight"] =
      wave({24, 8}, DType::bf16, 2);
  s.tensors["model/decoder.layers.0.mlp.linear_fc1.weight"] = wave({32, 8}, DType::f32, 3);
  s.tensors["model/decoder.layers.0.mlp.linear_fc1.bias"] = ramp(32);
  s.tensors["model/decoder.final_layernorm.weight"] = Tensor::full({8}, DType::f32, 1);
  s.tensors["optimizer/exp_avg/embedding.word_embeddings.weight"] = wave({16, 8}, DType::f32, 4);
  s.tensors["rng/philox"] = Tensor::from<std::int64_t>({1234, 5678}, {2});
  return s;
}

void write_not_checkpoint(const fs::path& path) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[1] = {3};
  const hid_t space = H5Screate_simple(1, dims, nullptr);
  const hid_t dataset =
      H5Dcreate2(file, "data", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const float values[3] = {1, 2, 3};
  H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
  H5Dclose(dataset);
  H5Sclose(space);
  if (H5Fclose(file) < 0) throw megatron::Error(path.string() + ": cannot write");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_checkpoint OUTDIR\n";
    return 2;
  }
  try {
    const fs::path out = argv[1];
    fs::remove_all(out);
    fs::create_directories(out);
    const CheckpointState a = base_state();
    megatron::checkpoint::save_checkpoint(out / "a", a);
    megatron::checkpoint::save_checkpoint(out / "b", base_state());

    CheckpointState c = base_state();
    c.tensors["model/decoder.layers.0.mlp.linear_fc1.bias"].data<float>()[3] += 0.5f;
    c.tensors.erase("model/embedding.position_embeddings.weight");
    c.tensors["model/extra.weight"] = Tensor::full({2, 2}, DType::f32, 3);
    c.tensors["model/decoder.final_layernorm.weight"] = Tensor::full({9}, DType::f32, 1);
    c.tensors["rng/philox"] = c.tensors["rng/philox"].to(DType::i32);
    megatron::checkpoint::save_checkpoint(out / "c", c);

    CheckpointState d = base_state();
    d.iteration = 200;
    megatron::checkpoint::save_checkpoint(out / "d", d);

    std::ofstream names(out / "a.names");
    for (const auto& [name, tensor] : a.tensors)
      names << name << "\n";
    write_not_checkpoint(out / "not_checkpoint.h5");
    std::ofstream(out / "text.txt") << "not a checkpoint\n";
    std::cout << "make_checkpoint: wrote " << out.string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "make_checkpoint: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
