// Reads queued through io_uring (RingReads, ring_reads.h): they put the file's bytes where asked,
// from the disk or the page cache, one under way at a time, in any order of waiting; a read past
// the file's end says so; one from a bad descriptor names the error; a ring destroyed with reads
// under way waits for them and keeps their memory alive until then.
// Where the kernel refuses io_uring (a seccomp filter, the sysctl) the tests skip and say so:
// loads then read another way, which the tile-digest tests cover.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/ring_reads.h"
#include "checkpoint_test_util.h"

namespace megatron::checkpoint {
namespace {

using detail::RingRead;
using detail::RingReads;

constexpr std::size_t kFileBytes = std::size_t(6) << 20;

// Byte k of the test file.
char byte_at(std::size_t k) {
  return char((k * 2654435761u) >> 13);
}

// A file of kFileBytes, written and synced (so its pages can be dropped), open for reading.
int make_file(const testing::TempDir& dir) {
  const std::string path = (dir.path() / "data").string();
  const int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(out, 0);
  std::vector<char> bytes(kFileBytes);
  for (std::size_t k = 0; k < bytes.size(); ++k)
    bytes[k] = byte_at(k);
  EXPECT_EQ(::write(out, bytes.data(), bytes.size()), ssize_t(bytes.size()));
  EXPECT_EQ(::fsync(out), 0);
  ::close(out);
  return ::open(path.c_str(), O_RDONLY);
}

// A read and the memory it fills, owned together (what a load's check keeps alive).
struct Owned {
  Owned(int fd, std::uint64_t offset, std::size_t bytes) : memory(bytes, char(0x55)) {
    read = RingRead{fd, offset, memory.data(), bytes, {}};
  }
  std::vector<char> memory;
  RingRead read;
  bool holds(std::uint64_t offset) const {
    for (std::size_t k = 0; k < memory.size(); ++k)
      if (memory[k] != byte_at(offset + k)) return false;
    return true;
  }
};

// A synced file of kFileBytes open at fd_ and a ring, or the test skipped where the kernel
// refuses io_uring.
class RingReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = make_file(dir_);
    ASSERT_GE(fd_, 0);
    ring_ = RingReads::open();
    if (!ring_) {
      GTEST_SKIP() << "the kernel refuses io_uring here (kernel.io_uring_disabled or a seccomp "
                      "filter): loads read without it";
    }
  }
  void TearDown() override {
    ring_.reset();
    if (fd_ >= 0) ::close(fd_);
  }
  testing::TempDir dir_;
  int fd_ = -1;
  std::unique_ptr<RingReads> ring_;
};

TEST_F(RingReadsTest, PutTheFilesBytesWhereAskedInAnyOrderOfWaiting) {
  const int fd = fd_;
  RingReads* ring = ring_.get();
  for (const bool cold : {true, false}) {
    if (cold) {
      ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    }
    // Three reads (odd offsets and sizes), each queued once the one before is done (one read
    // under way at a time), waited for last first.
    std::vector<std::shared_ptr<Owned>> reads = {
        std::make_shared<Owned>(fd, 0, std::size_t(2) << 20),
        std::make_shared<Owned>(fd, 3000001, 1234567),
        std::make_shared<Owned>(fd, kFileBytes - 4099, 4099)};
    for (std::size_t k = 0; k < reads.size(); ++k) {
      ASSERT_TRUE(ring->submit(reads[k]->read, reads[k]));
      if (k > 0) {
        EXPECT_TRUE(reads[k - 1]->read.requests[0].done) << "read " << k - 1;
      }
    }
    EXPECT_EQ(ring->wait(reads[2]->read), "");
    EXPECT_EQ(ring->wait(reads[0]->read), "");
    EXPECT_EQ(ring->wait(reads[1]->read), "");
    EXPECT_TRUE(reads[0]->holds(0)) << "cold " << cold;
    EXPECT_TRUE(reads[1]->holds(3000001)) << "cold " << cold;
    EXPECT_TRUE(reads[2]->holds(kFileBytes - 4099)) << "cold " << cold;
    EXPECT_EQ(reads[0]->read.requests.size(), 1u);  // one request under 1 GiB
  }
}

TEST_F(RingReadsTest, AReadPastTheEndOfTheFileSaysSo) {
  const int fd = fd_;
  RingReads* ring = ring_.get();
  const auto past = std::make_shared<Owned>(fd, kFileBytes - 1000, 5000);
  ASSERT_TRUE(ring->submit(past->read, past));
  EXPECT_EQ(ring->wait(past->read), "the file ends inside it");
  const auto closed = std::make_shared<Owned>(-1, 0, 100);  // not a descriptor
  ASSERT_TRUE(ring->submit(closed->read, closed));
  EXPECT_EQ(ring->wait(closed->read), "Bad file descriptor");
}

TEST_F(RingReadsTest, ARingDestroyedWithReadsUnderWayWaitsForThemAndKeepsTheirMemory) {
  const int fd = fd_;
  std::unique_ptr<RingReads>& ring = ring_;
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  // What the memory held when the ring let go of it.
  bool whole_at_release = false;
  std::shared_ptr<Owned> pending(new Owned(fd, 0, kFileBytes), [&](Owned* owned) {
    whole_at_release = owned->holds(0);
    delete owned;
  });
  const std::weak_ptr<Owned> watch = pending;
  ASSERT_TRUE(ring->submit(pending->read, pending));
  pending.reset();  // only the ring holds it now
  EXPECT_FALSE(watch.expired());
  ring.reset();
  EXPECT_TRUE(watch.expired());
  EXPECT_TRUE(whole_at_release);  // the read was done before its memory was let go
}

}  // namespace
}  // namespace megatron::checkpoint
