// Indexed dataset round trips, the exact byte layout (MEGATRON_NOTES.md section 1) of a tiny
// dataset worked out by hand, dtype choice, merging, and what the writer refuses.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "dataset_test_util.h"
#include "megatron/data/indexed_dataset.h"

namespace megatron {
namespace {

using I32 = std::vector<std::int32_t>;
using I64 = std::vector<std::int64_t>;

// Document 0: sequences [1 2 3] and [4]; document 1: empty; document 2: [65535].
void write_tiny(const std::string& prefix) {
  IndexedDatasetWriter writer(bin_path(prefix), IndexDType::u16);
  writer.add_document(I32{1, 2, 3, 4}, I64{3, 1});
  writer.add_document(I32{}, I64{});
  writer.add_item(I32{65535});
  writer.end_document();
  writer.finalize(idx_path(prefix));
}

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (const int v : values)
    out.push_back(static_cast<char>(v));
  return out;
}

TEST(IndexedDataset, TinyDatasetByteImage) {
  test::ScratchDir dir;
  const auto prefix = dir.prefix("tiny");
  write_tiny(prefix);
  // .bin: the five tokens as uint16 little-endian, nothing else.
  EXPECT_EQ(test::read_bytes(bin_path(prefix)), bytes({1, 0, 2, 0, 3, 0, 4, 0, 0xFF, 0xFF}));
  const std::string expected_idx =
      bytes({'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0}) +  // magic
      bytes({1, 0, 0, 0, 0, 0, 0, 0}) +                   // version 1
      bytes({8}) +                                        // dtype code 8: uint16
      bytes({3, 0, 0, 0, 0, 0, 0, 0}) +                   // N = 3 sequences
      bytes({4, 0, 0, 0, 0, 0, 0, 0}) +                   // D = 4 document indices
      bytes({3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}) +       // lengths 3 1 1 (int32)
      bytes({0, 0, 0, 0, 0, 0, 0, 0}) +                   // pointers (int64): 0,
      bytes({6, 0, 0, 0, 0, 0, 0, 0}) +                   //   3 tokens x 2 bytes = 6,
      bytes({8, 0, 0, 0, 0, 0, 0, 0}) +                   //   6 + 1 x 2 = 8
      bytes({0, 0, 0, 0, 0, 0, 0, 0}) +                   // document indices (int64): 0,
      bytes({2, 0, 0, 0, 0, 0, 0, 0}) +                   //   2 (after document 0),
      bytes({2, 0, 0, 0, 0, 0, 0, 0}) +                   //   2 again (empty document 1),
      bytes({3, 0, 0, 0, 0, 0, 0, 0});                    //   3 = N
  ASSERT_EQ(expected_idx.size(), 34u + 3 * 4 + 3 * 8 + 4 * 8);
  EXPECT_EQ(test::read_bytes(idx_path(prefix)), expected_idx);
}

TEST(IndexedDataset, ReadsBackWhatWasWritten) {
  test::ScratchDir dir;
  const auto prefix = dir.prefix("tiny");
  write_tiny(prefix);
  const IndexedDataset dataset(prefix);
  EXPECT_EQ(dataset.dtype(), IndexDType::u16);
  EXPECT_EQ(dataset.size(), 3u);
  EXPECT_EQ(dataset.document_count(), 3u);
  EXPECT_FALSE(dataset.has_sequence_modes());
  EXPECT_EQ(dataset.sequence_lengths(), (I32{3, 1, 1}));
  EXPECT_EQ(dataset.sequence_pointers(), (I64{0, 6, 8}));
  EXPECT_EQ(dataset.document_indices(), (I64{0, 2, 2, 3}));
  EXPECT_EQ(dataset.get(0), (I64{1, 2, 3}));
  EXPECT_EQ(dataset.get(1), (I64{4}));
  EXPECT_EQ(dataset.get(2), (I64{65535}));  // uint16, not sign-extended
  EXPECT_EQ(dataset.get(0, 1, 2), (I64{2, 3}));
  EXPECT_EQ(dataset.get(0, 3, 0), I64{});
  I32 out(2);
  dataset.read(0, 0, std::span<std::int32_t>(out));
  EXPECT_EQ(out, (I32{1, 2}));
  EXPECT_EQ(dataset.raw(1).size(), 2u);
}

TEST(IndexedDataset, OutOfRangeReadsAreRefused) {
  test::ScratchDir dir;
  const auto prefix = dir.prefix("tiny");
  write_tiny(prefix);
  const IndexedDataset dataset(prefix);
  EXPECT_MESSAGE(test::error_of([&] { dataset.get(3); }),
                 "tiny.bin: sequence 3 is out of range: the dataset has 3");
  EXPECT_MESSAGE(test::error_of([&] { dataset.get(0, 2, 2); }),
                 "tiny.bin: sequence 0 has 3 tokens; cannot read 2 from token 2");
  EXPECT_MESSAGE(test::error_of([&] { dataset.document_index(4); }),
                 "tiny.idx: document index 4 is out of range");
}

TEST(IndexedDataset, EveryIntegerDtypeRoundTrips) {
  const std::vector<std::pair<IndexDType, I64>> cases = {
      {IndexDType::u8, {0, 255, 7}},
      {IndexDType::i8, {-128, 127, 0}},
      {IndexDType::i16, {-32768, 32767, 1}},
      {IndexDType::u16, {0, 65535, 50256}},
      {IndexDType::i32, {-2147483648LL, 2147483647LL, 70000}},
      {IndexDType::i64, {-(1LL << 62), 1LL << 40, 3}},
  };
  for (const auto& [dtype, tokens] : cases) {
    SCOPED_TRACE(std::string(index_dtype_name(dtype)));
    test::ScratchDir dir;
    const auto prefix = dir.prefix("d");
    IndexedDatasetWriter writer(bin_path(prefix), dtype);
    writer.add_item(tokens);
    writer.end_document();
    writer.finalize(idx_path(prefix));
    const IndexedDataset dataset(prefix);
    EXPECT_EQ(dataset.dtype(), dtype);
    EXPECT_EQ(dataset.get(0), tokens);
    EXPECT_EQ(dataset.sequence_pointers(), I64{0});
    EXPECT_EQ(test::read_bytes(bin_path(prefix)).size(), tokens.size() * index_dtype_size(dtype));
  }
}

TEST(IndexedDataset, Int32ReadRefusesValuesThatDoNotFit) {
  test::ScratchDir dir;
  const auto prefix = dir.prefix("wide");
  IndexedDatasetWriter writer(bin_path(prefix), IndexDType::i64);
  writer.add_item(I64{5, 1LL << 33});
  writer.end_document();
  writer.finalize(idx_path(prefix));
  const IndexedDataset dataset(prefix);
  I32 out(2);
  EXPECT_MESSAGE(test::error_of([&] { dataset.read(0, 0, std::span<std::int32_t>(out)); }),
                 "wide.bin: sequence 0, token 1: value 8589934592 does not fit in int32");
}

TEST(IndexedDataset, OptimalDtypeFollowsMegatron) {
  EXPECT_EQ(optimal_index_dtype(50257), IndexDType::u16);
  EXPECT_EQ(optimal_index_dtype(65499), IndexDType::u16);
  EXPECT_EQ(optimal_index_dtype(65500), IndexDType::i32);
  EXPECT_EQ(optimal_index_dtype(128256), IndexDType::i32);
  EXPECT_EQ(index_dtype_size(IndexDType::u16), 2u);
  EXPECT_EQ(index_dtype_name(IndexDType::f64), "float64");
}

TEST(IndexedDataset, EmptyDatasetIsValid) {
  test::ScratchDir dir;
  const auto prefix = dir.prefix("empty");
  IndexedDatasetWriter writer(bin_path(prefix), IndexDType::u16);
  writer.finalize(idx_path(prefix));
  EXPECT_EQ(test::read_bytes(idx_path(prefix)).size(), 34u + 8);
  const IndexedDataset dataset(prefix);
  EXPECT_EQ(dataset.size(), 0u);
  EXPECT_EQ(dataset.document_count(), 0u);
}

TEST(IndexedDataset, AddIndexEqualsWritingEverythingAtOnce) {
  test::ScratchDir dir;
  const auto write = [&](const std::string& prefix, const std::vector<I32>& docs) {
    IndexedDatasetWriter writer(bin_path(prefix), IndexDType::u16);
    for (const auto& doc : docs) {
      writer.add_document(doc, I64{std::int64_t(doc.size())});
    }
    writer.finalize(idx_path(prefix));
  };
  const std::vector<I32> first = {{1, 2}, {3}}, second = {{}, {4, 5, 6}};
  write(dir.prefix("a"), first);
  write(dir.prefix("b"), second);
  std::vector<I32> all = first;
  all.insert(all.end(), second.begin(), second.end());
  write(dir.prefix("all"), all);

  IndexedDatasetWriter merged(bin_path(dir.prefix("merged")), IndexDType::u16);
  merged.add_index(dir.prefix("a"));
  merged.add_index(dir.prefix("b"));
  merged.finalize(idx_path(dir.prefix("merged")));
  EXPECT_EQ(test::read_bytes(bin_path(dir.prefix("merged"))),
            test::read_bytes(bin_path(dir.prefix("all"))));
  EXPECT_EQ(test::read_bytes(idx_path(dir.prefix("merged"))),
            test::read_bytes(idx_path(dir.prefix("all"))));

  IndexedDatasetWriter other_dtype(bin_path(dir.prefix("wide")), IndexDType::i32);
  EXPECT_MESSAGE(test::error_of([&] { other_dtype.add_index(dir.prefix("a")); }),
                 "a.idx: add_index: its dtype is uint16, this dataset's is int32");
}

TEST(IndexedDatasetWriter, RefusesWhatItCannotStore) {
  test::ScratchDir dir;
  const auto prefix = dir.prefix("w");
  IndexedDatasetWriter writer(bin_path(prefix), IndexDType::u16);
  EXPECT_MESSAGE(test::error_of([&] {
                   writer.add_item(I32{1, 70000});
                 }),
                 "w.bin: token 70000 (sequence 0, position 1) does not fit the dataset's dtype "
                 "uint16");
  EXPECT_MESSAGE(test::error_of([&] { writer.add_item(I32{-1}); }),
                 "token -1 (sequence 0, position 0) does not fit");
  EXPECT_MESSAGE(test::error_of([&] {
                   writer.add_document(I32{1, 2, 3}, I64{1, 1});
                 }),
                 "w.bin: add_document: the lengths sum to 2 but there are 3 tokens");
  EXPECT_MESSAGE(
      test::error_of([&] { IndexedDatasetWriter(bin_path(dir.prefix("f")), IndexDType::f32); }),
      "f.bin: cannot store token ids as float32");
  EXPECT_MESSAGE(
      test::error_of([] { IndexedDatasetWriter("/nonexistent/dir/x.bin", IndexDType::u16); }),
      "/nonexistent/dir/x.bin: cannot create: No such file or directory");
  writer.finalize(idx_path(prefix));
  EXPECT_MESSAGE(test::error_of([&] { writer.add_item(I32{1}); }), "already finalized");
}

}  // namespace
}  // namespace megatron
