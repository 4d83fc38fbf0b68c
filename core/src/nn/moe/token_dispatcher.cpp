// The all-to-all and all-gather token dispatchers: permutation into the experts' order, the
// expert-parallel collectives, the weighted sum back to the tokens, and their backward.
#include "token_dispatcher.h"

#include <utility>

#include "expert_exchange.h"
#include "host_transfer.h"

namespace megatron::nn::moe {

namespace {

// The experts' rows in some order: each row's source token (an index into the rows the
// dispatcher permutes), its expert (in the routing's columns) and its routing weight.
struct Permutation {
  std::vector<std::int32_t> token;
  std::vector<std::int64_t> expert;
  std::vector<double> prob;
  void add(std::int64_t tok, std::int64_t e, double p) {
    token.push_back(static_cast<std::int32_t>(tok));
    expert.push_back(e);
    prob.push_back(p);
  }
};

// What both dispatchers share: the permutation on the device and the weighted scatter-add.
class PermutedRows {
 public:
  PermutedRows(Backend& be, Permutation p, DType dtype)
      : perm_(std::move(p)),
        ids_(on_device(be, perm_.token, DType::i32)),
        probs_(on_device(be, perm_.prob, dtype)) {}

  std::int64_t rows() const { return static_cast<std::int64_t>(perm_.token.size()); }
  // (tokens, h) -> (rows, h).
  Tensor gather(Backend& be, const Tensor& tokens) const {
    Tensor out = be.empty({rows(), tokens.size(1)}, tokens.dtype());
    be.embedding_forward(ids_, tokens, 0, out);
    return out;
  }
  // (rows, h) -> tokens (t, h), overwritten, each row weighted by its probability when asked.
  void scatter(Backend& be, const Tensor& rows_in, bool weighted, Tensor& tokens) const {
    if (!weighted) {
      be.embedding_backward(ids_, rows_in, 0, tokens, false);
      return;
    }
    Tensor w = be.empty(rows_in.shape(), rows_in.dtype());
    be.scale_rows(rows_in, probs_, w);
    be.embedding_backward(ids_, w, 0, tokens, false);
  }
  // The weighted sum's backward on the rows: the output gradient of each row (dy's share times
  // its weight), and into dprobs (tokens x experts) each weight's gradient, dy . out.
  Tensor weighted_backward(Backend& be, const Tensor& dy_tokens, const Tensor& out,
                           std::int64_t experts, std::vector<double>& dprobs,
                           std::int64_t tokens) const {
    const Tensor dyp = gather(be, dy_tokens);
    Tensor dprob = be.empty({rows()}, dyp.dtype());
    be.row_dots(dyp, out, dprob);
    Tensor dout = be.empty(dyp.shape(), dyp.dtype());
    be.scale_rows(dyp, probs_, dout);
    const std::vector<double> d = to_host(be, dprob);
    dprobs.assign(static_cast<std::size_t>(tokens * experts), 0.0);
    for (std::size_t i = 0; i < d.size(); ++i) {
      dprobs[static_cast<std::size_t>(perm_.token[i] * experts + perm_.expert[i])] = d[i];
    }
    return dout;
  }

 private:
  Permutation perm_;
  Tensor ids_, probs_;  // i32 token of each row; its weight in the activations' dtype
};

// ---- alltoall ------------------------------------------------------------------------------
class AllToAllDispatcher final : public Dispatcher {
 public:
  AllToAllDispatcher(Backend& be, const ExpertParallelism& ep, const Routing& routing, DType dtype)
      : tokens_(routing.tokens),
        experts_(routing.experts),
        rows_(be, permute(routing), dtype),
        exchange_(be, ep, rows_per_expert(routing)) {
    local_rows_ = exchange_.local_rows();
  }

  Tensor dispatch(Backend& be, const Tensor& x_rows) override {
    return exchange_.dispatch(be, rows_.gather(be, x_rows));
  }
  void combine(Backend& be, const Tensor& local_out, Tensor& y_rows) override {
    out_ = exchange_.combine(be, local_out);
    rows_.scatter(be, out_, true, y_rows);
  }
  Tensor combine_backward(Backend& be, const Tensor& dy_rows,
                          std::vector<double>& dprobs) override {
    const Tensor dout = rows_.weighted_backward(be, dy_rows, out_, experts_, dprobs, tokens_);
    return exchange_.dispatch(be, dout);
  }
  void dispatch_backward(Backend& be, const Tensor& dlocal, Tensor& dx_rows) override {
    rows_.scatter(be, exchange_.combine(be, dlocal), false, dx_rows);
  }

 private:
  // Every (token, expert) pair on the map, expert-major, tokens in order (Megatron's permute of
  // routing_map.T).
  static Permutation permute(const Routing& r) {
    Permutation p;
    for (std::int64_t e = 0; e < r.experts; ++e) {
      for (std::int64_t tok = 0; tok < r.tokens; ++tok) {
        const auto k = static_cast<std::size_t>(tok * r.experts + e);
        if (r.map[k]) p.add(tok, e, r.probs[k]);
      }
    }
    return p;
  }
  static std::vector<std::int64_t> rows_per_expert(const Routing& r) {
    std::vector<std::int64_t> rows(static_cast<std::size_t>(r.experts), 0);
    for (std::int64_t tok = 0; tok < r.tokens; ++tok) {
      for (std::int64_t e = 0; e < r.experts; ++e)
        rows[static_cast<std::size_t>(e)] += r.map[static_cast<std::size_t>(tok * r.experts + e)];
    }
    return rows;
  }

