// bf16 and fp16 storage types with round-to-nearest-even conversion, usable on host and device.
#pragma once

#include <cstdint>
#include <cstring>

#include "megatron/tensor/hd.h"

namespace megatron {

namespace detail {
MEGATRON_HD std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
MEGATRON_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}
}  // namespace detail

// Brain float: the top 16 bits of an IEEE fp32.
struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  MEGATRON_HD explicit bf16(float f) : bits(from_float(f)) {}
  MEGATRON_HD explicit operator float() const { return detail::bits_float(std::uint32_t(bits) << 16); }

  MEGATRON_HD static std::uint16_t from_float(float f) {
    const std::uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
    const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return static_cast<std::uint16_t>((u + rounding) >> 16);
  }
};

// IEEE 754 binary16.
struct f16 {
  std::uint16_t bits = 0;

  f16() = default;
  MEGATRON_HD explicit f16(float f) : bits(from_float(f)) {}
  MEGATRON_HD explicit operator float() const { return to_float(bits); }

  MEGATRON_HD static std::uint16_t from_float(float f) {
    const std::uint32_t u = detail::float_bits(f);
    const std::uint32_t sign = (u >> 16) & 0x8000u;
    const std::uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
    if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (abs < 0x38800000u) {
      // Subnormal (or zero) in fp16: shift the implicit-1 mantissa into place, rounding to even.
      if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);
      const std::uint32_t exponent = abs >> 23;
      const std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
      const std::uint32_t shift = 126u - exponent;  // 14..24
      std::uint32_t half = mantissa >> shift;
      const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
      const std::uint32_t halfway = 1u << (shift - 1u);
      if (remainder > halfway || (remainder == halfway && (half & 1u))) ++half;
      return static_cast<std::uint16_t>(sign | half);
    }
    const std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }

  MEGATRON_HD static float to_float(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1fu;
    std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) return detail::bits_float(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
      if (mantissa == 0) return detail::bits_float(sign);
      // Subnormal: value = mantissa * 2^-24.
      const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
      return sign ? -magnitude : magnitude;
    }
    return detail::bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
};

}  // namespace megatron
