// Megatron's tasks/data_utils.py and the tasks' dataset names, against values its Python gives.
#include <gtest/gtest.h>

#include "glue_data.h"
#include "megatron/tasks/task_text.h"

namespace megatron::tasks {
namespace {

TEST(TaskText, CleanTextAsMegatron) {
  EXPECT_EQ(clean_text("A  b\n\tc . . . . d"), "A b c. ... d");
  EXPECT_EQ(clean_text(" x . y\xc2\xa0\xc2\xa0z "), " x. y z ");  // NBSP is whitespace to \s
  EXPECT_EQ(clean_text("end . . ."), "end.. .");
}

TEST(TaskText, SequencesAsBuildTokensTypesPaddings) {
  auto check = [](const TokenSequence& s, std::vector<TokenId> ids, std::vector<TokenId> types,
                  std::vector<std::int32_t> paddings) {
    EXPECT_EQ(s.ids, ids);
    EXPECT_EQ(s.types, types);
    EXPECT_EQ(s.paddings, paddings);
  };
  const std::vector<TokenId> b1 = {7}, b3 = {9, 10, 11};
  check(build_sequence({5, 6}, &b1, 8, 101, 102, 0), {101, 5, 6, 102, 7, 102, 0, 0},
        {0, 0, 0, 0, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1, 0, 0});
  // Too long: cut to seq - 1, then [SEP] (of type 1 with a second segment).
  check(build_sequence({5, 6, 7, 8}, &b3, 8, 101, 102, 0), {101, 5, 6, 7, 8, 102, 9, 102},
        {0, 0, 0, 0, 0, 0, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1});
  check(build_sequence({5, 6, 7, 8, 9, 10, 11}, nullptr, 8, 101, 102, 0),
        {101, 5, 6, 7, 8, 9, 10, 102}, {0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1});
  check(build_sequence({5}, nullptr, 8, 101, 102, 0), {101, 5, 102, 0, 0, 0, 0, 0},
        {0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 1, 0, 0, 0, 0, 0});
}

TEST(TaskText, SetNamesAsMegatronDerivesThem) {
  using glue::glue_set_name;
  using glue::GlueTask;
  EXPECT_EQ(glue_set_name(GlueTask::mnli, "/data/MNLI/dev_matched.tsv"), "dev-matched");
  // str.strip('.tsv') removes characters, not a suffix: Megatron calls QQP's dev.tsv "de".
  EXPECT_EQ(glue_set_name(GlueTask::qqp, "/x/QQP/dev.tsv"), "de");
  EXPECT_EQ(glue_set_name(GlueTask::mnli, "/tmp/test_mnli.tsv"), "tmp/test-mnli");
  EXPECT_EQ(std::string(strip_chars(after_last("/a/RACE/dev/high", "RACE"), "/")), "dev/high");
}

}  // namespace
}  // namespace megatron::tasks