  std::int64_t tokens_, experts_;
  PermutedRows rows_;
  ExpertExchange exchange_;
  Tensor out_;  // the experts' outputs of this rank's rows, back in global expert order
};

// ---- allgather -----------------------------------------------------------------------------
class AllGatherDispatcher final : public Dispatcher {
 public:
  AllGatherDispatcher(Backend& be, const ExpertParallelism& ep, const Routing& routing, DType dtype)
      : ep_(ep),
        tokens_(routing.tokens),
        experts_(routing.experts),
        rows_(be, permute_local(be, ep, routing, local_rows_), dtype) {}

  Tensor dispatch(Backend& be, const Tensor& x_rows) override {
    return rows_.gather(be, gather_tokens(be, x_rows));
  }
  void combine(Backend& be, const Tensor& local_out, Tensor& y_rows) override {
    out_ = local_out;
    sum_to_owners(be, local_out, true, y_rows);
  }
  Tensor combine_backward(Backend& be, const Tensor& dy_rows,
                          std::vector<double>& dprobs) override {
    const std::int64_t gathered = tokens_ * ep_.size;
    std::vector<double> all;
    const Tensor dout =
        rows_.weighted_backward(be, gather_tokens(be, dy_rows), out_, experts_, all, gathered);
    if (!ep_.split()) {
      dprobs = std::move(all);
      return dout;
    }
    // Each token's weights were differentiated where its experts live: summed to its rank.
    const Tensor send = on_device(be, all, DType::f64);
    Tensor mine = be.empty({tokens_ * experts_}, DType::f64);
    ep_.comm->reduce_scatter(send.raw_data(), mine.raw_data(),
                             static_cast<std::size_t>(tokens_ * experts_), DType::f64,
                             ReduceOp::sum);
    dprobs = to_host(be, mine);
    return dout;
  }
  void dispatch_backward(Backend& be, const Tensor& dlocal, Tensor& dx_rows) override {
    sum_to_owners(be, dlocal, false, dx_rows);
  }

 private:
  // The local experts' (token, expert) pairs among the group's gathered tokens (rank-major, each
  // rank's in order), local-expert-major, tokens in order; counts them into local_rows.
  static Permutation permute_local(Backend& be, const ExpertParallelism& ep, const Routing& r,
                                   std::vector<std::int64_t>& local_rows) {
    const std::int64_t local = r.experts / ep.size, first = ep.rank * local;
    const std::int64_t gathered = r.tokens * ep.size;
    // The group's routing: each rank's probabilities then its map, side by side per rank.
    std::vector<double> mine(r.probs);
    mine.insert(mine.end(), r.map.begin(), r.map.end());
    std::vector<double> all = mine;
    if (ep.split()) {
      const Tensor send = on_device(be, mine, DType::f64);
      Tensor recv = be.empty({static_cast<std::int64_t>(mine.size()) * ep.size}, DType::f64);
      ep.comm->all_gather(send.raw_data(), recv.raw_data(), mine.size(), DType::f64);
      all = to_host(be, recv);
    }
    const auto block = static_cast<std::int64_t>(mine.size()), plane = r.tokens * r.experts;
    Permutation p;
    local_rows.assign(static_cast<std::size_t>(local), 0);
    for (std::int64_t e = 0; e < local; ++e) {
      for (std::int64_t g = 0; g < gathered; ++g) {
        const std::int64_t src = g / r.tokens, tok = g % r.tokens;
        const std::int64_t k = src * block + tok * r.experts + first + e;
        if (all[static_cast<std::size_t>(k + plane)] == 0) continue;
        p.add(g, first + e, all[static_cast<std::size_t>(k)]);
        ++local_rows[static_cast<std::size_t>(e)];
      }
    }
    return p;
  }

  // (t, h) on each rank -> (t * EP, h), rank-major.
  Tensor gather_tokens(Backend& be, const Tensor& rows) const {
    if (!ep_.split()) return rows;
    Tensor all = be.empty({rows.size(0) * ep_.size, rows.size(1)}, rows.dtype());
    ep_.comm->all_gather(rows.raw_data(), all.raw_data(), static_cast<std::size_t>(rows.numel()),
                         rows.dtype());
    return all;
  }
  // The local experts' rows scattered (weighted or not) onto the gathered tokens, and the
  // partial sums reduced to the ranks owning the tokens.
  void sum_to_owners(Backend& be, const Tensor& local, bool weighted, Tensor& out_rows) const {
    if (!ep_.split()) {
      rows_.scatter(be, local, weighted, out_rows);
      return;
    }
    Tensor all = be.empty({tokens_ * ep_.size, out_rows.size(1)}, out_rows.dtype());
    rows_.scatter(be, local, weighted, all);
    ep_.comm->reduce_scatter(all.raw_data(), out_rows.raw_data(),
                             static_cast<std::size_t>(out_rows.numel()), out_rows.dtype(),
                             ReduceOp::sum);
  }

  ExpertParallelism ep_;
  std::int64_t tokens_, experts_;
  PermutedRows rows_;
  Tensor out_;  // the local experts' outputs
};

}  // namespace

std::unique_ptr<Dispatcher> make_dispatcher(TokenDispatcher kind, Backend& backend,
                                            const ExpertParallelism& ep, const Routing& routing,
                                            DType dtype) {
  if (kind == TokenDispatcher::alltoall) {
    return std::make_unique<AllToAllDispatcher>(backend, ep, routing, dtype);
  }
  return std::make_unique<AllGatherDispatcher>(backend, ep, routing, dtype);
}

}  // namespace megatron::nn::moe
