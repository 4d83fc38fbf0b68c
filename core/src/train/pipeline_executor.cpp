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

NamedTensors allocate_stage_buffers(const SampleSpec& spec, Device device) {
  NamedTensors out;
  for (const FieldSpec& f : spec)
    out.emplace_back(f.name, Tensor::empty(f.shape, f.dtype, device));
  return out;
}

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
  // Neighbouring virtual stages of chunk c on this rank, as (rank, chunk).
  auto previous = [&](int c) {
    return rank > 0 ? std::pair{rank - 1, c} : std::pair{pp - 1, c - 1};
  };
  auto next = [&](int c) { return rank < pp - 1 ? std::pair{rank + 1, c} : std::pair{0, c + 1}; };
  auto is_first = [&](int c) { return rank == 0 && c == 0; };
  auto is_last = [&](int c) { return rank == pp - 1 && c == vp - 1; };
  // What virtual stage v receives from v - 1 (and sends its gradients back as), asked once.
  std::vector<SampleSpec> inputs(static_cast<std::size_t>(pp * vp));
  for (int v = 1; v < pp * vp; ++v)
    inputs[static_cast<std::size_t>(v)] = model.stage_inputs(v, st.micro_batch_size);
  auto spec_into = [&](std::pair<int, int> stage) -> const SampleSpec& {
    return inputs[static_cast<std::size_t>(stage.second * pp + stage.first)];
  };

  // Outgoing tensors stay alive until their sends complete. Each named tensor of a message is
  // sent in the spec's order; the receiver allocates from the same spec on the model's device.
  std::vector<std::pair<Tensor, CommHandle>> sends;
  auto send = [&](const NamedTensors& tensors, const SampleSpec& spec, std::pair<int, int> to,
                  int direction) {
    if (tensors.size() != spec.size()) {
      throw Error("pipeline step: the model handed over " + std::to_string(tensors.size()) +
                  " tensors where stage_inputs declares " + describe_fields(spec));
    }
    for (const FieldSpec& f : spec) {
      const Tensor& t = named_tensor(tensors, f.name, "the pipeline activations");
      if (t.shape() != f.shape || !t.is_contiguous() || t.dtype() != f.dtype) {
        throw Error("pipeline step: the model handed over '" + f.name + "' as a " + t.describe() +
                    " where stage_inputs declares " + describe_fields({f}));
      }
      CommHandle h = st.comm.send_async(t.raw_data(), static_cast<std::size_t>(t.numel()),
                                        t.dtype(), to.first, message_tag(direction, to.second));
      sends.emplace_back(t, std::move(h));
    }
  };
  auto receive = [&](const SampleSpec& spec, std::pair<int, int> from, int chunk, int direction) {
    NamedTensors out = allocate_stage_buffers(spec, st.device);
    for (auto& [name, t] : out) {
      st.comm.recv(t.raw_data(), static_cast<std::size_t>(t.numel()), t.dtype(), from.first,
                   message_tag(direction, chunk));
    }
    return out;
  };

  StepResult total;
  for (const PipelineAction& a : actions) {
    StepOptions options = st.options(a.micro_batch);
    options.backward = st.backward;
    const std::pair<int, int> here{rank, a.chunk};
    if (a.op == PipelineOp::forward) {
      const NamedTensors input =
          is_first(a.chunk) ? NamedTensors{}
                            : receive(spec_into(here), previous(a.chunk), a.chunk, kForward);
      Model::ChunkOutput out =
          model.forward_chunk(a.chunk, a.micro_batch, st.batch(a.micro_batch), input, options);
      // Every stage's losses count: the last stage's are the model's, an earlier one's are its
      // layers' logged-only terms (MoE's auxiliary losses), which the trainer sums over stages.
      total.add(out.loss);
      if (!is_last(a.chunk)) {
        send(out.activations, spec_into(next(a.chunk)), next(a.chunk), kForward);
      }
    } else {
      const NamedTensors output_grad =
          is_last(a.chunk) ? NamedTensors{}
                           : receive(spec_into(next(a.chunk)), next(a.chunk), a.chunk, kBackward);
      NamedTensors input_grad = model.backward_chunk(a.chunk, a.micro_batch, output_grad, options);
      if (!is_first(a.chunk)) send(input_grad, spec_into(here), previous(a.chunk), kBackward);
    }
  }
  for (auto& [tensor, handle] : sends)
    handle.wait();
  return total;
}

}  // namespace megatron::train
