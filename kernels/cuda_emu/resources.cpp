// pb_emu: each emulated kernel's real resource usage and occupancy (resources.hpp).
// An emulated kernel is a host function; its symbol (read from the binary's ELF
// symbol table, local symbols included, and demangled) names the instantiation
// exactly as nvcc's does, so the table ptxas_usage.py made from the nvcc build's
// ptxas report (kernel_resources.inc, in the build folder) can be looked up by it.
#include "resources.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <cuda_occupancy.h>

#include "runtime_internal.hpp"

namespace pb_emu {

namespace {

struct Row {
  const char* name;
  const char* arch;
  int registers, static_smem, stack_frame, spill_stores, spill_loads;
};

constexpr Row kRows[] = {
#define PB_EMU_KERNEL(name, arch, regs, smem, stack, spill_st, spill_ld) {name, arch, regs, smem, stack, spill_st, spill_ld},
#include "kernel_resources.inc"
#undef PB_EMU_KERNEL
    {nullptr, nullptr, 0, 0, 0, 0, 0}};
constexpr const char* kSource = PB_EMU_RESOURCE_SOURCE;

// (demangled name, arch) -> row.
const std::map<std::pair<std::string, std::string>, const Row*>& table() {
  static const auto t = [] {
    std::map<std::pair<std::string, std::string>, const Row*> m;
    for (const Row& r : kRows)
      if (r.name) m[{r.name, r.arch}] = &r;
    return m;
  }();
  return t;
}

// ---- symbols ----------------------------------------------------------------------------

// The function symbols of one ELF file, by address relative to its load base.
struct Symbols {
  std::map<std::uintptr_t, std::string> by_value;
  bool relative = true;  // ET_DYN (PIE, shared object): values are offsets from the load base
};

std::unique_ptr<Symbols> read_symbols(const char* path) {
  auto out = std::make_unique<Symbols>();
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat sb {};
  if (fstat(fd, &sb) != 0 || sb.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    ::close(fd);
    return out;
  }
  const auto size = static_cast<std::size_t>(sb.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return out;
  const auto* base = static_cast<const unsigned char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
      eh->e_shoff + std::size_t{eh->e_shnum} * sizeof(Elf64_Shdr) <= size) {
    out->relative = eh->e_type == ET_DYN;
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type != SHT_SYMTAB && sh[i].sh_type != SHT_DYNSYM) continue;
      if (sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr& strs = sh[sh[i].sh_link];
      if (sh[i].sh_offset + sh[i].sh_size > size || strs.sh_offset + strs.sh_size > size) continue;
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
      const std::size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
      const char* names = reinterpret_cast<const char*>(base + strs.sh_offset);
      for (std::size_t k = 0; k < n; ++k) {
        if (ELF64_ST_TYPE(syms[k].st_info) != STT_FUNC || syms[k].st_value == 0) continue;
        if (syms[k].st_name >= strs.sh_size) continue;
        out->by_value.emplace(syms[k].st_value, names + syms[k].st_name);
      }
    }
  }
  munmap(map, size);
  return out;
}

std::string demangle(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !d) return mangled;
  std::string s(d);
  std::free(d);
  return s;
}

// The demangled name of the function at `fn` ("" when unknown).
std::string function_name(const void* fn) {
  Dl_info info{};
  if (dladdr(fn, &info) == 0 || !info.dli_fname) return "";
  if (info.dli_sname && info.dli_saddr == fn) return demangle(info.dli_sname);
  static std::unordered_map<std::string, std::unique_ptr<Symbols>> files;
  auto& syms = files[info.dli_fname];
  if (!syms) {
    // The main program is dladdr's "" or its argv[0]: read it through /proc.
    syms = read_symbols(std::strlen(info.dli_fname) ? info.dli_fname : "/proc/self/exe");
    if (syms->by_value.empty()) syms = read_symbols("/proc/self/exe");
  }
  const auto a = reinterpret_cast<std::uintptr_t>(fn);
  const std::uintptr_t key = syms->relative ? a - reinterpret_cast<std::uintptr_t>(info.dli_fbase) : a;
  auto it = syms->by_value.find(key);
  return it == syms->by_value.end() ? "" : demangle(it->second);
}

int arch_number() { return target().cc_major * 10 + target().cc_minor; }

// "kernels/cuda/x.cu:12": the rewritten sources name their .cu file relative to the
// project (cu2emu's #line), which the line tables put under the build folder.
std::string readable_line(std::string s) {
#ifdef PB_EMU_BUILD_ROOT
  const std::string root = PB_EMU_BUILD_ROOT;
  if (s.rfind(root, 0) == 0) s = s.substr(root.size());
#endif
#ifdef PB_EMU_SOURCE_ROOT
  const std::string src = PB_EMU_SOURCE_ROOT;
  if (s.rfind(src, 0) == 0) s = s.substr(src.size());
#endif
  if (auto at = s.find(" (discriminator"); at != std::string::npos) s = s.substr(0, at);
  return s;
}

}  // namespace

std::string short_function_name(std::string s) {
  int depth = 0;
  for (std::size_t i = s.size(); i-- > 0;) {
    if (s[i] == ')') ++depth;
    if (s[i] == '(' && --depth == 0) {
      s = s.substr(0, i);
      break;
    }
  }
  if (s.rfind("void ", 0) == 0) s = s.substr(5);
  for (const std::string ns : {"phasebench::cuda::", "(anonymous namespace)::", "phasebench::"})
    for (std::size_t at; (at = s.find(ns)) != std::string::npos;) s.erase(at, ns.size());
  return s;
}

