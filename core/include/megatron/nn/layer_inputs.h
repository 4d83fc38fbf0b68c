// Named per-micro-batch inputs of a stack's layers (masks, the encoder output, a score bias,
// rotary tables, a plugin's own) and where the gradients of those inputs go: a model sets what
// its blocks read by name, so a new block kind needs no new field in the core.
#pragma once

#include <map>
#include <string>

#include "megatron/nn/transformer_config.h"
#include "megatron/tensor/tensor.h"

namespace megatron::nn {

// The inputs the core's blocks read.
namespace layer_input {
// (S, R) rotary cos / sin tables (RotaryTables); absent: no rotary positions.
inline constexpr const char* rotary_cos = "rotary_cos";
inline constexpr const char* rotary_sin = "rotary_sin";
// (B, S) u8 on the model's device, non-zero = that key is padding (Megatron's convention); read
// by self-attention whose mask is `padding` or `causal_padding`.
inline constexpr const char* key_padding_mask = "key_padding_mask";
// (B, S) i32 on the model's device: the first key each query sees (GPT's reset_attention_mask,
// AttentionParams::first_key); read by every self-attention block when present.
inline constexpr const char* first_key = "first_key";
// The encoder output (Sk, B, h) in the layers' dtype, an (Sk / tp, B, h) sequence shard under
// sequence parallelism as the decoder's x; read by cross-attention, which adds its gradient.
inline constexpr const char* memory = "memory";
// (B, Sk) u8 on the model's device, non-zero = that encoder position is padding.
inline constexpr const char* memory_padding_mask = "memory_padding_mask";
// Additive score bias of every self-attention block (T5's relative position bias): (this rank's
// heads, S, S) in the layers' dtype; its gradient is added when the bias is present.
inline constexpr const char* attention_bias = "attention_bias";
}  // namespace layer_input

class LayerInputs {
 public:
  // Sets (or replaces) input `name`; an undefined tensor removes it.
  void set(const std::string& name, Tensor value);
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  // The input, or an undefined tensor when the micro-batch has none.
  Tensor get(const std::string& name) const;
  // The input; Error naming `who` and the input when the micro-batch has none.
  const Tensor& require(const std::string& name, const std::string& who) const;

  // Asks for the gradient of input `name`: the backward of every block that reads it ADDS its
  // gradient into `accumulator` (shaped as the input, zeroed by the caller, sharing storage with
  // the caller's handle).
  void collect_gradient(const std::string& name, Tensor accumulator);
  bool collects_gradient(const std::string& name) const { return gradients_.count(name) != 0; }
  // The accumulator of input `name`'s gradient; Error naming `who` when none was asked for.
  Tensor gradient(const std::string& name, const std::string& who) const;

  // Rotary tables as inputs rotary_cos / rotary_sin (nullptr: none).
  void set_rotary(const RotaryTables* tables);

 private:
  std::map<std::string, Tensor> values_, gradients_;
};

}  // namespace megatron::nn
