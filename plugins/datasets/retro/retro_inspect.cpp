// `megatron-app retro inspect`: a sample's chunks with their retrieved neighbours as text, the way
// a user checks that retrieval makes sense (Megatron's tools/retro/cli print_neighbor_texts).
#include <iostream>
#include <string>

#include "megatron/error.h"
#include "query_stage.h"
#include "retro_dataset.h"

namespace megatron::retro_data {

namespace {

constexpr const char* kUsage =
    "usage: megatron-app retro inspect --config FILE [--split train|valid|test] [--sample N]\n"
    "                                  [--chunk C]\n"
    "Prints sample N (default 0) of the split (default train) chunk by chunk (or chunk C only),\n"
    "each with its retro_num_neighbors neighbours from the database and their continuations, as\n"
    "training reads them.\n";

struct InspectArgs {
  data::Split split = data::Split::kTrain;
  std::int64_t sample = 0;
  std::int64_t chunk = -1;  // all
};

std::int64_t parse_count(const std::string& flag, const std::string& value) {
  std::size_t used = 0;
  std::int64_t n = -1;
  try {
    n = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || n < 0) {
    throw UsageError("megatron-app retro inspect: " + flag + " needs a count >= 0, got '" + value +
                     "'");
  }
  return n;
}

InspectArgs parse_inspect_args(const std::vector<std::string>& args) {
  InspectArgs out;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag != "--split" && flag != "--sample" && flag != "--chunk") {
      throw UsageError("megatron-app retro inspect: unexpected argument '" + flag + "'\n" + kUsage);
    }
    if (i + 1 == args.size())
      throw UsageError("megatron-app retro inspect: " + flag + " needs a value");
    const std::string& value = args[++i];
    if (flag == "--split") {
      bool known = false;
      for (const data::Split split : data::kSplits) {
        if (value == data::split_name(split)) out.split = split, known = true;
      }
      if (!known) {
        throw UsageError("megatron-app retro inspect: --split '" + value +
                         "' is not one of train, valid, test");
      }
    } else {
      (flag == "--sample" ? out.sample : out.chunk) = parse_count(flag, value);
    }
  }
  return out;
}

// One line of text: newlines shown as \n, so each chunk stays on its line.
std::string one_line(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    if (ch == '\n') {
      out += "\\n";
    } else {
      out += ch;
    }
  }
  return "\"" + out + "\"";
}

}  // namespace

int RetroDataset::inspect(const std::vector<std::string>& args) {
  if (args.size() > 1 && (args[1] == "--help" || args[1] == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  const InspectArgs what = parse_inspect_args(args);
  build(wanted_samples());
  const std::string split = std::string(data::split_name(what.split));
  const std::int64_t samples = size(what.split);
  if (what.sample >= samples) {
    throw UsageError("megatron-app retro inspect: --sample " + std::to_string(what.sample) +
                     ": the " + split + " split has " + std::to_string(samples) + " samples");
  }
  const std::int64_t l = chunks_per_sample(options_), m = options_.chunk_length;
  if (what.chunk >= l) {
    throw UsageError("megatron-app retro inspect: --chunk " + std::to_string(what.chunk) +
                     ": a sample has " + std::to_string(l) + " chunks");
  }
  if (parallel_.world_rank() != 0) return 0;

  const Tensor& neighbors = neighbors_[static_cast<std::size_t>(what.split)];
  const std::int64_t queried = neighbors.size(0) / l;
  const std::int64_t row_sample = what.sample % queried;
  Batch sample = Batch::allocate(gpt_.sample_fields(), 1);
  gpt_.get(what.split, what.sample, sample.sample(0));
  const std::int32_t* tokens = sample["tokens"].data<std::int32_t>();
  const gpt_data::GptDataset::SampleSource source = gpt_.sample_source(what.split, what.sample);
  const Tokenizer& text = gpt_.tokenizer();

  std::cout << split << " sample " << what.sample << " of " << samples << " (" << l << " chunks of "
            << m << " tokens), from " << source.prefix << ", documents";
  for (const std::int64_t doc : source.sequence_ids)
    std::cout << " " << doc;
  std::cout << "\n";
  if (row_sample != what.sample) {
    std::cout << "(neighbours queried for " << queried << " samples: training gives this sample "
              << "those of sample " << row_sample << ", as Megatron wraps)\n";
  }
  const std::int64_t* chunks = db_.chunks.data<std::int64_t>();
  const std::int64_t rows = db_.chunks.size(0);
  auto chunk_text = [&](std::int64_t id) {
    const std::int64_t* chunk = chunks + id * kChunkColumns;
    std::vector<std::int32_t> ids(static_cast<std::size_t>(chunk[kTokenEnd] - chunk[kTokenStart]));
    db_data_[static_cast<std::size_t>(chunk[kDatasetIndex])]->read(
        static_cast<std::size_t>(chunk[kDocId]), static_cast<std::size_t>(chunk[kTokenStart]),
        std::span<std::int32_t>(ids));
    return text.decode(ids);
  };
  for (std::int64_t c = 0; c < l; ++c) {
    if (what.chunk >= 0 && c != what.chunk) continue;
    std::cout << "\nchunk " << c << " (tokens " << c * m << "-" << (c + 1) * m - 1 << "): "
              << one_line(text.decode(
                     std::span<const TokenId>(tokens + c * m, static_cast<std::size_t>(m))))
              << "\n";
    const std::int64_t* row =
        neighbors.data<std::int64_t>() + (row_sample * l + c) * neighbors.size(1);
    for (std::int64_t j = 0; j < options_.num_neighbors; ++j) {
      const std::int64_t id = (row[j] % rows + rows) % rows;  // a -1 pad reads the last chunk
      const std::int64_t* chunk = chunks + id * kChunkColumns;
      std::cout << "  neighbour " << j + 1 << ": database chunk " << id
                << (row[j] < 0 ? " (no neighbour found: the -1 pad, read as the last chunk)" : "")
                << ", " << db_.prefixes[static_cast<std::size_t>(chunk[kDatasetIndex])]
                << " document " << chunk[kDocId] << " tokens " << chunk[kTokenStart] << "-"
                << chunk[kTokenEnd] - 1 << ": " << one_line(chunk_text(id)) << "\n";
      for (std::int64_t p = 1; p < options_.num_retrieved_chunks; ++p) {
        std::cout << "    continuation " << p << ": " << one_line(chunk_text((id + p) % rows))
                  << "\n";
      }
    }
  }
  return 0;
}

}  // namespace megatron::retro_data
