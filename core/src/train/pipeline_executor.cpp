// The pipeline executor: Megatron's forward_backward_pipelining_{with,without}_interleaving over
// the Model's chunk interface and a Communicator's point-to-point operations.
#include "pipeline_executor.h"

#include <utility>
#include <vector>

#include "megatron/error.h"

namespace megatron::train {

namespace {

constexpr int kForward = 0, kBackward = 1;

// Messages between two ranks with the same tag arrive in the order they were sent, and both
// sides handle a chunk's micro-batches in the same (increasing) order, so the tag only has to
// tell directions and receiving chunks apart.
int message_tag(int direction, int receiving_chunk) {
  return receiving_chunk * 2 + direction;
}

}  // namespace

StepResult run_pipeline_step(Model& model, const PipelineStep& st) {
  const PipelineLayout& layout = st.layout;
  const int pp = layout.pipeline_size, vp = layout.virtual_size, rank = st.rank;
  if (st.comm.size() != pp || st.comm.rank() != rank) {
    throw Error("pipeline step: the pipeline communicator has " + std::to_string(st.comm.size()) +
                " ranks (this one " + std::to_string(st.comm.rank()) + "), the layout " +
                std::to_string(pp) + " stages (this one " + std::to_string(rank) + ")");
  }
  const std::vector<PipelineAction> actions =
      st.backward ? pipeline_schedule(layout, rank, st.num_micro_batches)
                  : pipeline_forward_schedule(layout, rank, st.num_micro_batches);
  const Shape shape = model.activation_shape(st.micro_batch_size);
  const auto count = static_cast<std::size_t>(shape_numel(shape));

  // Neighbouring virtual stages of chunk c on this rank, as (rank, chunk).
  auto previous = [&](int c) {
    return rank > 0 ? std::pair{rank - 1, c} : std::pair{pp - 1, c - 1};
  };
  auto next = [&](int c) { return rank < pp - 1 ? std::pair{rank + 1, c} : std::pair{0, c + 1}; };
  auto is_first = [&](int c) { return rank == 0 && c == 0; };
  auto is_last = [&](int c) { return rank == pp - 1 && c == vp - 1; };

  // Outgoing tensors stay alive until their sends complete.
  std::vector<std::pair<Tensor, CommHandle>> sends;
  auto send = [&](Tensor t, std::pair<int, int> to, int direction) {
    if (t.shape() != shape || !t.is_contiguous() || t.dtype() != st.activation_dtype) {
      throw Error("pipeline step: the model handed over a " + t.describe() + " where a " +
                  shape_str(shape) + " activation was expected (activation_shape)");
    }
    CommHandle h = st.comm.send_async(t.raw_data(), count, t.dtype(), to.first,
                                      message_tag(direction, to.second));
    sends.emplace_back(std::move(t), std::move(h));
  };
  auto receive = [&](std::pair<int, int> from, int chunk, int direction) {
    Tensor t = Tensor::empty(shape, st.activation_dtype);
    st.comm.recv(t.raw_data(), count, st.activation_dtype, from.first,
                 message_tag(direction, chunk));
    return t;
  };

  StepResult total;
  for (const PipelineAction& a : actions) {
    StepOptions options = st.options(a.micro_batch);
    options.backward = st.backward;
    if (a.op == PipelineOp::forward) {
      const Tensor input =
          is_first(a.chunk) ? Tensor() : receive(previous(a.chunk), a.chunk, kForward);
      Model::ChunkOutput out =
          model.forward_chunk(a.chunk, a.micro_batch, st.batch(a.micro_batch), input, options);
      if (is_last(a.chunk)) {
        total.loss_sum += out.loss.loss_sum;
        total.token_count += out.loss.token_count;
      } else {
        send(std::move(out.activation), next(a.chunk), kForward);
      }
    } else {
      const Tensor output_grad =
          is_last(a.chunk) ? Tensor() : receive(next(a.chunk), a.chunk, kBackward);
      Tensor input_grad = model.backward_chunk(a.chunk, a.micro_batch, output_grad, options);
      if (!is_first(a.chunk)) send(std::move(input_grad), previous(a.chunk), kBackward);
    }
  }
  for (auto& [tensor, handle] : sends)
    handle.wait();
  return total;
}

}  // namespace megatron::train