namespace {

}  // namespace

std::string target_arch() { return "sm_" + std::to_string(arch_number()); }

std::string resource_table_source() { return kSource; }

const KernelInfo& kernel_info(const void* fn) {
  static std::unordered_map<const void*, KernelInfo> cache;
  auto it = cache.find(fn);
  if (it != cache.end()) return it->second;
  KernelInfo k;
  k.name = function_name(fn);
  k.resources.arch = target_arch();
  if (!k.name.empty()) {
    auto r = table().find({k.name, k.resources.arch});
    if (r != table().end()) {
      k.resources.known = true;
      k.resources.registers = r->second->registers;
      k.resources.static_smem = r->second->static_smem;
      k.resources.stack_frame = r->second->stack_frame;
      k.resources.spill_stores = r->second->spill_stores;
      k.resources.spill_loads = r->second->spill_loads;
    }
  }
  return cache.emplace(fn, std::move(k)).first->second;
}

counters::Occupancy occupancy_of(const void* fn, int block_threads, std::size_t dynamic_smem) {
  const Target& t = target();
  const KernelInfo& k = kernel_info(fn);
  cudaOccDeviceProp prop;
  prop.computeMajor = t.cc_major;
  prop.computeMinor = t.cc_minor;
  prop.maxThreadsPerBlock = 1024;
  prop.maxThreadsPerMultiprocessor = 2048;
  prop.regsPerBlock = 65536;
  prop.regsPerMultiprocessor = 65536;
  prop.warpSize = 32;
  prop.sharedMemPerBlock = kStaticSmemLimit;
  prop.sharedMemPerMultiprocessor = static_cast<std::size_t>(t.smem_per_sm);
  prop.numSms = t.sm_count;
  prop.sharedMemPerBlockOptin = static_cast<std::size_t>(t.smem_per_block_optin);
  prop.reservedSharedMemPerBlock = 1024;
  cudaOccFuncAttributes attr;
  attr.maxThreadsPerBlock = INT_MAX;
  attr.numRegs = k.resources.known ? k.resources.registers : 64;
  attr.sharedSizeBytes = k.resources.known ? static_cast<std::size_t>(k.resources.static_smem) : 0;
  attr.partitionedGCConfig = PARTITIONED_GC_OFF;
  const int allowed = max_dynamic_smem_attribute(fn);
  attr.shmemLimitConfig = dynamic_smem > kStaticSmemLimit ? FUNC_SHMEM_LIMIT_OPTIN : FUNC_SHMEM_LIMIT_DEFAULT;
  attr.maxDynamicSharedSizeBytes = allowed > 0 ? static_cast<std::size_t>(allowed) : kStaticSmemLimit;
  if (dynamic_smem > attr.maxDynamicSharedSizeBytes) attr.maxDynamicSharedSizeBytes = dynamic_smem;
  attr.numBlockBarriers = 1;
  cudaOccDeviceState state;
  cudaOccResult r{};
  counters::Occupancy o;
  o.from_resources = k.resources.known;
  o.max_warps_per_sm = prop.maxThreadsPerMultiprocessor / 32;
  if (cudaOccMaxActiveBlocksPerMultiprocessor(&r, &prop, &attr, &state, block_threads, dynamic_smem) != CUDA_OCC_SUCCESS)
    return o;
  o.blocks_per_sm = r.activeBlocksPerMultiprocessor;
  o.warps_per_sm = o.blocks_per_sm * ((block_threads + 31) / 32);
  const unsigned f = r.limitingFactors;
  o.limiter = (f & OCC_LIMIT_REGISTERS)       ? "registers"
              : (f & OCC_LIMIT_SHARED_MEMORY) ? "shared memory"
              : (f & OCC_LIMIT_WARPS)         ? "warps"
              : (f & OCC_LIMIT_BLOCKS)        ? "blocks"
              : (f & OCC_LIMIT_BARRIERS)      ? "barriers"
                                              : "none";
  return o;
}

std::string describe_code_address(const void* pc) {
  static std::unordered_map<const void*, std::string> cache;
  if (auto it = cache.find(pc); it != cache.end()) return it->second;
  Dl_info info{};
  std::string out;
  char hex[32];
  std::snprintf(hex, sizeof hex, "%p", pc);
  if (dladdr(pc, &info) != 0 && info.dli_fname) {
    const char* file = std::strlen(info.dli_fname) ? info.dli_fname : "/proc/self/exe";
    // The return address is the instruction after the call: its line is the call's, one byte back.
    const auto off = reinterpret_cast<std::uintptr_t>(pc) - 1 - reinterpret_cast<std::uintptr_t>(info.dli_fbase);
    char cmd[4200];
    std::snprintf(cmd, sizeof cmd, "addr2line -C -f -e '%s' %#zx 2>/dev/null", file, static_cast<std::size_t>(off));
    if (FILE* p = popen(cmd, "r")) {
      char fn[4096] = "", line[4096] = "";
      if (std::fgets(fn, sizeof fn, p) && std::fgets(line, sizeof line, p)) {
        fn[std::strcspn(fn, "\n")] = 0;
        line[std::strcspn(line, "\n")] = 0;
        if (std::strncmp(line, "??", 2) != 0) out = readable_line(line) + " (" + short_function_name(fn) + ")";
      }
      pclose(p);
    }
  }
  if (out.empty()) out = std::string("code address ") + hex + " (no line table; build with -g1)";
  return cache.emplace(pc, out).first->second;
}

}  // namespace pb_emu
