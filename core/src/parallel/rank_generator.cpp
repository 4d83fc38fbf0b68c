// Megatron's generate_masked_orthogonal_rank_groups, re-derived for the C++ RankGenerator.
#include "megatron/parallel/rank_generator.h"

#include <string>

#include "megatron/error.h"

namespace megatron {
namespace {

constexpr std::array<std::string_view, 5> kNames = {"tp", "cp", "ep", "dp", "pp"};

std::vector<std::string_view> split_dashes(std::string_view text) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dash = text.find('-', start);
    parts.push_back(text.substr(start, dash == std::string_view::npos ? dash : dash - start));
    if (dash == std::string_view::npos) return parts;
    start = dash + 1;
  }
}

int size_by_name(const RankGenerator::Sizes& s, std::string_view name) {
  if (name == "tp") return s.tp;
  if (name == "cp") return s.cp;
  if (name == "ep") return s.ep;
  if (name == "dp") return s.dp;
  if (name == "pp") return s.pp;
  return -1;
}

std::string join(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace

RankGenerator::RankGenerator(int tp, int ep, int dp, int pp, int cp, std::string_view order)
    : RankGenerator(Sizes{.tp = tp, .ep = ep, .dp = dp, .pp = pp, .cp = cp}, order) {}

RankGenerator::RankGenerator(Sizes sizes, std::string_view order) : sizes_(sizes), order_(order) {
  for (std::string_view name : kNames) {
    const int n = size_by_name(sizes_, name);
    if (n < 1) {
      throw ConfigError("rank generator: size of " + std::string(name) + " must be >= 1, got " +
                        std::to_string(n));
    }
  }
  if (sizes_.ep > 1 && sizes_.cp > 1) {
    throw ConfigError("rank generator: ep (" + std::to_string(sizes_.ep) + ") and cp (" +
                      std::to_string(sizes_.cp) +
                      ") cannot both be > 1 in one generator; context parallelism belongs to the "
                      "dense layout and expert parallelism to the expert layout");
  }

  const std::vector<std::string_view> parts = split_dashes(order);
  std::vector<std::string_view> unknown, repeated, missing;
  std::array<int, 5> seen{};
  for (std::string_view p : parts) {
    bool known = false;
    for (std::size_t i = 0; i < kNames.size(); ++i) {
      if (p == kNames[i]) {
        known = true;
        if (++seen[i] == 2) repeated.push_back(p);
      }
    }
    if (!known) unknown.push_back(p.empty() ? std::string_view("<empty>") : p);
  }
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (seen[i] == 0) missing.push_back(kNames[i]);
  }
  if (!unknown.empty() || !repeated.empty() || !missing.empty()) {
    std::string msg = "invalid parallel order \"" + std::string(order) +
                      "\": expected each of tp, cp, ep, dp, pp exactly once joined by '-' "
                      "(e.g. \"" +
                      std::string(kDefaultParallelOrder) + "\")";
    if (!unknown.empty()) msg += "; unknown: " + join(unknown);
    if (!repeated.empty()) msg += "; repeated: " + join(repeated);
    if (!missing.empty()) msg += "; missing: " + join(missing);
    throw ConfigError(msg);
  }

  for (std::size_t i = 0; i < parts.size(); ++i) {
    // Point at the static names, not into the caller's string, so the views never dangle.
    for (std::string_view name : kNames) {
      if (parts[i] == name) axis_name_[i] = name;
    }
    axis_size_[i] = size_by_name(sizes_, axis_name_[i]);
    if (__builtin_mul_overflow(world_size_, axis_size_[i], &world_size_)) {
      throw ConfigError("rank generator: tp(" + std::to_string(sizes_.tp) + ") x cp(" +
                        std::to_string(sizes_.cp) + ") x ep(" + std::to_string(sizes_.ep) +
                        ") x dp(" + std::to_string(sizes_.dp) + ") x pp(" +
                        std::to_string(sizes_.pp) + ") does not fit in an int");
    }
  }
}

int RankGenerator::size_of(std::string_view name) const {
  const int n = size_by_name(sizes_, name);
  if (n < 0) {
    throw Error("rank generator: unknown parallel dimension \"" + std::string(name) +
                "\" (expected one of tp, cp, ep, dp, pp)");
  }
  return n;
}

std::vector<std::vector<int>> RankGenerator::get_ranks(std::string_view token) const {
  std::array<bool, 5> in_token{};
  for (std::string_view part : split_dashes(token)) {
    std::size_t axis = axis_name_.size();
    for (std::size_t i = 0; i < axis_name_.size(); ++i) {
      if (axis_name_[i] == part) axis = i;
    }
    if (axis == axis_name_.size()) {
      throw Error("rank generator: bad group token \"" + std::string(token) + "\": \"" +
                  std::string(part) + "\" is not one of tp, cp, ep, dp, pp");
    }
    if (in_token[axis]) {
      throw Error("rank generator: bad group token \"" + std::string(token) + "\": \"" +
                  std::string(part) + "\" appears twice");
    }
    in_token[axis] = true;
  }

  // Split the axes (kept in generator order) into those spanning a group and those naming it.
  std::vector<int> inner_size, inner_stride, outer_size, outer_stride;
  int stride = 1;
  for (std::size_t i = 0; i < axis_size_.size(); ++i) {
    (in_token[i] ? inner_size : outer_size).push_back(axis_size_[i]);
    (in_token[i] ? inner_stride : outer_stride).push_back(stride);
    stride *= axis_size_[i];
  }
  int group_size = 1;
  for (int n : inner_size)
    group_size *= n;
  const int num_groups = world_size_ / group_size;

  // Mixed-radix decode of `index` over `shape` (leftmost fastest), then back to a rank offset.
  auto offset_of = [](int index, const std::vector<int>& shape, const std::vector<int>& strides) {
    int offset = 0;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      offset += (index % shape[i]) * strides[i];
      index /= shape[i];
    }
    return offset;
  };

  std::vector<std::vector<int>> groups(static_cast<std::size_t>(num_groups));
  for (int g = 0; g < num_groups; ++g) {
    const int base = offset_of(g, outer_size, outer_stride);
    std::vector<int>& ranks = groups[static_cast<std::size_t>(g)];
    ranks.reserve(static_cast<std::size_t>(group_size));
    for (int r = 0; r < group_size; ++r)
      ranks.push_back(base + offset_of(r, inner_size, inner_stride));
  }
  return groups;
}

}  // namespace megatron
