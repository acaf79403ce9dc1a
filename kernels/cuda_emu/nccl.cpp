// pb_emu's NCCL: the collectives phasebench calls (all-reduce, all-gather,
// reduce-scatter, all-to-all, broadcast, reduce), over the emulated devices of
// one process, computed on the host against NCCL's documented semantics.
//
// How it runs. A communicator is a rank of a clique (ncclCommInitAll, or
// ncclCommInitRank with one ncclUniqueId); each call is queued for its rank and,
// once every rank of the clique has called (between ncclGroupStart and
// ncclGroupEnd when one thread drives every rank, as NCCL requires), the
// matched calls are checked against each other (kind, count, type, op, root)
// and enqueued as one op on each rank's stream. The collective runs when the
// first of those ops runs: it first runs every other rank's stream up to its
// own op (the work queued before the collective on each rank), then reads every
// input, reduces in double (integers exactly, wrapping as the type does) and
// writes every output: the inputs are read before any output is written, so
// in-place calls are right. Like the rest of pb_emu, nothing runs until
// something waits for a stream, so a missing synchronisation shows.
//
// Ranks in other processes of this machine (one a process, as mpirun starts
// them): ncclCommInitRank outside a group (where NCCL blocks until every rank
// has joined) joins through a shared-memory segment named by the id, and waits
// for the other processes' ranks. Each of its collectives runs when its op runs
// on the rank's stream: the rank writes its call and input into a segment of
// that collective's own, waits for every rank's, checks that the calls match,
// computes its own output from all the inputs, and waits until every rank has
// read them before the segment goes. A rank that never calls is an error after
// a timeout (PB_EMU_NCCL_TIMEOUT_S, 60 by default), not a hang. Nodes apart are
// not emulated (the segments are this machine's).
// Not emulated (refused with the reason): send/recv, user-defined reduction
// ops, graph capture of collectives, config options.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../common/numeric.hpp"
#include "runtime_internal.hpp"

namespace {

namespace num = phasebench::numeric;

std::string g_last_error;  // ncclGetLastError's text

ncclResult_t fail(ncclResult_t r, const std::string& why) {
  g_last_error = "pb_emu NCCL: " + why;
  return r;
}

enum class Kind { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::all_reduce: return "ncclAllReduce";
    case Kind::all_gather: return "ncclAllGather";
    case Kind::reduce_scatter: return "ncclReduceScatter";
    case Kind::all_to_all: return "ncclAlltoAll";
    case Kind::broadcast: return "ncclBroadcast";
    case Kind::reduce: return "ncclReduce";
  }
  return "?";
}

std::size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

bool is_float(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}
bool is_signed_int(ncclDataType_t t) { return t == ncclInt8 || t == ncclInt32 || t == ncclInt64; }

// fp8 e5m2 is the top byte of an fp16: round the fp16 to it, nearest even.
std::uint8_t float_to_e5m2(float f) {
  const std::uint16_t h = num::float_to_fp16(f);
  if ((h & 0x7c00u) == 0x7c00u) return static_cast<std::uint8_t>((h >> 8) | ((h & 0xffu) ? 1u : 0u));  // inf, NaN
  const std::uint32_t r = h + 0x7fu + ((h >> 8) & 1u);
  return static_cast<std::uint8_t>(r >> 8);
}

double load_float(const unsigned char* p, ncclDataType_t t) {
  switch (t) {
    case ncclFloat16: { std::uint16_t v; std::memcpy(&v, p, 2); return num::fp16_to_float(v); }
    case ncclBfloat16: { std::uint16_t v; std::memcpy(&v, p, 2); return num::bf16_to_float(v); }
    case ncclFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case ncclFloat64: { double v; std::memcpy(&v, p, 8); return v; }
    case ncclFloat8e4m3: return num::fp8e4m3_to_float(*p);
    case ncclFloat8e5m2: return num::fp16_to_float(static_cast<std::uint16_t>(*p << 8));
    default: return 0;
  }
}

void store_float(unsigned char* p, ncclDataType_t t, double x) {
  switch (t) {
    case ncclFloat16: { const std::uint16_t v = num::float_to_fp16(static_cast<float>(x)); std::memcpy(p, &v, 2); break; }
    case ncclBfloat16: { const std::uint16_t v = num::float_to_bf16(static_cast<float>(x)); std::memcpy(p, &v, 2); break; }
    case ncclFloat32: { const float v = static_cast<float>(x); std::memcpy(p, &v, 4); break; }
    case ncclFloat64: std::memcpy(p, &x, 8); break;
    case ncclFloat8e4m3: *p = num::float_to_fp8e4m3(static_cast<float>(x)); break;
    case ncclFloat8e5m2: *p = float_to_e5m2(static_cast<float>(x)); break;
    default: break;
  }
}

