// For the language-model reference dumps (GPT, Mamba): a random (tokens, labels, loss_mask) batch
// and the dump itself — the initial weights, the batch, our "lm loss" and every parameter
// gradient of one evaluation-mode step — in the checkpoint format the Python references read.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "megatron/model.h"

namespace megatron::reference {

// Tokens and labels uniform below `vocab`; loss_mask 0 where the flat index % mask_every == 3.
inline Batch random_lm_batch(std::int64_t vocab, std::int64_t batch, std::int64_t seq,
                             std::size_t mask_every, std::mt19937& rng) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch * seq)), labels(tokens.size());
  std::vector<float> mask(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
    labels[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
    mask[i] = i % mask_every == 3 ? 0.0f : 1.0f;
  }
  Batch b;
  b.set("tokens", Tensor::from(tokens, {batch, seq}));
  b.set("labels", Tensor::from(labels, {batch, seq}));
  b.set("loss_mask", Tensor::from(mask, {batch, seq}));
  return b;
}

// model/<name> (the weights before the step), reference/loss, reference/grad/<name> and the
// batch under reference/.
inline checkpoint::CheckpointState lm_reference_state(Model& model, const Batch& b) {
  checkpoint::CheckpointState state;
  for (auto& p : model.parameters())
    state.tensors["model/" + p->name] = p->value.clone();
  StepOptions o;
  o.training = false;
  const StepResult r = model.step(b, o);
  const LossTerm* lm = r.find("lm loss");
  if (!lm) throw Error("the model returned no \"lm loss\"");
  state.tensors["reference/loss"] = Tensor::from(std::vector<double>{lm->sum / lm->count}, {1});
  for (auto& p : model.parameters())
    state.tensors["reference/grad/" + p->name] = p->grad;
  for (const char* field : {"tokens", "labels", "loss_mask"})
    state.tensors[std::string("reference/") + field] = b[field];
  return state;
}

}  // namespace megatron::reference
