// The pipeline executor on real MPI ranks (2 or 4, one pipeline stage each), with and without
// interleaving, for several micro-batch counts: a small model split into stages gives the loss and
// every parameter gradient of the same model run whole on one rank.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "megatron/error.h"
#include "megatron/model.h"
#include "megatron/parallel/communicator.h"
#include "megatron/parallel/mpi_runtime.h"
#include "megatron/parallel/parallel_state.h"
#include "parallel/mpi_test_main.h"
#include "train/pipeline_executor.h"

namespace megatron::train {
namespace {

constexpr std::int64_t kVocab = 11, kHidden = 6, kSeq = 5, kLayers = 8, kMicroBatch = 2;

// Deterministic, layout-independent values: parameter `name`, element i.
float init_value(const std::string& name, std::int64_t i) {
  std::uint64_t h = 1469598103934665603ull;
  for (char c : name)
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  h = (h ^ static_cast<std::uint64_t>(i)) * 1099511628211ull;
  return static_cast<float>(static_cast<double>(h % 2001) / 1000.0 - 1.0) * 0.5f;
}

// Embedding, `kLayers` layers y = tanh(x W^T + b), output head with masked cross-entropy; written
// with plain loops so the executor is tested against something independent of the GPT code.
class ToyModel : public Model {
 public:
  SampleSpec input_fields() const override {
    return {{"tokens", DType::i32, {kSeq}, FieldKind::token_ids},
            {"labels", DType::i32, {kSeq}, FieldKind::labels},
            {"loss_mask", DType::f32, {kSeq}, FieldKind::mask}};
  }
  void build(const ModelBuildInfo& info) override {
    placement_ = info.pipeline;
    if (placement_.chunks.empty()) placement_.chunks = {{0, kLayers}};
    auto declare = [&](const std::string& name, Shape shape) {
      Parameter p;
      p.name = name;
      p.global_shape = shape;
      p.value = Tensor::empty(shape, DType::f32);
      p.grad = Tensor::zeros(shape, DType::f32);
      for (std::int64_t i = 0; i < p.value.numel(); ++i)
        p.value.data<float>()[i] = init_value(name, i);
      return &params_.add(std::move(p));
    };
    if (placement_.is_first_virtual_stage(0)) embed_ = declare("embed", {kVocab, kHidden});
    for (const LayerRange& r : placement_.chunks) {
      for (std::int64_t l = r.first; l < r.first + r.count; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        weights_[l] = declare(p + "weight", {kHidden, kHidden});
        biases_[l] = declare(p + "bias", {kHidden});
      }
    }
    if (placement_.is_last_virtual_stage(placement_.num_chunks() - 1))
      head_ = declare("head", {kVocab, kHidden});
  }
  ParameterSet& parameters() override { return params_; }
  StepResult step(const Batch& batch, const StepOptions& options) override {
    ChunkOutput out = forward_chunk(0, 0, batch, {}, options);
    if (options.backward) backward_chunk(0, 0, {}, options);
    return out.loss;
  }
  double flops_per_iteration(std::int64_t) const override { return 0; }
  ModelDimensions dimensions() const override { return {}; }
  std::string describe() const override { return "toy"; }
  // Every boundary passes one "hidden" tensor (S, B, h) in f32.
  SampleSpec stage_inputs(int, std::int64_t mbs) const override {
    return {{"hidden", DType::f32, {kSeq, mbs, kHidden}, FieldKind::value}};
  }

