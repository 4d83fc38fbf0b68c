// Test helper: runs the C++ data-index code on the cases in a JSON file and writes what it computes
// (.npy arrays and a results JSON) for megatron_reference.py to compare with numpy and with its
// own re-implementation of Megatron. Usage: data_indices_probe CASES.json OUTPUT_DIR
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megatron/data/blend.h"
#include "megatron/data/gpt_indices.h"
#include "megatron/data/npy.h"
#include "megatron/data/numpy_random.h"
#include "megatron/data/split.h"
#include "megatron/error.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using namespace megatron::data;

// Doubles travel as text with 17 significant digits, which round-trips exactly.
std::string exact(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

// OUT_DIR/ID.npy with its extension replaced by a suffix such as ".sample_index.npy".
fs::path sibling(const fs::path& out, std::string_view suffix) {
  fs::path path = out;
  path.replace_extension();
  path += suffix;
  return path;
}

template <typename T>
void shuffle_arange(NumpyRandomState& random, std::int64_t n, const fs::path& out) {
  std::vector<T> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    values[static_cast<std::size_t>(i)] = static_cast<T>(i);
  random.shuffle(std::span(values));
  write_npy(out, IndexArray(std::move(values), {static_cast<std::size_t>(n)}));
}

Json run_shuffle(const Json& c, const fs::path& out) {
  NumpyRandomState random(c.at("seed").get<std::int64_t>());
  const std::string dtype = c.at("dtype");
  const std::int64_t n = c.at("n");
  if (dtype == "int32") shuffle_arange<std::int32_t>(random, n, out);
  if (dtype == "uint32") shuffle_arange<std::uint32_t>(random, n, out);
  if (dtype == "int64") shuffle_arange<std::int64_t>(random, n, out);
  return Json::object();
}

Json run_raw32(const Json& c, const fs::path& out) {
  NumpyRandomState random(c.at("seed").get<std::int64_t>());
  const auto count = c.at("count").get<std::size_t>();
  std::vector<std::uint32_t> values(count);
  for (auto& v : values)
    v = random.next_uint32();
  write_npy(out, IndexArray(std::move(values), {count}));
  return Json::object();
}

Json run_interval(const Json& c, const fs::path& out) {
  NumpyRandomState random(c.at("seed").get<std::int64_t>());
  std::vector<std::int64_t> values;
  for (const auto& max : c.at("maxes")) {
    values.push_back(static_cast<std::int64_t>(random.random_interval(max.get<std::uint64_t>())));
  }
  write_npy(out, IndexArray(std::move(values), {c.at("maxes").size()}));
  return Json::object();
}

Json run_split(const Json& c) {
  const std::array<double, 3> weights = parse_split(c.at("split").get<std::string>());
  const SplitMatrix matrix = split_matrix(weights);
  Json result;
  for (double w : weights)
    result["weights"].push_back(exact(w));
  for (const auto& bookends : matrix) {
    result["matrix"].push_back(
        bookends ? Json::array({exact(bookends->begin), exact(bookends->end)}) : Json(nullptr));
  }
  for (std::int64_t elements : c.at("num_elements")) {
    Json ranges = Json::array();
    for (const auto& bookends : matrix) {
      if (!bookends) {
        ranges.push_back(nullptr);
        continue;
      }
      const ElementRange range = split_element_range(*bookends, elements);
      ranges.push_back(Json::array({range.begin, range.end}));
    }
    result["ranges"].push_back(ranges);
  }
  return result;
}

GptIndexOptions gpt_options(const Json& c) {
  GptIndexOptions options;
  options.sequence_length = c.at("seq_length");
  if (!c.at("num_samples").is_null()) options.num_samples = c.at("num_samples").get<std::int64_t>();
  options.seed = c.at("seed");
  options.add_extra_token = c.at("add_extra_token");
  options.drop_last_partial_sequence = c.at("drop_last");
  return options;
}

Json run_gpt(const Json& c, const fs::path& out) {
  const auto lengths = c.at("lengths").get<std::vector<std::int32_t>>();
  const auto ids = c.at("ids").get<std::vector<std::int32_t>>();
  const GptIndices indices = build_gpt_indices(ids, lengths, gpt_options(c));
  write_npy(sibling(out, ".document_index.npy"),
            IndexArray(indices.document_index, {indices.document_index.size()}));
  write_npy(sibling(out, ".sample_index.npy"), indices.sample_index);
  write_npy(sibling(out, ".shuffle_index.npy"), indices.shuffle_index);
  std::vector<std::int64_t> pieces;
  for (std::int64_t item = 0; item < indices.size(); ++item) {
    for (const SamplePiece& piece : indices.sample_pieces(item, lengths)) {
      pieces.insert(pieces.end(), {item, piece.sequence_id, piece.offset, piece.length});
    }
  }
  write_npy(sibling(out, ".pieces.npy"), IndexArray(pieces, {pieces.size() / 4, 4}));
  return {{"num_epochs", indices.num_epochs},
          {"separate_final_epoch", indices.separate_final_epoch},
          {"tokens_per_epoch", indices.tokens_per_epoch}};
}

Json run_blend(const Json& c, const fs::path& out) {
  BlendRequest request;
  if (!c.at("weights").is_null()) request.weights = c.at("weights").get<std::vector<double>>();
  if (!c.at("size").is_null()) request.size = c.at("size").get<std::int64_t>();
  request.surplus = c.at("surplus");
  const auto lengths = c.at("lengths").get<std::vector<std::int64_t>>();
  Json result;
  for (const auto& planned : plan_constituent_samples(request, lengths.size())) {
    result["plan"].push_back(planned ? Json(*planned) : Json(nullptr));
  }
  const Blend blend = build_blend(request, lengths);
  for (double w : blend.weights)
    result["weights"].push_back(exact(w));
  result["size"] = blend.size ? Json(*blend.size) : Json(nullptr);
  write_npy(sibling(out, ".dataset_index.npy"),
            IndexArray(blend.indices.dataset_index, {blend.indices.dataset_index.size()}));
  write_npy(
      sibling(out, ".dataset_sample_index.npy"),
      IndexArray(blend.indices.dataset_sample_index, {blend.indices.dataset_sample_index.size()}));
  return result;
}

Json run_description(const Json& c) {
  GptDatasetIdentity identity;
  identity.dataset_path = c.at("dataset_path");
  identity.split = kSplits.at(c.at("split_index").get<std::size_t>());
  if (!c.at("split").is_null()) {
    identity.split_string = c.at("split").get<std::string>();
    identity.split_matrix = split_matrix(parse_split(*identity.split_string));
  }
  identity.tokenizer.class_name = c.at("tokenizer_class");
  identity.tokenizer.paths = c.at("tokenizer_paths").get<std::vector<std::string>>();
  for (const auto& [key, value] : c.at("tokenizer_options").items()) {
    identity.tokenizer.options.emplace_back(key, value.get<std::string>());
  }
  const std::string description = gpt_description(identity, gpt_options(c));
  return {{"description", description}, {"md5", description_md5(description)}};
}

Json run_npy_write(const Json& c, const fs::path& out) {
  const std::string dtype = c.at("dtype");
  const auto shape = c.at("shape").get<std::vector<std::size_t>>();
  const Json& values = c.at("values");
  if (dtype == "int16") write_npy(out, IndexArray(values.get<std::vector<std::int16_t>>(), shape));
  if (dtype == "int32") write_npy(out, IndexArray(values.get<std::vector<std::int32_t>>(), shape));
  if (dtype == "uint32")
    write_npy(out, IndexArray(values.get<std::vector<std::uint32_t>>(), shape));
  if (dtype == "int64") write_npy(out, IndexArray(values.get<std::vector<std::int64_t>>(), shape));
  return Json::object();
}

Json run_npy_read(const Json& c) {
  const IndexArray array = read_npy(c.at("path").get<std::string>());
  Json values = Json::array();
  for (std::size_t i = 0; i < array.size(); ++i)
    values.push_back(array[i]);
  return {{"dtype", dtype_name(array.dtype())}, {"shape", array.shape()}, {"values", values}};
}

Json run_case(const Json& c, const fs::path& out_dir) {
  const std::string kind = c.at("kind");
  const fs::path out = out_dir / (c.at("id").get<std::string>() + ".npy");
  if (kind == "shuffle") return run_shuffle(c, out);
  if (kind == "raw32") return run_raw32(c, out);
  if (kind == "interval") return run_interval(c, out);
  if (kind == "split") return run_split(c);
  if (kind == "gpt") return run_gpt(c, out);
  if (kind == "blend") return run_blend(c, out);
  if (kind == "description") return run_description(c);
  if (kind == "npy_write") return run_npy_write(c, out);
  if (kind == "npy_read") return run_npy_read(c);
  throw std::runtime_error("unknown case kind '" + kind + "'");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: data_indices_probe CASES.json OUTPUT_DIR\n";
    return 2;
  }
  try {
    std::ifstream in(argv[1]);
    const Json cases = Json::parse(in);
    Json results = Json::object();
    for (const Json& c : cases) {
      try {
        results[c.at("id").get<std::string>()] = run_case(c, argv[2]);
      } catch (const megatron::Error& error) {
        results[c.at("id").get<std::string>()] = {{"error", error.what()}};
      }
    }
    std::ofstream(fs::path(argv[2]) / "results.json") << results.dump(1);
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "data_indices_probe: " << error.what() << "\n";
    return 1;
  }
}
