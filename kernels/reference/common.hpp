#pragma once
// What the plain CPU references share (one file per operation beside this one):
// storage-type conversion, the seeded fill, tolerances and the comparisons, and
// one query's softmax attention. The references are written for clarity, not
// speed: every kernel of every backend is checked against them on random data
// before it is timed. Inputs are floats already decoded from their storage
// type; accumulation is double.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "phasebench/dtype.hpp"

namespace phasebench::reference {

// Decode a buffer of `n` elements stored as `t` into floats.
std::vector<float> to_float(const void* data, DType t, std::size_t n);
// Encode floats into storage type `t` (round to nearest even).
void from_float(const float* in, DType t, std::size_t n, void* out);
// Round a float through storage type `t` and back.
float round_to(float v, DType t);
// Fill `n` elements of storage type `t` with numeric::random_value(seed, i, scale).
void fill_random(void* data, DType t, std::size_t n, std::uint64_t seed, float scale);

// Tolerances for comparing an output stored as `t`: |got - want| <= atol + rtol*|want|.
struct Tolerance {
  double atol = 0, rtol = 0;
};
Tolerance tolerance_for(DType out_type);

// Throws VerificationError naming `what`, the first bad index and both values
// when any element is out of tolerance; `scale[i]` (optional) multiplies atol
// per element (e.g. the sum of |x*w| of a dot product).
void check_close(const std::vector<float>& got, const std::vector<double>& want, Tolerance tol, const std::string& what,
                 const std::vector<double>* scale = nullptr);

// check_close for attention outputs, rows of `row_len` (one query head each):
// atol is scaled by each reference row's RMS. An attention output is a
// softmax-weighted mean of V rows, of size ~1/sqrt(context), so a fixed atol
// would accept almost anything (even zeros) at long contexts.
void check_rows_close(const std::vector<float>& got, const std::vector<double>& want, std::size_t row_len, Tolerance tol,
                      const std::string& what);

// One query over L keys of width Dk and values of width Dv, in double: the
// softmax of the scaled dot products, then the weighted sum of the values
// (out[Dv]); key(l) and value(l) return pointers to token l's elements.
void attend(const float* q, std::size_t L, std::size_t Dk, std::size_t Dv, float scale,
            const std::function<const float*(std::size_t)>& key, const std::function<const float*(std::size_t)>& value,
            double* out);
// The same with Dk = Dv = D, the result rounded to float.
void attend(const float* q, std::size_t L, std::size_t D, float scale,
            const std::function<const float*(std::size_t)>& key, const std::function<const float*(std::size_t)>& value,
            float* out);

}  // namespace phasebench::reference