  ChunkOutput forward_chunk(int chunk, std::int64_t mb, const Batch& batch,
                            const NamedTensors& inputs, const StepOptions& options) override {
    const std::int64_t b = batch["tokens"].size(0), rows = kSeq * b;
    Saved s;
    s.batch = batch;
    std::vector<float> x(static_cast<std::size_t>(rows * kHidden));
    if (placement_.is_first_virtual_stage(chunk)) {
      for (std::int64_t r = 0; r < rows; ++r) {  // row = s * B + b, as Megatron's (S, B, h)
        const std::int32_t t = batch["tokens"].data<std::int32_t>()[(r % b) * kSeq + r / b];
        for (std::int64_t j = 0; j < kHidden; ++j)
          x[static_cast<std::size_t>(r * kHidden + j)] =
              embed_->value.data<float>()[t * kHidden + j];
      }
    } else {
      EXPECT_EQ(inputs.size(), 1u);
      const Tensor& input = named_tensor(inputs, "hidden", "the toy's stage inputs");
      EXPECT_EQ(input.shape(), hidden_shape(b));
      EXPECT_EQ(input.dtype(), DType::f32);
      x.assign(input.data<float>(), input.data<float>() + rows * kHidden);
    }
    const LayerRange range = placement_.chunks[static_cast<std::size_t>(chunk)];
    for (std::int64_t l = range.first; l < range.first + range.count; ++l) {
      s.inputs.push_back(x);
      const float* w = weights_[l]->value.data<float>();
      const float* bias = biases_[l]->value.data<float>();
      std::vector<float> y(x.size());
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t o = 0; o < kHidden; ++o) {
          double acc = bias[o];
          for (std::int64_t i = 0; i < kHidden; ++i)
            acc += static_cast<double>(x[static_cast<std::size_t>(r * kHidden + i)]) *
                   w[o * kHidden + i];
          y[static_cast<std::size_t>(r * kHidden + o)] = static_cast<float>(std::tanh(acc));
        }
      x = y;
    }
    s.output = x;
    ChunkOutput out;
    if (placement_.is_last_virtual_stage(chunk)) {
      LossTerm loss{"lm loss", 0, 0};
      s.dlogits.assign(static_cast<std::size_t>(rows * kVocab), 0.0);
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t k = (r % b) * kSeq + r / b;
        const float mask = batch["loss_mask"].data<float>()[k];
        const std::int32_t label = batch["labels"].data<std::int32_t>()[k];
        std::vector<double> logits(kVocab);
        double mx = -1e300;
        for (std::int64_t v = 0; v < kVocab; ++v) {
          double acc = 0;
          for (std::int64_t j = 0; j < kHidden; ++j)
            acc += static_cast<double>(x[static_cast<std::size_t>(r * kHidden + j)]) *
                   head_->value.data<float>()[v * kHidden + j];
          logits[static_cast<std::size_t>(v)] = acc;
          mx = std::max(mx, acc);
        }
        double sum = 0;
        for (double z : logits)
          sum += std::exp(z - mx);
        loss.sum += mask * (std::log(sum) + mx - logits[static_cast<std::size_t>(label)]);
        loss.count += mask;
        for (std::int64_t v = 0; v < kVocab; ++v) {
          const double p = std::exp(logits[static_cast<std::size_t>(v)] - mx) / sum;
          s.dlogits[static_cast<std::size_t>(r * kVocab + v)] =
              mask * (p - (v == label ? 1.0 : 0.0));
        }
      }
      out.loss.losses.push_back(loss);
    } else {
      out.activations.emplace_back("hidden", Tensor::from(x, hidden_shape(b)));
    }
    if (options.backward) saved_[{chunk, mb}] = std::move(s);
    return out;
  }

