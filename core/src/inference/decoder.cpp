// The generation engine's two ways to the logits: the model's KV cache, and recomputing each
// whole sequence.
#include "megatron/inference/decoder.h"

#include <algorithm>

#include "megatron/error.h"

namespace megatron::inference {

namespace {

// Logits as f32 on the host (a bf16 model's too), the form sampling reads.
Tensor as_f32(const Tensor& t) {
  return t.dtype() == DType::f32 ? t.contiguous() : t.to(DType::f32);
}

class KvCacheDecoder : public Decoder {
 public:
  KvCacheDecoder(nn::LanguageModel& lm, std::int64_t max_tokens) : lm_(lm), max_(max_tokens) {
    if (!lm.can_decode()) throw Error("generation: the model cannot decode with a KV cache");
  }
  std::int64_t max_tokens() const override { return max_; }
  std::unique_ptr<Sequence> start() override {
    auto seq = std::make_unique<State>();
    seq->state = lm_.start_decoding(1, max_);
    return seq;
  }
  Tensor prefill(Sequence& seq, std::span<const TokenId> prompt, bool every_position) override {
    const std::vector<TokenId> ids(prompt.begin(), prompt.end());
    const Tensor logits =
        lm_.decode(static_cast<State&>(seq).state,
                   Tensor::from(ids, {1, static_cast<std::int64_t>(ids.size())}), every_position);
    return as_f32(logits.select(0, 0));
  }
  Tensor step(std::span<Sequence* const> sequences, std::span<const TokenId> tokens) override {
    std::vector<nn::LayerStackModel::DecodeState*> states;
    for (Sequence* seq : sequences)
      states.push_back(&static_cast<State*>(seq)->state);
    return as_f32(lm_.decode_ragged(states, tokens));
  }

 private:
  struct State : Sequence {
    nn::LayerStackModel::DecodeState state;
  };
  nn::LanguageModel& lm_;
  std::int64_t max_;
};

class RecomputingDecoder : public Decoder {
 public:
  RecomputingDecoder(nn::LanguageModel& lm, SampleSpec fields, std::int64_t seq_length, TokenId pad)
      : lm_(lm), fields_(std::move(fields)), seq_(seq_length), pad_(pad) {}
  std::int64_t max_tokens() const override { return seq_; }
  std::unique_ptr<Sequence> start() override { return std::make_unique<Ids>(); }
  Tensor prefill(Sequence& seq, std::span<const TokenId> prompt, bool every_position) override {
    auto& ids = static_cast<Ids&>(seq).ids;
    ids.insert(ids.end(), prompt.begin(), prompt.end());
    const Tensor all = logits(ids);  // (S, padded vocab)
    const auto n = static_cast<std::int64_t>(ids.size());
    if (every_position) return all.slice(0, 0, n).contiguous();
    return all.select(0, n - 1).contiguous();
  }
  Tensor step(std::span<Sequence* const> sequences, std::span<const TokenId> tokens) override {
    std::vector<Tensor> rows;
    for (std::size_t b = 0; b < sequences.size(); ++b) {
      auto& ids = static_cast<Ids*>(sequences[b])->ids;
      ids.push_back(tokens[b]);
      rows.push_back(logits(ids).select(0, static_cast<std::int64_t>(ids.size()) - 1).contiguous());
    }
    const std::int64_t v = rows.front().size(0);
    Tensor out = Tensor::empty({static_cast<std::int64_t>(rows.size()), v}, rows.front().dtype());
    for (std::size_t b = 0; b < rows.size(); ++b) {
      const auto* src = rows[b].data<float>();
      std::copy(src, src + v, out.data<float>() + static_cast<std::int64_t>(b) * v);
    }
    return out;
  }

 private:
  struct Ids : Sequence {
    std::vector<TokenId> ids;
  };
  // One micro-batch of `ids` padded to the model's length -> (S, padded vocab).
  Tensor logits(const std::vector<TokenId>& ids) {
    if (static_cast<std::int64_t>(ids.size()) > seq_) {
      throw Error("generation: " + std::to_string(ids.size()) + " tokens, the model reads " +
                  std::to_string(seq_));
    }
    Batch batch = Batch::allocate(fields_, 1);
    const SampleSlots slots = batch.sample(0);
    auto tokens = slots.i32("tokens");
    std::fill(tokens.begin(), tokens.end(), pad_);
    std::copy(ids.begin(), ids.end(), tokens.begin());
    auto labels = slots.i32("labels");
    std::fill(labels.begin(), labels.end(), pad_);
    auto mask = slots.get<float>("loss_mask");
    std::fill(mask.begin(), mask.end(), 0.0f);
    return as_f32(lm_.logits(batch).select(0, 0));
  }
  nn::LanguageModel& lm_;
  SampleSpec fields_;
  std::int64_t seq_;
  TokenId pad_;
};

}  // namespace

std::unique_ptr<Decoder> kv_cache_decoder(nn::LanguageModel& lm, std::int64_t max_tokens) {
  return std::make_unique<KvCacheDecoder>(lm, max_tokens);
}

std::unique_ptr<Decoder> recomputing_decoder(nn::LanguageModel& lm, SampleSpec fields,
                                             std::int64_t seq_length, TokenId pad) {
  return std::make_unique<RecomputingDecoder>(lm, std::move(fields), seq_length, pad);
}

}  // namespace megatron::inference
