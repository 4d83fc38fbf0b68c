// Every refusal of load_checkpoint names the file and what is wrong with it.
#include <gtest/gtest.h>

#include <hdf5.h>

#include <fstream>

#include "checkpoint_test_util.h"

namespace megatron::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

CheckpointState small_state(std::int64_t iteration) {
  CheckpointState state;
  state.iteration = iteration;
  state.config_toml = "[model]\ntype = \"gpt\"\n";
  state.tensors["model/embedding.word_embeddings.weight"] = Tensor::full({64, 32}, DType::f32, 0.5);
  state.tensors["model/decoder.final_layernorm.weight"] = Tensor::full({32}, DType::bf16, 1);
  state.tensors["optimizer/exp_avg/embedding.word_embeddings.weight"] =
      Tensor::full({64, 32}, DType::f32, 0.25);
  return state;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Sets the root attribute `format_version` of an existing HDF5 file (creating the file, with no
// other content, when `create` is set; a negative version writes no attribute).
void write_format_version(const fs::path& path, std::int64_t version, bool create) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t file = create ? H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)
                            : H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  if (version >= 0) {
    if (H5Aexists(file, "format_version") > 0) H5Adelete(file, "format_version");
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t attribute =
        H5Acreate2(file, "format_version", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Awrite(attribute, H5T_NATIVE_INT64, &version), 0);
    H5Aclose(attribute);
    H5Sclose(space);
  } else {
    const hid_t group = H5Gcreate2(file, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(group);
  }
  ASSERT_GE(H5Fclose(file), 0);
}

TEST(CheckpointRefusal, MissingFileOrDirectory) {
  TempDir dir;
  EXPECT_ERROR_MENTIONING(load_checkpoint(dir.path() / "iter_0000001.h5"), "iter_0000001.h5",
                          "no such checkpoint file or directory");
  EXPECT_ERROR_MENTIONING(load_checkpoint(dir.path() / "nowhere"), "nowhere",
                          "no such checkpoint file or directory");
}

TEST(CheckpointRefusal, DirectoryWithoutMarker) {
  TempDir dir;
  EXPECT_ERROR_MENTIONING(load_checkpoint(dir.path()), dir.path().string(),
                          "not a checkpoint directory", "no latest_checkpointed_iteration.txt");
}

TEST(CheckpointRefusal, MarkerNotANumber) {
  TempDir dir;
  save_checkpoint(dir.path(), small_state(3));
  const fs::path marker = latest_marker(dir.path());
  for (const char* text : {"abc", "3x", "-3", "99999999999999999999999", "1 2"}) {
    write_text(marker, text);
    EXPECT_ERROR_MENTIONING(load_checkpoint(dir.path()), marker.string(),
                            "expected the latest iteration number, found '" + std::string(text));
    EXPECT_ERROR_MENTIONING(latest_iteration(dir.path()), marker.string());
  }
  write_text(marker, "release\n");
  EXPECT_ERROR_MENTIONING(load_checkpoint(dir.path()), "found 'release'",
                          "release checkpoints are not supported");
  write_text(marker, " \n");
  EXPECT_ERROR_MENTIONING(load_checkpoint(dir.path()), marker.string(), "is empty");
}

TEST(CheckpointRefusal, MarkerNamesMissingFile) {
  TempDir dir;
  save_checkpoint(dir.path(), small_state(3));
  write_text(latest_marker(dir.path()), "30");
  EXPECT_ERROR_MENTIONING(load_checkpoint(dir.path()), "latest_checkpointed_iteration.txt",
                          "names iteration 30 but",
                          (dir.path() / "iter_0000030.h5").string() + " does not exist");
}

TEST(CheckpointRefusal, NotAnHdf5File) {
  TempDir dir;
  const fs::path text = dir.path() / "notes.h5";
  write_text(text, "this is plain text, not HDF5\n");
  EXPECT_ERROR_MENTIONING(load_checkpoint(text), text.string(), "not an HDF5 file");
  const fs::path empty = dir.path() / "empty.h5";
  write_text(empty, "");
  EXPECT_ERROR_MENTIONING(load_checkpoint(empty), empty.string(), "not an HDF5 file");
}

TEST(CheckpointRefusal, Hdf5FileThatIsNotACheckpoint) {
  TempDir dir;
  const fs::path file = dir.path() / "other.h5";
  write_format_version(file, -1, true);
  EXPECT_ERROR_MENTIONING(load_checkpoint(file), file.string(),
                          "not a megatron-app checkpoint: it has no format_version attribute");
}

TEST(CheckpointRefusal, NewerFormatVersion) {
  TempDir dir;
  const fs::path file = save_checkpoint(dir.path(), small_state(3));
  write_format_version(file, kFormatVersion + 1, false);
  EXPECT_ERROR_MENTIONING(load_checkpoint(dir.path()), file.string(),
                          "checkpoint format version " + std::to_string(kFormatVersion + 1) +
                              " is newer than this megatron-app reads");
  write_format_version(file, 0, false);
  EXPECT_ERROR_MENTIONING(load_checkpoint(file), file.string(),
                          "invalid checkpoint format_version 0");
}

TEST(CheckpointRefusal, MissingRootAttribute) {
  TempDir dir;
  const fs::path file = save_checkpoint(dir.path(), small_state(3));
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t h5 = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(H5Adelete(h5, "consumed_train_samples"), 0);
  H5Fclose(h5);
  EXPECT_ERROR_MENTIONING(load_checkpoint(file), file.string(), "corrupt",
                          "'consumed_train_samples' is missing");
}

TEST(CheckpointRefusal, TruncatedFile) {
  TempDir dir;
  const fs::path file = save_checkpoint(dir.path(), small_state(3));
  const auto size = fs::file_size(file);
  for (const auto keep : {size - 1, size / 2, std::uintmax_t(100)}) {
    fs::resize_file(file, keep);
    EXPECT_ERROR_MENTIONING(load_checkpoint(dir.path()), file.string(), "truncated or corrupt");
  }
}

TEST(CheckpointRefusal, CorruptMetadata) {
  TempDir dir;
  const fs::path file = save_checkpoint(dir.path(), small_state(3));
  // Scribble over everything after the superblock; the metadata checksums catch it.
  std::fstream io(file, std::ios::binary | std::ios::in | std::ios::out);
  io.seekp(48);
  const std::string junk(4096, '\x5a');
  io.write(junk.data(), std::streamsize(junk.size()));
  io.close();
  EXPECT_ERROR_MENTIONING(load_checkpoint(file), file.string(), "corrupt");
}

}  // namespace
}  // namespace megatron::checkpoint
