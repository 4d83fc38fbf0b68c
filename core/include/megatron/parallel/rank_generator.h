// Megatron's rank -> group mapping: which global ranks form each tp/cp/ep/dp/pp group (and unions).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace megatron {

// Megatron's default rank order; "tp-cp-ep-pp-dp" (--use-tp-pp-dp-mapping) is the other common one.
inline constexpr std::string_view kDefaultParallelOrder = "tp-cp-ep-dp-pp";

// Lays the world out as a grid with one axis per parallel dimension, the first name of the order
// varying fastest: rank = sum_i coord_i * prod_{j<i} size_j. A group for a token such as "dp-cp"
// is the set of ranks that agree on every axis NOT named in the token.
//
// Immutable after construction; all methods are const and safe to call from any thread.
class RankGenerator {
 public:
  // Field order matches Megatron's RankGenerator(tp, ep, dp, pp, cp), so designated initializers
  // read the same way: RankGenerator({.tp = 2, .dp = 2, .pp = 4}).
  struct Sizes {
    int tp = 1;
    int ep = 1;
    int dp = 1;
    int pp = 1;
    int cp = 1;
  };

  // Throws ConfigError when a size is < 1, when ep and cp are both > 1 (Megatron keeps CP in the
  // dense generator and EP in the expert one), or when `order` is not a permutation of
  // tp, cp, ep, dp, pp (each exactly once, lower case, joined by '-').
  explicit RankGenerator(Sizes sizes, std::string_view order = kDefaultParallelOrder);
  RankGenerator(int tp, int ep, int dp, int pp, int cp,
                std::string_view order = kDefaultParallelOrder);

  // All groups for `token` ("tp", "dp-cp", "tp-ep-pp", ...; any order of distinct names).
  // Groups are enumerated by the coordinates of the axes not in the token, and the ranks inside a
  // group by the token's axes, in both cases taking the axes in the generator's order with the
  // leftmost varying fastest (so "dp-cp" and "cp-dp" give the same result, as in Megatron).
  // Throws megatron::Error for an empty token, an unknown or repeated name.
  std::vector<std::vector<int>> get_ranks(std::string_view token) const;

  int world_size() const { return world_size_; }
  const std::string& order() const { return order_; }
  const Sizes& sizes() const { return sizes_; }
  // Size of one dimension by name ("tp", "cp", "ep", "dp", "pp"); throws megatron::Error otherwise.
  int size_of(std::string_view name) const;

 private:
  Sizes sizes_;
  std::string order_;
  int world_size_ = 1;
  // Axis sizes in order_ sequence; axis 0 varies fastest.
  std::array<int, 5> axis_size_{};
  std::array<std::string_view, 5> axis_name_{};
};

}  // namespace megatron