  NamedTensors backward_chunk(int chunk, std::int64_t mb, const NamedTensors& output_grads,
                              const StepOptions& options) override {
    auto it = saved_.find({chunk, mb});
    if (it == saved_.end()) throw Error("toy: backward of a forward never run");
    Saved s = std::move(it->second);
    saved_.erase(it);
    const std::int64_t b = s.batch["tokens"].size(0), rows = kSeq * b;
    std::vector<double> dx(static_cast<std::size_t>(rows * kHidden), 0.0);
    if (placement_.is_last_virtual_stage(chunk)) {
      // The loss is options.loss_scale * the loss sum (the trainer divides by tokens elsewhere).
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t v = 0; v < kVocab; ++v) {
          const double g = options.loss_scale * s.dlogits[static_cast<std::size_t>(r * kVocab + v)];
          for (std::int64_t j = 0; j < kHidden; ++j) {
            head_->grad.data<float>()[v * kHidden + j] +=
                static_cast<float>(g * s.output[static_cast<std::size_t>(r * kHidden + j)]);
            dx[static_cast<std::size_t>(r * kHidden + j)] +=
                g * head_->value.data<float>()[v * kHidden + j];
          }
        }
    } else {
      EXPECT_EQ(output_grads.size(), 1u);
      const Tensor& output_grad = named_tensor(output_grads, "hidden", "the toy's stage gradients");
      EXPECT_EQ(output_grad.shape(), hidden_shape(b));
      for (std::size_t i = 0; i < dx.size(); ++i)
        dx[i] = output_grad.data<float>()[i];
    }
    const LayerRange range = placement_.chunks[static_cast<std::size_t>(chunk)];
    std::vector<float> y = s.output;
    for (std::int64_t l = range.first + range.count - 1; l >= range.first; --l) {
      const std::vector<float>& x = s.inputs[static_cast<std::size_t>(l - range.first)];
      float* dw = weights_[l]->grad.data<float>();
      float* db = biases_[l]->grad.data<float>();
      const float* w = weights_[l]->value.data<float>();
      std::vector<double> dnext(dx.size(), 0.0);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t o = 0; o < kHidden; ++o) {
          const double yo = y[static_cast<std::size_t>(r * kHidden + o)];
          const double dpre = dx[static_cast<std::size_t>(r * kHidden + o)] * (1 - yo * yo);
          db[o] += static_cast<float>(dpre);
          for (std::int64_t i = 0; i < kHidden; ++i) {
            dw[o * kHidden + i] +=
                static_cast<float>(dpre * x[static_cast<std::size_t>(r * kHidden + i)]);
            dnext[static_cast<std::size_t>(r * kHidden + i)] += dpre * w[o * kHidden + i];
          }
        }
      dx = dnext;
      y = x;
    }
    if (placement_.is_first_virtual_stage(chunk)) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int32_t t = s.batch["tokens"].data<std::int32_t>()[(r % b) * kSeq + r / b];
        for (std::int64_t j = 0; j < kHidden; ++j)
          embed_->grad.data<float>()[t * kHidden + j] +=
              static_cast<float>(dx[static_cast<std::size_t>(r * kHidden + j)]);
      }
      return {};
    }
    std::vector<float> out(dx.begin(), dx.end());
    return {{"hidden", Tensor::from(out, hidden_shape(b))}};
  }

  std::size_t saved_count() const { return saved_.size(); }

 private:
  static Shape hidden_shape(std::int64_t mbs) { return {kSeq, mbs, kHidden}; }
  struct Saved {
    Batch batch;
    std::vector<std::vector<float>> inputs;  // per layer of the chunk
    std::vector<float> output;
    std::vector<double> dlogits;
  };
  PipelinePlacement placement_;
  ParameterSet params_;
  Parameter* embed_ = nullptr;
  Parameter* head_ = nullptr;
  std::map<std::int64_t, Parameter*> weights_, biases_;
  std::map<std::pair<int, std::int64_t>, Saved> saved_;
};

Batch micro_batch(std::int64_t k) {
  std::vector<std::int32_t> tokens(kMicroBatch * kSeq), labels(tokens.size());
  std::vector<float> mask(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((k * 7 + static_cast<std::int64_t>(i) * 3) % kVocab);
    labels[i] = static_cast<std::int32_t>((k * 5 + static_cast<std::int64_t>(i) * 2 + 1) % kVocab);
    mask[i] = (i + static_cast<std::size_t>(k)) % 4 == 3 ? 0.0f : 1.0f;
  }
  Batch batch;
  batch.set("tokens", Tensor::from(tokens, {kMicroBatch, kSeq}));
  batch.set("labels", Tensor::from(labels, {kMicroBatch, kSeq}));
  batch.set("loss_mask", Tensor::from(mask, {kMicroBatch, kSeq}));
  return batch;
}

// The toy's one loss term ("lm loss": masked loss sum over tokens); 0 where there is none (the
// ranks that do not compute the loss).
double loss_sum(const StepResult& r) {
  const LossTerm* t = r.find("lm loss");
  return t ? t->sum : 0.0;
}
double token_count(const StepResult& r) {
  const LossTerm* t = r.find("lm loss");
  return t ? t->count : 0.0;
}

StepResult run(ToyModel& model, const PipelineLayout& layout, int rank, Communicator& comm,
               std::int64_t m, bool backward) {
  auto options = [](std::int64_t) {
    StepOptions o;
    o.loss_scale = 0.25f;
    return o;
  };
  const PipelineStep step{layout,        rank,     comm,        m,      kMicroBatch,
                          Device::cpu(), backward, micro_batch, options};
  return run_pipeline_step(model, step);
}