// Integers as 64-bit two's complement: sums and products wrap as the type does
// once truncated; max and min compare sign-extended (signed) or zero-extended.
std::uint64_t load_int(const unsigned char* p, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int8_t>(*p)));
    case ncclUint8: return *p;
    case ncclInt32: { std::int32_t v; std::memcpy(&v, p, 4); return static_cast<std::uint64_t>(static_cast<std::int64_t>(v)); }
    case ncclUint32: { std::uint32_t v; std::memcpy(&v, p, 4); return v; }
    default: { std::uint64_t v; std::memcpy(&v, p, 8); return v; }
  }
}
void store_int(unsigned char* p, ncclDataType_t t, std::uint64_t v) { std::memcpy(p, &v, type_bytes(t)); }

// One element of each rank's input (in rank order) reduced by `op` into `out`.
void reduce_element(const std::vector<const unsigned char*>& in, unsigned char* out, ncclDataType_t t, ncclRedOp_t op) {
  const auto n = in.size();
  if (is_float(t)) {
    double acc = load_float(in[0], t);
    for (std::size_t r = 1; r < n; ++r) {
      const double v = load_float(in[r], t);
      switch (op) {
        case ncclSum: case ncclAvg: acc += v; break;
        case ncclProd: acc *= v; break;
        case ncclMax: acc = std::isnan(acc) || std::isnan(v) ? NAN : std::max(acc, v); break;
        case ncclMin: acc = std::isnan(acc) || std::isnan(v) ? NAN : std::min(acc, v); break;
        default: break;
      }
    }
    if (op == ncclAvg) acc /= static_cast<double>(n);
    store_float(out, t, acc);
    return;
  }
  std::uint64_t acc = load_int(in[0], t);
  for (std::size_t r = 1; r < n; ++r) {
    const std::uint64_t v = load_int(in[r], t);
    switch (op) {
      case ncclSum: case ncclAvg: acc += v; break;
      case ncclProd: acc *= v; break;
      case ncclMax:
        acc = is_signed_int(t) ? static_cast<std::uint64_t>(std::max(static_cast<std::int64_t>(acc), static_cast<std::int64_t>(v)))
                               : std::max(acc, v);
        break;
      case ncclMin:
        acc = is_signed_int(t) ? static_cast<std::uint64_t>(std::min(static_cast<std::int64_t>(acc), static_cast<std::int64_t>(v)))
                               : std::min(acc, v);
        break;
      default: break;
    }
  }
  if (op == ncclAvg) {
    // NCCL's average of integers: the sum divided by the rank count, as the type divides.
    if (is_signed_int(t)) {
      const auto w = static_cast<int>(8 * type_bytes(t));
      std::int64_t sv = static_cast<std::int64_t>(acc << (64 - w)) >> (64 - w);  // the sum as the type holds it
      acc = static_cast<std::uint64_t>(sv / static_cast<std::int64_t>(n));
    } else {
      const auto w = 8 * type_bytes(t);
      const std::uint64_t uv = w == 64 ? acc : acc & ((std::uint64_t{1} << w) - 1);
      acc = uv / n;
    }
  }
  store_int(out, t, acc);
}

struct Clique;

// One rank's call of a collective.
struct Call {
  Kind kind = Kind::all_reduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;  // as the API takes it (per rank, or per peer for all-to-all)
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  cudaStream_t stream = nullptr;
  ncclComm* comm = nullptr;
};

}  // namespace

namespace {
struct Remote;
}

struct ncclComm {
  std::shared_ptr<Clique> clique;   // ranks of this process (ncclCommInitAll, or ncclCommInitRank in a group)
  std::shared_ptr<Remote> remote;   // or: one rank of a communicator over processes
  int rank = 0;
  int device = 0;
  bool finalized = false;
};

