#pragma once
// The reference of a linear layer (ops/linear.hpp): one output element of
// Y = X W^T in double, with the |x*w| sum its tolerance scales by.
#include <cstddef>

namespace phasebench::reference {

// Y[m,n] of Y = X W^T (X is M x K, W is N x K, row-major). Returns the value
// and, in *abs_sum, sum |x*w| for the tolerance.
double linear_element(const float* X, const float* W, std::size_t K, std::size_t m, std::size_t n, double* abs_sum);

}  // namespace phasebench::reference
