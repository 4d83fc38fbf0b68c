// Page-cache residency (ResidencyProbe, page_cache.h): a file just written is in the page cache,
// one dropped from it is not, and a part read back is again; one probe answers for any range,
// and for another file once asked about it.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/page_cache.h"
#include "checkpoint_test_util.h"

namespace megatron::checkpoint {
namespace {

using detail::ResidencyProbe;

constexpr std::uint64_t kMiB = std::uint64_t(1) << 20;
constexpr std::uint64_t kFileBytes = 4 * kMiB;

struct Range {
  std::uint64_t offset;
  std::uint64_t bytes;
};

// Whole, head, tail, and ranges that start and end inside pages.
const std::vector<Range> kRanges = {
    {0, kFileBytes},       {0, kMiB},           {3 * kMiB, kMiB},        {4097, 10000},
    {3 * kMiB - 100, 200}, {kFileBytes - 1, 1}, {2 * kMiB + 1, kMiB - 2}};

std::string describe(const Range& r) {
  return std::to_string(r.bytes) + " bytes at " + std::to_string(r.offset);
}

// A file of kFileBytes written and synced (its pages clean, so a drop may evict them).
int write_file(const testing::TempDir& dir, const std::string& name) {
  const int fd = ::open((dir.path() / name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(fd, 0);
  const std::vector<char> bytes(kFileBytes, 'x');
  EXPECT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), ssize_t(bytes.size()));
  EXPECT_EQ(::fsync(fd), 0);
  return fd;
}

// Drops the file's pages, as a restart would; false where the file system keeps them (tmpfs),
// judged by a probe of its own.
bool drop(int fd) {
  EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ResidencyProbe probe;
  return !probe.in_page_cache(fd, 0, 1) && !probe.in_page_cache(fd, kFileBytes - 1, 1);
}

void read_back(int fd, const Range& r) {
  std::vector<char> bytes(r.bytes);
  ASSERT_EQ(::pread(fd, bytes.data(), r.bytes, off_t(r.offset)), ssize_t(r.bytes));
}

TEST(ResidencyProbe, AFileJustWrittenIsInThePageCache) {
  testing::TempDir dir;
  const int fd = write_file(dir, "a");
  ResidencyProbe probe;
  for (const Range& r : kRanges)
    EXPECT_TRUE(probe.in_page_cache(fd, r.offset, r.bytes)) << describe(r);
  ::close(fd);
}

TEST(ResidencyProbe, ADroppedFileIsNotAndWhatIsReadBackIs) {
  testing::TempDir dir;
  const int fd = write_file(dir, "a");
  ResidencyProbe probe;
  EXPECT_TRUE(probe.in_page_cache(fd, 0, kFileBytes));  // maps the file before the drop
  if (!drop(fd)) {
    ::close(fd);
    GTEST_SKIP() << "this file system keeps a file's pages after POSIX_FADV_DONTNEED (tmpfs)";
  }
  for (const Range& r : kRanges)
    EXPECT_FALSE(probe.in_page_cache(fd, r.offset, r.bytes)) << describe(r);
  read_back(fd, {3 * kMiB, kMiB});
  EXPECT_TRUE(probe.in_page_cache(fd, 3 * kMiB, kMiB));
  EXPECT_TRUE(probe.in_page_cache(fd, kFileBytes - 1, 1));
  EXPECT_TRUE(probe.in_page_cache(fd, 3 * kMiB + 5, 100));
  EXPECT_FALSE(probe.in_page_cache(fd, 3 * kMiB - 1, 2));  // one byte before the part read
  EXPECT_FALSE(probe.in_page_cache(fd, 0, kFileBytes));
  ::close(fd);
}

// The probe keeps its mapping between questions: asked about another file, even under the same
// descriptor number, it answers for that file.
TEST(ResidencyProbe, AnswersForTheFileAskedAbout) {
  testing::TempDir dir;
  const int first = write_file(dir, "a");
  const int second = write_file(dir, "b");
  ResidencyProbe probe;
  ASSERT_TRUE(probe.in_page_cache(first, 0, kFileBytes));
  ASSERT_TRUE(probe.in_page_cache(second, 0, kFileBytes));
  if (!drop(second)) {
    ::close(first);
    ::close(second);
    GTEST_SKIP() << "this file system keeps a file's pages after POSIX_FADV_DONTNEED (tmpfs)";
  }
  EXPECT_TRUE(probe.in_page_cache(first, 0, kFileBytes));
  EXPECT_FALSE(probe.in_page_cache(second, 0, kFileBytes));
  // The dropped file's descriptor number now names the first file.
  ASSERT_EQ(::dup2(first, second), second);
  EXPECT_TRUE(probe.in_page_cache(second, 0, kFileBytes));
  ::close(first);
  ::close(second);
}

}  // namespace
}  // namespace megatron::checkpoint
