// A decoder-only language model loaded for text generation (`generate`, `serve`): the config's
// session, its [data] plugin's tokenizer and sequence length, the [model] plugin's model with a
// checkpoint's weights, and the decoder the generation engine steps (the KV cache, or recomputing
// each sequence where a block keeps no cache or --recompute asks). Under mpirun with tensor and
// pipeline parallelism every rank loads its shard; rank 0 leads the decoding and the others follow.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli.h"
#include "megatron/dataset.h"
#include "megatron/inference/decoder.h"
#include "megatron/model.h"
#include "megatron/parallel/parallel_state.h"
#include "session.h"

namespace megatron::app {

class GenerationModel {
 public:
  // `command` names the subcommand in messages; `load` the checkpoint (empty: [checkpoint] load,
  // else save). One rank. Throws UsageError for a model that is not a decoder-only LM.
  GenerationModel(MpiRuntime& runtime, const CommonOptions& common, const std::string& command,
                  const std::string& load, bool recompute);
  ~GenerationModel();

  Logger& log() { return *session_.log; }
  const Tokenizer& tokenizer() const { return dataset_->tokenizer(); }
  std::int64_t vocab_size() const { return static_cast<std::int64_t>(tokenizer().vocab_size()); }
  std::int64_t seq_length() const { return dataset_->seq_length(); }
  inference::Decoder& decoder() { return *decoder_; }
  // Several ranks: rank 0 leads (runs the engine; its decoder announces each call), the other
  // ranks follow() until it stops. One rank: the leader.
  bool leader() const;
  void follow();
  const std::string& type() const { return type_; }  // the [model] plugin's name

 private:
  Session session_;
  std::optional<ParallelState> parallel_;
  std::unique_ptr<Dataset> dataset_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<inference::Decoder> decoder_;
  std::string type_;
  Communicator* group_ = nullptr;  // the model's ranks (tp x pp), when there are several
};

}  // namespace megatron::app
