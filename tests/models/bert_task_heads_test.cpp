// BERT with a task head (Megatron's legacy Classification and MultipleChoice): fp64
// finite-difference gradients of every parameter, the parameters a head adds and drops, the
// per-sample outputs, and that a multiple-choice sample's choices are scored as one softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "bert_model.h"
#include "bert_test_config.h"
#include "common/model_checks.h"
#include "megatron/error.h"

namespace megatron::bert {
namespace {

// The head's dropout is off in these fp64 checks (training = false), but declared.
BertConfig tiny_config(bool binary_head) {
  return tiny_bert_config(binary_head, 0.1f);
}

// `samples` samples of `choices` sequences (1: classification) of length s, with padding.
Batch task_batch(std::int64_t samples, std::int64_t choices, std::int64_t s, std::int64_t vocab,
                 std::int64_t classes, unsigned seed) {
  std::mt19937 rng(seed);
  const std::int64_t rows = samples * choices;
  std::vector<std::int32_t> text(static_cast<std::size_t>(rows * s)), types(text.size()),
      padding(text.size()), label(static_cast<std::size_t>(samples));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t real = s - static_cast<std::int64_t>(rng() % 3);
    for (std::int64_t j = 0; j < s; ++j) {
      const auto k = static_cast<std::size_t>(r * s + j);
      text[k] = j < real ? static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab)) : 0;
      types[k] = j < real && j > 3 ? 1 : 0;
      padding[k] = j < real ? 1 : 0;
    }
  }
  for (auto& l : label)
    l = static_cast<std::int32_t>(rng() % static_cast<unsigned>(classes));
  const Shape shape = choices > 1 ? Shape{samples, choices, s} : Shape{samples, s};
  Batch batch;
  batch.set("text", Tensor::from(text, shape));
  batch.set("types", Tensor::from(types, shape));
  batch.set("padding_mask", Tensor::from(padding, shape));
  batch.set("label", Tensor::from(label, {samples}));
  return batch;
}

std::unique_ptr<BertModel> build(const BertConfig& c, const TaskHead& head,
                                 TaskHeadParameters* names = nullptr) {
  auto m = std::make_unique<BertModel>(c);
  const TaskHeadParameters n = m->select_head(head);
  if (names) *names = n;
  ModelBuildInfo info;
  info.vocab_size = 37;
  info.seq_length = 7;
  info.param_dtype = DType::f64;
  info.seed = 17;
  m->build(info);
  return m;
}

StepResult evaluate(BertModel& m, const Batch& batch, bool outputs = false) {
  StepOptions o;
  o.backward = false;
  o.training = false;
  o.outputs = outputs;
  return m.step(batch, o);
}

TEST(BertTaskHeads, ClassificationGradientsMatchFiniteDifferences) {
  auto m = build(tiny_config(true), {TaskHead::Kind::classification, 3});
  const Batch batch = task_batch(3, 1, 7, 37, 3, 4);
  StepOptions o;
  o.training = false;
  const StepResult r = m->step(batch, o);
  ASSERT_EQ(r.losses.size(), 1u);
  EXPECT_EQ(r.losses[0].name, "lm loss");
  test::expect_gradients_match_finite_differences(m->parameters(),
                                                  [&] { return evaluate(*m, batch).objective(); });
}

TEST(BertTaskHeads, MultipleChoiceGradientsMatchFiniteDifferences) {
  auto m = build(tiny_config(false), {TaskHead::Kind::multiple_choice, 4});
  const Batch batch = task_batch(2, 4, 7, 37, 4, 8);
  StepOptions o;
  o.training = false;
  m->step(batch, o);
  test::expect_gradients_match_finite_differences(m->parameters(),
                                                  [&] { return evaluate(*m, batch).objective(); });
}

TEST(BertTaskHeads, HeadsReplaceThePretrainingHeads) {
  TaskHeadParameters names;
  auto m = build(tiny_config(true), {TaskHead::Kind::classification, 3}, &names);
  EXPECT_EQ(names.added, std::vector<std::string>{"classification_head."});
  EXPECT_EQ(names.dropped, (std::vector<std::string>{"lm_head.", "output_layer.", "binary_head."}));
  EXPECT_NE(m->parameters().find("classification_head.weight"), nullptr);
  EXPECT_EQ(m->parameters().find("classification_head.weight")->global_shape, (Shape{3, 16}));
  EXPECT_NE(m->parameters().find("classification_head.bias"), nullptr);
  EXPECT_NE(m->parameters().find("pooler.dense.weight"), nullptr);
  EXPECT_NE(m->parameters().find("embedding.tokentype_embeddings.weight"), nullptr);
  for (const auto& p : m->parameters()) {
    for (const std::string& gone : names.dropped)
      EXPECT_NE(p->name.rfind(gone, 0), 0u) << p->name;
  }
  // Without the binary head the pretrained checkpoint has no pooler: it is new too.
  auto mc = build(tiny_config(false), {TaskHead::Kind::multiple_choice, 4}, &names);
  EXPECT_EQ(names.added, (std::vector<std::string>{"multichoice_head.", "pooler."}));
  EXPECT_EQ(mc->parameters().find("multichoice_head.weight")->global_shape, (Shape{1, 16}));
  EXPECT_THROW(BertModel(tiny_config(true)).select_head({TaskHead::Kind::classification, 1}),
               ConfigError);
}

TEST(BertTaskHeads, OutputsArePerSampleScoresAndTheirArgmax) {
  auto m = build(tiny_config(false), {TaskHead::Kind::multiple_choice, 4});
  const Batch batch = task_batch(3, 4, 7, 37, 4, 12);
  const StepResult r = evaluate(*m, batch, true);
  const Tensor& logits = named_tensor(r.outputs, "logits", "outputs");
  const Tensor& prediction = named_tensor(r.outputs, "prediction", "outputs");
  ASSERT_EQ(logits.shape(), (Shape{3, 4}));
  ASSERT_EQ(prediction.shape(), (Shape{3}));
  const auto l = logits.to_vector<float>();
  const auto p = prediction.to_vector<std::int64_t>();
  const auto labels = batch["label"].to_vector<std::int32_t>();
  double loss = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const auto row = l.begin() + static_cast<std::ptrdiff_t>(i * 4);
    EXPECT_EQ(p[i], std::max_element(row, row + 4) - row);
    // The choices of one sample form one softmax: the loss is the mean of -log softmax[label].
    const double m_ = *std::max_element(row, row + 4);
    double z = 0;
    for (int c = 0; c < 4; ++c)
      z += std::exp(row[c] - m_);
    loss += std::log(z) + m_ - row[labels[i]];
  }
  EXPECT_NEAR(r.losses[0].sum, loss / 3, 1e-6);
  // Each choice is scored on its own: changing one choice's tokens changes only that score.
  Batch changed = task_batch(3, 4, 7, 37, 4, 12);
  Tensor text = changed["text"].contiguous();
  text.data<std::int32_t>()[2 * 7 + 1] = (text.data<std::int32_t>()[2 * 7 + 1] + 1) % 37;
  changed.set("text", text);
  const auto l2 =
      named_tensor(evaluate(*m, changed, true).outputs, "logits", "").to_vector<float>();
  for (std::size_t k = 0; k < l.size(); ++k) {
    if (k == 2) {
      EXPECT_NE(l2[k], l[k]);
    } else {
      EXPECT_EQ(l2[k], l[k]) << k;
    }
  }
}

}  // namespace
}  // namespace megatron::bert
