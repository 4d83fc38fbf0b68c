// For the reference dump tools (tests/reference/*_reference_dump.cpp): their shared main and
// model build, and for the language models (GPT, Mamba, MoE) a random (tokens, labels, loss_mask)
// batch and the dump itself — the initial weights, the batch, our losses and every parameter
// gradient of one step — in the checkpoint format the Python references read.
#pragma once

#include <exception>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "megatron/model.h"

namespace megatron::reference {

// The dump tools' main: `TOOL OUT_DIR VARIANT`; `dump(variant)` makes the state saved to OUT_DIR,
// whose path is printed. Exit 2 on bad usage, 1 on any error (named).
inline int dump_main(int argc, char** argv, const char* tool,
                     const std::function<checkpoint::CheckpointState(const std::string&)>& dump) {
  if (argc != 3) {
    std::cerr << "usage: " << tool << " OUT_DIR VARIANT\n";
    return 2;
  }
  try {
    const checkpoint::CheckpointState state = dump(argv[2]);
    std::cout << checkpoint::save_checkpoint(argv[1], state).string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << tool << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// Builds `model` as every reference dump does: one rank, f32 on the CPU, seed 1234.
inline void build_for_reference(Model& model, std::int64_t vocab, std::int64_t seq,
                                SampleSpec fields = {}) {
  ModelBuildInfo info;
  info.vocab_size = vocab;
  info.seq_length = seq;
  info.sample_fields = std::move(fields);
  info.seed = 1234;
  model.build(info);
}

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

// model/<name> (the weights before the step), reference/grad/<name> and the batch under
// reference/. Evaluation mode: "lm loss" as reference/loss. `training`: a training step (dropout
// must be off in the config), each loss term as reference/loss/<name> (MoE's auxiliary losses
// are computed in training only).
inline checkpoint::CheckpointState lm_reference_state(Model& model, const Batch& b,
                                                      bool training = false) {
  checkpoint::CheckpointState state;
  for (auto& p : model.parameters())
    state.tensors["model/" + p->name] = p->value.clone();
  StepOptions o;
  o.training = training;
  const StepResult r = model.step(b, o);
  if (training) {
    for (const LossTerm& term : r.losses) {
      state.tensors["reference/loss/" + term.name] =
          Tensor::from(std::vector<double>{term.sum / term.count}, {1});
    }
  } else {
    const LossTerm* lm = r.find("lm loss");
    if (!lm) throw Error("the model returned no \"lm loss\"");
    state.tensors["reference/loss"] = Tensor::from(std::vector<double>{lm->sum / lm->count}, {1});
  }
  for (auto& p : model.parameters())
    state.tensors["reference/grad/" + p->name] = p->grad;
  for (const char* field : {"tokens", "labels", "loss_mask"})
    state.tensors[std::string("reference/") + field] = b[field];
  return state;
}

}  // namespace megatron::reference
