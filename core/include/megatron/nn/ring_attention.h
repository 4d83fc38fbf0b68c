// Context parallelism's attention (Megatron's context_parallel_size with cp_comm_type "p2p") over
// the chunks of context_parallelism.h. Keys and values travel round the CP group's ring: at step i
// a rank attends its queries to the keys of rank r−i while the next block is in flight, and merges
// the partial results by their log-sum-exp (online softmax). Backward passes the keys' and values'
// gradients round the ring with them, each rank adding its queries' share, until they reach their
// owner.
#pragma once

#include <cstdint>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/nn/context_parallelism.h"

namespace megatron::nn {

// q (B, 2c, Hq, D), k and v (B, 2c, Hkv, D): this rank's two chunks (any strides, last dimension
// contiguous, one float dtype). out (B, 2c, Hq, D) and lse (B, Hq, 2c) are overwritten with what
// Backend::attention_forward gives for these queries over the whole sequence's keys. params as
// there, in global terms: causal over global positions; key_padding_mask (B, S) over the whole
// sequence; first_key (B, 2c) for this rank's queries, as global key positions. No score bias.
// Dropout draws each ring step's probabilities from its own share of the stream.
void ring_attention_forward(Backend& be, const ContextParallelism& cp, const Tensor& q,
                            const Tensor& k, const Tensor& v, const AttentionParams& params,
                            Tensor& out, Tensor& lse);

// The gradients of ring_attention_forward (same arguments, its out and lse): dq, dk, dv
// overwritten, each this rank's chunks'.
void ring_attention_backward(Backend& be, const ContextParallelism& cp, const Tensor& dout,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const AttentionParams& params, Tensor& dq,
                             Tensor& dk, Tensor& dv);

}  // namespace megatron::nn
