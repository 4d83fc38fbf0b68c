// ModelBuildInfo from the parallel state and the core config (megatron/train/model_setup.h).
#include "megatron/train/model_setup.h"

namespace megatron::train {

PipelineLayout model_pipeline_layout(const config::CoreConfig& core, const Model& model) {
  return pipeline_layout(core.parallel, model.dimensions());
}

ModelBuildInfo model_build_info(ParallelState& parallel, const config::CoreConfig& core,
                                const Model& model, std::int64_t vocab_size,
                                std::int64_t seq_length, const SampleSpec& sample_fields) {
  ModelBuildInfo info;
  info.vocab_size = vocab_size;
  info.seq_length = seq_length;
  info.sample_fields = sample_fields;
  info.device = parallel.device();
  info.seed = static_cast<std::uint64_t>(core.training.seed);
  info.tensor_comm = parallel.tp_size() > 1 ? &parallel.device_comm(Group::tensor) : nullptr;
  info.tp_rank = parallel.tp_rank();
  info.tp_size = parallel.tp_size();
  info.sequence_parallel = core.parallel.sequence_parallel;
  info.expert_comm = parallel.ep_size() > 1 ? &parallel.device_comm(Group::expert) : nullptr;
  info.ep_rank = parallel.ep_rank();
  info.ep_size = parallel.ep_size();
  info.etp_size = parallel.etp_size();
  // Per-iteration statistics (MoE's expert-bias token counts) cover every token of the
  // iteration: summed over data x context.
  info.data_comm = parallel.group_size(Group::data_context) > 1
                       ? &parallel.device_comm(Group::data_context)
                       : nullptr;
  info.context_comm = parallel.cp_size() > 1 ? &parallel.device_comm(Group::context) : nullptr;
  info.cp_rank = parallel.cp_rank();
  info.cp_size = parallel.cp_size();
  const PipelineLayout pipeline = model_pipeline_layout(core, model);
  if (pipeline.pipeline_size > 1) {
    info.pipeline.rank = parallel.pp_rank();
    info.pipeline.size = pipeline.pipeline_size;
    info.pipeline.comm = &parallel.device_comm(Group::pipeline);
    for (int c = 0; c < pipeline.virtual_size; ++c)
      info.pipeline.chunks.push_back(stage_layers(pipeline, parallel.pp_rank(), c));
  }
  // Mixed precision: fp32 master weights; GEMM inputs in bf16/fp16.
  info.compute_dtype = core.training.bf16   ? DType::bf16
                       : core.training.fp16 ? DType::f16
                                            : DType::f32;
  return info;
}

}  // namespace megatron::train