namespace {

struct Clique {
  int nranks = 0;
  std::vector<ncclComm*> comms;               // by rank; nullptr until that rank joins
  std::vector<std::vector<Call>> pending;      // by rank: called, not yet matched
};

std::map<std::string, std::weak_ptr<Clique>>& cliques() {
  static std::map<std::string, std::weak_ptr<Clique>> m;
  return m;
}

std::uint64_t g_ids = 0;
int g_group_depth = 0;
std::vector<Call> g_grouped;  // calls made inside the current group

std::string describe(const Call& c) {
  std::string s = std::string(kind_name(c.kind)) + "(count " + std::to_string(c.count) + ", type " +
                  std::to_string(static_cast<int>(c.type));
  if (c.kind == Kind::all_reduce || c.kind == Kind::reduce_scatter || c.kind == Kind::reduce)
    s += ", op " + std::to_string(static_cast<int>(c.op));
  if (c.kind == Kind::broadcast || c.kind == Kind::reduce) s += ", root " + std::to_string(c.root);
  return s + ")";
}

// Element counts of the send and receive buffers of `c` on rank `rank` of `n`.
std::pair<std::size_t, std::size_t> buffer_counts(const Call& c, int rank, int n) {
  const auto N = static_cast<std::size_t>(n);
  switch (c.kind) {
    case Kind::all_reduce: return {c.count, c.count};
    case Kind::all_gather: return {c.count, c.count * N};
    case Kind::reduce_scatter: return {c.count * N, c.count};
    case Kind::all_to_all: return {c.count * N, c.count * N};
    case Kind::broadcast: return {rank == c.root ? c.count : 0, c.count};
    case Kind::reduce: return {c.count, rank == c.root ? c.count : 0};
  }
  return {0, 0};
}

// Why the buffers of one rank's call are wrong, or "": inside allocations of the
// rank's device, and either disjoint or in place exactly where NCCL allows it.
std::string check_buffers(const Call& c, int rank, int n) {
  const auto [sn, rn] = buffer_counts(c, rank, n);
  const std::size_t e = type_bytes(c.type), sb = sn * e, rb = rn * e;
  const int dev = c.comm->device;
  auto inside = [&](const void* p, std::size_t b, const char* what) -> std::string {
    if (b == 0) return "";
    if (auto why = pb_emu::check_device_range(p, b, what); !why.empty()) return why;
    if (pb_emu::device_of(p) != dev)
      return std::string("the ") + what + " is on device " + std::to_string(pb_emu::device_of(p)) +
             ", the communicator's device is " + std::to_string(dev);
    return "";
  };
  if (auto why = inside(c.send, sb, "send buffer"); !why.empty()) return why;
  if (auto why = inside(c.recv, rb, "receive buffer"); !why.empty()) return why;
  if (sb == 0 || rb == 0) return "";
  const auto s0 = reinterpret_cast<std::uintptr_t>(c.send), r0 = reinterpret_cast<std::uintptr_t>(c.recv);
  if (s0 + sb <= r0 || r0 + rb <= s0) return "";  // disjoint
  // In place, where NCCL documents it.
  const std::uintptr_t off = static_cast<std::uintptr_t>(rank) * c.count * e;
  switch (c.kind) {
    case Kind::all_reduce: case Kind::broadcast: case Kind::reduce:
      if (s0 == r0) return "";
      break;
    case Kind::all_gather:
      if (s0 == r0 + off) return "";
      break;
    case Kind::reduce_scatter:
      if (r0 == s0 + off) return "";
      break;
    case Kind::all_to_all: break;
  }
  return std::string(kind_name(c.kind)) + ": the send and receive buffers overlap other than in place " +
         (c.kind == Kind::all_gather       ? "(sendbuff == recvbuff + rank * sendcount)"
          : c.kind == Kind::reduce_scatter ? "(recvbuff == sendbuff + rank * recvcount)"
          : c.kind == Kind::all_to_all     ? "(ncclAlltoAll is never in place)"
                                           : "(sendbuff == recvbuff)");
}

// The collective of matched calls (one per rank, in rank order), on host memory.
void compute(const std::vector<Call>& calls) {
  const int n = static_cast<int>(calls.size());
  const std::size_t e = type_bytes(calls[0].type), count = calls[0].count;
  // Every input first (in-place calls overwrite them).
  std::vector<std::vector<unsigned char>> in(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto sn = buffer_counts(calls[static_cast<std::size_t>(r)], r, n).first;
    const auto* p = static_cast<const unsigned char*>(calls[static_cast<std::size_t>(r)].send);
    in[static_cast<std::size_t>(r)].assign(p, p + sn * e);
  }
  auto out = [&](int r) { return static_cast<unsigned char*>(calls[static_cast<std::size_t>(r)].recv); };
  const Call& c0 = calls[0];
  std::vector<const unsigned char*> elems(static_cast<std::size_t>(n));
  auto reduce_at = [&](std::size_t i, unsigned char* dst) {  // element i of every rank's input
    for (int r = 0; r < n; ++r) elems[static_cast<std::size_t>(r)] = in[static_cast<std::size_t>(r)].data() + i * e;
    reduce_element(elems, dst, c0.type, c0.op);
  };
  switch (c0.kind) {
    case Kind::all_reduce:
      for (std::size_t i = 0; i < count; ++i) {
        reduce_at(i, out(0) + i * e);
        for (int r = 1; r < n; ++r) std::memcpy(out(r) + i * e, out(0) + i * e, e);
      }
      break;
    case Kind::reduce:
      for (std::size_t i = 0; i < count; ++i) reduce_at(i, out(c0.root) + i * e);
      break;
    case Kind::reduce_scatter:
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < count; ++i) reduce_at(static_cast<std::size_t>(r) * count + i, out(r) + i * e);
      break;
    case Kind::all_gather:
      for (int r = 0; r < n; ++r)
        for (int src = 0; src < n; ++src)
          std::memcpy(out(r) + static_cast<std::size_t>(src) * count * e, in[static_cast<std::size_t>(src)].data(), count * e);
      break;
    case Kind::broadcast:
      for (int r = 0; r < n; ++r) std::memcpy(out(r), in[static_cast<std::size_t>(c0.root)].data(), count * e);
      break;
    case Kind::all_to_all:
      for (int r = 0; r < n; ++r)
        for (int src = 0; src < n; ++src)
          std::memcpy(out(r) + static_cast<std::size_t>(src) * count * e,
                      in[static_cast<std::size_t>(src)].data() + static_cast<std::size_t>(r) * count * e, count * e);
      break;
  }
}

