// The expert-parallel all-to-all: counts first, then rows, then the sort into local expert order.
#include "expert_exchange.h"

#include <numeric>

#include "host_transfer.h"
#include "megatron/error.h"

namespace megatron::nn::moe {

namespace {

std::vector<std::size_t> element_counts(const std::vector<std::int64_t>& rows, std::int64_t h) {
  std::vector<std::size_t> out;
  for (const std::int64_t r : rows)
    out.push_back(static_cast<std::size_t>(r * h));
  return out;
}

}  // namespace

ExpertExchange::ExpertExchange(Backend& be, const ExpertParallelism& ep,
                               const std::vector<std::int64_t>& rows_per_expert)
    : ep_(ep) {
  const auto experts = static_cast<std::int64_t>(rows_per_expert.size());
  const std::int64_t n = ep.size, local = experts / n;
  sent_ = std::accumulate(rows_per_expert.begin(), rows_per_expert.end(), std::int64_t{0});
  if (!ep.split()) {
    local_rows_ = rows_per_expert;
    received_ = sent_;
    return;
  }
  // counts[src][e]: rows source rank src sends to this rank's local expert e.
  const Tensor mine = on_device(be, rows_per_expert, DType::i64);
  Tensor theirs = be.empty({experts}, DType::i64);
  ep.comm->all_to_all(mine.raw_data(), theirs.raw_data(), static_cast<std::size_t>(local),
                      DType::i64);
  Tensor host = Tensor::empty({experts}, DType::i64);
  be.copy(theirs, host);
  const std::vector<std::int64_t> counts = host.to_vector<std::int64_t>();

  send_rows_.assign(static_cast<std::size_t>(n), 0);
  recv_rows_.assign(static_cast<std::size_t>(n), 0);
  local_rows_.assign(static_cast<std::size_t>(local), 0);
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t e = 0; e < local; ++e) {
      send_rows_[static_cast<std::size_t>(r)] +=
          rows_per_expert[static_cast<std::size_t>(r * local + e)];
      const std::int64_t c = counts[static_cast<std::size_t>(r * local + e)];
      recv_rows_[static_cast<std::size_t>(r)] += c;
      local_rows_[static_cast<std::size_t>(e)] += c;
    }
  }
  received_ = std::accumulate(recv_rows_.begin(), recv_rows_.end(), std::int64_t{0});
  // Where each (source, local expert) chunk starts in the received rows and in expert order.
  std::vector<std::int64_t> chunk_start(static_cast<std::size_t>(n * local));
  std::int64_t at = 0;
  for (std::size_t k = 0; k < chunk_start.size(); ++k) {
    chunk_start[k] = at;
    at += counts[k];
  }
  std::vector<std::int32_t> sort, unsort(static_cast<std::size_t>(received_));
  for (std::int64_t e = 0; e < local; ++e) {
    for (std::int64_t r = 0; r < n; ++r) {
      const auto k = static_cast<std::size_t>(r * local + e);
      for (std::int64_t j = 0; j < counts[k]; ++j) {
        unsort[static_cast<std::size_t>(chunk_start[k] + j)] =
            static_cast<std::int32_t>(sort.size());
        sort.push_back(static_cast<std::int32_t>(chunk_start[k] + j));
      }
    }
  }
  sort_ = on_device(be, sort, DType::i32);
  unsort_ = on_device(be, unsort, DType::i32);
}

Tensor ExpertExchange::exchange(Backend& be, const Tensor& rows,
                                const std::vector<std::int64_t>& send,
                                const std::vector<std::int64_t>& recv,
                                std::int64_t recv_total) const {
  const std::int64_t h = rows.size(1);
  Tensor out = be.empty({recv_total, h}, rows.dtype());
  ep_.comm->all_to_all_v(rows.raw_data(), element_counts(send, h), out.raw_data(),
                         element_counts(recv, h), rows.dtype());
  return out;
}

Tensor ExpertExchange::dispatch(Backend& be, const Tensor& rows) const {
  if (rows.size(0) != sent_) {
    throw Error("MoE dispatch: " + std::to_string(rows.size(0)) + " rows for an exchange of " +
                std::to_string(sent_));
  }
  if (!ep_.split()) return rows;
  const Tensor by_source = exchange(be, rows, send_rows_, recv_rows_, received_);
  Tensor out = be.empty(by_source.shape(), rows.dtype());
  be.embedding_forward(sort_, by_source, 0, out);
  return out;
}

Tensor ExpertExchange::combine(Backend& be, const Tensor& local) const {
  if (local.size(0) != received_) {
    throw Error("MoE combine: " + std::to_string(local.size(0)) + " rows for an exchange of " +
                std::to_string(received_));
  }
  if (!ep_.split()) return local;
  Tensor by_source = be.empty(local.shape(), local.dtype());
  be.embedding_forward(unsort_, local, 0, by_source);
  return exchange(be, by_source, recv_rows_, send_rows_, sent_);
}

}  // namespace megatron::nn::moe
