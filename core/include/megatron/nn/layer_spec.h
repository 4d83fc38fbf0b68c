// What varies between the layers of a stack (Megatron-core's ModuleSpec submodules, as data) and
// what every layer of a micro-batch is given besides its input.
#pragma once

#include "megatron/nn/transformer_config.h"
#include "megatron/tensor/tensor.h"

namespace megatron::nn {

// Which keys a query of self-attention sees.
enum class AttentionMask {
  causal,          // keys up to the query's own position (GPT)
  padding,         // every key but the sample's padding (BERT, T5's encoder): bidirectional
  causal_padding,  // keys up to the query's own position that are not padding (T5's decoder)
};

// What a layer holds. Megatron-core's hybrid stacks (MambaStack) build one-block layers, each
// norm -> mixer -> dropout -> residual: a Mamba layer (MambaLayer), an attention layer (a
// TransformerLayer whose MLP is IdentityOp) or an MLP layer (MLPLayer, whose attention is).
enum class LayerKind {
  transformer,  // self-attention block, then MLP block (GPT, BERT, T5)
  attention,    // self-attention block only (hybrid "*")
  mlp,          // MLP block only (hybrid "-")
  mamba,        // Mamba-2 mixer block (hybrid "M")
};

// The slots of one layer. Norm, MLP kind and sizes come from the stack's TransformerConfig.
struct LayerSpec {
  AttentionMask self_attention_mask = AttentionMask::causal;
  // T5's decoder layer: cross-attention to the encoder output (LayerInputs::memory) between
  // self-attention and the MLP, its keys masked by LayerInputs::memory_padding_mask (Megatron's
  // cross-attention is always padding-masked, never causal, and has no rotary).
  bool cross_attention = false;
  LayerKind kind = LayerKind::transformer;
  // Norms named as Transformer Engine's fused LayerNormLinear, inside the linear layer they feed
  // (`self_attention.linear_qkv.layer_norm_weight`, `mlp.linear_fc1.layer_norm_weight`,
  // `mixer.in_proj.layer_norm_weight`): the names of Megatron-core's Mamba/hybrid checkpoints,
  // whose specs are TE-only. Otherwise the local spec's `input_layernorm` / `pre_mlp_layernorm`
  // (and a Mamba layer's `norm`).
  bool fused_norm_names = false;
};

// Per micro-batch inputs shared by the layers of a stack.
struct LayerInputs {
  const RotaryTables* rotary = nullptr;  // rotary positions, or none
  // (B, S) u8 on the model's device, non-zero = that key is padding (Megatron's convention); read
  // by layers whose attention mask is `padding`.
  Tensor key_padding_mask;
  // (B, S) i32 on the model's device: the first key each query sees (GPT's reset_attention_mask,
  // AttentionParams::first_key), or undefined; read by every self-attention layer.
  Tensor first_key;
  // Read by cross-attention layers only. The encoder output (Sk, B, h) in the layers' dtype, an
  // (Sk / tp, B, h) sequence shard under sequence parallelism, as the decoder's x.
  // ({}: aggregate initialisations naming only the first fields stay -Wextra clean.)
  Tensor memory{};
  // (B, Sk) u8 on the model's device, non-zero = that encoder position is padding; or undefined.
  Tensor memory_padding_mask{};
  // Shaped as memory: every cross-attention layer's backward ADDS its gradient w.r.t. memory
  // here (the caller zeroes it before the decoder's backward and hands it to the encoder's).
  Tensor* memory_grad = nullptr;
  // Additive score bias of every self-attention layer (T5's relative position bias): (this rank's
  // heads, S, S) in the layers' dtype on the model's device (AttentionParams::bias), or undefined.
  Tensor attention_bias{};
  // Shaped as attention_bias: every self-attention layer's backward ADDS the bias's gradient here
  // (the caller zeroes it before the stack's backward); required when attention_bias is defined.
  Tensor* attention_bias_grad = nullptr;
};

}  // namespace megatron::nn
