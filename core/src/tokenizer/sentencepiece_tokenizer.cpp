// SentencePieceTokenizer: Megatron's two SentencePiece tokenizers over Debian's libsentencepiece.
#include "megatron/tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "megatron/error.h"
#include "tokenizer/utf8.h"

namespace megatron {

namespace {

constexpr std::string_view kSpecialTokensName = "SentencePieceTokenizer";
constexpr std::string_view kGptName = "GPTSentencePieceTokenizer";

std::string read_model_file(const std::filesystem::path& path) {
  const std::string where = "SentencePiece model file " + path.string();
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) throw Error(where + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(where + ": cannot open: " + std::strerror(errno));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) throw Error(where + ": read error");
  return std::move(contents).str();
}

}  // namespace

bool is_sentencepiece_tokenizer_type(std::string_view type) {
  return type == kSpecialTokensName || type == kGptName;
}

struct SentencePieceTokenizer::Model {
  std::string file;
  Kind kind = Kind::gpt;
  sentencepiece::SentencePieceProcessor processor;
  int pieces = 0;  // the model's piece count; ids [pieces, vocab size) are appended tokens
  std::vector<std::string> appended;
  // Megatron's _special_tokens in its (insertion) order, which decides ties in encode().
  std::vector<std::pair<std::string, TokenId>> specials;
  std::unordered_map<TokenId, std::string> special_of_id;  // Megatron's _inv_special_tokens
  std::optional<TokenId> cls, sep, eod, mask, pad, bos, eos;
  std::vector<TokenId> extra_ids;

  std::size_t vocab_size() const { return std::size_t(pieces) + appended.size(); }

  // sentencepiece's pad_id()/bos_id()/eos_id() are -1 when the model has no such piece.
  std::optional<TokenId> model_id(int id) const {
    return id >= 0 && id < pieces ? std::optional<TokenId>(id) : std::nullopt;
  }

  void encode_plain(std::string_view text, std::vector<TokenId>& ids) const {
    if (text.empty()) return;
    std::vector<int> out;
    const auto status = processor.Encode(text, &out);
    if (!status.ok()) {
      throw Error(std::string(kind == Kind::gpt ? kGptName : kSpecialTokensName) +
                  ": cannot encode text: " + status.ToString());
    }
    ids.insert(ids.end(), out.begin(), out.end());
  }

  std::string decode_plain(std::span<const TokenId> ids) const {
    std::string text;
    if (ids.empty()) return text;
    const auto status = processor.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!status.ok()) {
      throw Error(std::string(kind == Kind::gpt ? kGptName : kSpecialTokensName) +
                  ": cannot decode: " + status.ToString());
    }
    return text;
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::filesystem::path& model_file, Kind kind,
                                               std::int64_t vocab_extra_ids) {
  auto model = std::make_unique<Model>();
  model->file = model_file.string();
  model->kind = kind;
  const std::string where = "SentencePiece model file " + model->file;
  if (vocab_extra_ids < 0) {
    throw Error("vocab_extra_ids must not be negative, got " + std::to_string(vocab_extra_ids));
  }
  if (kind == Kind::gpt && vocab_extra_ids != 0) {
    throw Error("GPTSentencePieceTokenizer takes no extra ids (Megatron's class has none)");
  }
  // Read here rather than by Load(path), so a missing file gets the same message as the other
  // tokenizers' files instead of the library's status text.
  const std::string bytes = read_model_file(model_file);
  const auto status = model->processor.LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    // The library reports bytes protobuf cannot parse by the failing source line only.
    const std::string why =
        std::string_view(status.message()).find("ParseFromArray") != std::string_view::npos
            ? "the bytes do not parse as its protobuf ModelProto"
            : status.message();
    throw Error(where + ": not a SentencePiece model (" + why + ")");
  }
  model->pieces = model->processor.GetPieceSize();
  // An empty file parses as an empty protobuf message; a model needs pieces to encode anything.
  if (model->pieces <= 0) throw Error(where + ": not a SentencePiece model (it has no pieces)");

  if (kind == Kind::gpt) {
    // _GPTSentencePieceTokenizer._initalize: the model's ids only; eod is the eos id.
    model->pad = model->model_id(model->processor.pad_id());
    model->bos = model->model_id(model->processor.bos_id());
    model->eos = model->model_id(model->processor.eos_id());
    // Megatron would append eod = -1 after every document; refuse that model up front.
    if (!model->eos) {
      throw Error(where + ": the model has no eos piece (eos_id is -1), which " +
                  std::string(kGptName) + " uses as its end-of-document token");
    }
    model->eod = model->eos;
    model_ = std::move(model);
    return;
  }

  // _SentencePieceTokenizer._populate_vocab and _initalize.
  std::unordered_map<std::string, TokenId> vocab;
  vocab.reserve(std::size_t(model->pieces) + 16);
  for (int id = 0; id < model->pieces; ++id)
    vocab[model->processor.IdToPiece(id)] = id;
  Model& m = *model;
  auto add_special = [&](const std::string& token) {
    auto [it, added] = vocab.try_emplace(token, static_cast<TokenId>(m.vocab_size()));
    if (added) m.appended.push_back(token);
    // A dict keeps a re-assigned key where it was first inserted: the order of first addition.
    bool known = false;
    for (const auto& [special, id] : m.specials)
      known = known || special == token;
    if (!known) m.specials.emplace_back(token, it->second);
    m.special_of_id[it->second] = token;
    return it->second;
  };
  // Python's id_to_piece raises IndexError for -1 (no such piece), and Megatron then uses its own
  // spelling.
  auto piece_or = [&](int id, const char* fallback) {
    return m.model_id(id) ? m.processor.IdToPiece(id) : std::string(fallback);
  };
  m.cls = add_special("<CLS>");
  m.sep = add_special("<SEP>");
  m.eod = add_special("<EOD>");
  m.mask = add_special("<MASK>");
  m.pad = add_special(piece_or(m.processor.pad_id(), "<PAD>"));
  m.bos = add_special(piece_or(m.processor.bos_id(), "<BOS>"));
  m.eos = add_special(piece_or(m.processor.eos_id(), "<EOS>"));
  for (std::int64_t i = 0; i < vocab_extra_ids; ++i)
    m.extra_ids.push_back(add_special("<extra_id_" + std::to_string(i) + ">"));
  model_ = std::move(model);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::string_view SentencePieceTokenizer::type_name() const {
  return model_->kind == Kind::gpt ? kGptName : kSpecialTokensName;
}

