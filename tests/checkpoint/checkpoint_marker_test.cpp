// The latest marker and crash safety of saves: the marker follows the last completed save, and a
// save that fails at any step leaves the previous checkpoint and the marker as they were.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "checkpoint_test_util.h"

namespace megatron::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

CheckpointState state_at(std::int64_t iteration) {
  CheckpointState state;
  state.iteration = iteration;
  state.consumed_train_samples = iteration * 8;
  state.config_toml = "[training]\ntrain_iters = 100\n";
  state.tensors["model/w"] = Tensor::full({3, 4}, DType::f32, double(iteration));
  return state;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Everything a directory holds, by file name.
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void expect_latest(const fs::path& dir, std::int64_t iteration) {
  EXPECT_EQ(latest_iteration(dir), iteration);
  const CheckpointState loaded = load_checkpoint(dir);
  EXPECT_EQ(loaded.iteration, iteration);
  ASSERT_TRUE(loaded.tensors.count("model/w"));
  EXPECT_EQ(loaded.tensors.at("model/w").to_vector<float>()[0], float(iteration));
}

TEST(CheckpointMarker, NamesAndMegatronText) {
  EXPECT_EQ(checkpoint_file("ckpt", 10), fs::path("ckpt/iter_0000010.h5"));
  EXPECT_EQ(checkpoint_file("ckpt", 12345678), fs::path("ckpt/iter_12345678.h5"));
  EXPECT_EQ(latest_marker("ckpt"), fs::path("ckpt/latest_checkpointed_iteration.txt"));
  TempDir dir;
  save_checkpoint(dir.path() / "new" / "sub", state_at(10));  // directories are created
  EXPECT_EQ(read_text(latest_marker(dir.path() / "new" / "sub")), "10");
}

TEST(CheckpointMarker, FollowsTheLastSave) {
  TempDir dir;
  EXPECT_EQ(latest_iteration(dir.path()), std::nullopt);
  EXPECT_EQ(latest_iteration(dir.path() / "missing"), std::nullopt);
  save_checkpoint(dir.path(), state_at(10));
  expect_latest(dir.path(), 10);
  save_checkpoint(dir.path(), state_at(20));
  expect_latest(dir.path(), 20);
  save_checkpoint(dir.path(), state_at(15));  // as Megatron: the marker names the last save
  expect_latest(dir.path(), 15);
  // Older files stay loadable by name.
  EXPECT_EQ(load_checkpoint(checkpoint_file(dir.path(), 20)).iteration, 20);
  EXPECT_EQ(listing(dir.path()),
            (std::vector<std::string>{"iter_0000010.h5", "iter_0000015.h5", "iter_0000020.h5",
                                      "latest_checkpointed_iteration.txt"}));
  // Saving the same iteration again replaces it.
  CheckpointState again = state_at(15);
  again.consumed_train_samples = 999;
  save_checkpoint(dir.path(), again);
  EXPECT_EQ(load_checkpoint(dir.path()).consumed_train_samples, 999);
}

TEST(CheckpointMarker, AcceptsWhitespaceAroundTheNumber) {
  TempDir dir;
  save_checkpoint(dir.path(), state_at(42));
  write_text(latest_marker(dir.path()), "  42\n");
  expect_latest(dir.path(), 42);
}

TEST(CheckpointMarker, StalePartialFilesAreRemovedByTheNextSave) {
  TempDir dir;
  save_checkpoint(dir.path(), state_at(1));
  write_text(dir.path() / "iter_0000002.h5.partial", "half a checkpoint");
  write_text(dir.path() / "unrelated.partial", "not ours");
  save_checkpoint(dir.path(), state_at(3));
  EXPECT_EQ(listing(dir.path()),
            (std::vector<std::string>{"iter_0000001.h5", "iter_0000003.h5",
                                      "latest_checkpointed_iteration.txt", "unrelated.partial"}));
}

// A save refused before writing anything: nothing new appears.
TEST(CheckpointFailedSave, BadTensorLeavesOlderCheckpoint) {
  TempDir dir;
  save_checkpoint(dir.path(), state_at(5));
  const auto before = listing(dir.path());

  CheckpointState undefined = state_at(10);
  undefined.tensors["model/z_undefined"] = Tensor();
  EXPECT_ERROR_MENTIONING(save_checkpoint(dir.path(), undefined), "iter_0000010.h5",
                          "tensor 'model/z_undefined' is undefined");

  CheckpointState meta = state_at(10);
  meta.tensors["model/z_meta"] = Tensor::empty({1 << 20}, DType::f32, Device::meta());
  EXPECT_ERROR_MENTIONING(save_checkpoint(dir.path(), meta), "'model/z_meta'", "meta",
                          "host tensors");

  CheckpointState clash = state_at(10);
  clash.tensors["model"] = Tensor::full({1}, DType::f32, 0);
  EXPECT_ERROR_MENTIONING(save_checkpoint(dir.path(), clash),
                          "tensor 'model' is also a group holding 'model/w'");

  for (const char* bad : {"model//w", "/model/w", "model/w/", "model/./w", "model/../w", ""}) {
    CheckpointState named = state_at(10);
    named.tensors[bad] = Tensor::full({1}, DType::f32, 0);
    EXPECT_ERROR_MENTIONING(save_checkpoint(dir.path(), named), "cannot save checkpoint");
  }
  EXPECT_ERROR_MENTIONING(save_checkpoint(dir.path(), state_at(-1)), "negative iteration -1");

  EXPECT_EQ(listing(dir.path()), before);
  expect_latest(dir.path(), 5);
}

// HDF5 refuses a tensor after others were written (more than 32 dimensions): the half-written
// temporary file is removed and nothing else changes.
TEST(CheckpointFailedSave, TensorHdf5CannotStoreMidway) {
  TempDir dir;
  save_checkpoint(dir.path(), state_at(5));
  const auto before = listing(dir.path());
  CheckpointState state = state_at(10);
  state.tensors["model/a_first"] = Tensor::full({1000, 100}, DType::f32, 1);
  state.tensors["model/z_rank33"] = Tensor::full(Shape(33, 1), DType::f32, 1);
  EXPECT_ERROR_MENTIONING(save_checkpoint(dir.path(), state), "iter_0000010.h5.partial",
                          "cannot store tensor 'model/z_rank33'");
  EXPECT_EQ(listing(dir.path()), before);
  expect_latest(dir.path(), 5);
}

// The temporary file cannot be created (a directory occupies its name).
TEST(CheckpointFailedSave, UnwritableTemporaryFile) {
  TempDir dir;
  save_checkpoint(dir.path(), state_at(5));
  fs::create_directory(dir.path() / "iter_0000010.h5.partial");
  EXPECT_ERROR_MENTIONING(save_checkpoint(dir.path(), state_at(10)), "iter_0000010.h5.partial",
                          "cannot create checkpoint file");
  EXPECT_FALSE(fs::exists(dir.path() / "iter_0000010.h5"));
  EXPECT_EQ(read_text(latest_marker(dir.path())), "5");
  expect_latest(dir.path(), 5);
}

// The whole file is written, then the rename into place fails: the partial file is removed and
// the marker still names the older checkpoint.
TEST(CheckpointFailedSave, RenameIntoPlaceFails) {
  TempDir dir;
  save_checkpoint(dir.path(), state_at(5));
  fs::create_directories(dir.path() / "iter_0000010.h5" / "occupied");
  EXPECT_ERROR_MENTIONING(save_checkpoint(dir.path(), state_at(10)), "iter_0000010.h5",
                          "cannot rename");
  EXPECT_FALSE(fs::exists(dir.path() / "iter_0000010.h5.partial"));
  EXPECT_EQ(read_text(latest_marker(dir.path())), "5");
  expect_latest(dir.path(), 5);
}

// The checkpoint file lands but the marker cannot be replaced: the marker (and so the latest
// checkpoint) stays the older one, and the error says why.
TEST(CheckpointFailedSave, MarkerCannotBeReplaced) {
  TempDir dir;
  save_checkpoint(dir.path(), state_at(5));
  fs::create_directories(dir.path() / "latest_checkpointed_iteration.txt.partial" / "occupied");
  EXPECT_ERROR_MENTIONING(save_checkpoint(dir.path(), state_at(10)),
                          "latest_checkpointed_iteration.txt.partial", "cannot create");
  EXPECT_EQ(read_text(latest_marker(dir.path())), "5");
  expect_latest(dir.path(), 5);
  EXPECT_EQ(load_checkpoint(checkpoint_file(dir.path(), 10)).iteration, 10);
}

}  // namespace
}  // namespace megatron::checkpoint
