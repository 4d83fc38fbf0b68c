// Byte compatibility with Megatron-LM: a Python script writes datasets with numpy exactly as
// Megatron's IndexedDatasetBuilder does; our reader must read them and our writer must produce
// the same bytes for the same calls (uint16 and int32 datasets, empty documents, add_index).
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dataset_test_util.h"
#include "megatron/data/indexed_dataset.h"

namespace megatron {
namespace {

struct Document {
  std::vector<std::vector<std::int64_t>> sequences;
  bool via_add_item = false;
};

std::vector<Document> random_documents(unsigned seed, int count, std::int64_t max_token) {
  std::mt19937 rng(seed);
  std::vector<Document> documents(count);
  for (auto& doc : documents) {
    doc.via_add_item = rng() % 2 == 0;
    doc.sequences.resize(rng() % 5);  // 0..4 sequences; some documents are empty
    for (auto& sequence : doc.sequences) {
      sequence.resize(rng() % 40);
      for (auto& token : sequence)
        token = std::int64_t(rng() % std::uint64_t(max_token));
    }
  }
  return documents;
}

nlohmann::json to_json(const std::string& prefix, IndexDType dtype,
                       const std::vector<Document>& documents) {
  nlohmann::json spec{{"prefix", prefix}, {"dtype", index_dtype_name(dtype)}};
  spec["documents"] = nlohmann::json::array();
  for (const auto& doc : documents) {
    spec["documents"].push_back(
        {{"sequences", doc.sequences}, {"via", doc.via_add_item ? "add_item" : "add_document"}});
  }
  return spec;
}

void run_numpy_writer(const nlohmann::json& spec, const test::ScratchDir& dir) {
  const std::string spec_file = dir.prefix("spec.json");
  test::write_bytes(spec_file, spec.dump());
  const std::string command = std::string(PYTHON3) + " " + NUMPY_WRITER_SCRIPT + " " + spec_file;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

void write_ours(const std::string& prefix, IndexDType dtype,
                const std::vector<Document>& documents) {
  IndexedDatasetWriter writer(bin_path(prefix), dtype);
  for (const auto& doc : documents) {
    if (doc.via_add_item) {
      for (const auto& sequence : doc.sequences)
        writer.add_item(sequence);
      writer.end_document();
    } else {
      std::vector<std::int32_t> tokens;
      std::vector<std::int64_t> lengths;
      for (const auto& sequence : doc.sequences) {
        tokens.insert(tokens.end(), sequence.begin(), sequence.end());
        lengths.push_back(std::int64_t(sequence.size()));
      }
      writer.add_document(tokens, lengths);
    }
  }
  writer.finalize(idx_path(prefix));
}

void expect_same_files(const std::string& ours, const std::string& megatron) {
  EXPECT_EQ(test::read_bytes(bin_path(ours)), test::read_bytes(bin_path(megatron)))
      << ours << ".bin differs from " << megatron << ".bin";
  EXPECT_EQ(test::read_bytes(idx_path(ours)), test::read_bytes(idx_path(megatron)))
      << ours << ".idx differs from " << megatron << ".idx";
}

void expect_reads_documents(const IndexedDataset& dataset, const std::vector<Document>& documents) {
  std::size_t sequence = 0;
  ASSERT_EQ(dataset.document_count(), documents.size());
  for (std::size_t d = 0; d < documents.size(); ++d) {
    EXPECT_EQ(dataset.document_index(d), std::int64_t(sequence));
    for (const auto& expected : documents[d].sequences)
      EXPECT_EQ(dataset.get(sequence++), expected) << "sequence " << sequence - 1;
  }
  EXPECT_EQ(dataset.size(), sequence);
  EXPECT_EQ(dataset.document_index(documents.size()), std::int64_t(sequence));
}

class NumpyCompat : public ::testing::TestWithParam<IndexDType> {};

TEST_P(NumpyCompat, ReadsMegatronFilesAndWritesTheSameBytes) {
  const IndexDType dtype = GetParam();
  const std::int64_t max_token = dtype == IndexDType::u16 ? 50257 : 200000;
  test::ScratchDir dir;
  auto documents = random_documents(1234, 300, max_token);
  documents.push_back({{{max_token - 1}, {}, {0}}, false});  // extremes and an empty sequence
  nlohmann::json spec;
  spec["datasets"] = {to_json(dir.prefix("megatron"), dtype, documents)};
  run_numpy_writer(spec, dir);

  const IndexedDataset megatron(dir.prefix("megatron"));
  EXPECT_EQ(megatron.dtype(), dtype);
  expect_reads_documents(megatron, documents);

  write_ours(dir.prefix("ours"), dtype, documents);
  expect_same_files(dir.prefix("ours"), dir.prefix("megatron"));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NumpyCompat, ::testing::Values(IndexDType::u16, IndexDType::i32),
                         [](const auto& test_info) {
                           return std::string(index_dtype_name(test_info.param));
                         });

TEST(NumpyCompat, AddIndexMergesAsMegatronDoes) {
  test::ScratchDir dir;
  const auto first = random_documents(1, 40, 50257), second = random_documents(2, 25, 50257);
  nlohmann::json spec;
  spec["datasets"] = {to_json(dir.prefix("m_a"), IndexDType::u16, first),
                      to_json(dir.prefix("m_b"), IndexDType::u16, second)};
  spec["merges"] = {{{"prefix", dir.prefix("m_merged")},
                     {"dtype", "uint16"},
                     {"parts", {dir.prefix("m_a"), dir.prefix("m_b")}}}};
  run_numpy_writer(spec, dir);

  write_ours(dir.prefix("o_a"), IndexDType::u16, first);
  write_ours(dir.prefix("o_b"), IndexDType::u16, second);
  IndexedDatasetWriter merged(bin_path(dir.prefix("o_merged")), IndexDType::u16);
  merged.add_index(dir.prefix("o_a"));
  merged.add_index(dir.prefix("o_b"));
  merged.finalize(idx_path(dir.prefix("o_merged")));
  expect_same_files(dir.prefix("o_merged"), dir.prefix("m_merged"));

  auto all = first;
  all.insert(all.end(), second.begin(), second.end());
  expect_reads_documents(IndexedDataset(dir.prefix("m_merged")), all);
}

}  // namespace
}  // namespace megatron
