// The data_path / split / per-split path keys: declaration, cross-key rule and reading.
#include "megatron/data/blend_config.h"

#include <algorithm>
#include <filesystem>

#include "megatron/config/value.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/error.h"

namespace megatron::data {

namespace {

using config::ConfigTable;

constexpr std::array<const char*, 3> kPerSplitKeys = {"train_data_path", "valid_data_path",
                                                      "test_data_path"};

bool any_per_split(const ConfigTable& t) {
  for (const char* key : kPerSplitKeys) {
    if (t.has(key)) return true;
  }
  return false;
}

// Absolute, so the cache descriptions (which hold the paths) do not depend on the directory the
// job was started from when the config file was named by a relative path.
std::string absolute(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}

BlendSpec read_blend(const ConfigTable& t, const std::string& key,
                     std::string_view preprocess_command) {
  const config::WeightedPaths paths = config::split_weighted_paths(t.string_list(key));
  BlendSpec spec{key, {}, paths.weights};
  for (const std::string& prefix : paths.paths)
    spec.prefixes.push_back(absolute(prefix));
  for (const std::string& prefix : spec.prefixes) {
    for (const auto& file : {idx_path(prefix), bin_path(prefix)}) {
      if (!std::filesystem::is_regular_file(file)) {
        t.fail(key, "dataset file " + file.string() +
                        " does not exist (a path here is a prefix P naming P.idx and P.bin, as `" +
                        std::string(preprocess_command) + "` writes them)");
      }
    }
  }
  return spec;
}

}  // namespace

std::string per_split_key(Split split) {
  return kPerSplitKeys[static_cast<std::size_t>(split)];
}

void declare_blend_keys(config::TableSchema& s, const BlendKeyDocs& docs) {
  s.optional_weighted_path_list("data_path", docs.data_path)
      .string("split", std::string(kDefaultSplit), docs.split)
      .optional_weighted_path_list("train_data_path", "the train split's own blend (no `split`)")
      .optional_weighted_path_list("valid_data_path", "the valid split's own blend (no `split`)")
      .optional_weighted_path_list("test_data_path", "the test split's own blend (no `split`)");

  s.rule([](const ConfigTable& t) {
    if (t.has("data_path") && any_per_split(t)) {
      for (const char* key : kPerSplitKeys) {
        if (t.has(key)) {
          t.fail(key,
                 "data_path and per-split paths cannot be combined: give data_path with "
                 "`split`, or train_data_path / valid_data_path / test_data_path");
        }
      }
    }
    if (!t.has("data_path") && !any_per_split(t)) {
      t.fail("data_path",
             "required key is missing: give data_path, or train_data_path / valid_data_path / "
             "test_data_path");
    }
    if (!t.has("data_path") && t.is_set("split")) {
      t.fail("split", "split divides data_path; the per-split paths are used as they are");
    }
    try {
      parse_split(t.string("split"));
    } catch (const Error& e) {
      t.fail("split", e.what());
    }
  });
}

BlendConfig read_blend_config(const ConfigTable& t, std::string_view preprocess_command) {
  BlendConfig c;
  if (t.has("data_path")) {
    c.blend = read_blend(t, "data_path", preprocess_command);
    c.split = t.string("split");
    c.split_matrix = split_matrix(parse_split(*c.split));
  }
  for (Split split : kSplits) {
    const std::string key = per_split_key(split);
    if (t.has(key)) {
      c.blend_per_split[static_cast<std::size_t>(split)] = read_blend(t, key, preprocess_command);
    }
  }
  return c;
}

std::vector<PrefixUse> distinct_prefixes(const BlendConfig& config) {
  std::vector<const BlendSpec*> specs;
  if (config.blend) specs.push_back(&*config.blend);
  for (const auto& spec : config.blend_per_split) {
    if (spec) specs.push_back(&*spec);
  }
  std::vector<PrefixUse> uses;
  for (const BlendSpec* spec : specs) {
    for (const std::string& prefix : spec->prefixes) {
      const bool seen = std::any_of(uses.begin(), uses.end(),
                                    [&](const PrefixUse& use) { return use.prefix == prefix; });
      if (!seen) uses.push_back({prefix, spec->key});
    }
  }
  return uses;
}

}  // namespace megatron::data