// Matched calls: checked against each other, then one op on each rank's stream;
// the first of them to run runs the others' streams up to theirs and computes.
ncclResult_t launch(std::vector<Call> calls) {
  const int n = static_cast<int>(calls.size());
  const Call& c0 = calls[0];
  for (int r = 0; r < n; ++r) {
    const Call& c = calls[static_cast<std::size_t>(r)];
    if (c.kind != c0.kind || c.count != c0.count || c.type != c0.type || c.op != c0.op || c.root != c0.root)
      return fail(ncclInvalidUsage, "the ranks' calls do not match: rank 0 called " + describe(c0) + ", rank " +
                                        std::to_string(r) + " " + describe(c));
    if (auto why = check_buffers(c, r, n); !why.empty())
      return fail(ncclInvalidArgument, std::string(kind_name(c.kind)) + " on rank " + std::to_string(r) + ": " + why);
    for (int q = 0; q < r; ++q)
      if (calls[static_cast<std::size_t>(q)].stream == c.stream)
        return fail(ncclInvalidUsage, "ranks " + std::to_string(q) + " and " + std::to_string(r) +
                                          " use one stream: each rank's stream belongs to its own device");
  }
  struct Shared {
    std::vector<Call> calls;
    std::vector<std::uint64_t> seq;  // each rank's op on its stream
    bool done = false;
  };
  auto shared = std::make_shared<Shared>();
  shared->calls = std::move(calls);
  shared->seq.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    pb_emu::Op op;
    op.what = std::string(kind_name(c0.kind)) + " (rank " + std::to_string(r) + " of " + std::to_string(n) + ")";
    op.capturable = false;
    op.counted = "library";
    const auto [sn, rn] = buffer_counts(shared->calls[static_cast<std::size_t>(r)], r, n);
    op.bytes_read = sn * type_bytes(c0.type);
    op.bytes_written = rn * type_bytes(c0.type);
    op.run = [shared, r] {
      if (shared->done) return cudaSuccess;
      shared->done = true;
      for (std::size_t q = 0; q < shared->calls.size(); ++q)
        if (static_cast<int>(q) != r) pb_emu::flush_stream_to(shared->calls[q].stream, shared->seq[q]);
      if (pb_emu::sticky() != cudaSuccess) return pb_emu::sticky();
      compute(shared->calls);
      return cudaSuccess;
    };
    const cudaStream_t s = shared->calls[static_cast<std::size_t>(r)].stream;
    if (pb_emu::stream_capturing(s))
      return fail(ncclInvalidUsage, "capturing NCCL calls into a CUDA graph is not emulated");
    if (pb_emu::enqueue(s, std::move(op)) != cudaSuccess)
      return fail(ncclUnhandledCudaError, std::string("enqueueing ") + kind_name(c0.kind) + " on rank " +
                                              std::to_string(r) + "'s stream failed: " + cudaGetErrorString(cudaGetLastError()));
    shared->seq[static_cast<std::size_t>(r)] = pb_emu::last_enqueued(s);
  }
  return ncclSuccess;
}

// ---- ranks in other processes ---------------------------------------------------------

