// The two token dispatchers (allgather, alltoall) over an expert-parallel pair against each token's
// own weighted sum: with a stand-in expert that scales its rows by (global expert + 1), combine
// gives sum_e p(t, e) (e + 1) x_t, the routing weights' gradient is dy_t . (e + 1) x_t, and the
// input gradient through the experts is sum_e p(t, e) (e + 1) dy_t; also when every token of both
// ranks goes to rank 1's experts, so rank 0's experts receive no rows at all.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "megatron/backend/backend.h"
#include "megatron/parallel/parallel_state.h"
#include "nn/moe/token_dispatcher.h"
#include "parallel/mpi_test_main.h"

namespace megatron::nn {
namespace {

constexpr std::int64_t kTokens = 5, kH = 3, kExperts = 4;

Backend& cpu() {
  return backend_for(Device::cpu());
}

// Token t of this rank routes to two experts with weights 0.6 and 0.4; `onto_rank_one` sends
// every token to experts 2 and 3 (rank 1's).
moe::Routing routing(int rank, bool onto_rank_one) {
  moe::Routing r;
  r.tokens = kTokens;
  r.experts = kExperts;
  r.probs.assign(kTokens * kExperts, 0.0);
  r.map.assign(kTokens * kExperts, 0);
  for (std::int64_t t = 0; t < kTokens; ++t) {
    const std::int64_t first = onto_rank_one ? 2 + t % 2 : (t + rank) % kExperts;
    const std::int64_t second = onto_rank_one ? 3 - t % 2 : (t + rank + 1) % kExperts;
    for (const auto& [e, p] : {std::pair{first, 0.6}, std::pair{second, 0.4}}) {
      r.probs[static_cast<std::size_t>(t * kExperts + e)] = p;
      r.map[static_cast<std::size_t>(t * kExperts + e)] = 1;
    }
  }
  return r;
}

Tensor rows(int rank, int salt) {
  Tensor t = Tensor::empty({kTokens, kH}, DType::f64);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = 0.1 * static_cast<double>((i * 7 + rank * 13 + salt) % 11) - 0.5;
  return t;
}

// The stand-in expert: each local expert's rows times (its global index + 1).
Tensor experts(const Tensor& in, const std::vector<std::int64_t>& local_rows, int rank) {
  Tensor out = Tensor::empty(in.shape(), DType::f64);
  std::int64_t row = 0;
  for (std::size_t e = 0; e < local_rows.size(); ++e) {
    const double scale = static_cast<double>(rank * static_cast<int>(local_rows.size())) +
                         static_cast<double>(e) + 1.0;
    for (std::int64_t j = 0; j < local_rows[e]; ++j, ++row)
      for (std::int64_t c = 0; c < kH; ++c)
        out.data<double>()[row * kH + c] = scale * in.data<double>()[row * kH + c];
  }
  EXPECT_EQ(row, in.size(0));
  return out;
}

TEST(MoeDispatchMpi, BothDispatchersGiveEachTokensWeightedSumAndItsGradients) {
  ParallelState ps = ParallelState::create(test::mpi_runtime(), ParallelSizes{.expert = 2});
  ASSERT_EQ(ps.ep_size(), 2);
  const int rank = ps.ep_rank();
  const ExpertParallelism ep{&ps.comm(Group::expert), rank, 2, 1};
  const Tensor x = rows(rank, 1), dy = rows(rank, 5);
  for (const bool onto_rank_one : {false, true}) {
    for (const TokenDispatcher kind : {TokenDispatcher::allgather, TokenDispatcher::alltoall}) {
      SCOPED_TRACE(std::string(kind == TokenDispatcher::allgather ? "allgather" : "alltoall") +
                   (onto_rank_one ? ", every token onto rank 1" : ""));
      const moe::Routing r = routing(rank, onto_rank_one);
      auto dispatcher = moe::make_dispatcher(kind, cpu(), ep, r, DType::f64);
      const Tensor in = dispatcher->dispatch(cpu(), x);
      std::int64_t received = 0;
      for (const std::int64_t n : dispatcher->local_rows())
        received += n;
      EXPECT_EQ(in.size(0), received);
      if (onto_rank_one && rank == 0) {
        EXPECT_EQ(received, 0);
      }
      Tensor y = Tensor::empty({kTokens, kH}, DType::f64);
      dispatcher->combine(cpu(), experts(in, dispatcher->local_rows(), rank), y);

      std::vector<double> dprobs;
      const Tensor dout = dispatcher->combine_backward(cpu(), dy, dprobs);
      Tensor dx = Tensor::empty({kTokens, kH}, DType::f64);
      dispatcher->dispatch_backward(cpu(), experts(dout, dispatcher->local_rows(), rank), dx);

      ASSERT_EQ(dprobs.size(), static_cast<std::size_t>(kTokens * kExperts));
      for (std::int64_t t = 0; t < kTokens; ++t) {
        for (std::int64_t c = 0; c < kH; ++c) {
          double want_y = 0, want_dx = 0;
          for (std::int64_t e = 0; e < kExperts; ++e) {
            const double p = r.probs[static_cast<std::size_t>(t * kExperts + e)];
            want_y += p * static_cast<double>(e + 1) * x.data<double>()[t * kH + c];
            want_dx += p * static_cast<double>(e + 1) * dy.data<double>()[t * kH + c];
          }
          EXPECT_NEAR(y.data<double>()[t * kH + c], want_y, 1e-14) << t << "," << c;
          EXPECT_NEAR(dx.data<double>()[t * kH + c], want_dx, 1e-14) << t << "," << c;
        }
        for (std::int64_t e = 0; e < kExperts; ++e) {
          double want = 0;
          if (r.map[static_cast<std::size_t>(t * kExperts + e)]) {
            for (std::int64_t c = 0; c < kH; ++c)
              want += dy.data<double>()[t * kH + c] * static_cast<double>(e + 1) *
                      x.data<double>()[t * kH + c];
          }
          EXPECT_NEAR(dprobs[static_cast<std::size_t>(t * kExperts + e)], want, 1e-14)
              << t << "," << e;
        }
      }
    }
  }
}

}  // namespace
}  // namespace megatron::nn
