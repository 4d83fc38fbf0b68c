// Checking the server's request bodies and turning them into generation requests.
#include "serve/requests.h"

#include <fmt/format.h>

#include "megatron/error.h"
#include "megatron/inference/sampling.h"

namespace megatron::app::serve {

using nlohmann::json;

namespace {

bool has(const json& body, const char* key) {
  return body.contains(key);
}

bool boolean(const json& body, const char* key, bool fallback) {
  if (!has(body, key)) return fallback;
  if (!body[key].is_boolean()) throw BadRequest(std::string(key) + " must be a boolean value");
  return body[key].get<bool>();
}

// Tokenizes a prompt (empty prompts start from the end-of-document id, Megatron's add_BOS).
std::vector<TokenId> tokenize(const std::string& text, bool add_bos, const ModelLimits& limits) {
  std::vector<TokenId> ids;
  if (add_bos) ids.push_back(limits.tokenizer->eod());
  try {
    limits.tokenizer->encode(text, ids);
  } catch (const Error& e) {
    throw BadRequest(std::string("prompt: ") + e.what());
  }
  return ids;
}

void check_lengths(const Job& job, const ModelLimits& limits, const char* message) {
  for (const auto& ids : job.prompts) {
    if (static_cast<std::int64_t>(ids.size()) + job.settings.tokens_to_generate > limits.seq_length)
      throw BadRequest(message);
  }
}

void check_sampling(const Job& job, const ModelLimits& limits) {
  const std::string error = inference::sampling_error(job.settings.sampling, limits.vocab_size);
  if (!error.empty()) throw BadRequest(error);
}

}  // namespace

Job parse_api(const json& body, const ModelLimits& limits) {
  if (!body.is_object()) throw BadRequest("the body must be a JSON object");
  if (!has(body, "prompts")) throw BadRequest("prompts argument required");
  if (has(body, "max_len"))
    throw BadRequest("max_len is no longer used.  Replace with tokens_to_generate");
  if (has(body, "sentences"))
    throw BadRequest("sentences is no longer used.  Replace with prompts");
  const json& prompts = body["prompts"];
  if (!prompts.is_array()) throw BadRequest("prompts is not a list of strings");
  if (prompts.empty()) throw BadRequest("prompts is empty");
  if (prompts.size() > 128) throw BadRequest("Maximum number of prompts is 128");
  for (const json& p : prompts)
    if (!p.is_string()) throw BadRequest("prompts is not a list of strings");

  Job job;
  inference::GenerationRequest& q = job.settings;
  q.tokens_to_generate = 64;
  if (has(body, "tokens_to_generate")) {
    const json& t = body["tokens_to_generate"];
    if (!t.is_number_integer())
      throw BadRequest("tokens_to_generate must be an integer greater than 0");
    q.tokens_to_generate = t.get<std::int64_t>();
    if (q.tokens_to_generate < 0)
      throw BadRequest("tokens_to_generate must be an integer greater than or equal to 0");
  }
  q.logprobs = boolean(body, "logprobs", false);
  if (q.tokens_to_generate == 0 && !q.logprobs)
    throw BadRequest("tokens_to_generate=0 implies logprobs should be True");
  if (has(body, "temperature")) {
    const json& t = body["temperature"];
    if (!t.is_number() || t.is_boolean())
      throw BadRequest("temperature must be a positive number less than or equal to 100.0");
    q.sampling.temperature = t.get<double>();
    if (!(q.sampling.temperature > 0.0 && q.sampling.temperature <= 100.0))
      throw BadRequest("temperature must be a positive number less than or equal to 100.0");
  }
  if (has(body, "top_k")) {
    const json& k = body["top_k"];
    if (!k.is_number_integer())
      throw BadRequest(
          "top_k must be an integer equal to or greater than 0 and less than or equal to 1000");
    q.sampling.top_k = k.get<std::int64_t>();
    if (q.sampling.top_k < 0 || q.sampling.top_k > 1000)
      throw BadRequest("top_k must be equal to or greater than 0 and less than or equal to 1000");
  }
  if (has(body, "top_p")) {
    const json& p = body["top_p"];
    if (!p.is_number())
      throw BadRequest("top_p must be a positive float less than or equal to 1.0");
    q.sampling.top_p = p.get<double>();
    if (q.sampling.top_p > 0.0 && q.sampling.top_k > 0)
      throw BadRequest("cannot set both top-k and top-p samplings.");
    if (!(q.sampling.top_p >= 0.0 && q.sampling.top_p <= 1.0))
      throw BadRequest("top_p must be less than or equal to 1.0");
  }
  if (has(body, "top_p_decay")) {
    const json& d = body["top_p_decay"];
    if (!d.is_number())
      throw BadRequest("top_p_decay must be a positive float less than or equal to 1.0");
    if (q.sampling.top_p == 0.0) throw BadRequest("top_p_decay cannot be set without top_p");
    q.sampling.top_p_decay = d.get<double>();
    if (!(q.sampling.top_p_decay >= 0.0 && q.sampling.top_p_decay <= 1.0))
      throw BadRequest("top_p_decay must be less than or equal to 1.0");
  }
  if (has(body, "top_p_bound")) {
    const json& b = body["top_p_bound"];
    if (!b.is_number())
      throw BadRequest("top_p_bound must be a positive float less than or equal to top_p");
    if (q.sampling.top_p == 0.0) throw BadRequest("top_p_bound cannot be set without top_p");
    q.sampling.top_p_bound = b.get<double>();
    if (!(q.sampling.top_p_bound > 0.0 && q.sampling.top_p_bound <= q.sampling.top_p))
      throw BadRequest("top_p_bound must be greater than 0 and less than top_p");
  }
  const bool add_bos = boolean(body, "add_BOS", false);
  for (const json& p : prompts)
    if (p.get<std::string>().empty() && !add_bos)
      throw BadRequest("Empty prompts require add_BOS=true");
  q.stop_on_double_eol = boolean(body, "stop_on_double_eol", false);
  q.stop_on_eol = boolean(body, "stop_on_eol", false);
  q.prevent_newline_after_colon = boolean(body, "prevent_newline_after_colon", false);
  if (has(body, "random_seed")) {
    const json& s = body["random_seed"];
    if (!s.is_number_integer()) throw BadRequest("random_seed must be integer");
    if (s.get<std::int64_t>() < 0) throw BadRequest("random_seed must be a positive integer");
    q.seed = s.get<std::uint64_t>();
    job.seeded = true;
  }
  job.no_log = boolean(body, "no_log", false);
  if (has(body, "beam_width"))
    throw BadRequest("beam_width: beam search is not supported by this server");
  check_sampling(job, limits);
  for (const json& p : prompts) {
    job.prompt_texts.push_back(p.get<std::string>());
    job.prompts.push_back(tokenize(job.prompt_texts.back(), add_bos, limits));
  }
  check_lengths(job, limits, "Length of prompt + tokens_to_generate longer than allowed");
  return job;
}

namespace {

// OpenAI's sampling fields, shared by completions and chat completions.
void parse_openai_sampling(const json& body, Job& job) {
  inference::GenerationRequest& q = job.settings;
  if (has(body, "model")) {
    if (!body["model"].is_string()) throw BadRequest("model must be a string");
    job.model = body["model"].get<std::string>();
  }
  double temperature = 1.0;
  if (has(body, "temperature") && !body["temperature"].is_null()) {
    if (!body["temperature"].is_number() || body["temperature"].is_boolean())
      throw BadRequest("temperature must be a number");
    temperature = body["temperature"].get<double>();
  }
  double top_p = 1.0;
  if (has(body, "top_p") && !body["top_p"].is_null()) {
    if (!body["top_p"].is_number()) throw BadRequest("top_p must be a number");
    top_p = body["top_p"].get<double>();
  }
  std::int64_t top_k = 0;
  if (has(body, "top_k") && !body["top_k"].is_null()) {
    if (!body["top_k"].is_number_integer()) throw BadRequest("top_k must be an integer");
    top_k = std::max<std::int64_t>(0, body["top_k"].get<std::int64_t>());  // -1: none (vLLM)
  }
  // Temperature 0 is OpenAI's greedy (as Megatron's /completions maps it); top_p 1 keeps every
  // token, which is no top-p cut at all.
  if (temperature == 0.0) {
    q.sampling.top_k = 1;
  } else {
    if (temperature < 0.0) throw BadRequest("temperature must be positive, or 0 for greedy");
    q.sampling.temperature = temperature;
    q.sampling.top_k = top_k;
    q.sampling.top_p = top_p >= 1.0 ? 0.0 : top_p;
  }
  if (has(body, "seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) throw BadRequest("seed must be an integer");
    q.seed = static_cast<std::uint64_t>(body["seed"].get<std::int64_t>());
    job.seeded = true;
  }
  if (has(body, "stop") && !body["stop"].is_null()) {
    const json& stop = body["stop"];
    if (stop.is_string()) {
      q.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const json& s : stop) {
        if (!s.is_string()) throw BadRequest("stop must be a string or a list of strings");
        q.stop.push_back(s.get<std::string>());
      }
    } else {
      throw BadRequest("stop must be a string or a list of strings");
    }
  }
  for (const char* one : {"n", "best_of"}) {
    if (has(body, one) && !body[one].is_null() && body[one] != 1)
      throw BadRequest(std::string(one) + " > 1 not supported");
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    if (has(body, penalty) && !body[penalty].is_null() && body[penalty] != 0)
      throw BadRequest(std::string(penalty) + " is not supported");
  }
  job.stream = boolean(body, "stream", false);
  if (has(body, "stream_options") && body["stream_options"].is_object())
    job.include_usage = boolean(body["stream_options"], "include_usage", false);
}

std::int64_t max_tokens(const json& body, const char* key, std::int64_t fallback) {
  if (!has(body, key) || body[key].is_null()) return fallback;
  if (!body[key].is_number_integer() || body[key].get<std::int64_t>() < 0)
    throw BadRequest(std::string(key) + " must be an integer greater than or equal to 0");
  return body[key].get<std::int64_t>();
}

std::string context_message(const ModelLimits& limits) {
  return fmt::format(
      "This model's maximum context length is {} tokens; the prompt and max_tokens "
      "together ask for more",
      limits.seq_length);
}

}  // namespace

Job parse_completion(const json& body, const ModelLimits& limits, bool require_max_tokens) {
  if (!body.is_object()) throw BadRequest("the body must be a JSON object");
  Job job;
  parse_openai_sampling(body, job);
  if (require_max_tokens && !has(body, "max_tokens")) throw BadRequest("max_tokens is required");
  job.settings.tokens_to_generate = max_tokens(body, "max_tokens", 16);  // OpenAI's default
  job.echo = boolean(body, "echo", false);
  if (!job.echo && job.settings.tokens_to_generate == 0)
    throw BadRequest("echo=False not supported when tokens_to_generate=0");
  if (has(body, "logprobs") && !body["logprobs"].is_null()) {
    const json& lp = body["logprobs"];
    if (!lp.is_number_integer() || lp.get<std::int64_t>() < 0 || lp.get<std::int64_t>() > 10)
      throw BadRequest("logprobs must be an integer from 0 to 10");
    job.logprobs = lp.get<std::int64_t>();
    job.settings.logprobs = true;
    job.settings.top_logprobs = job.logprobs;
  }
  if (job.echo)
    job.settings.logprobs = job.settings.logprobs || job.settings.tokens_to_generate == 0;
  if (has(body, "suffix") && !body["suffix"].is_null()) throw BadRequest("suffix is not supported");
  if (!has(body, "prompt")) throw BadRequest("prompt is required");
  const json& prompt = body["prompt"];
  auto add_ids = [&](const json& ids) {
    std::vector<TokenId> tokens;
    for (const json& id : ids) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
          id.get<std::int64_t>() >= limits.vocab_size)
        throw BadRequest("prompt: token ids must be integers in [0, " +
                         std::to_string(limits.vocab_size) + ")");
      tokens.push_back(id.get<TokenId>());
    }
    if (tokens.empty()) throw BadRequest("prompt contains no items");
    job.prompt_texts.push_back(limits.tokenizer->decode(tokens));
    job.prompts.push_back(std::move(tokens));
  };
  auto add_text = [&](const std::string& text) {
    job.prompt_texts.push_back(text);
    // An empty prompt starts from the end-of-document id, as an unconditional sample.
    job.prompts.push_back(text.empty() ? std::vector<TokenId>{limits.tokenizer->eod()}
                                       : tokenize(text, false, limits));
  };
  if (prompt.is_string()) {
    add_text(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    add_ids(prompt);
  } else if (prompt.is_array() && !prompt.empty()) {
    for (const json& p : prompt) {
      if (p.is_string())
        add_text(p.get<std::string>());
      else if (p.is_array())
        add_ids(p);
      else
        throw BadRequest("prompt must be a string, a list of strings or of token id lists");
    }
  } else {
    throw BadRequest("prompt must be a string, a list of strings or of token id lists");
  }
  if (job.prompts.size() > 128) throw BadRequest("Maximum number of prompts is 128");
  check_sampling(job, limits);
  check_lengths(job, limits, context_message(limits).c_str());
  return job;
}

