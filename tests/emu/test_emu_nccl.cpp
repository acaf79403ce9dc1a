// Tests of the emulation's several devices (PB_EMU_DEVICES) and of its NCCL
// stand-in (kernels/cuda_emu/nccl.cpp): each collective against a host
// computation written here, over 2, 3 and 4 devices, every NCCL data type and
// reduction, counts that do not divide by the rank count, in place and out of
// place; the misuses it reports (ranks that disagree, a rank that never calls,
// buffers on the wrong device or overlapping wrongly); and that a collective
// waits for the work queued before it on every rank's stream. Ranks in two
// processes (this test binary starts itself again as rank 1): the collectives,
// in place too, a mismatch and a rank that never calls.
#if __has_include(<nccl.h>)
#include <nccl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "emu_kernels.hpp"
#include "emu_test_util.hpp"

namespace {

namespace num = phasebench::numeric;

// Sets the emulation to `n` devices for one test, and back to one after it.
class Devices {
 public:
  explicit Devices(int n) { pb_emu::set_device_count_for_tests(n); }
  ~Devices() {
    cudaSetDevice(0);
    pb_emu::reset_after_failure_for_tests();
    pb_emu::set_device_count_for_tests(1);
  }
};

TEST(EmuDevices, CountCurrentDeviceAndMemoryArePerDevice) {
  Devices d(4);
  int n = 0, cur = -1;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 4);
  EXPECT_EQ(cudaSetDevice(4), cudaErrorInvalidDevice);
  EXPECT_NE(std::string(cudaGetErrorString(cudaGetLastError())).find("PB_EMU_DEVICES"), std::string::npos);
  ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
  ASSERT_EQ(cudaGetDevice(&cur), cudaSuccess);
  EXPECT_EQ(cur, 2);
  std::size_t free2 = 0, free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free2, &total), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  std::size_t after2 = 0;
  ASSERT_EQ(cudaMemGetInfo(&after2, &total), cudaSuccess);
  EXPECT_EQ(free2 - after2, std::size_t{1} << 20);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  EXPECT_EQ(free0, free2) << "device 0's memory is its own";
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 3), cudaSuccess);
  EXPECT_EQ(prop.pciBusID, 0xee + 3);
  int can = 0;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 3), cudaSuccess);
  EXPECT_EQ(can, 1);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST(EmuDevices, LaunchesAndEventRecordsFollowTheStreamsDevice) {
  Devices d(2);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t s1;
  cudaEvent_t e1;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  pb_emu_test::Dev<int> in(64), out(64);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t s0;
  cudaEvent_t e0;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  // A launch on device 1's stream while device 0 is current fails at the launch.
  pb_emu_test::copy(in.p, out.p, 64, s1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorInvalidResourceHandle)).find("belongs to device 1"), std::string::npos);
  // Recording device 0's event on device 1's stream fails; waiting across devices is fine.
  EXPECT_EQ(cudaEventRecord(e0, s1), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);  // and clears it
  ASSERT_EQ(cudaEventRecord(e0, s0), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(s1, e0, 0), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  std::vector<int> h(64);
  for (int i = 0; i < 64; ++i) h[static_cast<std::size_t>(i)] = i * 3;
  in.set(h);
  pb_emu_test::copy(in.p, out.p, 64, s1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e1, s1), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  EXPECT_EQ(out.get(), h);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s0);
  cudaStreamDestroy(s1);
}

// ---- the collectives ------------------------------------------------------------

const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,     ncclInt64,      ncclUint64,
                                 ncclFloat16, ncclFloat32, ncclFloat64,  ncclBfloat16,   ncclFloat8e4m3, ncclFloat8e5m2};
const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

