// The public pretrained loader: what may differ (initialised and skipped tensors, by prefix),
// what is refused (missing, reshaped and unknown tensors, another [model] type, each naming the
// tensor and both shapes) and that a refusal leaves the model untouched.
#include <gtest/gtest.h>

#include <filesystem>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/error.h"
#include "megatron/parallel/mpi_runtime.h"
#include "megatron/train/pretrained.h"

namespace megatron {
namespace {

Parameter param(const std::string& name, Shape shape, float fill) {
  Parameter p;
  p.name = name;
  p.global_shape = shape;
  p.value = Tensor::full(shape, DType::f32, fill);
  p.grad = Tensor::zeros(shape, DType::f32);
  return p;
}

class PretrainedLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pretrained_load_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    checkpoint::CheckpointState s;
    s.iteration = 7;
    s.config_toml = "[model]\ntype = \"bert\"\nnum_layers = 1\n";
    s.tensors["model/encoder.weight"] = Tensor::full({2, 3}, DType::f32, 1.5);
    s.tensors["model/lm_head.dense.weight"] = Tensor::full({3, 3}, DType::f32, 2.0);
    s.tensors["model/binary_head.weight"] = Tensor::full({2, 3}, DType::f32, 3.0);
    s.tensors["optimizer/exp_avg/encoder.weight"] = Tensor::zeros({2, 3}, DType::f32);
    file_ = checkpoint::save_checkpoint(dir_, s);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A fine-tuning model: the pretrained encoder plus a new classification head.
  ParameterSet classifier(Shape encoder_shape = {2, 3}) {
    ParameterSet params;
    params.add(param("encoder.weight", encoder_shape, 0.0f));
    params.add(param("classification_head.weight", {4, 3}, 0.25f));
    return params;
  }
  std::string refusal(ParameterSet& params, const train::PretrainedRules& rules) {
    try {
      train::load_pretrained(dir_, params, parallel_, rules, *log_);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  }

  MpiRuntime runtime_{MpiRuntime::Mode::single_process};
  ParallelState parallel_ = ParallelState::create(runtime_, ParallelSizes{});
  std::shared_ptr<Logger> log_ = make_logger({"warn", "", 0, 1});
  std::filesystem::path dir_, file_;
};

TEST_F(PretrainedLoad, InitialisesNewHeadsAndSkipsPretrainingHeads) {
  ParameterSet params = classifier();
  train::PretrainedRules rules;
  rules.initialise = {"classification_head."};
  rules.skip = {"lm_head.", "binary_head."};
  rules.model_type = "bert";
  const train::PretrainedReport report =
      train::load_pretrained(dir_, params, parallel_, rules, *log_);
  EXPECT_EQ(report.file, file_);
  EXPECT_EQ(report.iteration, 7);
  EXPECT_EQ(report.loaded, std::vector<std::string>{"encoder.weight"});
  EXPECT_EQ(report.initialised, std::vector<std::string>{"classification_head.weight"});
  EXPECT_EQ(report.skipped,
            (std::vector<std::string>{"binary_head.weight", "lm_head.dense.weight"}));
  EXPECT_EQ(params.find("encoder.weight")->value.to_vector<float>(), std::vector<float>(6, 1.5f));
  // The new head keeps its own initialisation.
  EXPECT_EQ(params.find("classification_head.weight")->value.to_vector<float>(),
            std::vector<float>(12, 0.25f));
}

TEST_F(PretrainedLoad, RefusesWhatTheRulesDoNotAllowAndLeavesTheModelAsBuilt) {
  {
    ParameterSet params = classifier();
    train::PretrainedRules rules;
    rules.skip = {"lm_head.", "binary_head."};
    const std::string message = refusal(params, rules);
    EXPECT_NE(message.find("has no tensor 'classification_head.weight', which the model has with "
                           "shape [4, 3]"),
              std::string::npos)
        << message;
    EXPECT_EQ(params.find("encoder.weight")->value.to_vector<float>(), std::vector<float>(6, 0.0f));
  }
  {
    ParameterSet params = classifier();
    train::PretrainedRules rules;
    rules.initialise = {"classification_head."};
    rules.skip = {"lm_head."};
    const std::string message = refusal(params, rules);
    EXPECT_NE(message.find("has tensor 'binary_head.weight' of shape [2, 3], which this model does "
                           "not have"),
              std::string::npos)
        << message;
  }
  {
    ParameterSet params = classifier({3, 3});
    train::PretrainedRules rules;
    rules.initialise = {"classification_head."};
    rules.skip = {"lm_head.", "binary_head."};
    const std::string message = refusal(params, rules);
    EXPECT_NE(
        message.find("tensor 'encoder.weight' has shape [2, 3] there, the model expects [3, 3]"),
        std::string::npos)
        << message;
  }
  {
    ParameterSet params = classifier();
    train::PretrainedRules rules;
    rules.initialise = {"classification_head."};
    rules.skip = {"lm_head.", "binary_head."};
    rules.model_type = "gpt";
    const std::string message = refusal(params, rules);
    EXPECT_NE(message.find("was saved from a 'bert' model; this run builds a 'gpt' model"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(file_.string()), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace megatron
