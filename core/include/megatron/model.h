// The interface of model plugins: parameters declared as data, and a forward/backward step on one
// micro-batch that returns the loss. The training loop owns everything else.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "megatron/nn/parameter.h"
#include "megatron/plugin.h"
#include "megatron/tensor/tensor.h"

namespace megatron {

// What the host tells a model when it builds it (after the dataset's tokenizer is known).
struct ModelBuildInfo {
  std::int64_t vocab_size = 0;  // unpadded tokenizer vocabulary; the model pads it
  std::int64_t seq_length = 0;  // sequence length of the samples it will see
  Device device = Device::cpu();
  DType param_dtype = DType::f32;    // f32 normally, f64 for gradient checks
  DType compute_dtype = DType::f32;  // bf16/f16: GEMM inputs cast to it (mixed precision)
  std::uint64_t seed = 1234;
};

// One micro-batch, (B, S) each: input tokens, target labels (the next tokens), loss mask (1 =
// counts). tokens and labels i32, loss_mask f32.
struct Batch {
  Tensor tokens;
  Tensor labels;
  Tensor loss_mask;
};

struct StepOptions {
  bool backward = true;     // false: forward only (evaluation)
  bool training = true;     // false: dropout off
  float loss_scale = 1.0f;  // gradients are of loss_scale * loss (loss = masked mean)
  // Distinguishes dropout streams: the same (iteration, micro_batch) gives the same masks,
  // including when a layer is recomputed.
  std::uint64_t dropout_offset = 0;
  std::uint64_t dropout_seed = 1234;  // [training] seed, or the checkpoint's on resume
  // Called during backward, as soon as these parameters' gradients of this micro-batch are
  // complete (a layer's after its backward; a tied embedding only after its last use), so the
  // training loop can start reducing them while backward goes on. Every parameter is reported
  // exactly once per step. Empty: not called.
  std::function<void(const std::vector<Parameter*>&)> grads_ready;
};

struct StepResult {
  double loss_sum = 0;     // sum over masked tokens of the per-token loss
  double token_count = 0;  // sum of loss_mask
};

// The transformer dimensions memory planning needs (Megatron's argument names).
struct ModelDimensions {
  std::int64_t num_layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t ffn_hidden_size = 0;
  std::int64_t seq_length = 0;
  std::int64_t padded_vocab_size = 0;
};

class Model : public Plugin {
 public:
  ~Model() override;
  // Declares and allocates the parameters (meta device: declares only) and initialises them from
  // info.seed. Called once before anything else.
  virtual void build(const ModelBuildInfo& info) = 0;
  virtual ParameterSet& parameters() = 0;
  // Forward on `batch`, then (options.backward) backward of options.loss_scale * loss_sum /
  // token_count, accumulated into each Parameter::grad.
  virtual StepResult step(const Batch& batch, const StepOptions& options) = 0;
  // Model FLOPs of one forward+backward over `samples` sequences (Megatron's formula, for the
  // TFLOP/s figure).
  virtual double flops_per_iteration(std::int64_t samples) const = 0;
  virtual ModelDimensions dimensions() const = 0;
  // Megatron's (key, value) summary of the architecture for logs and `plan`.
  virtual std::string describe() const = 0;
};

}  // namespace megatron
