// Preloaded ahead of libtsan in the race checker's child process. ThreadSanitizer asks
// __tsan::OnReport (a weak symbol, interposable only from an object loaded before it) whether
// to drop a report; the kernel module's runtime, loaded later and privately, installs its
// filter here (astra_runtime.cpp, hold_warp_write). Not instrumented; no state but the filter.
namespace __tsan {
struct ReportDesc;
}

extern "C" {
typedef int (*astra_report_filter)(const void* report);
static astra_report_filter g_filter = nullptr;

__attribute__((visibility("default"))) void astra_tsan_set_filter(astra_report_filter f) { g_filter = f; }
}

namespace __tsan {
__attribute__((visibility("default"))) bool OnReport(const ReportDesc* rep, bool suppressed) {
  return suppressed || (g_filter != nullptr && g_filter(rep) != 0);
}
}  // namespace __tsan
