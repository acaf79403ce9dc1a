// MLA decode attention's reference (latent_attention.hpp): attend()
// with the whole latent as keys and its first R elements as values.
#include "reference/latent_attention.hpp"

#include "reference/common.hpp"

namespace phasebench::reference {

void latent_attention_head(const float* q, std::size_t L, std::size_t R, std::size_t P, float scale,
                           const std::function<const float*(std::size_t)>& latent, double* out) {
  // Keys: the whole latent (nope and rope parts); values: its first R elements.
  attend(q, L, R + P, R, scale, latent, latent, out);
}

}  // namespace phasebench::reference
