// Helpers shared by the CPU kernels (vectors.cpp, torus.cpp): forced inlining, and exact bfloat16 conversions that
// vectorise.
#pragma once

#include <torch/extension.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kuramoto {

// the per-oscillator helpers must be inlined into the block loops for those to vectorise
#define KA_INLINE inline __attribute__((always_inline))

// Stored <-> computed numbers: a plain conversion, and for bfloat16 the bit operations written out (c10's conversions
// branch on NaN, which keeps the loops that read or write bfloat16 from vectorising): widening is exact; narrowing
// rounds to nearest even as c10::BFloat16 does, a NaN staying a (quiet) NaN
template <typename To, typename From>
KA_INLINE To recast(From v) {
  if constexpr (std::is_same_v<From, at::BFloat16>) {
    const uint32_t bits = uint32_t(v.x) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return static_cast<To>(f);
  } else if constexpr (std::is_same_v<To, at::BFloat16>) {
    const float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    const uint16_t rounded = uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
    const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;  // a bit test: immune to -ffinite-math-only
    return at::BFloat16(nan ? uint16_t(0x7FC0) : rounded, at::BFloat16::from_bits());
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace kuramoto
