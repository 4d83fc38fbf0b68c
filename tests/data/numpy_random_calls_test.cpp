// NumpyRandomState's random(), randint, geometric, choice and list shuffle, and the numpy sum
// the masked datasets normalise with, each compared with what /usr/bin/python3's numpy returns.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "data/masked_ngram_rules.h"
#include "megatron/data/numpy_random.h"
#include "megatron/error.h"

namespace megatron::data {
namespace {

// Runs a Python script (numpy imported as np) and returns its output lines.
std::vector<std::string> numpy_lines(const std::string& script) {
  const testing::ScratchDir dir;
  const auto script_path = dir / "reference.py";
  const auto output_path = dir / "out.txt";
  std::ofstream(script_path) << "import numpy as np\n" << script;
  const std::string command =
      std::string(PYTHON3) + " " + script_path.string() + " > " + output_path.string();
  if (std::system(command.c_str()) != 0) ADD_FAILURE() << "failed: " << command;
  std::ifstream in(output_path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

// Python's repr of a float round-trips, and strtod reads it back exactly.
double as_double(const std::string& text) {
  return std::strtod(text.c_str(), nullptr);
}
std::int64_t as_int(const std::string& text) {
  return std::stoll(text);
}
std::vector<double> as_doubles(const std::string& line) {
  std::vector<double> out;
  std::size_t start = 0;
  while (start < line.size()) {
    std::size_t end = line.find(' ', start);
    if (end == std::string::npos) end = line.size();
    out.push_back(as_double(line.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

TEST(NumpyRandomCalls, RandomMatchesRandomSample) {
  const auto lines = numpy_lines(R"(
for seed in (0, 1, 1234, 4294967295):
    rs = np.random.RandomState(seed)
    for _ in range(1000):
        print(repr(rs.random()))
)");
  ASSERT_EQ(lines.size(), 4000u);
  std::size_t k = 0;
  for (const std::int64_t seed : {0LL, 1LL, 1234LL, 4294967295LL}) {
    NumpyRandomState random(seed);
    for (int i = 0; i < 1000; ++i, ++k)
      ASSERT_EQ(random.random(), as_double(lines[k])) << "seed " << seed << " draw " << i;
  }
}

// Ranges that take no draw, 32-bit draws, the full 32-bit range, 64-bit draws and the whole
// int64 range, interleaved on one state so the number of words each takes is checked too.
const std::vector<std::pair<std::int64_t, std::int64_t>> kRanges = {{0, 1},
                                                                    {1, 2},
                                                                    {1, 3},
                                                                    {0, 5},
                                                                    {1, 100},
                                                                    {0, 30522},
                                                                    {-5, 7},
                                                                    {0, 4294967296LL},
                                                                    {0, 4294967297LL},
                                                                    {-1000, 1099511627779LL},
                                                                    {INT64_MIN, INT64_MAX},
                                                                    {7, 8}};

TEST(NumpyRandomCalls, RandintMatchesLegacyRandint) {
  const auto lines = numpy_lines(R"(
ranges = [(0, 1), (1, 2), (1, 3), (0, 5), (1, 100), (0, 30522), (-5, 7), (0, 2**32),
          (0, 2**32 + 1), (-1000, 2**40 + 3), (-2**63, 2**63 - 1), (7, 8)]
for seed in (3, 99, 4294967295):
    rs = np.random.RandomState(seed)
    for _ in range(50):
        for low, high in ranges:
            print(rs.randint(low, high))
        print(repr(rs.random()))
)");
  ASSERT_EQ(lines.size(), 3u * 50u * (kRanges.size() + 1));
  std::size_t k = 0;
  for (const std::int64_t seed : {3LL, 99LL, 4294967295LL}) {
    NumpyRandomState random(seed);
    for (int round = 0; round < 50; ++round) {
      for (const auto& [low, high] : kRanges) {
        ASSERT_EQ(random.randint(low, high), as_int(lines[k++]))
            << "seed " << seed << " randint(" << low << ", " << high << ")";
      }
      ASSERT_EQ(random.random(), as_double(lines[k++]));
    }
  }
}

TEST(NumpyRandomCalls, RandintRefusesAnEmptyRange) {
  NumpyRandomState random(1);
  EXPECT_THROW(random.randint(5, 5), Error);
  EXPECT_THROW(random.randint(6, 5), Error);
}

// Both of numpy's rules: the CDF search (p >= 1/3) and the inversion (T5 uses p = 0.2).
TEST(NumpyRandomCalls, GeometricMatchesLegacyGeometric) {
  const auto lines = numpy_lines(R"(
ps = [0.2, 0.05, 0.001, 1/3, 0.3333333333333333, 0.5, 0.9, 1.0]
for seed in (0, 1234, 77):
    rs = np.random.RandomState(seed)
    for _ in range(300):
        for p in ps:
            print(rs.geometric(p))
)");
  const std::vector<double> ps = {0.2, 0.05, 0.001, 1.0 / 3, 0.3333333333333333, 0.5, 0.9, 1.0};
  ASSERT_EQ(lines.size(), 3u * 300u * ps.size());
  std::size_t k = 0;
  for (const std::int64_t seed : {0LL, 1234LL, 77LL}) {
    NumpyRandomState random(seed);
    for (int i = 0; i < 300; ++i) {
      for (const double p : ps)
        ASSERT_EQ(random.geometric(p), as_int(lines[k++])) << "seed " << seed << " p " << p;
    }
  }
  NumpyRandomState random(1);
  EXPECT_THROW(random.geometric(0.0), Error);
  EXPECT_THROW(random.geometric(1.5), Error);
}

TEST(NumpyRandomCalls, ChoiceWithProbabilitiesMatchesLegacyChoice) {
  const auto lines = numpy_lines(R"(
ps = [[1.0], [0.5, 0.5], [0.1, 0.2, 0.3, 0.4], [0.0, 1.0, 0.0], [0.25, 0.0, 0.75],
      [6/11, 3/11, 2/11], [0.7, 0.2, 0.1 + 1e-9]]
for seed in (5, 1234):
    rs = np.random.RandomState(seed)
    for _ in range(400):
        for p in ps:
            print(rs.choice(np.arange(len(p)), p=p))
)");
  const std::vector<std::vector<double>> ps = {{1.0},
                                               {0.5, 0.5},
                                               {0.1, 0.2, 0.3, 0.4},
                                               {0.0, 1.0, 0.0},
                                               {0.25, 0.0, 0.75},
                                               {6.0 / 11, 3.0 / 11, 2.0 / 11},
                                               {0.7, 0.2, 0.1 + 1e-9}};
  ASSERT_EQ(lines.size(), 2u * 400u * ps.size());
  std::size_t k = 0;
  for (const std::int64_t seed : {5LL, 1234LL}) {
    NumpyRandomState random(seed);
    for (int i = 0; i < 400; ++i) {
      for (const auto& p : ps) {
        ASSERT_EQ(static_cast<std::int64_t>(random.choice(p)), as_int(lines[k++]))
            << "seed " << seed << " draw " << i;
      }
    }
  }
}

TEST(NumpyRandomCalls, ChoiceRefusesWhatNumpyRefuses) {
  NumpyRandomState random(1);
  EXPECT_THROW(random.choice(std::vector<double>{}), Error);
  EXPECT_THROW(random.choice(std::vector<double>{0.5, 0.4}), Error);
  EXPECT_THROW(random.choice(std::vector<double>{1.5, -0.5}), Error);
}

// Megatron shuffles a Python list of lists; numpy's untyped path draws as its array path does.
TEST(NumpyRandomCalls, ShuffleMatchesShuffleOfAPythonList) {
  const auto lines = numpy_lines(R"(
for seed in (0, 8, 1234):
    rs = np.random.RandomState(seed)
    for n in (0, 1, 2, 3, 10, 257):
        items = [[i, [i]] for i in range(n)]
        rs.shuffle(items)
        print(" ".join(str(item[0]) for item in items))
    print(repr(rs.random()))
)");
  ASSERT_EQ(lines.size(), 3u * 7u);
  std::size_t k = 0;
  for (const std::int64_t seed : {0LL, 8LL, 1234LL}) {
    NumpyRandomState random(seed);
    for (const std::size_t n : {0u, 1u, 2u, 3u, 10u, 257u}) {
      std::vector<std::size_t> items(n);
      std::iota(items.begin(), items.end(), 0);
      random.shuffle(std::span(items));
      std::string text;
      for (const std::size_t item : items)
        text += (text.empty() ? "" : " ") + std::to_string(item);
      ASSERT_EQ(text, lines[k++]) << "seed " << seed << " n " << n;
    }
    ASSERT_EQ(random.random(), as_double(lines[k++]));
  }
}

// Sizes below 8, up to 128 and beyond (the recursive halves), in forward and reversed order.
TEST(NumpyRandomCalls, SumMatchesNumpysPairwiseSum) {
  const auto lines = numpy_lines(R"(
rs = np.random.RandomState(42)
for n in range(1, 400):
    v = 1.0 / (np.arange(n, dtype=np.int64) + 1)
    print(repr(v.sum(keepdims=True)[0]), repr(v[::-1].sum()))
    w = rs.random_sample(n) * 10 ** rs.randint(-3, 4)
    print(" ".join(repr(x) for x in w))
    print(repr(w.sum()))
)");
  ASSERT_EQ(lines.size(), 3u * 399u);
  for (std::size_t n = 1; n < 400; ++n) {
    const std::size_t k = 3 * (n - 1);
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i)
      v[i] = 1.0 / static_cast<double>(i + 1);
    const auto space = lines[k].find(' ');
    ASSERT_EQ(numpy_sum(v), as_double(lines[k].substr(0, space))) << "n " << n;
    std::vector<double> reversed(v.rbegin(), v.rend());
    ASSERT_EQ(numpy_sum(reversed), as_double(lines[k].substr(space + 1))) << "n " << n;
    const std::vector<double> w = as_doubles(lines[k + 1]);
    ASSERT_EQ(w.size(), n);
    ASSERT_EQ(numpy_sum(w), as_double(lines[k + 2])) << "n " << n;
  }
}

// masked_dataset.py's nprobs and the p it passes to choice, bit for bit.
TEST(NumpyRandomCalls, NgramProbabilitiesMatchMegatronsNumpyExpression) {
  const auto lines = numpy_lines(R"(
for longer in (False, True):
    for max_ngram in range(1, 21):
        nvals = np.arange(max_ngram, dtype=np.int64) + 1
        nprobs = 1.0 / nvals
        nprobs = nprobs / nprobs.sum(keepdims=True)
        if longer:
            nprobs = nprobs[::-1]
        p = nprobs[:max_ngram] / nprobs[:max_ngram].sum(keepdims=True)
        print(" ".join(repr(x) for x in p))
)");
  ASSERT_EQ(lines.size(), 40u);
  std::size_t k = 0;
  for (const bool longer : {false, true}) {
    for (std::int64_t max_ngram = 1; max_ngram <= 20; ++max_ngram) {
      MaskingOptions options;
      options.masking_max_ngram = max_ngram;
      options.masking_use_longer_ngrams = longer;
      ASSERT_EQ(ngram_probabilities(options), as_doubles(lines[k++]))
          << "max_ngram " << max_ngram << " longer " << longer;
    }
  }
}

}  // namespace
}  // namespace megatron::data
