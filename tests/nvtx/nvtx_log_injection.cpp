// A tiny NVTX tool ("injection library") that logs ranges to a text file, so the
// NVTX annotations can be tested without Nsight. NVTX loads it when the process
// runs with NVTX_INJECTION64_PATH=/path/to/libphasebench_nvtx_log.so; it writes one
// line per event to the file named by PHASEBENCH_NVTX_LOG (stderr if unset):
//
//   domain_create <TAB> tid <TAB> domain
//   register_string <TAB> tid <TAB> domain <TAB> string
//   push <TAB> tid <TAB> domain <TAB> message       (nvtxDomainRangePushEx / nvtxRangePush*)
//   pop <TAB> tid <TAB> domain <TAB> message         (the message of the range it closes)
//   pop_unbalanced <TAB> tid <TAB> domain            (a pop with nothing open)
//   mark / start / end <TAB> tid <TAB> domain <TAB> message
//
// Ranges outside a named domain are logged with the domain "<global>"; messages
// given as registered strings are resolved; tabs and newlines in text are escaped.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct nvtxDomainRegistration_st {
  std::string name;
};
struct nvtxStringRegistration_st {
  std::string text;
};

namespace {

std::mutex g_mutex;
std::FILE* g_out = nullptr;
const char* const kGlobal = "<global>";

std::string escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    if (c == '\t') o += "\\t";
    else if (c == '\n') o += "\\n";
    else if (c == '\\') o += "\\\\";
    else o += c;
  }
  return o;
}

std::string domain_name(nvtxDomainHandle_t d) { return d ? d->name : kGlobal; }

std::string message_of(const nvtxEventAttributes_t* a) {
  if (!a) return "";
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_REGISTERED: return a->message.registered ? a->message.registered->text : "";
    case NVTX_MESSAGE_TYPE_UNICODE: {
      std::string s;  // ASCII subset only; enough for a test
      for (const wchar_t* w = a->message.unicode; w && *w; ++w) s += *w < 128 ? static_cast<char>(*w) : '?';
      return s;
    }
    default: return "";
  }
}

unsigned long long tid() { return static_cast<unsigned long long>(std::hash<std::thread::id>{}(std::this_thread::get_id())); }

void write_line(const char* event, const std::string& domain, const std::string* message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_out) return;
  if (message)
    std::fprintf(g_out, "%s\t%llu\t%s\t%s\n", event, tid(), escape(domain).c_str(), escape(*message).c_str());
  else
    std::fprintf(g_out, "%s\t%llu\t%s\n", event, tid(), escape(domain).c_str());
  std::fflush(g_out);  // the process may end without running destructors
}

// Open ranges of this thread, per domain (nullptr: the global domain).
thread_local std::map<nvtxDomainHandle_t, std::vector<std::string>> t_stacks;

int push(nvtxDomainHandle_t d, const std::string& msg) {
  auto& st = t_stacks[d];
  st.push_back(msg);
  write_line("push", domain_name(d), &msg);
  return static_cast<int>(st.size()) - 1;
}

int pop(nvtxDomainHandle_t d) {
  auto& st = t_stacks[d];
  if (st.empty()) {
    write_line("pop_unbalanced", domain_name(d), nullptr);
    return -1;
  }
  const std::string msg = st.back();
  st.pop_back();
  write_line("pop", domain_name(d), &msg);
  return static_cast<int>(st.size());
}

// --- domain API (NVTX_CB_MODULE_CORE2) ---
nvtxDomainHandle_t NVTX_API DomainCreateA(const char* name) {
  auto* d = new nvtxDomainRegistration_st{name ? name : ""};  // lives as long as the process
  write_line("domain_create", d->name, nullptr);
  return d;
}
void NVTX_API DomainDestroy(nvtxDomainHandle_t) {}  // handles stay valid: ranges may still name them
nvtxStringHandle_t NVTX_API DomainRegisterStringA(nvtxDomainHandle_t d, const char* s) {
  auto* h = new nvtxStringRegistration_st{s ? s : ""};
  write_line("register_string", domain_name(d), &h->text);
  return h;
}
int NVTX_API DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) { return push(d, message_of(a)); }
int NVTX_API DomainRangePop(nvtxDomainHandle_t d) { return pop(d); }
void NVTX_API DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  const auto m = message_of(a);
  write_line("mark", domain_name(d), &m);
}
nvtxRangeId_t NVTX_API DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  const auto m = message_of(a);
  write_line("start", domain_name(d), &m);
  return 0;
}
void NVTX_API DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t) { write_line("end", domain_name(d), nullptr); }

// --- global (domain-less) API (NVTX_CB_MODULE_CORE), so stray ranges are seen too ---
int NVTX_API RangePushEx(const nvtxEventAttributes_t* a) { return push(nullptr, message_of(a)); }
int NVTX_API RangePushA(const char* m) { return push(nullptr, m ? m : ""); }
int NVTX_API RangePop() { return pop(nullptr); }
void NVTX_API MarkA(const char* m) {
  const std::string s = m ? m : "";
  write_line("mark", kGlobal, &s);
}

template <class F>
void set(NvtxFunctionTable table, unsigned int size, unsigned int id, F fn) {
  if (id < size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace

extern "C" NVTX_DYNAMIC_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable) {
  const char* path = std::getenv("PHASEBENCH_NVTX_LOG");
  g_out = path && *path ? std::fopen(path, "w") : stderr;
  if (!g_out) {
    std::fprintf(stderr, "phasebench_nvtx_log: cannot open PHASEBENCH_NVTX_LOG=%s\n", path);
    return 0;  // NVTX then turns every call into a no-op
  }
  auto* cb = static_cast<const NvtxExportTableCallbacks*>(getExportTable(NVTX_ETID_CALLBACKS));
  if (!cb || cb->struct_size < sizeof(NvtxExportTableCallbacks) || !cb->GetModuleFunctionTable) return 0;

  NvtxFunctionTable core2 = nullptr, core = nullptr;
  unsigned int n2 = 0, n1 = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &n2) || !core2) return 0;
  set(core2, n2, NVTX_CBID_CORE2_DomainCreateA, &DomainCreateA);
  set(core2, n2, NVTX_CBID_CORE2_DomainDestroy, &DomainDestroy);
  set(core2, n2, NVTX_CBID_CORE2_DomainRegisterStringA, &DomainRegisterStringA);
  set(core2, n2, NVTX_CBID_CORE2_DomainRangePushEx, &DomainRangePushEx);
  set(core2, n2, NVTX_CBID_CORE2_DomainRangePop, &DomainRangePop);
  set(core2, n2, NVTX_CBID_CORE2_DomainMarkEx, &DomainMarkEx);
  set(core2, n2, NVTX_CBID_CORE2_DomainRangeStartEx, &DomainRangeStartEx);
  set(core2, n2, NVTX_CBID_CORE2_DomainRangeEnd, &DomainRangeEnd);
  if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &n1) && core) {
    set(core, n1, NVTX_CBID_CORE_RangePushEx, &RangePushEx);
    set(core, n1, NVTX_CBID_CORE_RangePushA, &RangePushA);
    set(core, n1, NVTX_CBID_CORE_RangePop, &RangePop);
    set(core, n1, NVTX_CBID_CORE_MarkA, &MarkA);
  }
  write_line("init", "phasebench_nvtx_log", nullptr);
  return 1;
}