std::size_t SentencePieceTokenizer::vocab_size() const {
  return model_->vocab_size();
}

std::size_t SentencePieceTokenizer::model_piece_count() const {
  return std::size_t(model_->pieces);
}

TokenId SentencePieceTokenizer::eod() const {
  return *model_->eod;
}

void SentencePieceTokenizer::encode(std::string_view text, std::vector<TokenId>& ids) const {
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t at = pos;
    if (!utf8::next_code_point(text, pos)) {
      throw Error("text is not valid UTF-8 at byte " + std::to_string(at));
    }
  }
  if (model_->kind == Kind::gpt) {
    model_->encode_plain(text, ids);
    return;
  }
  // _SentencePieceTokenizer.tokenize (from NeMo): repeatedly take the special token whose next
  // occurrence comes first, encode the text before it, emit its id. Byte offsets order the
  // occurrences as Python's character offsets do: valid UTF-8 only matches at character starts.
  // Each token's next occurrence is kept until the scan passes it, so the text is searched once
  // per token and occurrence rather than once per token and special token found.
  const auto& specials = model_->specials;
  std::vector<std::size_t> next(specials.size(), 0);
  std::vector<bool> searched(specials.size(), false);
  std::size_t begin = 0;
  for (;;) {
    std::size_t best = specials.size(), best_at = std::string_view::npos;
    for (std::size_t k = 0; k < specials.size(); ++k) {
      if (!searched[k] || (next[k] != std::string_view::npos && next[k] < begin)) {
        next[k] = text.find(specials[k].first, begin);
        searched[k] = true;
      }
      // Strictly earlier only: at the same offset the token added first wins (Python's min()
      // returns the first minimal key in dict order).
      if (next[k] != std::string_view::npos && next[k] < best_at) {
        best = k;
        best_at = next[k];
      }
    }
    if (best == specials.size()) break;
    model_->encode_plain(text.substr(begin, best_at - begin), ids);
    ids.push_back(specials[best].second);
    begin = best_at + specials[best].first.size();
  }
  model_->encode_plain(text.substr(begin), ids);
}

std::string SentencePieceTokenizer::decode(std::span<const TokenId> ids) const {
  for (const TokenId id : ids) {
    if (id < 0 || std::size_t(id) >= vocab_size()) {
      throw Error(std::string(type_name()) + ": id " + std::to_string(id) +
                  " is outside the vocabulary (0.." + std::to_string(vocab_size() - 1) + ")");
    }
  }
  if (model_->kind == Kind::gpt) return model_->decode_plain(ids);
  // _SentencePieceTokenizer.detokenize: every special id (the model's own pad/bos/eos included)
  // is written as " <token> " between the decoded runs of the other ids.
  std::string text;
  std::size_t last = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto special = model_->special_of_id.find(ids[i]);
    if (special == model_->special_of_id.end()) continue;
    text += model_->decode_plain(ids.subspan(last, i - last));
    text += " ";
    text += special->second;
    text += " ";
    last = i + 1;
  }
  text += model_->decode_plain(ids.subspan(last));
  return text;
}

std::string SentencePieceTokenizer::id_to_token(TokenId id) const {
  if (id >= 0 && id < model_->pieces) return model_->processor.IdToPiece(id);
  if (id >= 0 && std::size_t(id) < vocab_size()) {
    return model_->appended[std::size_t(id) - std::size_t(model_->pieces)];
  }
  throw Error(std::string(type_name()) + ": id " + std::to_string(id) +
              " is outside the vocabulary (0.." + std::to_string(vocab_size() - 1) + ")");
}

std::optional<TokenId> SentencePieceTokenizer::special_token(SpecialToken role) const {
  switch (role) {
    case SpecialToken::cls:
      return model_->cls;
    case SpecialToken::sep:
      return model_->sep;
    case SpecialToken::pad:
      return model_->pad;
    case SpecialToken::mask:
      return model_->mask;
    case SpecialToken::bos:
      return model_->bos;
    case SpecialToken::eos:
      return model_->eos;
  }
  return std::nullopt;
}

std::vector<TokenId> SentencePieceTokenizer::additional_special_token_ids() const {
  return model_->extra_ids;
}

}  // namespace megatron
