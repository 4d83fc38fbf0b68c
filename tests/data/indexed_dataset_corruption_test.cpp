// Every kind of damaged .idx/.bin is refused with the file, the byte offset and what was expected.
// The tiny dataset's layout: header 0-33, lengths 34-45, pointers 46-69, document indices 70-101.
#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

#include "dataset_test_util.h"
#include "megatron/data/indexed_dataset.h"

namespace megatron {
namespace {

class Corruption : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = dir_.prefix("tiny");
    IndexedDatasetWriter writer(bin_path(prefix_), IndexDType::u16);
    writer.add_document(std::vector<std::int32_t>{1, 2, 3, 4}, std::vector<std::int64_t>{3, 1});
    writer.add_document(std::vector<std::int32_t>{}, std::vector<std::int64_t>{});
    writer.add_item(std::vector<std::int32_t>{9});
    writer.end_document();
    writer.finalize(idx_path(prefix_));
    idx_ = test::read_bytes(idx_path(prefix_));
    ASSERT_EQ(idx_.size(), 102u);
  }

  template <typename T>
  void put(std::size_t offset, T value) {
    std::memcpy(idx_.data() + offset, &value, sizeof value);
  }

  // The error opening the dataset after writing `idx_` as its .idx.
  std::string open_error() {
    test::write_bytes(idx_path(prefix_), idx_);
    return test::error_of([&] { IndexedDataset dataset(prefix_); });
  }

  test::ScratchDir dir_;
  std::string prefix_;
  std::string idx_;
};

TEST_F(Corruption, IntactFileOpens) {
  EXPECT_EQ(open_error(), "");
}

TEST_F(Corruption, WrongMagic) {
  idx_[0] = 'P', idx_[1] = 'K';
  EXPECT_MESSAGE(open_error(),
                 "tiny.idx: byte 0: expected the magic \"MMIDIDX\\0\\0\" (4D 4D 49 44 49 44 58 00 "
                 "00), found 50 4B 49 44 49 44 58 00 00");
}

TEST_F(Corruption, WrongVersion) {
  put<std::uint64_t>(9, 2);
  EXPECT_MESSAGE(open_error(), "tiny.idx: byte 9: expected version 1, found 2");
}

TEST_F(Corruption, UnknownDtypeCode) {
  put<std::uint8_t>(17, 9);
  EXPECT_MESSAGE(open_error(), "tiny.idx: byte 17: expected a dtype code 1..8");
  EXPECT_MESSAGE(open_error(), "found 9");
}

TEST_F(Corruption, TruncatedHeader) {
  idx_.resize(20);
  EXPECT_MESSAGE(open_error(), "tiny.idx: truncated: the header needs 34 bytes, the file has 20");
}

TEST_F(Corruption, TruncatedArrays) {
  idx_.resize(60);
  EXPECT_MESSAGE(open_error(),
                 "tiny.idx: truncated: sequence_pointers (3 entries from byte 46) would end at "
                 "byte 70, but the file has 60 bytes");
  idx_.resize(40);
  EXPECT_MESSAGE(open_error(), "tiny.idx: truncated: sequence_lengths (3 entries from byte 34)");
}

TEST_F(Corruption, TruncatedDocumentIndices) {
  idx_.resize(101);
  EXPECT_MESSAGE(open_error(),
                 "tiny.idx: truncated: document_indices (4 entries from byte 70) would end at "
                 "byte 102, but the file has 101 bytes");
}

TEST_F(Corruption, AbsurdSequenceCount) {
  put<std::uint64_t>(18, ~std::uint64_t(0) / 2);
  EXPECT_MESSAGE(open_error(),
                 "tiny.idx: truncated: sequence_lengths (9223372036854775807 entries");
}

TEST_F(Corruption, TrailingBytes) {
  idx_ += "xyzxyzxyz";
  EXPECT_MESSAGE(open_error(),
                 "tiny.idx: byte 102: expected the end of the file (or 3 sequence-mode bytes), "
                 "found 9 more bytes");
}

TEST_F(Corruption, SequenceModesAreAccepted) {
  idx_ += std::string("\x00\x01\x00", 3);
  EXPECT_EQ(open_error(), "");
  const IndexedDataset dataset(prefix_);
  EXPECT_TRUE(dataset.has_sequence_modes());
  EXPECT_EQ(dataset.sequence_mode(1), 1);
}

TEST_F(Corruption, PointerInconsistentWithLengths) {
  put<std::int64_t>(46 + 8, 4);
  EXPECT_MESSAGE(open_error(),
                 "tiny.idx: byte 54: sequence_pointers[1]: expected 6 (sequence_pointers[0] + "
                 "sequence_lengths[0] x 2 bytes), found 4");
}

TEST_F(Corruption, FirstPointerNotZero) {
  put<std::int64_t>(46, 2);
  EXPECT_MESSAGE(open_error(), "tiny.idx: byte 46: sequence_pointers[0]: expected 0");
}

TEST_F(Corruption, NegativeLength) {
  put<std::int32_t>(34 + 4, -1);
  EXPECT_MESSAGE(open_error(),
                 "tiny.idx: byte 38: sequence_lengths[1]: expected a length >= 0, found -1");
}

TEST_F(Corruption, DocumentIndicesNotEndingAtN) {
  put<std::int64_t>(70 + 24, 2);
  EXPECT_MESSAGE(open_error(),
                 "tiny.idx: byte 94: document_indices[3]: expected 3 (the number of sequences), "
                 "found 2");
}

TEST_F(Corruption, DocumentIndicesDecreasing) {
  put<std::int64_t>(70 + 8, 3);
  EXPECT_MESSAGE(open_error(),
                 "tiny.idx: byte 86: document_indices[2]: expected a value >= 3 (document "
                 "indices never decrease), found 2");
}

TEST_F(Corruption, DocumentIndicesNotStartingAtZero) {
  put<std::int64_t>(70, 1);
  EXPECT_MESSAGE(open_error(), "tiny.idx: byte 70: document_indices[0]: expected 0, found 1");
}

TEST_F(Corruption, NoDocumentIndices) {
  put<std::uint64_t>(26, 0);
  EXPECT_MESSAGE(open_error(),
                 "tiny.idx: byte 26: expected at least 1 document index (the leading 0), found 0");
}

TEST_F(Corruption, BinShorterThanTheLastSequence) {
  test::write_bytes(bin_path(prefix_), test::read_bytes(bin_path(prefix_)).substr(0, 9));
  EXPECT_MESSAGE(open_error(),
                 "tiny.bin: truncated: sequence 2 ends at byte 10 (its pointer + length x 2 bytes, "
                 "per the .idx), but the file has 9 bytes");
}

TEST_F(Corruption, MissingFiles) {
  std::filesystem::remove(bin_path(prefix_));
  EXPECT_MESSAGE(open_error(), "tiny.bin: cannot open: No such file or directory");
  EXPECT_MESSAGE(test::error_of([&] { IndexedDataset dataset(dir_.prefix("none")); }),
                 "none.idx: cannot open: No such file or directory");
}

}  // namespace
}  // namespace megatron
