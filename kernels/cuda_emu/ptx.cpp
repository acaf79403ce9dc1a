// pb_emu: the inline PTX instructions that need more than a few lines
// (declared in pb_emu_ptx.hpp). Fragment layouts are the PTX ISA's ("Matrix
// Fragments for mma.m16n8k16 with floating point type"), with
// groupID = lane >> 2 and threadID_in_group = lane % 4; in a .f16x2/.bf16x2
// register the element of lower index is the lower half.
#include <cmath>
#include <cstring>

#define PB_EMU_RUNTIME
#include "pb_emu.hpp"

namespace pb_emu {

namespace {

float half_to_float(unsigned short h, bool bf16) {
  if (bf16) return __uint_as_float(static_cast<unsigned>(h) << 16);
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}

float element(unsigned reg, int half, bool bf16) {
  return half_to_float(static_cast<unsigned short>(half ? reg >> 16 : reg & 0xffffu), bf16);
}

struct MmaPayload {
  const unsigned* a;  // 4 registers: a0..a7
  const unsigned* b;  // 2 registers: b0..b3
  const float* c;     // c0..c3
  float* d;           // d0..d3
};

}  // namespace

void mma_m16n8k16_f32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4], bool bf16,
                      const char* file, int line) {
  MmaPayload mine{a, b, c, d};
  const char* what = bf16 ? "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
                          : "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
  // .aligned: all 32 threads of the warp execute the same mma.sync.
  warp_collective(0xffffffffu, Site{what, file, line, true}, &mine, [bf16](void* const* ps, unsigned) {
    float A[16][16], B[16][8], C[16][8];
    for (unsigned lane = 0; lane < 32; ++lane) {
      const auto& p = *static_cast<const MmaPayload*>(ps[lane]);
      const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3);
      for (int i = 0; i < 8; ++i) {  // a_i
        const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
        const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
        A[row][col] = element(p.a[i / 2], i & 1, bf16);
      }
      for (int i = 0; i < 4; ++i) {  // b_i
        const int row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
        B[row][g] = element(p.b[i / 2], i & 1, bf16);
      }
      for (int i = 0; i < 4; ++i) C[i < 2 ? g : g + 8][t * 2 + (i & 1)] = p.c[i];  // c_i
    }
    for (unsigned lane = 0; lane < 32; ++lane) {
      auto& p = *static_cast<MmaPayload*>(ps[lane]);
      const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3);
      for (int i = 0; i < 4; ++i) {  // d_i, laid out as c_i
        const int row = i < 2 ? g : g + 8, col = t * 2 + (i & 1);
        float acc = C[row][col];
        for (int k = 0; k < 16; ++k) acc = std::fma(A[row][k], B[k][col], acc);
        p.d[i] = acc;
      }
    }
  });
}

}  // namespace pb_emu
