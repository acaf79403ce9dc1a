// pb_emu: nvcuda::wmma for the m16n16k16 shape (bf16/fp16 inputs, fp32 or
// fp16 accumulators), the subset phasebench's kernels use. CUDA leaves the
// fragment layout unspecified, so this one is deliberately unlike any real one
// (lane l holds elements l, l+32, ..., l+224 of the row-major tile): a kernel
// that relies on a layout fails here. load/store check the rules of the CUDA C++
// guide (a 256-bit aligned pointer, ldm a multiple of 16 bytes, called by every
// lane of the warp with the same pointer, ldm and layout); mma_sync is a warp
// collective of all 32 lanes.
#pragma once

#include <string>
#include <type_traits>

namespace pb_emu {
void check_access(const void* p, std::size_t align, const char* what);
[[noreturn]] void device_fail(const std::string& what);
}  // namespace pb_emu

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "pb_emu: only the m16n16k16 WMMA shape is emulated");
  static constexpr int num_elements = 8;
  T x[8];
};

namespace detail {
// Element e of lane `lane`: its (row, col) in the 16x16 tile.
inline void element(unsigned lane, int e, int& r, int& c) {
  const int idx = static_cast<int>(lane) + 32 * e;
  r = idx / 16;
  c = idx % 16;
}
template <class T>
inline float to_f(T v) {
  return static_cast<float>(v);
}
// The rules of load_matrix_sync / store_matrix_sync: "mptr must be a 256-bit
// aligned pointer", "ldm must be a multiple of 16 bytes", and every lane of the
// warp calls it with the same mptr, ldm and layout (a warp collective).
inline void check(const void* p, unsigned ldm, int layout, std::size_t elem, const char* what, const char* file,
                  int line) {
  ::pb_emu::check_access(p, 32, what);
  if ((ldm * elem) % 16 != 0)
    ::pb_emu::device_fail(std::string(what) + ": ldm " + std::to_string(ldm) + " is not a multiple of 16 bytes");
  struct Payload {
    const void* p;
    unsigned ldm;
    int layout;
  } mine{p, ldm, layout};
  ::pb_emu::warp_collective(0xffffffffu, ::pb_emu::Site{what, file, line, true}, &mine, [what](void* const* ps, unsigned) {
    const auto& lane0 = *static_cast<const Payload*>(ps[0]);
    for (unsigned l = 1; l < 32; ++l) {
      const auto& o = *static_cast<const Payload*>(ps[l]);
      if (o.p != lane0.p || o.ldm != lane0.ldm || o.layout != lane0.layout)
        ::pb_emu::device_fail(std::string(what) + ": lane " + std::to_string(l) +
                              " passes another pointer, ldm or layout than lane 0; all lanes must pass the same");
    }
  });
}
}  // namespace detail

template <class Use, class T, class L, class U>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, const U& v) {
  for (auto& e : f.x) e = T(v);
}

template <class Use, class T, class L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm,
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load takes a layout_t");
  detail::check(p, ldm, std::is_same_v<L, row_major> ? 0 : 1, sizeof(T), "wmma::load_matrix_sync", file, line);
  const unsigned lane = ::pb_emu::lane_id();
  for (int e = 0; e < 8; ++e) {
    int r, c;
    detail::element(lane, e, r, c);
    f.x[e] = std::is_same_v<L, row_major> ? p[r * ldm + c] : p[c * ldm + r];
  }
}

template <class T>
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T, void>& f, const T* p, unsigned ldm, layout_t l,
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::check(p, ldm, l, sizeof(T), "wmma::load_matrix_sync", file, line);
  const unsigned lane = ::pb_emu::lane_id();
  for (int e = 0; e < 8; ++e) {
    int r, c;
    detail::element(lane, e, r, c);
    f.x[e] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  }
}

template <class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T, void>& f, unsigned ldm, layout_t l,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::check(p, ldm, l, sizeof(T), "wmma::store_matrix_sync", file, line);
  const unsigned lane = ::pb_emu::lane_id();
  for (int e = 0; e < 8; ++e) {
    int r, c;
    detail::element(lane, e, r, c);
    (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
  }
}

// D = A B + C over the whole warp: the last lane to arrive gathers all 32 lanes'
// fragments into the three tiles, multiplies in fp32 (k in order), and scatters D.
template <class TA, class LA, class TB, class LB, class TC>
inline void mma_sync(fragment<accumulator, 16, 16, 16, TC, void>& d, const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, TB, LB>& b,
                     const fragment<accumulator, 16, 16, 16, TC, void>& c, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  struct Payload {
    const fragment<matrix_a, 16, 16, 16, TA, LA>* a;
    const fragment<matrix_b, 16, 16, 16, TB, LB>* b;
    const fragment<accumulator, 16, 16, 16, TC, void>* c;
    TC out[8];
  } mine{&a, &b, &c, {}};
  ::pb_emu::warp_collective(0xffffffffu, ::pb_emu::Site{"wmma::mma_sync", file, line, true}, &mine,
                            [](void* const* ps, unsigned) {
                              float A[16][16], B[16][16], C[16][16];
                              for (unsigned lane = 0; lane < 32; ++lane) {
                                const auto& p = *static_cast<const Payload*>(ps[lane]);
                                for (int e = 0; e < 8; ++e) {
                                  int r, col;
                                  detail::element(lane, e, r, col);
                                  A[r][col] = detail::to_f(p.a->x[e]);
                                  B[r][col] = detail::to_f(p.b->x[e]);
                                  C[r][col] = detail::to_f(p.c->x[e]);
                                }
                              }
                              for (unsigned lane = 0; lane < 32; ++lane) {
                                auto& p = *static_cast<Payload*>(ps[lane]);
                                for (int e = 0; e < 8; ++e) {
                                  int r, col;
                                  detail::element(lane, e, r, col);
                                  float acc = C[r][col];
                                  for (int k = 0; k < 16; ++k) acc = std::fma(A[r][k], B[k][col], acc);
                                  p.out[e] = TC(acc);
                                }
                              }
                            });
  for (int e = 0; e < 8; ++e) d.x[e] = mine.out[e];
}

}  // namespace wmma
}  // namespace nvcuda