// A communicator over processes, as one of its ranks sees it: the segments' base
// name (from the id), its size and rank, and how many collectives it has issued
// (every rank issues the same sequence, so the n-th names one segment on all).
struct Remote {
  std::string base;
  int nranks = 0, rank = 0;
  std::uint64_t issued = 0;
};

constexpr int kMaxRemoteRanks = 64;

// The start of every segment: counters the ranks meet at, and each rank's call.
struct SegmentHeader {
  std::atomic<int> arrived, read, left;
  struct Sig {
    int kind, type, op, root;
    std::uint64_t count;
    int pid;
  } sig[kMaxRemoteRanks];
};
constexpr std::size_t kHeaderBytes = (sizeof(SegmentHeader) + 4095) / 4096 * 4096;

double timeout_s() {
  const char* v = std::getenv("PB_EMU_NCCL_TIMEOUT_S");
  const double t = v ? std::atof(v) : 0;
  return t > 0 ? t : 60;
}

// A shared-memory segment of `bytes`, created by the first rank to open it.
class Segment {
 public:
  Segment(const std::string& name, std::size_t bytes) : name_(name), bytes_(bytes) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0) throw std::runtime_error("shm_open(" + name + "): " + std::strerror(errno));
    // posix_fallocate never shrinks what another rank sized (ranks whose calls differ
    // ask for different sizes), and says ENOSPC where a full /dev/shm would fault later.
    if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
      close(fd);
      shm_unlink(name.c_str());
      throw std::runtime_error("sizing the shared segment " + name + " to " + std::to_string(bytes) +
                               " bytes: " + std::strerror(e) + (e == ENOSPC ? " (/dev/shm is full)" : ""));
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("mmap(" + name + "): " + std::strerror(errno));
    base_ = static_cast<unsigned char*>(p);
  }
  ~Segment() { munmap(base_, bytes_); }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  SegmentHeader& header() { return *reinterpret_cast<SegmentHeader*>(base_); }
  unsigned char* data() { return base_ + kHeaderBytes; }
  void unlink() { shm_unlink(name_.c_str()); }

 private:
  std::string name_;
  std::size_t bytes_;
  unsigned char* base_ = nullptr;
};

