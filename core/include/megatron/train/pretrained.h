// The public checkpoint loader: a checkpoint saved at any parallel layout loads into a model built
// at the current one, with explicit control of the tensors that may differ (a new task head is
// kept as initialised, a pretraining head the model lacks is skipped). Fine-tuning and evaluation
// tasks use it; the trainer's resume uses it for the model weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "megatron/log.h"
#include "megatron/model.h"
#include "megatron/nn/parameter.h"
#include "megatron/parallel/parallel_state.h"

namespace megatron::train {

struct PretrainedRules {
  // Model parameters (name prefixes, e.g. "classification_head.") the checkpoint need not hold:
  // they keep the model's own initialisation.
  std::vector<std::string> initialise;
  // Checkpoint tensors (name prefixes, e.g. "lm_head.", "binary_head.") the model need not have:
  // they are not read.
  std::vector<std::string> skip;
  // When set, the checkpoint's stored config must name this [model] type (a GPT task refuses a
  // BERT checkpoint with that reason rather than with its first differing tensor).
  std::string model_type;
  // This run's [model] type, when known: named in the errors for a checkpoint of another type.
  std::string run_model_type;
  // With run_model_type (the trainer sets it for [checkpoint] finetune), a checkpoint saved from
  // another model type may lack model parameters: they keep their initialisation and are
  // reported. Megatron loads Retro non-strictly this way, so that a GPT checkpoint starts a Retro
  // model (its cross-attention and retrieval encoder new). Every tensor of the checkpoint must
  // still be one of the model's, with its shape.
  bool extend_other_type = false;
};

// The [model] type a config's TOML names ("" when it names none or cannot be read).
std::string config_model_type(const std::string& config_toml);

struct PretrainedReport {
  std::filesystem::path file;  // the checkpoint file read
  std::int64_t iteration = 0;  // its iteration
  std::string config_toml;     // the config it was saved with
  // This rank's parameters (its pipeline stage's), in declaration order.
  std::vector<std::string> loaded, initialised;
  // Checkpoint tensors (without "model/") no pipeline stage holds; the same on every rank.
  std::vector<std::string> skipped;
};

// Collective over the world (every rank calls it). Loads `path` (an .h5 file, or a directory's
// latest checkpoint) into `params`: each parameter reads this rank's slice of its global tensor,
// whatever layout saved it. Every initialised and skipped tensor is logged by name. Anything else
// that differs throws ConfigError naming the file, the tensor and both shapes: a parameter the
// checkpoint lacks, a global shape that differs, a checkpoint tensor no pipeline stage holds, a
// different [model] type. The values loaded before such an error are left in the parameters.
PretrainedReport load_pretrained(const std::filesystem::path& path, ParameterSet& params,
                                 ParallelState& parallel, const PretrainedRules& rules,
                                 Logger& log);
// The same for a built model: its parameters, and its buffers (Model::buffers) where the
// checkpoint has them (one saved before a buffer existed leaves it as built, logged as
// initialised).
PretrainedReport load_pretrained(const std::filesystem::path& path, Model& model,
                                 ParallelState& parallel, const PretrainedRules& rules,
                                 Logger& log);

}  // namespace megatron::train
