// Ring attention over the context-parallel group: the block each ring step computes, the masks cut
// to it, the online-softmax merge forward, and the travelling key/value gradients backward.
#include "megatron/nn/ring_attention.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "megatron/error.h"

namespace megatron::nn {

namespace {

constexpr int kKeysTag = 0, kKeyGradsTag = 1;

// What ring step `step` computes on this rank: the keys of rank `source` (its chunks s and
// 2n−1−s). Causal: step 0 is this rank's own chunks under the causal mask; an earlier rank's
// first chunk precedes both of this rank's chunks and its second chunk follows them (all queries,
// the first chunk's keys); a later rank's chunks both precede this rank's second chunk and follow
// its first (the second chunk's queries, all keys). Without the causal mask every block is whole.
struct Block {
  int source = 0;
  bool all_queries = true;  // else the second chunk's queries only
  bool all_keys = true;     // else the first chunk's keys only
  bool causal = false;
};

Block block_at(const ContextParallelism& cp, int step, bool causal) {
  const int source = (cp.rank - step + cp.size) % cp.size;
  if (!causal) return {source, true, true, false};
  if (step == 0) return {source, true, true, true};
  if (source < cp.rank) return {source, true, false, false};
  return {source, false, true, false};
}

// The masks as the caller gives them (global), on the host, to cut per block.
struct HostMasks {
  Tensor padding;    // (B, S) u8, or undefined
  Tensor first_key;  // (B, 2c) i32, or undefined
};

HostMasks host_masks(Backend& be, const AttentionParams& params) {
  HostMasks m;
  for (auto [from, to] : {std::pair{&params.key_padding_mask, &m.padding},
                          std::pair{&params.first_key, &m.first_key}}) {
    if (!from->defined() || from->numel() == 0) continue;
    *to = Tensor::empty(from->shape(), from->dtype());
    be.copy(*from, *to);
  }
  return m;
}

// A host tensor onto the backend's device.
Tensor to_device(Backend& be, const Tensor& host, Device device) {
  Tensor out = Tensor::empty(host.shape(), host.dtype(), device);
  be.copy(host, out);
  return out;
}

// The block's parameters: its causal flag, the padding of its keys, its queries' first keys
// counted in its keys, and its own share of the dropout stream.
// `q` is this rank's (B, 2c, Hq, D) queries.
AttentionParams block_params(Backend& be, const AttentionParams& params, const HostMasks& masks,
                             const Block& block, const ContextParallelism& cp, const Tensor& q,
                             int step) {
  const std::int64_t local = q.size(1), chunk = local / 2;
  AttentionParams p;
  p.scale = params.scale;
  p.causal = block.causal;
  p.dropout_p = params.dropout_p;
  p.seed = params.seed;
  // Each step's block indexes the stream from its own (B, Hq, 2c, 2c) range.
  p.offset = params.offset + static_cast<std::uint64_t>(step) *
                                 static_cast<std::uint64_t>(q.size(0) * q.size(2) * local * local);
  const Device device = q.device();
  // The block's keys in global positions: chunk s, then (all keys) chunk 2n−1−s.
  const std::int64_t first_start = block.source * chunk;
  const std::int64_t second_start = (2 * cp.size - 1 - block.source) * chunk;
  const std::int64_t keys = block.all_keys ? local : chunk;
  if (masks.padding.defined()) {
    const std::int64_t b_n = masks.padding.size(0), s_n = masks.padding.size(1);
    Tensor cut = Tensor::empty({b_n, keys}, DType::u8);
    const auto* src = static_cast<const std::uint8_t*>(masks.padding.raw_data());
    auto* dst = static_cast<std::uint8_t*>(cut.raw_data());
    for (std::int64_t b = 0; b < b_n; ++b) {
      std::memcpy(dst + b * keys, src + b * s_n + first_start, static_cast<std::size_t>(chunk));
      if (block.all_keys) {
        std::memcpy(dst + b * keys + chunk, src + b * s_n + second_start,
                    static_cast<std::size_t>(chunk));
      }
    }
    p.key_padding_mask = to_device(be, cut, device);
  }
  if (masks.first_key.defined()) {
    // A global first key F excludes the block's keys before it: their count is the local one.
    const std::int64_t b_n = masks.first_key.size(0);
    const std::int64_t queries = block.all_queries ? local : chunk;
    const std::int64_t q0 = block.all_queries ? 0 : chunk;
    Tensor cut = Tensor::empty({b_n, queries}, DType::i32);
    const auto* src = static_cast<const std::int32_t*>(masks.first_key.raw_data());
    auto* dst = static_cast<std::int32_t*>(cut.raw_data());
    for (std::int64_t b = 0; b < b_n; ++b)
      for (std::int64_t i = 0; i < queries; ++i) {
        const std::int64_t f = src[b * local + q0 + i];
        std::int64_t before = std::clamp<std::int64_t>(f - first_start, 0, chunk);
        if (block.all_keys) before += std::clamp<std::int64_t>(f - second_start, 0, chunk);
        dst[b * queries + i] = static_cast<std::int32_t>(before);
      }
    p.first_key = to_device(be, cut, device);
  }
  return p;
}

// Starts sending `out` to the next rank of the ring and receiving the previous rank's into `in`
// (same shape).
std::pair<CommHandle, CommHandle> pass_on(const ContextParallelism& cp, const Tensor& out,
                                          Tensor& in, int tag) {
  const auto count = static_cast<std::size_t>(out.numel());
  CommHandle send =
      cp.comm->send_async(out.raw_data(), count, out.dtype(), (cp.rank + 1) % cp.size, tag);
  CommHandle recv =
      cp.comm->recv_async(in.raw_data(), count, in.dtype(), (cp.rank + cp.size - 1) % cp.size, tag);
  return {std::move(send), std::move(recv)};
}

// The keys and values travelling the ring, packed as (2, B, 2c, Hkv, D): start(step) passes this
// step's on while the block is computed, finish(step) takes the next step's.
class TravellingKeys {
 public:
  TravellingKeys(Backend& be, const ContextParallelism& cp, const Tensor& k, const Tensor& v)
      : cp_(cp), chunk_(k.size(1) / 2) {
    const Shape& s = k.shape();
    kv_ = be.empty({2, s[0], s[1], s[2], s[3]}, k.dtype());
    Tensor k_slot = kv_.select(0, 0), v_slot = kv_.select(0, 1);
    be.copy(k, k_slot);
    be.copy(v, v_slot);
    incoming_ = be.empty(kv_.shape(), kv_.dtype());
  }
  void start(int step) {
    if (step + 1 < cp_.size) passing_ = pass_on(cp_, kv_, incoming_, kKeysTag);
  }
  void finish(int step) {
    if (step + 1 == cp_.size) return;
    passing_.first.wait();
    passing_.second.wait();
    std::swap(kv_, incoming_);
  }
  // The keys (0) or values (1) as the block reads them.
  Tensor get(int which, const Block& block) const {
    const Tensor all = kv_.select(0, which);
    return block.all_keys ? all : all.slice(1, 0, chunk_);
  }

