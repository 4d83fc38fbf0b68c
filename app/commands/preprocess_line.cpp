// One JSON line of `megatron-app preprocess` -> token ids (see preprocess_line.h).
#include "commands/preprocess_line.h"

#include <nlohmann/json.hpp>

#include "megatron/error.h"

namespace megatron::app {
namespace {

std::string json_type(const nlohmann::json& value) {
  return value.is_number() ? "a number"
                           : std::string(value.is_array() || value.is_object() ? "an " : "a ") +
                                 value.type_name();
}

// tools/preprocess_data.py hands punkt the text in slices of 1,000,000 characters (code points),
// so no sentence spans a slice boundary; these are the same slices. `text` is valid UTF-8 (the
// JSON parser checks it), so code points start at the bytes that are not 10xxxxxx.
std::vector<std::string_view> megatron_split_slices(std::string_view text) {
  constexpr std::size_t slice_code_points = 1'000'000;
  std::vector<std::string_view> slices;
  std::size_t start = 0, code_points = 0;
  for (std::size_t pos = 0; pos < text.size(); ++pos) {
    if ((static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) continue;
    if (code_points == slice_code_points) {
      slices.push_back(text.substr(start, pos - start));
      start = pos, code_points = 0;
    }
    ++code_points;
  }
  if (start < text.size()) slices.push_back(text.substr(start));
  return slices;
}

// The sentences of one key's value. A list of strings is a document already split into
// sentences, with or without --split-sentences: that is what Megatron's Encoder.encode does with
// a list, and its --split-sentences first pass writes such lists to <input>_ss.json, then encodes
// that file. (That first pass itself fails on a list: punkt needs a string. Here the list is
// simply not split again.) A string is one sentence, or split into sentences with
// --split-sentences (`splitter` not null). Returns the problem, empty if none.
std::string key_sentences(const std::string& key, const nlohmann::json& value,
                          const SentenceSplitter* splitter,
                          std::vector<std::string_view>& sentences) {
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    if (!splitter) {
      sentences.push_back(text);
      return {};
    }
    try {
      for (const std::string_view slice : megatron_split_slices(text)) {
        for (const std::string_view sentence : splitter->split(slice))
          sentences.push_back(sentence);
      }
    } catch (const Error& e) {
      return "\"" + key + "\": " + e.what();
    }
    return {};
  }
  if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      const auto& sentence = value[i];
      if (!sentence.is_string()) {
        return "\"" + key + "\"[" + std::to_string(i) + "] is " + json_type(sentence) +
               ", expected a string";
      }
      sentences.push_back(sentence.get_ref<const std::string&>());
    }
    return {};
  }
  return "\"" + key + "\" is " + json_type(value) + ", expected a string or a list of strings";
}

}  // namespace

// tools/preprocess_data.py's Encoder.encode: each sentence tokenized, empty ones dropped, EOD
// appended to the last sentence of a non-empty document.
EncodedLine encode_line(const std::string& line, const std::vector<std::string>& json_keys,
                        bool append_eod, const Tokenizer& tokenizer,
                        const SentenceSplitter* splitter) {
  EncodedLine result;
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number beyond double's range (found by the fuzzer: it
    // escaped as an exception that stopped the run). Python's json reads such a number as
    // infinity, so Megatron keeps a line nlohmann refuses; here it is skipped as a bad line.
    std::string reason = e.what();
    if (const auto end = reason.find("] ");
        reason.starts_with("[json.exception") && end != std::string::npos)
      reason.erase(0, end + 2);
    result.problem = "not valid JSON (" + reason + ")";
    return result;
  }
  if (!record.is_object()) {
    result.problem = "expected a JSON object, found " + json_type(record);
    return result;
  }
  for (const std::string& key : json_keys) {
    const auto value = record.find(key);
    if (value == record.end()) {
      result.problem = "no key \"" + key + "\"";
      return result;
    }
    std::vector<std::string_view> sentences;
    result.problem = key_sentences(key, *value, splitter, sentences);
    if (!result.problem.empty()) return result;
    KeyDocument document;
    for (const std::string_view sentence : sentences) {
      const std::size_t before = document.tokens.size();
      try {
        tokenizer.encode(sentence, document.tokens);
      } catch (const Error& e) {
        result.problem = "\"" + key + "\": " + e.what();
        return result;
      }
      if (document.tokens.size() > before)
        document.lengths.push_back(std::int64_t(document.tokens.size() - before));
    }
    if (!document.tokens.empty() && append_eod) {
      document.tokens.push_back(tokenizer.eod());
      ++document.lengths.back();
    }
    result.documents.push_back(std::move(document));
  }
  return result;
}

}  // namespace megatron::app
