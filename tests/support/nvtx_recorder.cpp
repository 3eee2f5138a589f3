// An NVTX tool for tests: a shared library that nvtx3 loads when NVTX_INJECTION64_PATH names it,
// as it loads Nsight Systems' own. Its InitializeInjectionNvtx2 fills nvtx3's callback tables
// with functions that append one line per event to the file named by VITDDP_NVTX_LOG:
//   push <domain> <name>      a range opened (domain "-" for the global, non-domain API)
//   pop <domain>              the innermost range of that domain closed
//   mark <domain> <name>      an instant
// so a test can check names, domains and nesting without nsys. Not thread-safe beyond a mutex
// per line; the tests run one thread.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

// nvtx3 leaves the domain registration type to the tool; ours remembers the name.
struct nvtxDomainRegistration_st {
  std::string name;
};

namespace {

std::FILE* g_log = nullptr;
std::mutex g_mutex;

void write_line(const char* verb, const char* domain, const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_log) return;
  if (name)
    std::fprintf(g_log, "%s %s %s\n", verb, domain, name);
  else
    std::fprintf(g_log, "%s %s\n", verb, domain);
  std::fflush(g_log);
}

const char* domain_name(nvtxDomainHandle_t domain) { return domain ? domain->name.c_str() : "-"; }

const char* message(const nvtxEventAttributes_t* a) {
  if (!a) return "(null)";
  if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) return a->message.ascii;
  return "(non-ascii)";
}

nvtxDomainHandle_t NVTX_API domain_create_a(const char* name) {
  return new nvtxDomainRegistration_st{name ? name : ""};  // lives as long as the process
}
void NVTX_API domain_destroy(nvtxDomainHandle_t domain) { delete domain; }

int NVTX_API domain_push_ex(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* a) {
  write_line("push", domain_name(domain), message(a));
  return 0;
}
int NVTX_API domain_pop(nvtxDomainHandle_t domain) {
  write_line("pop", domain_name(domain), nullptr);
  return 0;
}
void NVTX_API domain_mark_ex(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* a) {
  write_line("mark", domain_name(domain), message(a));
}

int NVTX_API push_a(const char* name) {
  write_line("push", "-", name);
  return 0;
}
int NVTX_API push_ex(const nvtxEventAttributes_t* a) {
  write_line("push", "-", message(a));
  return 0;
}
int NVTX_API pop() {
  write_line("pop", "-", nullptr);
  return 0;
}
void NVTX_API mark_a(const char* name) { write_line("mark", "-", name); }

template <typename Fn>
void install(NvtxFunctionTable table, unsigned size, unsigned id, Fn fn) {
  if (id < size) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const char* path = std::getenv("VITDDP_NVTX_LOG");
  if (!path || !*path) return 0;  // nothing to record into: tell nvtx3 to fall back to no-ops
  // Each rank of a data-parallel run records into its own file: PATH.RANK.
  std::string file = path;
  if (const char* rank = std::getenv("RANK")) file += std::string(".") + rank;
  g_log = std::fopen(file.c_str(), "a");
  if (!g_log) return 0;

  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;

  NvtxFunctionTable core = nullptr;
  unsigned core_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) || !core) return 0;
  install(core, core_size, NVTX_CBID_CORE_RangePushA, push_a);
  install(core, core_size, NVTX_CBID_CORE_RangePushEx, push_ex);
  install(core, core_size, NVTX_CBID_CORE_RangePop, pop);
  install(core, core_size, NVTX_CBID_CORE_MarkA, mark_a);

  NvtxFunctionTable core2 = nullptr;
  unsigned core2_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size) || !core2) return 0;
  install(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, domain_create_a);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainDestroy, domain_destroy);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, domain_push_ex);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, domain_pop);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainMarkEx, domain_mark_ex);
  return 1;
}