std::string pretraining_chat_prompt(const json& messages) {
  std::string text;
  for (const json& m : messages) {
    const std::string role = m["role"].get<std::string>();
    std::string content;
    if (m["content"].is_string()) {
      content = m["content"].get<std::string>();
    } else {  // a list of parts: the text ones
      for (const json& part : m["content"])
        if (part.value("type", "") == "text") content += part.value("text", "");
    }
    if (role == "system" && !content.empty()) text += content + "\n";
    if (role == "user") text += content + "\n";
    if (role == "assistant") text += content + "\n\n";
  }
  return text;
}

Job parse_chat(const json& body, const ModelLimits& limits) {
  if (!body.is_object()) throw BadRequest("the body must be a JSON object");
  Job job;
  parse_openai_sampling(body, job);
  if (!has(body, "messages") || !body["messages"].is_array() || body["messages"].empty())
    throw BadRequest("messages must be a non-empty list");
  for (const json& m : body["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw BadRequest("messages: each message needs a role");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer")
      throw BadRequest("messages: unknown role '" + role + "'");
    if (!m.contains("content") || !(m["content"].is_string() || m["content"].is_array()))
      throw BadRequest("messages: each message needs a content string or list of parts");
  }
  if (has(body, "logprobs") && body["logprobs"] == true) {
    job.logprobs = std::min<std::int64_t>(
        10, std::max<std::int64_t>(0, body.value("top_logprobs", std::int64_t{0})));
    job.settings.logprobs = true;
    job.settings.top_logprobs = job.logprobs;
  }
  json messages = body["messages"];
  for (json& m : messages)  // OpenAI's newer name for the system role
    if (m["role"] == "developer") m["role"] = "system";
  job.prompt_texts.push_back(pretraining_chat_prompt(messages));
  job.prompts.push_back(job.prompt_texts.back().empty()
                            ? std::vector<TokenId>{limits.tokenizer->eod()}
                            : tokenize(job.prompt_texts.back(), false, limits));
  const auto room = limits.seq_length - static_cast<std::int64_t>(job.prompts.back().size());
  const char* key = has(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  job.settings.tokens_to_generate = max_tokens(body, key, std::max<std::int64_t>(room, 0));
  if (job.settings.tokens_to_generate == 0)
    throw BadRequest(std::string(key) + " must be at least 1");
  check_sampling(job, limits);
  check_lengths(job, limits, context_message(limits).c_str());
  return job;
}

}  // namespace megatron::app::serve
