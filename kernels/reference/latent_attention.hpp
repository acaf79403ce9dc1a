#pragma once
// The reference of MLA decode attention (ops/latent_attention.hpp), absorbed
// form: one query head over the latent rows.
#include <cstddef>
#include <functional>

namespace phasebench::reference {

// One query head of MLA decode attention, absorbed form (ops/latent_attention.hpp):
// out[R] = softmax(q . C^T * scale) C[:, :R] over L latent rows of R + P
// elements; latent(l) returns a pointer to the R + P floats of token l, q has
// R + P. Double accumulation.
void latent_attention_head(const float* q, std::size_t L, std::size_t R, std::size_t P, float scale,
                           const std::function<const float*(std::size_t)>& latent, double* out);

}  // namespace phasebench::reference
