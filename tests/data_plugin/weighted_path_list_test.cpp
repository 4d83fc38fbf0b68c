// The config kind behind data_path: Megatron's --data-path list of paths, or of weights and paths,
// with paths resolved like any other path and weights kept as numbers written out.
#include <gtest/gtest.h>

#include "megatron/config/raw_config.h"
#include "megatron/config/validate.h"
#include "megatron/error.h"

namespace megatron::config {
namespace {

ConfigTable validate(const std::string& value) {
  TableSchema schema("data");
  schema.optional_weighted_path_list("data_path", "blend");
  const RawConfig raw =
      RawConfig::load_string("[data]\ndata_path = " + value + "\n", "/cfg/t.toml");
  return validate_table(raw.find("data"), schema);
}

std::string error_of(const std::string& value) {
  try {
    validate(value);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

using Strings = std::vector<std::string>;

TEST(WeightedPathList, PathsAloneAreResolvedRelativeToTheFile) {
  EXPECT_EQ(validate("[\"a\", \"/abs/b\", \"../c\"]").string_list("data_path"),
            (Strings{"/cfg/a", "/abs/b", "/c"}));
  const WeightedPaths split = split_weighted_paths({"/cfg/a", "/abs/b"});
  EXPECT_EQ(split.paths, (Strings{"/cfg/a", "/abs/b"}));
  EXPECT_TRUE(split.weights.empty());
}

TEST(WeightedPathList, ALoneStringIsOnePath) {
  EXPECT_EQ(validate("\"corpus\"").string_list("data_path"), (Strings{"/cfg/corpus"}));
}

TEST(WeightedPathList, NumbersAlternatingWithPathsAreWeights) {
  const Strings stored = validate("[0.3, \"a\", 7, \"b\"]").string_list("data_path");
  EXPECT_EQ(stored, (Strings{"0.3", "/cfg/a", "7", "/cfg/b"}));
  const WeightedPaths split = split_weighted_paths(stored);
  EXPECT_EQ(split.paths, (Strings{"/cfg/a", "/cfg/b"}));
  EXPECT_EQ(split.weights, (std::vector<double>{0.3, 7.0}));
}

TEST(WeightedPathList, NumbersInStringsAreWeightsAsOnMegatronsCommandLine) {
  const Strings stored = validate("[\"0.25\", \"a\", \" 1e-1 \", \"b\"]").string_list("data_path");
  EXPECT_EQ(stored, (Strings{"0.25", "/cfg/a", " 1e-1 ", "/cfg/b"}));
  EXPECT_EQ(split_weighted_paths(stored).weights, (std::vector<double>{0.25, 0.1}));
  // Megatron's rule: an odd length, or a non-number in a weight position, means paths only.
  EXPECT_EQ(validate("[\"1\", \"a\", \"b\"]").string_list("data_path"),
            (Strings{"/cfg/1", "/cfg/a", "/cfg/b"}));
}

TEST(WeightedPathList, PrintedValueReadsBackTheSame) {
  const Strings stored = validate("[0.1, \"a\", 0.9, \"/x/b\"]").string_list("data_path");
  EXPECT_EQ(validate(format_value(stored)).string_list("data_path"), stored);
}

TEST(WeightedPathList, MistakesAreRefusedWithTheirLocation) {
  const std::string numbers_without_pairs = error_of("[0.3, \"a\", \"b\"]");
  EXPECT_NE(numbers_without_pairs.find("t.toml:2:14: data.data_path: item 1 is"), std::string::npos)
      << numbers_without_pairs;
  EXPECT_NE(error_of("[0.3, \"a\", 0.7, 2]").find("expected a path after weight 0.7"),
            std::string::npos);
  EXPECT_NE(error_of("[-1, \"a\"]").find("weight -1 of \"a\" must be a finite number > 0"),
            std::string::npos);
  EXPECT_NE(error_of("[0, \"a\"]").find("must be a finite number > 0"), std::string::npos);
  EXPECT_NE(error_of("[]").find("expected at least one path"), std::string::npos);
  EXPECT_NE(error_of("[\"\"]").find("a path is empty"), std::string::npos);
  EXPECT_NE(error_of("[true]").find("an item is"), std::string::npos);
  EXPECT_NE(error_of("3").find("expected a list of paths"), std::string::npos);
}

TEST(WeightedPathList, ParseWeightReadsNumbersAsPythonsFloat) {
  EXPECT_EQ(parse_weight("0.5"), 0.5);
  EXPECT_EQ(parse_weight(" +2 "), 2.0);
  EXPECT_EQ(parse_weight("1e3"), 1000.0);
  EXPECT_FALSE(parse_weight("data/a"));
  EXPECT_FALSE(parse_weight("1.5x"));
  EXPECT_FALSE(parse_weight(""));
  EXPECT_FALSE(parse_weight("+-1"));
}

}  // namespace
}  // namespace megatron::config
