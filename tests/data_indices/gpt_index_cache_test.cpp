// The GPT index cache: Megatron's file names and description, reuse, rebuild when the description
// differs, and refusal of damaged or mismatched files (the description text and its MD5 are
// compared with Python's json.dumps and hashlib in megatron_reference.py).
#include <gtest/gtest.h>

#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "expect_error.h"
#include "megatron/data/gpt_indices.h"
#include "temp_dir.h"

namespace megatron::data {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

class GptIndexCache : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::int32_t i = 0; i < 50; ++i)
      lengths_.push_back((i * 11) % 17 + 2);
    for (std::int32_t i = 0; i < 45; ++i)
      ids_.push_back(i);
    identity_.dataset_path = "/data/corpus_text_document";
    identity_.split = Split::kTrain;
    identity_.split_string = "90,10,0";
    identity_.split_matrix = split_matrix(parse_split("90,10,0"));
    identity_.tokenizer = {"_GPT2BPETokenizer", {"vocab.json", "merges.txt"}, {}};
    options_.sequence_length = 8;
    options_.num_samples = 100;
    options_.seed = 1234;
  }

  GptIndices load(bool* built) {
    return load_or_build_gpt_indices(dir_.path(), identity_, ids_, lengths_, options_, built);
  }
  fs::path file(const std::string& suffix) const {
    return dir_.path() /
           (description_md5(gpt_description(identity_, options_)) + "-GPTDataset-train-" + suffix);
  }

  TempDir dir_;
  std::vector<std::int32_t> lengths_;
  std::vector<std::int32_t> ids_;
  GptDatasetIdentity identity_;
  GptIndexOptions options_;
};