// Waits until `counter` reaches n; false after the timeout.
bool wait_for(const std::atomic<int>& counter, int n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s());
  while (counter.load(std::memory_order_acquire) < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

std::string segment_base(const ncclUniqueId& id) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a of the id
  for (char ch : id.internal) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  char buf[48];
  std::snprintf(buf, sizeof buf, "/pb_emu_nccl_%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// ncclCommInitRank outside a group: joins the communicator's segment and waits
// for every rank, as NCCL's blocking init does.
ncclResult_t join_remote(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank, int device) {
  if (nranks > kMaxRemoteRanks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: " + std::to_string(nranks) + " ranks over processes; the emulation takes up to " +
                                         std::to_string(kMaxRemoteRanks));
  auto remote = std::make_shared<Remote>();
  remote->base = segment_base(id);
  remote->nranks = nranks;
  remote->rank = rank;
  try {
    Segment seg(remote->base + "_init", kHeaderBytes);
    auto& h = seg.header();
    h.sig[rank].pid = static_cast<int>(getpid());
    h.arrived.fetch_add(1, std::memory_order_acq_rel);
    if (!wait_for(h.arrived, nranks)) {
      seg.unlink();
      return fail(ncclSystemError, "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                                       " waited " + std::to_string(static_cast<int>(timeout_s())) +
                                       " s for the other ranks to join (PB_EMU_NCCL_TIMEOUT_S): every process must call it with the same id");
    }
    h.read.fetch_add(1, std::memory_order_acq_rel);
    if (!wait_for(h.read, nranks)) {
      seg.unlink();
      return fail(ncclSystemError, "ncclCommInitRank: a rank left while joining");
    }
    if (h.left.fetch_add(1, std::memory_order_acq_rel) == nranks - 1) seg.unlink();
  } catch (const std::exception& e) {
    return fail(ncclSystemError, std::string("ncclCommInitRank over processes: ") + e.what());
  }
  auto* c = new ncclComm;
  c->remote = std::move(remote);
  c->rank = rank;
  c->device = device;
  *comm = c;
  return ncclSuccess;
}

// One rank's part of collective number `seq` of a communicator over processes
// (run as its op on the rank's stream): see the file's opening comment.
cudaError_t exchange(const Remote& rm, const Call& c, std::uint64_t seq) {
  const int n = rm.nranks, me = rm.rank;
  const std::size_t e = type_bytes(c.type);
  std::size_t slot = 0;
  for (int r = 0; r < n; ++r) slot = std::max(slot, buffer_counts(c, r, n).first * e);
  const std::string what = std::string(kind_name(c.kind)) + " #" + std::to_string(seq) + " (rank " +
                           std::to_string(me) + " of " + std::to_string(n) + ")";
  try {
    Segment seg(rm.base + "_" + std::to_string(seq), kHeaderBytes + static_cast<std::size_t>(n) * slot);
    auto& h = seg.header();
    h.sig[me] = {static_cast<int>(c.kind), static_cast<int>(c.type), static_cast<int>(c.op), c.root,
                 static_cast<std::uint64_t>(c.count), static_cast<int>(getpid())};
    const std::size_t sn = buffer_counts(c, me, n).first;
    if (sn) std::memcpy(seg.data() + static_cast<std::size_t>(me) * slot, c.send, sn * e);
    h.arrived.fetch_add(1, std::memory_order_acq_rel);
    auto give_up = [&](const std::string& why) {
      pb_emu::sticky_error(cudaErrorLaunchFailure, "pb_emu NCCL: " + what + ": " + why);
      return cudaErrorLaunchFailure;
    };
    if (!wait_for(h.arrived, n)) {
      seg.unlink();  // nobody else will: this rank gives up on it
      return give_up("waited " + std::to_string(static_cast<int>(timeout_s())) +
                     " s for the other ranks' calls (PB_EMU_NCCL_TIMEOUT_S): every rank must make the same calls");
    }
    auto call_of = [&](const SegmentHeader::Sig& g) {  // a rank's call as its signature says
      Call k = c;
      k.kind = static_cast<Kind>(g.kind);
      k.type = static_cast<ncclDataType_t>(g.type);
      k.op = static_cast<ncclRedOp_t>(g.op);
      k.root = g.root;
      k.count = g.count;
      return k;
    };
    for (int r = 0; r < n; ++r) {
      const auto& a = h.sig[0];
      const auto& b = h.sig[r];
      if (a.kind != b.kind || a.type != b.type || a.op != b.op || a.root != b.root || a.count != b.count) {
        // Every rank sees the same mismatch: each leaves, the last removes the segment.
        if (h.left.fetch_add(1, std::memory_order_acq_rel) == n - 1) seg.unlink();
        return give_up("the ranks' calls do not match: rank 0 called " + describe(call_of(a)) + ", rank " +
                       std::to_string(r) + " " + describe(call_of(b)));
      }
    }
    // Every rank's input from the segment; this rank's output into its buffer, the others' into scratch.
    std::vector<Call> calls(static_cast<std::size_t>(n), c);
    std::vector<std::vector<unsigned char>> scratch(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      auto& k = calls[static_cast<std::size_t>(r)];
      k.send = seg.data() + static_cast<std::size_t>(r) * slot;
      if (r != me) {
        scratch[static_cast<std::size_t>(r)].resize(std::max<std::size_t>(1, buffer_counts(c, r, n).second * e));
        k.recv = scratch[static_cast<std::size_t>(r)].data();
      }
    }
    compute(calls);
    h.read.fetch_add(1, std::memory_order_acq_rel);
    if (!wait_for(h.read, n)) {
      seg.unlink();
      return give_up("another rank did not finish reading the inputs");
    }
    if (h.left.fetch_add(1, std::memory_order_acq_rel) == n - 1) seg.unlink();
  } catch (const std::exception& ex) {
    pb_emu::sticky_error(cudaErrorLaunchFailure, "pb_emu NCCL: " + what + ": " + ex.what());
    return cudaErrorLaunchFailure;
  }
  return cudaSuccess;
}

// A call of a rank over processes: its buffers checked, then one op on its stream.
ncclResult_t launch_remote(const Call& c) {
  Remote& rm = *c.comm->remote;
  if (auto why = check_buffers(c, rm.rank, rm.nranks); !why.empty())
    return fail(ncclInvalidArgument, std::string(kind_name(c.kind)) + " on rank " + std::to_string(rm.rank) + ": " + why);
  if (pb_emu::stream_capturing(c.stream))
    return fail(ncclInvalidUsage, "capturing NCCL calls into a CUDA graph is not emulated");
  const std::uint64_t seq = rm.issued++;
  pb_emu::Op op;
  op.what = std::string(kind_name(c.kind)) + " (rank " + std::to_string(rm.rank) + " of " + std::to_string(rm.nranks) +
            ", over processes)";
  op.capturable = false;
  op.counted = "library";
  const auto [sn, rn] = buffer_counts(c, rm.rank, rm.nranks);
  op.bytes_read = sn * type_bytes(c.type);
  op.bytes_written = rn * type_bytes(c.type);
  auto remote = c.comm->remote;
  op.run = [remote, c, seq] { return exchange(*remote, c, seq); };
  if (pb_emu::enqueue(c.stream, std::move(op)) != cudaSuccess)
    return fail(ncclUnhandledCudaError, std::string("enqueueing ") + kind_name(c.kind) + " failed: " +
                                            cudaGetErrorString(cudaGetLastError()));
  return ncclSuccess;
}

// Queues calls for their ranks and launches every collective all of whose ranks
// have called; a clique left with a rank that called and one that did not is an
// error: one thread drives every rank here, so the missing call would never come
// (NCCL itself would hang).
ncclResult_t submit(std::vector<Call> calls) {
  std::vector<std::shared_ptr<Clique>> touched;
  ncclResult_t result = ncclSuccess;
  for (Call& c : calls) {
    if (c.comm->remote) {  // a rank over processes: its call goes alone, in order
      if (ncclResult_t r = launch_remote(c); r != ncclSuccess && result == ncclSuccess) result = r;
      continue;
    }
    auto cl = c.comm->clique;
    if (std::find(touched.begin(), touched.end(), cl) == touched.end()) touched.push_back(cl);
    cl->pending[static_cast<std::size_t>(c.comm->rank)].push_back(c);
  }
  for (const auto& cl : touched) {
    while (std::all_of(cl->pending.begin(), cl->pending.end(), [](const auto& q) { return !q.empty(); })) {
      std::vector<Call> matched;
      for (auto& q : cl->pending) {
        matched.push_back(q.front());
        q.erase(q.begin());
      }
      if (ncclResult_t r = launch(std::move(matched)); r != ncclSuccess && result == ncclSuccess) result = r;
    }
    int waiting = -1, absent = -1;
    for (int r = 0; r < cl->nranks; ++r) (cl->pending[static_cast<std::size_t>(r)].empty() ? absent : waiting) = r;
    if (waiting >= 0 && absent >= 0) {
      const std::string what = describe(cl->pending[static_cast<std::size_t>(waiting)].front());
      for (auto& q : cl->pending) q.clear();
      if (result == ncclSuccess)
        result = fail(ncclInvalidUsage, "rank " + std::to_string(waiting) + " called " + what + " but rank " +
                                            std::to_string(absent) +
                                            " did not: when one thread drives every rank, put their calls between "
                                            "ncclGroupStart and ncclGroupEnd");
    }
  }
  return result;
}

ncclResult_t check_comm(ncclComm_t comm, const char* call) {
  if (!comm) return fail(ncclInvalidArgument, std::string(call) + ": the communicator is null");
  if (comm->finalized) return fail(ncclInvalidUsage, std::string(call) + ": the communicator was finalized");
  if (comm->remote) return ncclSuccess;
  const auto& cl = *comm->clique;
  for (int r = 0; r < cl.nranks; ++r)
    if (!cl.comms[static_cast<std::size_t>(r)])
      return fail(ncclInvalidUsage, std::string(call) + ": rank " + std::to_string(r) + " of " +
                                        std::to_string(cl.nranks) +
                                        " has not joined the communicator (its ncclCommInitRank must be in the same "
                                        "group, or, in another process, outside any group)");
  return ncclSuccess;
}

ncclResult_t collective(Call c, const char* call) {
  if (ncclResult_t r = check_comm(c.comm, call); r != ncclSuccess) return r;
  if (type_bytes(c.type) == 0)
    return fail(ncclInvalidArgument, std::string(call) + ": data type " + std::to_string(static_cast<int>(c.type)) + " is not an NCCL type");
  if (c.op < ncclSum || c.op >= ncclNumOps)
    return fail(ncclInvalidArgument, std::string(call) + ": reduction op " + std::to_string(static_cast<int>(c.op)) +
                                         " is not built in (user-defined ops are not emulated)");
  if (c.root < 0 || c.root >= (c.comm->remote ? c.comm->remote->nranks : c.comm->clique->nranks))
    return fail(ncclInvalidArgument, std::string(call) + ": root " + std::to_string(c.root) + " is not a rank");
  const int sd = pb_emu::stream_device(c.stream);
  if (sd < 0) return fail(ncclInvalidArgument, std::string(call) + ": the stream is not a stream");
  if (sd != c.comm->device)
    return fail(ncclInvalidArgument, std::string(call) + ": the stream is on device " + std::to_string(sd) +
                                         ", the communicator's device is " + std::to_string(c.comm->device));
  if (g_group_depth > 0) {
    g_grouped.push_back(c);
    return ncclSuccess;
  }
  return submit({c});
}

std::shared_ptr<Clique> clique_for(const ncclUniqueId& id, int nranks) {
  const std::string key(id.internal, sizeof id.internal);
  auto& m = cliques();
  if (auto cl = m[key].lock()) return cl;
  auto cl = std::make_shared<Clique>();
  cl->nranks = nranks;
  cl->comms.assign(static_cast<std::size_t>(nranks), nullptr);
  cl->pending.resize(static_cast<std::size_t>(nranks));
  m[key] = cl;
  return cl;
}

ncclResult_t join(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank, int device) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is null");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  if (device < 0 || device >= pb_emu::device_count())
    return fail(ncclInvalidArgument, "device " + std::to_string(device) + " does not exist: the emulation has " +
                                         std::to_string(pb_emu::device_count()) + " (PB_EMU_DEVICES)");
  auto cl = clique_for(id, nranks);
  if (cl->nranks != nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: this id's communicator has " + std::to_string(cl->nranks) +
                                         " ranks, not " + std::to_string(nranks));
  if (cl->comms[static_cast<std::size_t>(rank)])
    return fail(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " joined twice");
  for (auto* other : cl->comms)
    if (other && other->device == device)
      return fail(ncclInvalidUsage, "ncclCommInitRank: two ranks on device " + std::to_string(device) +
                                        " (NCCL takes one rank a device)");
  auto* c = new ncclComm;
  c->clique = cl;
  c->rank = rank;
  c->device = device;
  cl->comms[static_cast<std::size_t>(rank)] = c;
  *comm = c;
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: null");
  *version = NCCL_VERSION_CODE;  // the headers it stands in for
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return fail(ncclInvalidArgument, "ncclGetUniqueId: null");
  std::memset(id->internal, 0, sizeof id->internal);
  // Unique over the processes of the machine and over time (its segments' names come from it).
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  std::snprintf(id->internal, sizeof id->internal, "pb_emu-nccl-%d-%llu-%llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(++g_ids), static_cast<unsigned long long>(now));
  return ncclSuccess;
}

// In a group: a rank of this process (one thread drives several); outside one,
// with other ranks: a rank over processes (NCCL's init blocks until all join).
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int device = 0;
  cudaGetDevice(&device);
  if (g_group_depth == 0 && nranks > 1) {
    if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is null");
    if (rank < 0 || rank >= nranks)
      return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
    return join_remote(comm, nranks, id, rank, device);
  }
  return join(comm, nranks, id, rank, device);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t*) {
  return ncclCommInitRank(comm, nranks, id, rank);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: needs at least one device");
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  for (int r = 0; r < ndev; ++r)
    if (ncclResult_t e = join(&comms[r], ndev, id, r, devlist ? devlist[r] : r); e != ncclSuccess) {
      for (int q = 0; q < r; ++q) ncclCommDestroy(comms[q]);
      return e;
    }
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommFinalize: null");
  comm->finalized = true;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (comm->clique) comm->clique->comms[static_cast<std::size_t>(comm->rank)] = nullptr;
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return fail(ncclInvalidArgument, "ncclCommCount: null");
  *count = comm->remote ? comm->remote->nranks : comm->clique->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!comm || !device) return fail(ncclInvalidArgument, "ncclCommCuDevice: null");
  *device = comm->device;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return fail(ncclInvalidArgument, "ncclCommUserRank: null");
  *rank = comm->rank;
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* e) {
  *e = ncclSuccess;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
const char* ncclGetLastError(ncclComm_t) { return g_last_error.c_str(); }

ncclResult_t ncclGroupStart() {
  ++g_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g_group_depth > 0) return ncclSuccess;
  std::vector<Call> calls;
  calls.swap(g_grouped);
  return submit(std::move(calls));
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective(Call{Kind::all_reduce, sendbuff, recvbuff, count, datatype, op, 0, stream, comm}, "ncclAllReduce");
}
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream) {
  return collective(Call{Kind::all_gather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream, comm},
                    "ncclAllGather");
}
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return collective(Call{Kind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, 0, stream, comm},
                    "ncclReduceScatter");
}
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                          cudaStream_t stream) {
  return collective(Call{Kind::all_to_all, sendbuff, recvbuff, count, datatype, ncclSum, 0, stream, comm}, "ncclAlltoAll");
}
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective(Call{Kind::broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, stream, comm},
                    "ncclBroadcast");
}
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return collective(Call{Kind::reduce, sendbuff, recvbuff, count, datatype, op, root, stream, comm}, "ncclReduce");
}

}  // extern "C"
