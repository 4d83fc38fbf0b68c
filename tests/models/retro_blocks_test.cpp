// Retro's blocks in fp64. Chunked cross-attention: each chunk of the shifted sequence (from
// pad = (S - 1) % m, the last chunk zero-padded) is Megatron's CrossAttention of those tokens
// over its own column of the encoder output, written back to the positions it came from, with
// nothing before pad. Encoder cross-attention: each neighbour column (b l + c) k + j is the
// CrossAttention of its tokens over chunk b l + c of the context. For both, the gradients of
// every parameter, of x and of the (accumulated) named input against central differences, and a
// wrongly shaped input refused. The retriever (the first Retro layer's cross-attention, which runs
// the encoder): Megatron's chunked_output layout, and the gradients through the encoder, including
// the later layers' share of the encoder output's gradient.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "chunked_cross_attention.h"
#include "common/model_checks.h"
#include "encoder_cross_attention.h"
#include "megatron/error.h"
#include "retriever_cross_attention.h"

namespace megatron {
namespace {

constexpr std::int64_t kB = 2, kH = 8, kHeads = 2, kHn = 3, kM = 3, kK = 2, kR = 2;

Backend& cpu() {
  return backend_for(Device::cpu());
}
using test::random_tensor;

nn::TransformerConfig config() {
  nn::TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = kH;
  c.num_attention_heads = kHeads;
  c.num_query_groups = kHeads;
  c.kv_channels = kHn;
  c.ffn_hidden_size = 12;
  c.attention_dropout = 0.25f;
  c.init_method_std = 0.4f;
  return c;
}

struct Fixture {
  ParameterSet params;
  retro::ChunkedCrossAttention cca{{kM, kK, kR}};
  explicit Fixture() {
    nn::ParamFactory f{params, Device::cpu(), DType::f64};
    cca.declare(f, "decoder.layers.5.cross_attention", config());
    unsigned seed = 100;
    for (auto& p : params) {
      cpu().copy(random_tensor(p->value.shape(), seed++, 0.4), p->value);
      cpu().fill(p->grad, 0.0);
    }
  }
  Tensor forward(const nn::LayerContext& ctx, const Tensor& x, const Tensor& memory,
                 std::unique_ptr<nn::Mixer::Saved>* keep = nullptr) {
    nn::LayerInputs inputs;
    inputs.set(retro::kEncoderOutput, memory);
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    auto saved = cca.forward(ctx, x, inputs, 4, y);
    if (keep) *keep = std::move(saved);
    return y;
  }
};

double at(const Tensor& t, std::int64_t s, std::int64_t b, std::int64_t e) {
  return t.data<double>()[(s * t.size(1) + b) * t.size(2) + e];
}

using test::dot;
using test::expect_input_gradient;

TEST(RetroChunkedCrossAttention, ParametersAreMegatronsCrossAttentionUnderAttn) {
  Fixture f;
  std::vector<std::string> names;
  for (auto& p : f.params)
    names.push_back(p->name);
  const std::string a = "decoder.layers.5.cross_attention.attn.";
  EXPECT_EQ(names, (std::vector<std::string>{a + "linear_q.weight", a + "linear_q.bias",
                                             a + "linear_kv.weight", a + "linear_kv.bias",
                                             a + "linear_proj.weight", a + "linear_proj.bias"}));
}

// For S = 8 (pad 1, the last chunk one token short) and S = 6 (pad 2 = m - 1): chunk c of sample
// b holds tokens pad + c m .. pad + c m + m - 1 and is the plain cross-attention of those tokens
// over encoder column b l + c; positions before pad get zero.
TEST(RetroChunkedCrossAttention, EachChunkIsCrossAttentionOfItsShiftedTokens) {
  for (const std::int64_t seq : {8, 6}) {
    Fixture f;
    const std::int64_t l = (seq + kM - 1) / kM, pad = (seq - 1) % kM;
    const Tensor x = random_tensor({seq, kB, kH}, 1);
    const Tensor memory = random_tensor({kR * kK, kB * l, kH}, 2);
    const nn::LayerContext eval{cpu(), false};
    const Tensor y = f.forward(eval, x, memory);
    for (std::int64_t b = 0; b < kB; ++b) {
      for (std::int64_t s = 0; s < pad; ++s)
        for (std::int64_t e = 0; e < kH; ++e)
          EXPECT_EQ(at(y, s, b, e), 0.0) << "seq " << seq << " position " << s;
      for (std::int64_t c = 0; c < l; ++c) {
        Tensor q = Tensor::zeros({kM, 1, kH}, DType::f64);
        Tensor mem = Tensor::empty({kR * kK, 1, kH}, DType::f64);
        for (std::int64_t i = 0; i < kM; ++i)
          for (std::int64_t e = 0; e < kH; ++e)
            if (pad + c * kM + i < seq)
              q.data<double>()[i * kH + e] = at(x, pad + c * kM + i, b, e);
        for (std::int64_t j = 0; j < kR * kK; ++j)
          for (std::int64_t e = 0; e < kH; ++e)
            mem.data<double>()[j * kH + e] = at(memory, j, b * l + c, e);
        Tensor want = Tensor::empty({kM, 1, kH}, DType::f64);
        nn::CrossAttention::Saved saved;
        f.cca.attention.forward(eval, q, mem, {}, 4, want, saved);
        for (std::int64_t i = 0; i < kM && pad + c * kM + i < seq; ++i)
          for (std::int64_t e = 0; e < kH; ++e)
            EXPECT_NEAR(at(y, pad + c * kM + i, b, e), want.data<double>()[i * kH + e], 1e-13)
                << "seq " << seq << " sample " << b << " chunk " << c << " row " << i;
      }
    }
  }
}

// With attention dropout on (a fixed mask): every parameter, dx (zero before pad), and the
// encoder output's gradient added to what the accumulator held.
TEST(RetroChunkedCrossAttention, GradientsMatchFiniteDifferences) {
  constexpr std::int64_t kSeq = 8, kL = 3;
  Fixture f;
  const nn::LayerContext ctx{cpu(), true, 7, 1};
  Tensor x = random_tensor({kSeq, kB, kH}, 1), memory = random_tensor({kR * kK, kB * kL, kH}, 2);
  const Tensor w = random_tensor({kSeq, kB, kH}, 3);
  const auto objective = [&] { return dot(f.forward(ctx, x, memory), w); };
  std::unique_ptr<nn::Mixer::Saved> saved;
  f.forward(ctx, x, memory, &saved);
  nn::LayerInputs inputs;
  inputs.set(retro::kEncoderOutput, memory);
  const Tensor held = random_tensor(memory.shape(), 9);
  Tensor dmemory = random_tensor(memory.shape(), 9);
  inputs.collect_gradient(retro::kEncoderOutput, dmemory);
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  f.cca.backward(ctx, x, w, inputs, 4, *saved, dx);

  test::expect_gradients_match_finite_differences(f.params, objective);
  expect_input_gradient(x, dx, objective, "dx", 2);
  expect_input_gradient(memory, dmemory, objective, "dmemory", 2, held);
  for (std::int64_t b = 0; b < kB; ++b)  // position 0 (before pad 1) reaches nothing
    for (std::int64_t e = 0; e < kH; ++e)
      EXPECT_EQ(at(dx, 0, b, e), 0.0);
}

TEST(RetroChunkedCrossAttention, RefusesAnEncoderOutputOfAnotherShape) {
  Fixture f;
  const Tensor x = random_tensor({8, kB, kH}, 1);
  try {
    f.forward(nn::LayerContext{cpu(), false}, x, random_tensor({kR * kK, kB * 2, kH}, 2));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "Retro's chunked cross-attention: the encoder output is [4, 4, 8], expected (4, 6, "
              "8) for 2 samples of 8 tokens");
  }
}

// ---- encoder cross-attention ---------------------------------------------------------------
constexpr std::int64_t kChunks = 3;  // B l: the chunks of the batch, columns of the context

struct EncoderFixture {
  ParameterSet params;
  retro::EncoderCrossAttention eca{kK};
  EncoderFixture() {
    nn::ParamFactory f{params, Device::cpu(), DType::f64};
    eca.declare(f, "decoder.layers.5.cross_attention.encoder.layers.0.cross_attention", config());
    unsigned seed = 200;
    for (auto& p : params) {
      cpu().copy(random_tensor(p->value.shape(), seed++, 0.4), p->value);
      cpu().fill(p->grad, 0.0);
    }
  }
  Tensor forward(const nn::LayerContext& ctx, const Tensor& x, const Tensor& context,
                 std::unique_ptr<nn::Mixer::Saved>* keep = nullptr) {
    nn::LayerInputs inputs;
    inputs.set(retro::kChunkContext, context);
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    auto saved = eca.forward(ctx, x, inputs, 2, y);
    if (keep) *keep = std::move(saved);
    return y;
  }
};

TEST(RetroEncoderCrossAttention, EachNeighbourAttendsToItsChunk) {
  EncoderFixture f;
  const Tensor x = random_tensor({kR, kChunks * kK, kH}, 1);
  const Tensor context = random_tensor({kM, kChunks, kH}, 2);
  const nn::LayerContext eval{cpu(), false};
  const Tensor y = f.forward(eval, x, context);
  for (std::int64_t c = 0; c < kChunks; ++c) {
    for (std::int64_t j = 0; j < kK; ++j) {
      const std::int64_t col = c * kK + j;
      Tensor q = Tensor::empty({kR, 1, kH}, DType::f64),
             mem = Tensor::empty({kM, 1, kH}, DType::f64);
      for (std::int64_t i = 0; i < kR; ++i)
        for (std::int64_t e = 0; e < kH; ++e)
          q.data<double>()[i * kH + e] = at(x, i, col, e);
      for (std::int64_t i = 0; i < kM; ++i)
        for (std::int64_t e = 0; e < kH; ++e)
          mem.data<double>()[i * kH + e] = at(context, i, c, e);
      Tensor want = Tensor::empty({kR, 1, kH}, DType::f64);
      nn::CrossAttention::Saved saved;
      f.eca.attention.forward(eval, q, mem, {}, 2, want, saved);
      for (std::int64_t i = 0; i < kR; ++i)
        for (std::int64_t e = 0; e < kH; ++e)
          EXPECT_NEAR(at(y, i, col, e), want.data<double>()[i * kH + e], 1e-13)
              << "chunk " << c << " neighbour " << j;
    }
  }
}

TEST(RetroEncoderCrossAttention, GradientsMatchFiniteDifferences) {
  EncoderFixture f;
  const nn::LayerContext ctx{cpu(), true, 7, 1};
  Tensor x = random_tensor({kR, kChunks * kK, kH}, 1),
         context = random_tensor({kM, kChunks, kH}, 2);
  const Tensor w = random_tensor(x.shape(), 3);
  const auto objective = [&] { return dot(f.forward(ctx, x, context), w); };
  std::unique_ptr<nn::Mixer::Saved> saved;
  f.forward(ctx, x, context, &saved);
  nn::LayerInputs inputs;
  inputs.set(retro::kChunkContext, context);
  const Tensor held = random_tensor(context.shape(), 9);
  Tensor dcontext = random_tensor(context.shape(), 9);
  inputs.collect_gradient(retro::kChunkContext, dcontext);
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  f.eca.backward(ctx, x, w, inputs, 2, *saved, dx);

  test::expect_gradients_match_finite_differences(f.params, objective);
  expect_input_gradient(x, dx, objective, "dx", 2);
  expect_input_gradient(context, dcontext, objective, "dcontext", 2, held);
}

TEST(RetroEncoderCrossAttention, RefusesAContextOfAnotherShape) {
  EncoderFixture f;
  const Tensor x = random_tensor({kR, kChunks * kK, kH}, 1);
  try {
    f.forward(nn::LayerContext{cpu(), false}, x, random_tensor({kM, kChunks + 1, kH}, 2));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "Retro's encoder cross-attention: the chunk context is [3, 4, 8], expected (chunk "
              "length, 3, 8) for 6 neighbour columns of 2 neighbours");
  }
}

