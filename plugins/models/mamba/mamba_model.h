// Megatron-core's MambaModel: the core's language model (embedding, output layer, masked
// cross-entropy) around a MambaStack of Mamba-2, attention and MLP layers (one block each,
// norm -> mixer -> residual), laid out by a hybrid pattern, with the final norm named
// `decoder.final_norm`. Parameter names
// are those of Megatron's (Transformer Engine) Mamba spec, e.g. mixer.in_proj.layer_norm_weight.
#pragma once

#include <string>
#include <vector>

#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/nn/hybrid_layers.h"
#include "megatron/nn/language_model.h"

namespace megatron::mamba {

struct MambaConfig {
  nn::ModelConfig model;  // model.transformer carries the mamba_* sizes
  nn::HybridLayers layers;
};

void declare_mamba_config(config::TableSchema& schema);
MambaConfig parse_mamba_config(const config::ConfigTable& table);

class MambaModel : public nn::LanguageModel {
 public:
  explicit MambaModel(MambaConfig config);

  std::string describe() const override;
  ModelDimensions dimensions() const override;
  // Megatron's hybrid_flops (training.py): each layer kind's forward FLOPs plus the logits, x 3.
  double flops_per_iteration(std::int64_t samples) const override;

  const nn::HybridLayers& layers() const { return layers_; }

 protected:
  nn::LayerSpec layer_spec(std::int64_t layer) const override;

 private:
  nn::HybridLayers layers_;
};

}  // namespace megatron::mamba