 private:
  const ContextParallelism& cp_;
  std::int64_t chunk_;
  Tensor kv_, incoming_;
  std::pair<CommHandle, CommHandle> passing_;
};

void check_arguments(const char* op, const ContextParallelism& cp, const Tensor& q, const Tensor& k,
                     const AttentionParams& params) {
  if (cp.split() && cp.comm == nullptr) {
    throw Error(std::string(op) + ": context parallelism of " + std::to_string(cp.size) +
                " ranks without a communicator");
  }
  if (q.dim() != 4 || k.dim() != 4 || q.size(1) % 2 != 0 || k.size(1) != q.size(1)) {
    throw Error(std::string(op) + ": queries and keys must be (B, 2c, H, D), this rank's two " +
                "chunks; got " + q.describe() + " and " + k.describe());
  }
  if (params.bias.defined() && params.bias.numel() > 0) {
    throw Error(std::string(op) + ": a score bias (T5's relative positions) is not supported " +
                "with context parallelism");
  }
  const std::int64_t seq = q.size(1) * cp.size;
  const Tensor& padding = params.key_padding_mask;
  if (padding.defined() && padding.numel() > 0 && (padding.dim() != 2 || padding.size(1) != seq)) {
    throw Error(std::string(op) + ": key_padding_mask must cover the whole sequence (B, " +
                std::to_string(seq) + "), got " + padding.describe());
  }
}

Tensor block_queries(const Tensor& t, const Block& block, std::int64_t chunk) {
  return block.all_queries ? t : t.slice(1, chunk, chunk);
}

}  // namespace

void ring_attention_forward(Backend& be, const ContextParallelism& cp, const Tensor& q,
                            const Tensor& k, const Tensor& v, const AttentionParams& params,
                            Tensor& out, Tensor& lse) {
  check_arguments("ring_attention_forward", cp, q, k, params);
  if (!cp.split()) {
    be.attention_forward(q, k, v, params, out, lse);
    return;
  }
  const std::int64_t chunk = q.size(1) / 2, batch = q.size(0), heads = q.size(2);
  const HostMasks masks = host_masks(be, params);
  TravellingKeys keys(be, cp, k, v);
  be.fill(out, 0.0);
  be.fill(lse, -std::numeric_limits<double>::infinity());
  for (int step = 0; step < cp.size; ++step) {
    keys.start(step);
    const Block block = block_at(cp, step, params.causal);
    const AttentionParams bp = block_params(be, params, masks, block, cp, q, step);
    const Tensor qb = block_queries(q, block, chunk);
    Tensor part_out = be.empty(qb.shape(), q.dtype());
    Tensor part_lse = be.empty({batch, heads, qb.size(1)}, lse.dtype());
    be.attention_forward(qb, keys.get(0, block), keys.get(1, block), bp, part_out, part_lse);
    Tensor out_rows = block_queries(out, block, chunk);
    Tensor lse_rows = block.all_queries ? lse : lse.slice(2, chunk, chunk);
    be.attention_merge(out_rows, lse_rows, part_out, part_lse);
    keys.finish(step);
  }
}

void ring_attention_backward(Backend& be, const ContextParallelism& cp, const Tensor& dout,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const AttentionParams& params, Tensor& dq,
                             Tensor& dk, Tensor& dv) {
  check_arguments("ring_attention_backward", cp, q, k, params);
  if (!cp.split()) {
    be.attention_backward(dout, q, k, v, out, lse, params, dq, dk, dv);
    return;
  }
  const std::int64_t chunk = q.size(1) / 2, heads = q.size(2);
  const HostMasks masks = host_masks(be, params);
  TravellingKeys keys(be, cp, k, v);
  // Gradients accumulated per chunk, each contiguous: dq's two halves here; the travelling
  // (4, B, c, Hkv, D) = [dk first chunk, dk second, dv first, dv second] of the travelling keys.
  const Shape& ks = k.shape();
  Tensor dq_halves = be.empty({2, q.size(0), chunk, heads, q.size(3)}, q.dtype());
  Tensor dkv = be.empty({4, ks[0], chunk, ks[2], ks[3]}, k.dtype());
  Tensor dkv_incoming = be.empty(dkv.shape(), dkv.dtype());
  be.fill(dq_halves, 0.0);
  be.fill(dkv, 0.0);
  // Adds a block gradient (B, rows, H, D) of whole chunks into consecutive slots of `into`.
  const auto add_chunks = [&](const Tensor& grad, const Tensor& into, std::int64_t first_slot) {
    for (std::int64_t c = 0; c < grad.size(1) / chunk; ++c) {
      Tensor slot = into.select(0, first_slot + c);
      be.axpy(1.0, grad.slice(1, c * chunk, chunk), slot);
    }
  };
  for (int step = 0; step < cp.size; ++step) {
    keys.start(step);
    const Block block = block_at(cp, step, params.causal);
    const AttentionParams bp = block_params(be, params, masks, block, cp, q, step);
    const Tensor qb = block_queries(q, block, chunk);
    const Tensor kb = keys.get(0, block), vb = keys.get(1, block);
    Tensor dq_b = be.empty(qb.shape(), q.dtype());
    Tensor dk_b = be.empty(kb.shape(), k.dtype()), dv_b = be.empty(vb.shape(), v.dtype());
    be.attention_backward(
        block_queries(dout, block, chunk), qb, kb, vb, block_queries(out, block, chunk),
        block.all_queries ? lse : lse.slice(2, chunk, chunk), bp, dq_b, dk_b, dv_b);
    add_chunks(dq_b, dq_halves, block.all_queries ? 0 : 1);
    add_chunks(dk_b, dkv, 0);
    add_chunks(dv_b, dkv, 2);
    // The key gradients go on with their keys (after the last step, on to their owner).
    std::pair<CommHandle, CommHandle> grads = pass_on(cp, dkv, dkv_incoming, kKeyGradsTag);
    grads.first.wait();
    grads.second.wait();
    std::swap(dkv, dkv_incoming);
    keys.finish(step);
  }
  for (std::int64_t c = 0; c < 2; ++c) {
    Tensor dq_chunk = dq.slice(1, c * chunk, chunk), dk_chunk = dk.slice(1, c * chunk, chunk),
           dv_chunk = dv.slice(1, c * chunk, chunk);
    be.copy(dq_halves.select(0, c), dq_chunk);
    be.copy(dkv.select(0, c), dk_chunk);
    be.copy(dkv.select(0, 2 + c), dv_chunk);
  }
}

}  // namespace megatron::nn
