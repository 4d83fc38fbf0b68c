// Transformer config helpers: output-layer init scale and rotary tables.
#include "megatron/nn/transformer_config.h"

#include <cmath>
#include <vector>

namespace megatron::nn {

float TransformerConfig::output_init_std() const {
  return static_cast<float>(init_method_std / std::sqrt(2.0 * static_cast<double>(num_layers)));
}

RotaryTables make_rotary_tables(std::int64_t seq_length, std::int64_t rotary_dim, double base,
                                DType dtype) {
  // Megatron's RotaryEmbedding: inv_freq = 1 / base^(arange(0, R, 2) / R) in fp32, freqs =
  // outer(positions, inv_freq), emb = cat(freqs, freqs); cos/sin taken in fp32.
  const std::int64_t half = rotary_dim / 2;
  std::vector<double> cos(static_cast<std::size_t>(seq_length * rotary_dim));
  std::vector<double> sin(cos.size());
  for (std::int64_t i = 0; i < half; ++i) {
    const float inv_freq =
        1.0f / static_cast<float>(
                   std::pow(base, static_cast<double>(2 * i) / static_cast<double>(rotary_dim)));
    for (std::int64_t s = 0; s < seq_length; ++s) {
      const float angle = static_cast<float>(s) * inv_freq;
      for (std::int64_t j : {i, i + half}) {
        cos[static_cast<std::size_t>(s * rotary_dim + j)] = std::cos(angle);
        sin[static_cast<std::size_t>(s * rotary_dim + j)] = std::sin(angle);
      }
    }
  }
  RotaryTables t;
  t.cos = Tensor::from(cos, {seq_length, rotary_dim}).to(dtype);
  t.sin = Tensor::from(sin, {seq_length, rotary_dim}).to(dtype);
  return t;
}

}  // namespace megatron::nn
