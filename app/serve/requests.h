// The server's request bodies: Megatron's PUT /api fields and the OpenAI-compatible completions
// and chat completions, checked (Megatron's messages where it has them) and turned into the
// generation engine's requests.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megatron/inference/engine.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::app::serve {

// A request the server refuses: HTTP 400 with this message.
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a request may ask of the loaded model.
struct ModelLimits {
  const Tokenizer* tokenizer = nullptr;
  std::int64_t vocab_size = 0;
  std::int64_t seq_length = 0;  // prompt and generated tokens together
};

// One HTTP request's prompts, each to generate with the same settings.
struct Job {
  std::vector<std::string> prompt_texts;
  std::vector<std::vector<TokenId>> prompts;
  inference::GenerationRequest settings;  // every field but the prompt
  bool seeded = false;                    // a seed was given (else each prompt draws its own)
  bool no_log = false;                    // /api's no_log
  // OpenAI endpoints.
  bool echo = false, stream = false, include_usage = false;
  std::int64_t logprobs = -1;  // -1: none; n >= 0: each token's, and its n most likely
  std::string model;
};

// Megatron's PUT /api (megatron/inference/text_generation_server.py).
Job parse_api(const nlohmann::json& body, const ModelLimits& limits);
// POST /v1/completions and Megatron's /completions (`max_tokens` required there).
Job parse_completion(const nlohmann::json& body, const ModelLimits& limits,
                     bool require_max_tokens);
// POST /v1/chat/completions: the messages in Megatron's pretraining chat template.
Job parse_chat(const nlohmann::json& body, const ModelLimits& limits);

// Megatron's pretraining.jinja: system and user contents each followed by a newline, assistant
// contents by an empty line.
std::string pretraining_chat_prompt(const nlohmann::json& messages);

}  // namespace megatron::app::serve