// ---- the retriever: the first Retro layer's cross-attention with the encoder ------------------
// Megatron's chunked_output, literally: pad the first S % m tokens to a chunk, concatenate the
// rest, view (l, m, B, h), permute to (m, B, l, h).
TEST(RetroRetriever, ChunkContextIsMegatronsChunkedOutput) {
  for (const std::int64_t seq : {8, 6, 3, 2}) {
    const std::int64_t l = (seq + kM - 1) / kM, first = seq % kM;
    std::vector<std::int64_t> cat;  // token per row of the concatenation, -1 = padding
    if (first > 0) {
      for (std::int64_t s = 0; s < first; ++s)
        cat.push_back(s);
      for (std::int64_t s = first; s < kM; ++s)
        cat.push_back(-1);
    }
    for (std::int64_t s = first; s < seq; ++s)
      cat.push_back(s);
    ASSERT_EQ(static_cast<std::int64_t>(cat.size()), l * kM);
    const std::vector<std::int32_t> ids =
        retro::RetrieverCrossAttention::chunk_context_rows(seq, kB, kM);
    for (std::int64_t i = 0; i < kM; ++i)
      for (std::int64_t b = 0; b < kB; ++b)
        for (std::int64_t c = 0; c < l; ++c) {
          const std::int64_t s = cat[static_cast<std::size_t>(c * kM + i)];
          EXPECT_EQ(ids[static_cast<std::size_t>(i * kB * l + b * l + c)],
                    s < 0 ? seq * kB : s * kB + b)
              << "seq " << seq << " row " << i << " sample " << b << " chunk " << c;
        }
  }
}