TEST_F(GptIndexCache, DescriptionIsMegatronsJson) {
  const std::string description = gpt_description(identity_, options_);
  EXPECT_EQ(description.rfind("{\n    \"class\": \"GPTDataset\",\n"
                              "    \"dataset_path\": \"/data/corpus_text_document\",\n"
                              "    \"num_samples\": 100,\n"
                              "    \"index_split\": \"train\",\n"
                              "    \"random_seed\": 1234,\n"
                              "    \"sequence_length\": 8,\n"
                              "    \"split\": \"90,10,0\",\n"
                              "    \"split_matrix\": [\n"
                              "        [\n"
                              "            0,\n"
                              "            0.9\n"
                              "        ],\n",
                              0),
            0u)
      << description;
  EXPECT_NE(description.find("        null\n    ],\n    \"tokenizer\": {\n"
                             "        \"class\": \"_GPT2BPETokenizer\",\n"),
            std::string::npos)
      << description;
  EXPECT_EQ(description.find("add_extra_token"), std::string::npos);
  options_.add_extra_token = false;
  EXPECT_NE(gpt_description(identity_, options_).find("\"add_extra_token_to_sequence\": false"),
            std::string::npos);
  // RFC 1321 test vector.
  EXPECT_EQ(description_md5("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(default_gpt_cache_dir("/d/x_text_document"),
            fs::path("/d/x_text_document/cache/GPTDataset_indices"));
}

TEST_F(GptIndexCache, BuildsOnceThenLoadsTheSameIndices) {
  bool built = false;
  const GptIndices first = load(&built);
  EXPECT_TRUE(built);
  for (const char* suffix :
       {"description.txt", "document_index.npy", "sample_index.npy", "shuffle_index.npy"}) {
    EXPECT_TRUE(fs::is_regular_file(file(suffix))) << suffix;
  }
  EXPECT_EQ(read_bytes(file("description.txt")), gpt_description(identity_, options_));
  const GptIndices second = load(&built);
  EXPECT_FALSE(built);
  EXPECT_EQ(second.document_index, first.document_index);
  EXPECT_EQ(second.sample_index, first.sample_index);
  EXPECT_EQ(second.shuffle_index, first.shuffle_index);
  EXPECT_EQ(second.num_epochs, first.num_epochs);
  EXPECT_EQ(second.separate_final_epoch, first.separate_final_epoch);
  EXPECT_EQ(first.document_index, build_gpt_indices(ids_, lengths_, options_).document_index);
}

// Concurrent builders of one cache (two jobs sharing a data_cache_path) write private temporaries
// and rename them into place: both succeed, agree, and leave no temporary behind.
TEST_F(GptIndexCache, ConcurrentBuildersBothSucceedAndLeaveNoTemporaries) {
  GptIndices a, b;
  std::exception_ptr failure;
  std::thread other([&] {
    try {
      a = load(nullptr);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  b = load(nullptr);
  other.join();
  if (failure) std::rethrow_exception(failure);
  EXPECT_EQ(a.shuffle_index, b.shuffle_index);
  EXPECT_EQ(a.sample_index, b.sample_index);
  for (const auto& entry : fs::directory_iterator(dir_.path()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
}

TEST_F(GptIndexCache, OtherSettingsGetTheirOwnFiles) {
  bool built = false;
  const GptIndices seed_1234 = load(&built);
  options_.seed = 99;
  const GptIndices seed_99 = load(&built);
  EXPECT_TRUE(built);
  EXPECT_NE(seed_99.shuffle_index, seed_1234.shuffle_index);
  EXPECT_EQ(seed_99.shuffle_index, build_gpt_indices(ids_, lengths_, options_).shuffle_index);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_.path()))
    ++files;
  EXPECT_EQ(files, 8u);
}

TEST_F(GptIndexCache, StaleDescriptionIsRebuilt) {
  bool built = false;
  load(&built);
  write_bytes(file("description.txt"), "{\"class\": \"something else\"}");
  write_bytes(file("shuffle_index.npy"), "not even an npy file");
  const GptIndices rebuilt = load(&built);
  EXPECT_TRUE(built);
  EXPECT_EQ(read_bytes(file("description.txt")), gpt_description(identity_, options_));
  EXPECT_EQ(rebuilt.shuffle_index, build_gpt_indices(ids_, lengths_, options_).shuffle_index);
  load(&built);
  EXPECT_FALSE(built);
}

TEST_F(GptIndexCache, MissingFileIsRebuilt) {
  bool built = false;
  load(&built);
  fs::remove(file("sample_index.npy"));
  load(&built);
  EXPECT_TRUE(built);
  EXPECT_TRUE(fs::is_regular_file(file("sample_index.npy")));
}

TEST_F(GptIndexCache, DamagedFilesAreRefusedByName) {
  bool built = false;
  load(&built);
  const std::string good = read_bytes(file("sample_index.npy"));
  write_bytes(file("sample_index.npy"), good.substr(0, good.size() - 4));
  EXPECT_ERROR_MENTIONING(load(&built), "sample_index.npy", "truncated");
  write_bytes(file("sample_index.npy"), "\x93NUMPX" + good.substr(6));
  EXPECT_ERROR_MENTIONING(load(&built), "sample_index.npy", "offset 0", "magic");
}

TEST_F(GptIndexCache, ArraysThatDoNotFitTheDataAreRefused) {
  bool built = false;
  const GptIndices indices = load(&built);
  // A well-formed file of the wrong length, as left by a dataset that changed under the cache.
  write_npy(file("shuffle_index.npy"), IndexArray(std::vector<std::uint32_t>{0, 1, 2}, {3}));
  EXPECT_ERROR_MENTIONING(load(&built), "shuffle_index.npy", "expected a uint32 array of shape",
                          "found uint32 (3,)", "delete the cache files");
  // Right shape, an id outside the dataset.
  std::vector<std::int32_t> bad(indices.document_index);
  bad[5] = 50;
  write_npy(file("shuffle_index.npy"), indices.shuffle_index);
  write_npy(file("document_index.npy"), IndexArray(bad, {bad.size()}));
  EXPECT_ERROR_MENTIONING(load(&built), "document_index.npy", "sequence ids in [0, 50)",
                          "found 50 at element 5");
}

}  // namespace
}  // namespace megatron::data
