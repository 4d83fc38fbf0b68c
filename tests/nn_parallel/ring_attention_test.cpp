// Ring attention (context parallelism) against the unsplit kernel in fp64: every rank holds
// chunks r and 2n−1−r of the sequence; its output, log-sum-exp and the gradients of its queries,
// keys and values equal the rows of the whole sequence's attention_forward / attention_backward,
// under the causal mask (grouped queries), with packed documents (first_key), without the mask,
// with key padding, and for a sequence whose documents leave some queries' ring blocks empty.
// Runs on 2 and 3 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "context_test_util.h"
#include "megatron/nn/ring_attention.h"

namespace megatron::nn {
namespace {

using context_test::context_group;
using context_test::expect_equal_rows;
using context_test::random;
using context_test::rows;

constexpr std::int64_t kBatch = 2, kChunk = 3, kHeadsQ = 4, kHeadsKv = 2, kDim = 8;

struct Masks {
  std::vector<std::uint8_t> padding;    // (B, S), empty: none
  std::vector<std::int32_t> first_key;  // (B, S) global, empty: none
};

// The whole sequence's attention on every rank, then the ring's on this rank's chunks.
void expect_ring_equals_whole(bool causal, const Masks& masks) {
  const ContextParallelism cp = context_group();
  const std::int64_t seq = 2 * cp.size * kChunk;
  Backend& be = backend_for(Device::cpu());
  const Tensor q = random({kBatch, seq, kHeadsQ, kDim}, 1),
               k = random({kBatch, seq, kHeadsKv, kDim}, 2),
               v = random({kBatch, seq, kHeadsKv, kDim}, 3),
               dout = random({kBatch, seq, kHeadsQ, kDim}, 4);
  AttentionParams whole;
  whole.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  whole.causal = causal;
  if (!masks.padding.empty()) whole.key_padding_mask = Tensor::from(masks.padding, {kBatch, seq});
  if (!masks.first_key.empty()) whole.first_key = Tensor::from(masks.first_key, {kBatch, seq});
  Tensor out = Tensor::empty(q.shape(), DType::f64),
         lse = Tensor::empty({kBatch, kHeadsQ, seq}, DType::f64);
  be.attention_forward(q, k, v, whole, out, lse);
  Tensor dq = Tensor::empty(q.shape(), DType::f64), dk = Tensor::empty(k.shape(), DType::f64),
         dv = Tensor::empty(v.shape(), DType::f64);
  be.attention_backward(dout, q, k, v, out, lse, whole, dq, dk, dv);

  const std::vector<std::int64_t> mine = context_positions(cp, seq);
  AttentionParams ring = whole;
  if (!masks.first_key.empty())
    ring.first_key =
        rows(whole.first_key.view({kBatch, seq, 1, 1}), mine, 1).view({kBatch, 2 * kChunk});
  const Tensor ql = rows(q, mine, 1), kl = rows(k, mine, 1), vl = rows(v, mine, 1),
               doutl = rows(dout, mine, 1);
  Tensor outl = Tensor::empty(ql.shape(), DType::f64),
         lsel = Tensor::empty({kBatch, kHeadsQ, 2 * kChunk}, DType::f64);
  ring_attention_forward(be, cp, ql, kl, vl, ring, outl, lsel);
  expect_equal_rows(outl, rows(out, mine, 1), "out");
  expect_equal_rows(lsel, rows(lse, mine, 2), "lse");
  Tensor dql = Tensor::empty(ql.shape(), DType::f64), dkl = Tensor::empty(kl.shape(), DType::f64),
         dvl = Tensor::empty(vl.shape(), DType::f64);
  ring_attention_backward(be, cp, doutl, ql, kl, vl, outl, lsel, ring, dql, dkl, dvl);
  expect_equal_rows(dql, rows(dq, mine, 1), "dq");
  expect_equal_rows(dkl, rows(dk, mine, 1), "dk");
  expect_equal_rows(dvl, rows(dv, mine, 1), "dv");
}

std::int64_t sequence_length() {
  return 2 * context_group().size * kChunk;
}

TEST(RingAttention, CausalGroupedQueriesEqualTheWholeSequence) {
  expect_ring_equals_whole(true, {});
}

TEST(RingAttention, NoMaskEqualsTheWholeSequence) {
  expect_ring_equals_whole(false, {});
}

TEST(RingAttention, KeyPaddingEqualsTheWholeSequence) {
  const std::int64_t s = sequence_length();
  Masks m;
  m.padding.assign(static_cast<std::size_t>(kBatch * s), 0);
  m.padding[2] = 1;                         // a key inside sample 0's first chunk
  for (std::int64_t j = s - 4; j < s; ++j)  // sample 1's tail
    m.padding[static_cast<std::size_t>(s + j)] = 1;
  expect_ring_equals_whole(false, m);
}

// Documents packed in each sample (reset_attention_mask): a query sees its own document's keys
// only, so some ring blocks see no key at all for some queries.
TEST(RingAttention, DocumentsEqualTheWholeSequence) {
  const std::int64_t s = sequence_length();
  Masks m;
  for (std::int64_t b = 0; b < kBatch; ++b)
    for (std::int64_t i = 0; i < s; ++i) {
      const std::int64_t start = b == 0 ? (i < 5 ? 0 : i < s - 2 ? 5 : s - 2) : (i / 4) * 4;
      m.first_key.push_back(static_cast<std::int32_t>(start));
    }
  expect_ring_equals_whole(true, m);
}

TEST(RingAttention, RefusesASequenceThatDoesNotCutIntoEqualChunks) {
  const ContextParallelism cp = context_group();
  EXPECT_THROW(context_positions(cp, 2 * cp.size * kChunk + 1), Error);
  const std::vector<std::int64_t> p = context_positions(cp, 4 * cp.size);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0], 2 * cp.rank);
  EXPECT_EQ(p[2], 2 * (2 * cp.size - 1 - cp.rank));
}

}  // namespace
}  // namespace megatron::nn
