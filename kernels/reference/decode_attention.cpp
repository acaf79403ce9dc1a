// Decode attention's reference (decode_attention.hpp): attend() over the
// context, and the fixed fp8 cache scales.
#include "reference/decode_attention.hpp"

#include "reference/common.hpp"

namespace phasebench::reference {

std::vector<float> kv_head_scales(std::size_t Hkv) {
  std::vector<float> s(2 * Hkv);
  for (std::size_t h = 0; h < Hkv; ++h) {
    s[h] = 0.375f + 0.0625f * static_cast<float>(h % 9);       // K: 0.375 .. 0.875
    s[Hkv + h] = 1.25f + 0.125f * static_cast<float>(h % 7);  // V: 1.25 .. 2.0
  }
  return s;
}

void decode_attention_head(const float* q, std::size_t L, std::size_t D, float scale,
                           const std::function<const float*(std::size_t)>& key,
                           const std::function<const float*(std::size_t)>& value, float* out) {
  attend(q, L, D, scale, key, value, out);
}

}  // namespace phasebench::reference