void check_layout(int vp, std::int64_t m) {
  const int pp = test::mpi_runtime().world_size(), rank = test::mpi_runtime().world_rank();
  SCOPED_TRACE("pp " + std::to_string(pp) + " vp " + std::to_string(vp) + " micro-batches " +
               std::to_string(m));
  ParallelSizes sizes;
  sizes.pipeline = pp;
  ParallelState state = ParallelState::create(test::mpi_runtime(), sizes);
  Communicator& comm = state.comm(Group::pipeline);

  // The whole model on this rank alone, one micro-batch after another without the executor.
  ToyModel reference;
  reference.build(ModelBuildInfo{});
  StepResult expected;
  for (std::int64_t k = 0; k < m; ++k) {
    StepOptions o;
    o.loss_scale = 0.25f;
    expected.add(reference.step(micro_batch(k), o));
  }
  // The executor on a pipeline of one stage gives the same.
  {
    PipelineLayout whole;
    whole.num_layers = kLayers;
    ToyModel single;
    single.build(ModelBuildInfo{});
    auto self = make_self_communicator(rank);
    const StepResult one = run(single, whole, 0, *self, m, true);
    EXPECT_EQ(loss_sum(one), loss_sum(expected));
    EXPECT_EQ(token_count(one), token_count(expected));
  }

  PipelineLayout layout;
  layout.num_layers = kLayers;
  layout.pipeline_size = pp;
  layout.virtual_size = vp;
  ModelBuildInfo info;
  info.pipeline.rank = rank;
  info.pipeline.size = pp;
  for (int c = 0; c < vp; ++c)
    info.pipeline.chunks.push_back(stage_layers(layout, rank, c));
  ToyModel staged;
  staged.build(info);
  const StepResult got = run(staged, layout, rank, comm, m, true);
  EXPECT_EQ(staged.saved_count(), 0u) << "activations kept after their backward";

  if (rank == pp - 1) {
    EXPECT_NEAR(loss_sum(got), loss_sum(expected), 1e-12 * std::abs(loss_sum(expected)));
    EXPECT_EQ(token_count(got), token_count(expected));
  } else {
    EXPECT_EQ(loss_sum(got), 0.0);
  }
  ASSERT_GT(staged.parameters().size(), 0u);
  for (auto& p : staged.parameters()) {
    const Parameter* r = reference.parameters().find(p->name);
    ASSERT_NE(r, nullptr) << p->name;
    const auto a = p->grad.to_vector<float>(), e = r->grad.to_vector<float>();
    float scale = 0;
    for (float v : e)
      scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0.0f) << p->name << " has no gradient in the reference";
    for (std::size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], e[i], 1e-6f * scale) << p->name << "[" << i << "]";
  }
  // Forward only (evaluation) gives the same loss and leaves nothing behind.
  ToyModel eval;
  eval.build(info);
  const StepResult forward_only = run(eval, layout, rank, comm, m, false);
  if (rank == pp - 1) {
    EXPECT_NEAR(loss_sum(forward_only), loss_sum(expected), 1e-12 * std::abs(loss_sum(expected)));
  }
  EXPECT_EQ(eval.saved_count(), 0u);
}

TEST(PipelineExecutor, StageBuffersAreAllocatedOnTheModelsDevice) {
  // The meta device allocates nothing but keeps the device: what a GPU model's stages would get
  // (NCCL refuses host buffers), testable without a GPU.
  const SampleSpec spec = {{"hidden", DType::f32, {4, 2, 8}},
                           {"encoder_output", DType::bf16, {6, 2, 8}}};
  const NamedTensors meta = allocate_stage_buffers(spec, Device::meta());
  ASSERT_EQ(meta.size(), 2u);
  for (std::size_t i = 0; i < spec.size(); ++i) {
    EXPECT_EQ(meta[i].first, spec[i].name);
    EXPECT_TRUE(meta[i].second.device().is_meta());
    EXPECT_EQ(meta[i].second.shape(), spec[i].shape);
    EXPECT_EQ(meta[i].second.dtype(), spec[i].dtype);
  }
  EXPECT_EQ(allocate_stage_buffers(spec, Device::cpu())[1].second.device().type, Device::Type::cpu);
}

TEST(PipelineExecutor, OneFOneBMatchesTheWholeModel) {
  for (std::int64_t m : {1, 2, 3, 8})
    check_layout(1, m);
}

TEST(PipelineExecutor, InterleavedMatchesTheWholeModel) {
  const int pp = test::mpi_runtime().world_size();
  for (std::int64_t m : {static_cast<std::int64_t>(pp), 2 * static_cast<std::int64_t>(pp)})
    check_layout(2, m);
}

}  // namespace
}  // namespace megatron::train