std::size_t bytes_of(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
bool floating(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

// Element i of a typed byte buffer as a double (integers exactly, as their type holds them).
double value(const std::vector<unsigned char>& b, ncclDataType_t t, std::size_t i) {
  const unsigned char* p = b.data() + i * bytes_of(t);
  switch (t) {
    case ncclInt8: return static_cast<std::int8_t>(*p);
    case ncclUint8: return *p;
    case ncclInt32: { std::int32_t v; std::memcpy(&v, p, 4); return v; }
    case ncclUint32: { std::uint32_t v; std::memcpy(&v, p, 4); return v; }
    case ncclInt64: { std::int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case ncclUint64: { std::uint64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case ncclFloat16: { std::uint16_t v; std::memcpy(&v, p, 2); return num::fp16_to_float(v); }
    case ncclBfloat16: { std::uint16_t v; std::memcpy(&v, p, 2); return num::bf16_to_float(v); }
    case ncclFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case ncclFloat64: { double v; std::memcpy(&v, p, 8); return v; }
    case ncclFloat8e4m3: return num::fp8e4m3_to_float(*p);
    case ncclFloat8e5m2: return num::fp16_to_float(static_cast<std::uint16_t>(*p << 8));
    default: return 0;
  }
}

// Small values every type holds exactly (so sums and products stay exact in the
// 8-bit floats too: integers 1..3, and their products over 4 ranks at most 81).
std::vector<unsigned char> fill(ncclDataType_t t, std::size_t n, int rank) {
  std::vector<unsigned char> b(n * bytes_of(t));
  for (std::size_t i = 0; i < n; ++i) {
    const int v = 1 + static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 5) % 3);
    unsigned char* p = b.data() + i * bytes_of(t);
    switch (t) {
      case ncclInt8: case ncclUint8: *p = static_cast<unsigned char>(v); break;
      case ncclInt32: case ncclUint32: { const std::int32_t x = v; std::memcpy(p, &x, 4); break; }
      case ncclInt64: case ncclUint64: { const std::int64_t x = v; std::memcpy(p, &x, 8); break; }
      case ncclFloat16: { const auto x = num::float_to_fp16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
      case ncclBfloat16: { const auto x = num::float_to_bf16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
      case ncclFloat32: { const float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
      case ncclFloat64: { const double x = v; std::memcpy(p, &x, 8); break; }
      case ncclFloat8e4m3: *p = num::float_to_fp8e4m3(static_cast<float>(v)); break;
      case ncclFloat8e5m2: *p = static_cast<unsigned char>(num::float_to_fp16(static_cast<float>(v)) >> 8); break;
      default: break;
    }
  }
  return b;
}

double reduce(const std::vector<double>& v, ncclRedOp_t op, bool is_float) {
  double acc = v[0];
  for (std::size_t r = 1; r < v.size(); ++r) {
    if (op == ncclSum || op == ncclAvg) acc += v[r];
    if (op == ncclProd) acc *= v[r];
    if (op == ncclMax) acc = std::max(acc, v[r]);
    if (op == ncclMin) acc = std::min(acc, v[r]);
  }
  if (op == ncclAvg) acc = is_float ? acc / static_cast<double>(v.size()) : std::trunc(acc / static_cast<double>(v.size()));
  return acc;
}

// `n` ranks on devices 0..n-1, each with a non-blocking stream of its device.
struct Ranks {
  int n;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  explicit Ranks(int count) : n(count), comms(static_cast<std::size_t>(count)), streams(static_cast<std::size_t>(count)) {
    EXPECT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess);
    for (int r = 0; r < n; ++r) {
      cudaSetDevice(r);
      cudaStreamCreateWithFlags(&streams[static_cast<std::size_t>(r)], cudaStreamNonBlocking);
    }
    cudaSetDevice(0);
  }
  ~Ranks() {
    for (int r = 0; r < n; ++r) {
      cudaStreamDestroy(streams[static_cast<std::size_t>(r)]);
      ncclCommDestroy(comms[static_cast<std::size_t>(r)]);
    }
  }
};

// A device buffer of `bytes` on device `dev`, freed at the end.
struct Buf {
  void* p = nullptr;
  std::size_t bytes;
  Buf(int dev, std::size_t b) : bytes(b) {
    cudaSetDevice(dev);
    EXPECT_EQ(cudaMalloc(&p, std::max<std::size_t>(b, 1)), cudaSuccess);
    cudaSetDevice(0);
  }
  ~Buf() { cudaFree(p); }
  void set(const std::vector<unsigned char>& h, std::size_t offset = 0) {
    cudaMemcpy(static_cast<unsigned char*>(p) + offset, h.data(), h.size(), cudaMemcpyHostToDevice);
  }
  std::vector<unsigned char> get(std::size_t offset, std::size_t n) const {
    std::vector<unsigned char> h(n);
    cudaMemcpy(h.data(), static_cast<const unsigned char*>(p) + offset, n, cudaMemcpyDeviceToHost);
    return h;
  }
};

enum class Coll { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce };

// Runs `coll` over `n` ranks with `count` (the API's count) of type `t`, in place or
// not, and checks every rank's output against the host computation.
void check_collective(Coll coll, int n, std::size_t count, ncclDataType_t t, ncclRedOp_t op, bool in_place, int root = 0) {
  Devices d(n);
  Ranks ranks(n);
  const std::size_t e = bytes_of(t), N = static_cast<std::size_t>(n);
  const std::size_t send_n = coll == Coll::reduce_scatter || coll == Coll::all_to_all ? count * N : count;
  const std::size_t recv_n = coll == Coll::all_gather || coll == Coll::all_to_all ? count * N : count;
  std::vector<std::vector<unsigned char>> inputs;
  std::vector<std::unique_ptr<Buf>> send, recv;
  for (int r = 0; r < n; ++r) {
    inputs.push_back(fill(t, send_n, r));
    recv.push_back(std::make_unique<Buf>(r, std::max(recv_n, send_n) * e));
    if (in_place) {
      // Where NCCL reads the input of an in-place call.
      const std::size_t off = coll == Coll::all_gather ? static_cast<std::size_t>(r) * count * e : 0;
      recv.back()->set(inputs.back(), off);
    } else {
      send.push_back(std::make_unique<Buf>(r, send_n * e));
      send.back()->set(inputs.back());
    }
  }
  auto send_ptr = [&](int r) -> const void* {
    if (!in_place) return send[static_cast<std::size_t>(r)]->p;
    const std::size_t off = coll == Coll::all_gather ? static_cast<std::size_t>(r) * count * e : 0;
    return static_cast<unsigned char*>(recv[static_cast<std::size_t>(r)]->p) + off;
  };
  auto recv_ptr = [&](int r) -> void* {
    void* base = recv[static_cast<std::size_t>(r)]->p;
    if (in_place && coll == Coll::reduce_scatter) return static_cast<unsigned char*>(base) + static_cast<std::size_t>(r) * count * e;
    return base;
  };
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    const auto c = ranks.comms[static_cast<std::size_t>(r)];
    const auto s = ranks.streams[static_cast<std::size_t>(r)];
    ncclResult_t res = ncclSuccess;
    switch (coll) {
      case Coll::all_reduce: res = ncclAllReduce(send_ptr(r), recv_ptr(r), count, t, op, c, s); break;
      case Coll::all_gather: res = ncclAllGather(send_ptr(r), recv_ptr(r), count, t, c, s); break;
      case Coll::reduce_scatter: res = ncclReduceScatter(send_ptr(r), recv_ptr(r), count, t, op, c, s); break;
      case Coll::all_to_all: res = ncclAlltoAll(send_ptr(r), recv_ptr(r), count, t, c, s); break;
      case Coll::broadcast: res = ncclBroadcast(send_ptr(r), recv_ptr(r), count, t, root, c, s); break;
      case Coll::reduce: res = ncclReduce(send_ptr(r), recv_ptr(r), count, t, op, root, c, s); break;
    }
    ASSERT_EQ(res, ncclSuccess) << ncclGetLastError(c);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) ASSERT_EQ(cudaStreamSynchronize(ranks.streams[static_cast<std::size_t>(r)]), cudaSuccess);
  for (int r = 0; r < n; ++r) {
    if (coll == Coll::reduce && r != root) continue;
    const std::size_t off = in_place && coll == Coll::reduce_scatter ? static_cast<std::size_t>(r) * count * e : 0;
    const auto got = recv[static_cast<std::size_t>(r)]->get(off, recv_n * e);
    for (std::size_t i = 0; i < recv_n; ++i) {
      double want = 0;
      std::vector<double> v;
      switch (coll) {
        case Coll::all_reduce: case Coll::reduce:
          for (int q = 0; q < n; ++q) v.push_back(value(inputs[static_cast<std::size_t>(q)], t, i));
          want = reduce(v, op, floating(t));
          break;
        case Coll::reduce_scatter:
          for (int q = 0; q < n; ++q) v.push_back(value(inputs[static_cast<std::size_t>(q)], t, static_cast<std::size_t>(r) * count + i));
          want = reduce(v, op, floating(t));
          break;
        case Coll::all_gather: want = value(inputs[i / count], t, i % count); break;
        case Coll::all_to_all: want = value(inputs[i / count], t, static_cast<std::size_t>(r) * count + i % count); break;
        case Coll::broadcast: want = value(inputs[static_cast<std::size_t>(root)], t, i); break;
      }
      // Exact for integers; for floats the reduction's one rounding (avg of 8-bit floats: coarse).
      const double tol = floating(t) ? std::abs(want) * (e == 1 ? 0.13 : e == 2 ? 0.008 : 1e-6) : 0;
      ASSERT_LE(std::abs(value(got, t, i) - want), tol)
          << "rank " << r << " element " << i << " of " << recv_n << " (type " << t << ", op " << op << ", n " << n
          << (in_place ? ", in place)" : ")");
    }
  }
}

TEST(EmuNccl, AllReduceEveryTypeAndOpOverThreeRanksWithAnOddCount) {
  for (auto t : kTypes)
    for (auto op : kOps) check_collective(Coll::all_reduce, 3, 37, t, op, false);
}

TEST(EmuNccl, InPlaceAndOutOfPlaceOverTwoAndFourRanks) {
  for (int n : {2, 4})
    for (bool in_place : {false, true})
      for (auto t : {ncclBfloat16, ncclFloat16, ncclFloat32, ncclInt32}) {
        check_collective(Coll::all_reduce, n, 1001, t, ncclSum, in_place);
        check_collective(Coll::all_gather, n, 13, t, ncclSum, in_place);
        check_collective(Coll::reduce_scatter, n, 13, t, ncclSum, in_place);
        check_collective(Coll::broadcast, n, 29, t, ncclSum, in_place, n - 1);
        check_collective(Coll::reduce, n, 29, t, ncclMax, in_place, 1);
        if (!in_place) check_collective(Coll::all_to_all, n, 7, t, ncclSum, false);
      }
}

TEST(EmuNccl, GatherScatterAndAllToAllEveryTypeOverThreeRanks) {
  // Per-rank counts of 1 and 5: totals (3, 15) that no power of two divides.
  for (auto t : kTypes)
    for (std::size_t count : {std::size_t{1}, std::size_t{5}}) {
      check_collective(Coll::all_gather, 3, count, t, ncclSum, false);
      check_collective(Coll::reduce_scatter, 3, count, t, ncclSum, true);
      check_collective(Coll::all_to_all, 3, count, t, ncclSum, false);
    }
}

TEST(EmuNccl, RanksThatDisagreeOrNeverCallAreReported) {
  Devices d(2);
  Ranks ranks(2);
  Buf a(0, 64), b(1, 64);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ncclAllReduce(a.p, a.p, 16, ncclFloat32, ncclSum, ranks.comms[0], ranks.streams[0]);
  ncclAllReduce(b.p, b.p, 15, ncclFloat32, ncclSum, ranks.comms[1], ranks.streams[1]);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("do not match"), std::string::npos) << ncclGetLastError(nullptr);
  // Outside a group, one thread calling rank 0 alone would wait forever on NCCL.
  EXPECT_EQ(ncclAllReduce(a.p, a.p, 16, ncclFloat32, ncclSum, ranks.comms[0], ranks.streams[0]), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("ncclGroupStart"), std::string::npos);
}

TEST(EmuNccl, BuffersOnTheWrongDeviceOrOverlappingAreRefused) {
  Devices d(2);
  Ranks ranks(2);
  Buf a0(0, 256), a1(1, 256), wrong(0, 256);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ncclAllReduce(a0.p, a0.p, 16, ncclFloat32, ncclSum, ranks.comms[0], ranks.streams[0]);
  ncclAllReduce(wrong.p, wrong.p, 16, ncclFloat32, ncclSum, ranks.comms[1], ranks.streams[1]);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("device 0"), std::string::npos) << ncclGetLastError(nullptr);
  // An all-gather whose input sits anywhere but at rank * sendcount of its output.
  auto* p0 = static_cast<unsigned char*>(a0.p);
  auto* p1 = static_cast<unsigned char*>(a1.p);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ncclAllGather(p0 + 4, p0, 16, ncclFloat32, ranks.comms[0], ranks.streams[0]);
  ncclAllGather(p1 + 64, p1, 16, ncclFloat32, ranks.comms[1], ranks.streams[1]);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("overlap"), std::string::npos) << ncclGetLastError(nullptr);
  // A receive buffer past the end of its allocation.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ncclAllGather(a0.p, wrong.p, 40, ncclFloat32, ranks.comms[0], ranks.streams[0]);
  ncclAllGather(a1.p, p1, 40, ncclFloat32, ranks.comms[1], ranks.streams[1]);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
}

