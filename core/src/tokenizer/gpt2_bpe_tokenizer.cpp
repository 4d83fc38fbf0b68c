// GPT-2 BPE encoding (pre-tokenize, merge by rank, per-thread piece cache) and decoding.
#include "megatron/tokenizer/gpt2_bpe_tokenizer.h"

#include <atomic>
#include <limits>

#include "megatron/error.h"
#include "tokenizer/gpt2_bpe_tables.h"
#include "tokenizer/gpt2_byte_map.h"
#include "tokenizer/utf8.h"

namespace megatron {

namespace {

std::atomic<std::uint64_t> next_instance_id{1};

// Natural text repeats a few tens of thousands of pieces; past this many entries the cache is
// emptied and refilled, which bounds its memory (~10 MB) on any input.
constexpr std::size_t kMaxCachedPieces = 1 << 17;
// Long pieces (whitespace runs, symbol art) rarely repeat; caching them would only use memory.
constexpr std::size_t kMaxCachedPieceBytes = 64;

struct CachedIds {
  std::uint32_t offset;  // into ThreadCache::ids
  std::uint32_t length;
};

// Per thread, so encode() needs no lock; it belongs to one tokenizer at a time.
struct ThreadCache {
  std::uint64_t owner = 0;
  std::unordered_map<std::string, CachedIds, gpt2::StringHash, std::equal_to<>> pieces;
  std::vector<TokenId> ids;
  std::vector<TokenId> symbols;  // scratch for bpe()

  void reset(std::uint64_t new_owner) {
    owner = new_owner;
    pieces.clear();
    ids.clear();
  }
};

// encoder.py's loop: merge every occurrence of the lowest-ranked adjacent pair, left to right,
// until no adjacent pair has a rank.
void bpe(const gpt2::BpeTables& tables, std::string_view piece, std::vector<TokenId>& symbols) {
  symbols.clear();
  for (const char c : piece)
    symbols.push_back(tables.byte_token[static_cast<unsigned char>(c)]);
  while (symbols.size() > 1) {
    std::uint32_t best_rank = std::numeric_limits<std::uint32_t>::max();
    TokenId left = 0, right = 0, merged = 0;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = tables.merges.find(gpt2::pair_key(symbols[i], symbols[i + 1]));
      if (it != tables.merges.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        left = symbols[i], right = symbols[i + 1], merged = it->second.merged;
      }
    }
    if (best_rank == std::numeric_limits<std::uint32_t>::max()) break;
    std::size_t out = 0;
    for (std::size_t i = 0; i < symbols.size();) {
      if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
        symbols[out++] = merged;
        i += 2;
      } else {
        symbols[out++] = symbols[i++];
      }
    }
    symbols.resize(out);
  }
}

}  // namespace

Gpt2BpeTokenizer::Gpt2BpeTokenizer(const std::filesystem::path& vocab_file,
                                   const std::filesystem::path& merge_file)
    : instance_id_(next_instance_id.fetch_add(1)) {
  auto tables = std::make_unique<gpt2::BpeTables>();
  gpt2::load_vocab(vocab_file, *tables);
  gpt2::load_merges(merge_file, *tables);
  tables_ = std::move(tables);
}

Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;

std::size_t Gpt2BpeTokenizer::vocab_size() const {
  return tables_->id_to_bytes.size();
}

TokenId Gpt2BpeTokenizer::eod() const {
  return tables_->eod;
}

void Gpt2BpeTokenizer::encode(std::string_view text, std::vector<TokenId>& ids) const {
  thread_local ThreadCache cache;
  if (cache.owner != instance_id_) cache.reset(instance_id_);
  const gpt2::BpeTables& tables = *tables_;
  tables.pretokenizer.split(text, [&](std::string_view piece) {
    if (piece.size() > kMaxCachedPieceBytes) {
      bpe(tables, piece, cache.symbols);
      ids.insert(ids.end(), cache.symbols.begin(), cache.symbols.end());
      return;
    }
    if (const auto hit = cache.pieces.find(piece); hit != cache.pieces.end()) {
      const auto first = cache.ids.begin() + hit->second.offset;
      ids.insert(ids.end(), first, first + hit->second.length);
      return;
    }
    bpe(tables, piece, cache.symbols);
    ids.insert(ids.end(), cache.symbols.begin(), cache.symbols.end());
    if (cache.pieces.size() >= kMaxCachedPieces) cache.reset(instance_id_);
    cache.pieces.emplace(
        piece, CachedIds{std::uint32_t(cache.ids.size()), std::uint32_t(cache.symbols.size())});
    cache.ids.insert(cache.ids.end(), cache.symbols.begin(), cache.symbols.end());
  });
}

std::string Gpt2BpeTokenizer::decode(std::span<const TokenId> ids) const {
  std::string bytes;
  for (const TokenId id : ids)
    bytes += token_bytes(id);
  return utf8::replace_invalid(bytes);
}

std::string_view Gpt2BpeTokenizer::token_bytes(TokenId id) const {
  if (id < 0 || std::size_t(id) >= tables_->id_to_bytes.size()) {
    throw Error("GPT2BPETokenizer: id " + std::to_string(id) + " is outside the vocabulary (0.." +
                std::to_string(tables_->id_to_bytes.size() - 1) + ")");
  }
  return tables_->id_to_bytes[std::size_t(id)];
}

std::string Gpt2BpeTokenizer::id_to_token(TokenId id) const {
  static constexpr auto spelling_of = gpt2::byte_to_code_point();
  std::string token;
  for (const char byte : token_bytes(id))
    utf8::append(token, spelling_of[static_cast<unsigned char>(byte)]);
  return token;
}

std::optional<TokenId> Gpt2BpeTokenizer::token_to_id(std::string_view token) const {
  std::string bytes;
  std::size_t pos = 0;
  while (pos < token.size()) {
    const auto code_point = utf8::next_code_point(token, pos);
    if (!code_point) return std::nullopt;
    const auto byte = gpt2::code_point_to_byte(*code_point);
    if (!byte) return std::nullopt;
    bytes.push_back(static_cast<char>(*byte));
  }
  const auto it = tables_->bytes_to_id.find(bytes);
  if (it == tables_->bytes_to_id.end()) return std::nullopt;
  return it->second;
}

}  // namespace megatron
