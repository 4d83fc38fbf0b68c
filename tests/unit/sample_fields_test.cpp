// Named sample fields, micro-batches and named losses: the contracts between dataset, trainer
// and model.
#include <gtest/gtest.h>

#include "megatron/batch.h"
#include "megatron/error.h"
#include "megatron/model.h"

namespace megatron {
namespace {

SampleSpec bert_like() {
  return {{"text", DType::i32, {8}, FieldKind::token_ids},
          {"padding_mask", DType::u8, {8}, FieldKind::mask},
          {"is_random", DType::i64, {}, FieldKind::value}};
}

std::string config_error(const SampleSpec& needed, const SampleSpec& provided) {
  try {
    check_sample_fields(needed, "gpt", provided, "bert");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SampleFields, MissingFieldNamesBothPluginsTheFieldAndWhatIsThere) {
  const SampleSpec gpt = {{"tokens", DType::i32, {}, FieldKind::token_ids}};
  EXPECT_EQ(config_error(gpt, bert_like()),
            "[model] type = \"gpt\" needs the sample field 'tokens' (int32), which [data] type = "
            "\"bert\" does not provide (it provides text (int32 [8]), padding_mask (uint8 [8]), "
            "is_random (int64 []))");
}

TEST(SampleFields, DtypeAndExactShapeMustAgree) {
  EXPECT_NE(config_error({{"text", DType::i64, {}}}, bert_like()).find("provides it as int32 [8]"),
            std::string::npos);
  EXPECT_NE(config_error({{"text", DType::i32, {9}}}, bert_like()), "");
  EXPECT_EQ(config_error({{"text", DType::i32, {8}}, {"is_random", DType::i64, {}}}, bert_like()),
            "");
  EXPECT_EQ(config_error({{"text", DType::i32, {}}}, bert_like()), "");  // any shape
}

// An optional field (GPT's position_ids) may be missing, but when provided must agree.
TEST(SampleFields, OptionalFieldsMayBeMissingButMustAgreeWhenThere) {
  const FieldSpec position_ids{"position_ids", DType::i32, {}, FieldKind::value, true};
  EXPECT_EQ(config_error({{"text", DType::i32, {}}, position_ids}, bert_like()), "");
  const FieldSpec padding_as_i32{"padding_mask", DType::i32, {}, FieldKind::mask, true};
  EXPECT_NE(config_error({padding_as_i32}, bert_like()).find("provides it as uint8 [8]"),
            std::string::npos);
}

TEST(Batch, SamplesFillRowsOfEveryField) {
  Batch b = Batch::allocate(bert_like(), 3);
  EXPECT_EQ(b.size(), 3);
  for (std::int64_t i = 0; i < 3; ++i) {
    SampleSlots s = b.sample(i);
    for (std::size_t k = 0; k < 8; ++k) {
      s.i32("text")[k] = static_cast<std::int32_t>(10 * i + static_cast<std::int64_t>(k));
      s.u8("padding_mask")[k] = k < 5;
    }
    ASSERT_EQ(s.i64("is_random").size(), 1u);
    s.i64("is_random")[0] = i;
  }
  EXPECT_EQ(b["text"].shape(), (Shape{3, 8}));
  EXPECT_EQ(b["is_random"].shape(), (Shape{3}));
  EXPECT_EQ(b["text"].data<std::int32_t>()[2 * 8 + 7], 27);
  EXPECT_EQ(b["padding_mask"].data<std::uint8_t>()[8 + 5], 0);
  EXPECT_EQ(b["is_random"].data<std::int64_t>()[2], 2);
}

TEST(Batch, WrongDtypeOrNameIsRefusedNamingTheField) {
  Batch b = Batch::allocate(bert_like(), 1);
  EXPECT_THROW((void)b.sample(0).f32("text"), Error);
  EXPECT_THROW((void)b.sample(0).i32("tokens"), Error);
  EXPECT_THROW((void)b.sample(1), Error);
  try {
    (void)b["tokens"];
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "the micro-batch's fields have no tensor 'tokens' (they have text, padding_mask, "
              "is_random)");
  }
}

TEST(StepResult, AddsByNameInFirstSeenOrderAndObjectiveSumsMeans) {
  StepResult a{{{"lm loss", 6.0, 3.0}, {"sop loss", 0.5, 1.0}}, {}};
  a.add({{{"sop loss", 1.5, 1.0}, {"lm loss", 2.0, 1.0}, {"accuracy", 3.0, 4.0, false}}, {}});
  ASSERT_EQ(a.losses.size(), 3u);
  EXPECT_EQ(a.losses[0].name, "lm loss");
  EXPECT_DOUBLE_EQ(a.losses[0].sum, 8.0);
  EXPECT_DOUBLE_EQ(a.losses[0].count, 4.0);
  EXPECT_DOUBLE_EQ(a.find("sop loss")->sum, 2.0);
  // lm 8/4 + sop 2/2; the accuracy metric is reported, not optimised.
  EXPECT_DOUBLE_EQ(a.objective(), 3.0);
  EXPECT_EQ(a.find("nothing"), nullptr);
}

TEST(StepResult, StacksOutputsOfMicroBatchesInOrder) {
  StepResult a{{}, {{"token_argmax", Tensor::from(std::vector<std::int64_t>{1, 2, 3, 4}, {2, 2})}}};
  a.add({{},
         {{"token_argmax", Tensor::from(std::vector<std::int64_t>{5, 6}, {1, 2})},
          {"token_loss", Tensor::from(std::vector<float>{0.5f, 1.5f}, {1, 2})}}});
  ASSERT_EQ(a.outputs.size(), 2u);
  EXPECT_EQ(a.outputs[0].second.shape(), (Shape{3, 2}));
  EXPECT_EQ(a.outputs[0].second.to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(a.outputs[1].first, "token_loss");  // first seen in the second micro-batch
  // Micro-batches of different per-sample shapes cannot be stacked.
  EXPECT_THROW(a.add({{}, {{"token_argmax", Tensor::from(std::vector<std::int64_t>{7}, {1, 1})}}}),
               Error);
}

}  // namespace
}  // namespace megatron