TEST(EmuNccl, ACollectiveRunsAfterTheWorkQueuedBeforeItOnEveryRank) {
  Devices d(2);
  Ranks ranks(2);
  const int n = 64;
  std::vector<int> one(n, 1), two(n, 2);
  pb_emu_test::Dev<int>* dev[2];
  Buf src1(1, n * sizeof(int));
  cudaSetDevice(0);
  pb_emu_test::Dev<int> x0(n);
  cudaSetDevice(1);
  pb_emu_test::Dev<int> x1(n);
  dev[0] = &x0;
  dev[1] = &x1;
  x0.set(one);
  src1.set(std::vector<unsigned char>(reinterpret_cast<unsigned char*>(two.data()),
                                      reinterpret_cast<unsigned char*>(two.data()) + n * sizeof(int)));
  // Rank 1 fills its input on its stream (queued, not run), then the all-reduce.
  pb_emu_test::copy(static_cast<const int*>(src1.p), x1.p, n, ranks.streams[1]);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cudaSetDevice(0);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r)
    ncclAllReduce(dev[r]->p, dev[r]->p, n, ncclInt32, ncclSum, ranks.comms[static_cast<std::size_t>(r)],
                  ranks.streams[static_cast<std::size_t>(r)]);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_GE(pb_emu::queued_work_for_tests(), 3u) << "nothing runs until something waits";
  // Waiting for rank 0 alone runs rank 1's fill first.
  ASSERT_EQ(cudaStreamSynchronize(ranks.streams[0]), cudaSuccess);
  EXPECT_EQ(x0.get(), std::vector<int>(n, 3));
  cudaSetDevice(1);
  ASSERT_EQ(cudaStreamSynchronize(ranks.streams[1]), cudaSuccess);
  EXPECT_EQ(x1.get(), std::vector<int>(n, 3));
  cudaSetDevice(0);
}

