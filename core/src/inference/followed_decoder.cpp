// Rank 0 leads the decoder calls, the other ranks follow them: one broadcast command each.
#include "megatron/inference/followed_decoder.h"

#include <map>
#include <vector>

#include "megatron/error.h"

namespace megatron::inference {

namespace {

enum class Op : std::int64_t { start = 1, prefill, step, release, stop };

// A command: its op, two arguments and a payload of ids (sequence ids and token ids).
struct Command {
  Op op = Op::stop;
  std::int64_t a = 0, b = 0;
  std::vector<std::int64_t> payload;
};

void send(Communicator& group, const Command& c) {
  std::int64_t head[4] = {static_cast<std::int64_t>(c.op), c.a, c.b,
                          static_cast<std::int64_t>(c.payload.size())};
  group.broadcast(head, 4, DType::i64, 0);
  if (!c.payload.empty())
    group.broadcast(const_cast<std::int64_t*>(c.payload.data()), c.payload.size(), DType::i64, 0);
}

Command receive(Communicator& group) {
  std::int64_t head[4] = {};
  group.broadcast(head, 4, DType::i64, 0);
  Command c{static_cast<Op>(head[0]), head[1], head[2], {}};
  c.payload.resize(static_cast<std::size_t>(head[3]));
  if (!c.payload.empty()) group.broadcast(c.payload.data(), c.payload.size(), DType::i64, 0);
  return c;
}

class LeadingDecoder : public Decoder {
 public:
  LeadingDecoder(std::unique_ptr<Decoder> inner, Communicator& group)
      : inner_(std::move(inner)), group_(group) {}
  ~LeadingDecoder() override {
    try {
      send(group_, {Op::stop, 0, 0, {}});
    } catch (const std::exception&) {  // a broken group: the followers fail on their own
    }
  }
  std::int64_t max_tokens() const override { return inner_->max_tokens(); }

  std::unique_ptr<Sequence> start() override {
    auto seq = std::make_unique<Led>(*this, next_id_++);
    send(group_, {Op::start, seq->id, 0, {}});
    seq->inner = inner_->start();
    return seq;
  }
  Tensor prefill(Sequence& seq, std::span<const TokenId> prompt, bool every_position) override {
    auto& led = static_cast<Led&>(seq);
    send(group_, {Op::prefill, led.id, every_position ? 1 : 0,
                  std::vector<std::int64_t>(prompt.begin(), prompt.end())});
    return inner_->prefill(*led.inner, prompt, every_position);
  }
  Tensor step(std::span<Sequence* const> sequences, std::span<const TokenId> tokens) override {
    Command c{Op::step, static_cast<std::int64_t>(sequences.size()), 0, {}};
    std::vector<Sequence*> inner;
    for (Sequence* s : sequences) {
      c.payload.push_back(static_cast<Led*>(s)->id);
      inner.push_back(static_cast<Led*>(s)->inner.get());
    }
    c.payload.insert(c.payload.end(), tokens.begin(), tokens.end());
    send(group_, c);
    return inner_->step(inner, tokens);
  }

 private:
  // A sequence whose end the followers hear of.
  struct Led : Sequence {
    Led(LeadingDecoder& d, std::int64_t i) : decoder(d), id(i) {}
    ~Led() override {
      try {
        send(decoder.group_, {Op::release, id, 0, {}});
      } catch (const std::exception&) {
      }
    }
    LeadingDecoder& decoder;
    std::int64_t id;
    std::unique_ptr<Sequence> inner;
  };
  std::unique_ptr<Decoder> inner_;
  Communicator& group_;
  std::int64_t next_id_ = 0;
};

}  // namespace

std::unique_ptr<Decoder> leading_decoder(std::unique_ptr<Decoder> inner, Communicator& group) {
  if (group.rank() != 0) throw Error("generation: only rank 0 of the model's ranks leads");
  return std::make_unique<LeadingDecoder>(std::move(inner), group);
}

void follow_decoder(Decoder& inner, Communicator& group) {
  std::map<std::int64_t, std::unique_ptr<Decoder::Sequence>> sequences;
  auto find = [&](std::int64_t id) -> Decoder::Sequence& {
    const auto it = sequences.find(id);
    if (it == sequences.end())
      throw Error("generation: rank 0 named sequence " + std::to_string(id) + ", unknown here");
    return *it->second;
  };
  for (;;) {
    const Command c = receive(group);
    switch (c.op) {
      case Op::start:
        sequences[c.a] = inner.start();
        break;
      case Op::prefill: {
        const std::vector<TokenId> prompt(c.payload.begin(), c.payload.end());
        (void)inner.prefill(find(c.a), prompt, c.b != 0);
        break;
      }
      case Op::step: {
        const auto n = static_cast<std::size_t>(c.a);
        std::vector<Decoder::Sequence*> seqs;
        for (std::size_t i = 0; i < n; ++i)
          seqs.push_back(&find(c.payload[i]));
        const std::vector<TokenId> tokens(c.payload.begin() + static_cast<std::ptrdiff_t>(n),
                                          c.payload.end());
        (void)inner.step(seqs, tokens);
        break;
      }
      case Op::release:
        sequences.erase(c.a);
        break;
      case Op::stop:
        return;
      default:
        throw Error("generation: unknown command " + std::to_string(static_cast<int>(c.op)) +
                    " from rank 0");
    }
  }
}

}  // namespace megatron::inference