// Encoder of 2 layers with its own dropouts on: every parameter (the chunked cross-attention's and
// both encoder layers'), x and the neighbour embeddings against central differences of
// y . w + output . w2, where w2 stands for the later Retro layers' gradient of the encoder output
// (already in its accumulator when this layer's backward runs).
TEST(RetroRetriever, GradientsThroughTheEncoderMatchFiniteDifferences) {
  constexpr std::int64_t kSeq = 8, kL = 3;
  ParameterSet params;
  retro::RetrieverCrossAttention block({kM, kK, kR}, {2, 0.2f, 0.15f});
  nn::ParamFactory factory{params, Device::cpu(), DType::f64};
  block.declare(factory, "decoder.layers.5.cross_attention", config());
  unsigned seed = 300;
  for (auto& p : params) {
    cpu().copy(random_tensor(p->value.shape(), seed++, 0.4), p->value);
    cpu().fill(p->grad, 0.0);
  }
  EXPECT_EQ(params[0].name, "decoder.layers.5.cross_attention.attn.linear_q.weight");
  EXPECT_NE(params.find("decoder.layers.5.cross_attention.encoder.layers.0.cross_attention.attn."
                        "linear_kv.weight"),
            nullptr);
  EXPECT_NE(params.find("decoder.layers.5.cross_attention.encoder.layers.1.mlp.linear_fc2.weight"),
            nullptr);
  // The chunked cross-attention's site; layer 0: attention + hidden for self-attention and
  // cross-attention, hidden for the MLP; layer 1: self-attention's two, the MLP's one.
  EXPECT_EQ(block.dropout_sites(), 1u + 5u + 3u);

  const nn::LayerContext ctx{cpu(), true, 7, 1};
  Tensor x = random_tensor({kSeq, kB, kH}, 1);
  Tensor neighbors = random_tensor({kR, kB * kL * kK, kH}, 2);
  const Tensor w = random_tensor({kSeq, kB, kH}, 3), w2 = random_tensor({kR * kK, kB * kL, kH}, 4);
  const auto run = [&](Tensor& output, std::unique_ptr<nn::Mixer::Saved>* keep) {
    nn::LayerInputs inputs;
    inputs.set(retro::kNeighborEmbeddings, neighbors);
    inputs.set(retro::kEncoderOutput, output);
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    auto saved = block.forward(ctx, x, inputs, 4, y);
    if (keep) *keep = std::move(saved);
    return y;
  };
  const auto objective = [&] {
    Tensor output = Tensor::zeros({kR * kK, kB * kL, kH}, DType::f64);
    const double y_term = dot(run(output, nullptr), w);
    return y_term + dot(output, w2);
  };
  Tensor output = Tensor::zeros({kR * kK, kB * kL, kH}, DType::f64);
  std::unique_ptr<nn::Mixer::Saved> saved;
  run(output, &saved);
  nn::LayerInputs inputs;
  inputs.set(retro::kNeighborEmbeddings, neighbors);
  inputs.set(retro::kEncoderOutput, output);
  Tensor doutput = Tensor::empty(w2.shape(), DType::f64);
  cpu().copy(w2, doutput);  // the later layers' share
  Tensor dneighbors = Tensor::zeros(neighbors.shape(), DType::f64);
  inputs.collect_gradient(retro::kEncoderOutput, doutput);
  inputs.collect_gradient(retro::kNeighborEmbeddings, dneighbors);
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  block.backward(ctx, x, w, inputs, 4, *saved, dx);

  test::expect_gradients_match_finite_differences(params, objective, 2);
  expect_input_gradient(x, dx, objective, "dx", 5);
  expect_input_gradient(neighbors, dneighbors, objective, "dneighbors", 5);
}

}  // namespace
}  // namespace megatron
