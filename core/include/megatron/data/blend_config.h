// The [data] keys that choose a dataset plugin's data as Megatron's --data-path, --split and
// --train/valid/test-data-path do, read into blend specs. Shared by the dataset plugins whose
// splits follow BlendedMegatronDatasetBuilder (gpt, bert).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/config/schema.h"
#include "megatron/config/table.h"
#include "megatron/data/split.h"

namespace megatron::data {

// One blend as configured: dataset path prefixes (absolute) and their weights (empty: none given).
struct BlendSpec {
  std::string key;  // the config key it came from, for messages
  std::vector<std::string> prefixes;
  std::vector<double> weights;
};

// Where every split's data comes from: data_path divided by `split`, or each split's own blend.
struct BlendConfig {
  std::optional<BlendSpec> blend;                           // data_path
  std::array<std::optional<BlendSpec>, 3> blend_per_split;  // train/valid/test_data_path
  std::optional<std::string> split;                         // nullopt with per-split blends
  SplitMatrix split_matrix{};                               // from `split`
};

// The plugin's help text for data_path and split (the per-split keys' text is common).
struct BlendKeyDocs {
  std::string data_path;
  std::string split;
};

// Declares data_path, split, train_data_path, valid_data_path and test_data_path, in that order,
// and their cross-key rule: data_path or per-split paths (one of them, not both), `split` only
// with data_path, and a `split` that parses.
void declare_blend_keys(config::TableSchema& schema, const BlendKeyDocs& docs);

// Reads the keys of a validated table. Each prefix is made absolute (the cache descriptions hold
// it) and must name an existing P.idx and P.bin; otherwise throws ConfigError naming the key and
// the file, and saying that `preprocess_command` (e.g. "megatron-app preprocess") writes them.
BlendConfig read_blend_config(const config::ConfigTable& table,
                              std::string_view preprocess_command);

// The config key of a split's own blend: "train_data_path", "valid_data_path", "test_data_path".
std::string per_split_key(Split split);

// Each prefix the config names, once, with the key it is first named under (data_path, then the
// per-split keys in split order): the low-level datasets to open.
struct PrefixUse {
  std::string prefix;
  std::string key;
};
std::vector<PrefixUse> distinct_prefixes(const BlendConfig& config);

}  // namespace megatron::data