// ---- ranks in two processes ---------------------------------------------------------

// Rank r's element i: small integers, exact in every type and in their sums.
int element(int r, std::size_t i) { return static_cast<int>((r * 7 + i * 3) % 17) - 8; }

std::string to_hex(const ncclUniqueId& id) {
  std::string h;
  char b[3];
  for (char c : id.internal) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    h += b;
  }
  return h;
}

ncclUniqueId from_hex(const std::string& h) {
  ncclUniqueId id{};
  for (std::size_t i = 0; i < sizeof id.internal && 2 * i + 1 < h.size(); ++i)
    id.internal[i] = static_cast<char>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  return id;
}

// This binary again, as rank 1 of `scenario` (the test EmuNcclProcesses.RankOne).
pid_t start_rank_one(const ncclUniqueId& id, const std::string& scenario) {
  const std::string env_id = "PB_EMU_NCCL_TEST_ID=" + to_hex(id), env_sc = "PB_EMU_NCCL_TEST_SCENARIO=" + scenario;
  std::vector<std::string> env_s{env_id, env_sc, "PB_EMU_NCCL_TIMEOUT_S=20"};
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "PB_EMU_NCCL_", 12) != 0) env_s.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", filter = "--gtest_filter=EmuNcclProcesses.RankOne";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// One rank of the two-process scenarios: joins outside a group (blocking until
// the other process joins), runs the collectives and checks its own outputs.
void run_rank(int me, const ncclUniqueId& id, const std::string& scenario) {
  ASSERT_EQ(cudaSetDevice(me), cudaSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRank(&comm, 2, id, me), ncclSuccess) << ncclGetLastError(nullptr);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  int count = 0;
  EXPECT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(count, 2);
  if (scenario == "absent") {  // rank 1 joins and leaves; rank 0's call waits in vain
    if (me == 0) {
      pb_emu_test::Dev<float> a(8);
      ASSERT_EQ(ncclAllReduce(a.p, a.p, 8, ncclFloat32, ncclSum, comm, s), ncclSuccess);
      const cudaError_t e = cudaStreamSynchronize(s);
      EXPECT_NE(e, cudaSuccess);
      EXPECT_NE(std::string(cudaGetErrorString(e)).find("waited 1 s for the other ranks' calls"), std::string::npos)
          << cudaGetErrorString(e);
    }
  } else if (scenario == "mismatch") {
    pb_emu_test::Dev<float> a(16);
    ASSERT_EQ(ncclAllReduce(a.p, a.p, me == 0 ? 16 : 15, ncclFloat32, ncclSum, comm, s), ncclSuccess);
    const cudaError_t e = cudaStreamSynchronize(s);
    EXPECT_NE(e, cudaSuccess);
    EXPECT_NE(std::string(cudaGetErrorString(e)).find("do not match"), std::string::npos) << cudaGetErrorString(e);
  } else {
    // float32, then int32 (exact), through every collective phasebench calls; 1001 elements (odd) and 5 or 13 a rank.
    for (bool ints : {false, true}) {
      const ncclDataType_t t = ints ? ncclInt32 : ncclFloat32;
      auto vals = [&](int r, std::size_t n, std::size_t from = 0) {
        std::vector<float> f;
        for (std::size_t i = 0; i < n; ++i) f.push_back(static_cast<float>(element(r, from + i)));
        return f;
      };
      auto as = [&](const std::vector<float>& f) {  // bit patterns of the type, in a float vector's storage
        std::vector<float> out(f.size());
        for (std::size_t i = 0; i < f.size(); ++i) {
          if (ints) {
            const std::int32_t v = static_cast<std::int32_t>(f[i]);
            std::memcpy(&out[i], &v, 4);
          } else {
            out[i] = f[i];
          }
        }
        return out;
      };
      auto back = [&](float x) {
        if (!ints) return static_cast<double>(x);
        std::int32_t v;
        std::memcpy(&v, &x, 4);
        return static_cast<double>(v);
      };
      const std::size_t N = 1001;
      pb_emu_test::Dev<float> send(N), recv(N);
      send.set(as(vals(me, N)));
      ASSERT_EQ(ncclAllReduce(send.p, recv.p, N, t, ncclSum, comm, s), ncclSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
      auto got = recv.get();
      for (std::size_t i = 0; i < N; ++i) ASSERT_EQ(back(got[i]), element(0, i) + element(1, i)) << "all-reduce " << i;
      // In place.
      ASSERT_EQ(ncclAllReduce(send.p, send.p, N, t, ncclSum, comm, s), ncclSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      got = send.get();
      for (std::size_t i = 0; i < N; ++i) ASSERT_EQ(back(got[i]), element(0, i) + element(1, i)) << "in place " << i;
      // All-gather of 5 a rank, in place (rank r's part at r * 5).
      pb_emu_test::Dev<float> g(10);
      auto mine = as(vals(me, 5));
      ASSERT_EQ(cudaMemcpy(g.p + me * 5, mine.data(), 20, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(ncclAllGather(g.p + me * 5, g.p, 5, t, comm, s), ncclSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      got = g.get();
      for (std::size_t i = 0; i < 10; ++i) ASSERT_EQ(back(got[i]), element(static_cast<int>(i / 5), i % 5)) << "all-gather " << i;
      // Reduce-scatter of 13 a rank, and all-to-all of 7 a peer.
      pb_emu_test::Dev<float> rs_in(26), rs_out(13), a2a_in(14), a2a_out(14);
      rs_in.set(as(vals(me, 26)));
      a2a_in.set(as(vals(me, 14)));
      ASSERT_EQ(ncclReduceScatter(rs_in.p, rs_out.p, 13, t, ncclSum, comm, s), ncclSuccess);
      ASSERT_EQ(ncclAlltoAll(a2a_in.p, a2a_out.p, 7, t, comm, s), ncclSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      got = rs_out.get();
      for (std::size_t i = 0; i < 13; ++i)
        ASSERT_EQ(back(got[i]), element(0, me * 13 + i) + element(1, me * 13 + i)) << "reduce-scatter " << i;
      got = a2a_out.get();
      for (std::size_t i = 0; i < 14; ++i)
        ASSERT_EQ(back(got[i]), element(static_cast<int>(i / 7), me * 7 + i % 7)) << "all-to-all " << i;
    }
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  cudaStreamDestroy(s);
}

// Rank 1 of a scenario, started by the tests below (skipped when run alone).
TEST(EmuNcclProcesses, RankOne) {
  const char* id = std::getenv("PB_EMU_NCCL_TEST_ID");
  const char* scenario = std::getenv("PB_EMU_NCCL_TEST_SCENARIO");
  if (!id || !scenario) GTEST_SKIP() << "rank 1 of the two-process tests: they start it";
  Devices d(2);
  run_rank(1, from_hex(id), scenario);
}

TEST(EmuNcclProcesses, CollectivesOverTwoProcesses) {
  Devices d(2);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const pid_t child = start_rank_one(id, "collectives");
  run_rank(0, id, "collectives");
  EXPECT_EQ(wait_exit(child), 0) << "rank 1's process failed (its output above)";
}

TEST(EmuNcclProcesses, MismatchedCallsAndAnAbsentRankAreErrorsNotHangs) {
  Devices d(2);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  pid_t child = start_rank_one(id, "mismatch");
  run_rank(0, id, "mismatch");
  EXPECT_EQ(wait_exit(child), 0) << "rank 1's process failed (its output above)";
  pb_emu::reset_after_failure_for_tests();
  setenv("PB_EMU_NCCL_TIMEOUT_S", "1", 1);
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  child = start_rank_one(id, "absent");
  run_rank(0, id, "absent");
  unsetenv("PB_EMU_NCCL_TIMEOUT_S");
  EXPECT_EQ(wait_exit(child), 0) << "rank 1's process failed (its output above)";
}

}  // namespace
#endif
