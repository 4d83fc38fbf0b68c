// Where a tensor lives: host memory, a CUDA device, or "meta" (shape only, nothing allocated).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace megatron {

struct Device {
  enum class Type : std::uint8_t { cpu, cuda, meta };
  Type type = Type::cpu;
  int index = 0;  // CUDA ordinal; 0 otherwise

  static Device cpu() { return {Type::cpu, 0}; }
  static Device cuda(int ordinal = 0) { return {Type::cuda, ordinal}; }
  static Device meta() { return {Type::meta, 0}; }

  bool is_cpu() const { return type == Type::cpu; }
  bool is_cuda() const { return type == Type::cuda; }
  bool is_meta() const { return type == Type::meta; }
  bool operator==(const Device&) const = default;

  std::string str() const;  // "cpu", "cuda:1", "meta"
  // Parses "cpu", "meta", "cuda" (ordinal 0) or "cuda:N"; throws Error otherwise.
  static Device parse(std::string_view text);
};

}  // namespace megatron
