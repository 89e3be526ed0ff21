// The CPU backend's executor (isolation.py starts it; built once by toolchain.executor_program).
//
// A small native process — the *zygote* — that never loads kernel code. Once, at start: resource
// limits, the folders the sandbox lets a launch read (opened now, before it gives up root where it
// has it), a user namespace of its own (an empty network, and RLIMIT_NPROC counted within it: a
// thread flood stops at a few dozen), a parent-death signal. Then, in a loop, it forks a *launch
// process*, tells the parent {"spare": pid} with the parent's end of that process's socket and a
// pidfd for it, and when the process has ended tells {"pid": pid, "status": wait status}. Two are
// ready or in use at a time, so a launch never waits for a fork.
//
// A launch process puts itself in a process group of its own, dies with the zygote, applies
// Landlock and the seccomp program the parent compiled (libseccomp, sandbox.compiled_filter) — all
// before its request — then takes one request (the binary layout below, with the module's and the
// buffers' memfds), maps the buffers, loads the module (its static constructors run inside the
// sandbox), launches, answers {"ok": true} or {"ok": false, "error": "..."} and ends with _exit:
// no exit handler of the module ever runs. Its answer is its own word about itself, which the
// parent validates and trusts no more than the launch's outputs.
//
// Native (not Python) because every launch forks and tears down a process: ~0.2 ms here instead
// of ~1.5 ms for an interpreter's.
//
//   astra-executor CTL_FD ADDRESS_LIMIT(0|1) THREADS PARENT_PID SECCOMP_FD(-1: none) NAME RULE...
//   where NAME marks the process (the checkout that started it) and each RULE is a path the
//   launch may read and execute.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <link.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000  // Linux >= 4.17; older kernels take the address as a hint
#endif

namespace {

constexpr int kSandboxExit = 71;  // could not sandbox itself (isolation.SANDBOX_EXIT)
constexpr int kChildFailed = 70;  // the launch's own plumbing failed, not the kernel
constexpr unsigned long long kMemoryLimit = 16ull << 30;
constexpr unsigned long long kFileLimit = 64ull << 20;
constexpr unsigned long long kOpenFiles = 1024;
constexpr unsigned long long kCpuLifetime = 3600;
// The user a root-started executor becomes: one no other process runs as (nobody's daemons could
// otherwise trace it once it is dumpable again, which the sanitizers' symbolizer needs).
constexpr unsigned kUnprivileged = 2147483646;
constexpr int kMaxFds = 251;  // module + 250 buffers
constexpr uint32_t kPidSentinel = 0x7EADBEEF;  // sandbox.PID_SENTINEL

bool g_required = true;  // ASTRA_UNSAFE_NO_SANDBOX=1 makes a missing part a warning

void say(const char* prefix, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  dprintf(2, "astra: %s: %s\n", prefix, buf);
}

// ---- Landlock (linux/landlock.h), the same rights as sandbox.py's -------------------------
constexpr uint64_t FS_EXECUTE = 1ull << 0, FS_WRITE_FILE = 1ull << 1, FS_READ_FILE = 1ull << 2,
                   FS_READ_DIR = 1ull << 3, FS_REFER = 1ull << 13, FS_TRUNCATE = 1ull << 14,
                   FS_IOCTL_DEV = 1ull << 15;
constexpr uint64_t FS_WRITES_V1 = 0x1ff0;  // remove dir/file, make char/dir/reg/sock/fifo/block/sym
constexpr uint64_t READ_EXEC = FS_READ_FILE | FS_READ_DIR | FS_EXECUTE;

int landlock_abi() {
  long v = syscall(444, nullptr, 0, 1u);  // landlock_create_ruleset(NULL, 0, VERSION)
  int abi = v > 0 ? (int)v : 0;
  const char* cap = getenv("ASTRA_LANDLOCK_ABI");  // as an older kernel would offer (tests)
  if (cap && *cap) {
    int c = atoi(cap);
    if (c >= 1 && c < abi) abi = c;
  }
  return abi;
}

uint64_t fs_rights(int abi) {
  uint64_t r = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | FS_WRITES_V1;
  if (abi >= 2) r |= FS_REFER;
  if (abi >= 3) r |= FS_TRUNCATE;
  if (abi >= 5) r |= FS_IOCTL_DEV;
  return r;
}

struct Rule {
  int fd;
  uint64_t rights;
};

bool open_rule(const char* path, uint64_t rights, std::vector<Rule>& out) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;  // a folder this system does not have
  struct stat st;
  if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
    rights &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
  out.push_back({fd, rights});
  return true;
}

struct PathBeneath {
  uint64_t allowed;
  int32_t parent_fd;
} __attribute__((packed));

// Nothing but the rules readable, nothing writable; no TCP (ABI >= 4); no abstract Unix sockets
// or signals outside the sandbox (ABI >= 6). Returns an error text, or "" when confined.
std::string restrict_files(const std::vector<Rule>& rules) {
  int abi = landlock_abi();
  if (abi < 1) return "Landlock is not available in this kernel";
  uint64_t attr[3] = {fs_rights(abi), 0, 0};
  size_t size = 8;
  if (abi >= 4) attr[1] = 3, size = 16;  // NET_BIND_TCP | NET_CONNECT_TCP
  if (abi >= 6) attr[2] = 3, size = 24;  // SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
  int rs = (int)syscall(444, attr, size, 0u);
  if (rs < 0) return std::string("landlock_create_ruleset: ") + strerror(errno);
  for (const Rule& r : rules) {
    PathBeneath pb{r.rights & attr[0], r.fd};
    if (syscall(445, rs, 1, &pb, 0u) != 0) {
      std::string e = std::string("landlock_add_rule: ") + strerror(errno);
      close(rs);
      return e;
    }
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(446, rs, 0u) != 0) {
    std::string e = std::string("landlock_restrict_self: ") + strerror(errno);
    close(rs);
    return e;
  }
  close(rs);
  return "";
}

// ---- seccomp: the program the parent compiled, with this process's pid filled in ------------
struct SockFilter {
  uint16_t code;
  uint8_t jt, jf;
  uint32_t k;
};
struct SockFprog {
  unsigned short len;
  SockFilter* filter;
};

std::string load_seccomp(const std::vector<SockFilter>& program, pid_t pid) {
  if (program.empty()) return "no seccomp filter (libseccomp is not usable)";
  std::vector<SockFilter> p = program;
  int found = 0;
  for (SockFilter& f : p)
    if (f.k == kPidSentinel) f.k = (uint32_t)pid, ++found;
  if (!found) return "seccomp filter: the compiled program has no pid to fill in";
  SockFprog prog{(unsigned short)p.size(), p.data()};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, 2, &prog, 0, 0) != 0)
    return std::string("seccomp filter: ") + strerror(errno);
  return "";
}

// ---- limits, user namespace, parent death ----------------------------------------------------
void limit(int resource, unsigned long long value) {
  struct rlimit l;
  getrlimit(resource, &l);
  if (l.rlim_max != RLIM_INFINITY && value > l.rlim_max) value = l.rlim_max;
  l.rlim_cur = l.rlim_max = value;
  setrlimit(resource, &l);
}

void die_with_parent(pid_t parent) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != parent) _exit(kChildFailed);
}

// RLIMIT_NPROC counts per user and user namespace (Linux >= 5.14) and never binds root, so a
// root-started executor becomes an unprivileged user first.
void own_namespace(unsigned long long threads) {
  if (geteuid() == 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(kUnprivileged, kUnprivileged, kUnprivileged) != 0 ||
        setresuid(kUnprivileged, kUnprivileged, kUnprivileged) != 0) {
      say("sandbox", "cannot give up root: %s", strerror(errno));
      _exit(kSandboxExit);
    }
  }
  if (unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) {
    limit(RLIMIT_NPROC, threads);
    return;
  }
  if (unshare(CLONE_NEWUSER) == 0)
    limit(RLIMIT_NPROC, threads);
  else
    say("executor", "no user namespace (%s): threads are only watched", strerror(errno));
  if (unshare(CLONE_NEWNET) != 0) say("executor", "no private network namespace (seccomp refuses sockets anyway)");
}

// ---- a launch ------------------------------------------------------------------------------
struct Reader {
  const char* p;
  const char* end;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (end - p < (long)sizeof(T)) {
      ok = false;
      return v;
    }
    memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
};

std::string json_string(const char* s) {
  std::string out = "\"";
  for (const unsigned char* c = (const unsigned char*)s; *c; ++c) {
    if (*c == '"' || *c == '\\') {
      out += '\\';
      out += (char)*c;
    } else if (*c < 0x20 || *c >= 0x7f) {
      char b[8];
      snprintf(b, sizeof b, "\\u%04x", *c);
      out += b;
    } else {
      out += (char)*c;
    }
  }
  return out + "\"";
}

// The writable data of the user's unit — its __device__ variables, static locals, the clock —
// which a GPU keeps for the module's life while each launch here runs in a fresh process: this
// code (never the module's) copies it in from the state buffer before the launch and back out
// after it. The ranges come from the module's section headers (device_state.layout); the
// buffer holds where the module was loaded, then each range's bytes. A pointer into the module
// moves with it where the module loads elsewhere (a new zygote). The copies are volatile loops
// no sanitizer intercepts: with AddressSanitizer the ranges hold the variables' redzones too.
struct StateRange {
  uint64_t at, bytes;
};

const uint64_t kPage = 4096;

// Where each range's bytes are in the state buffer: after a page for the module's address, each
// range starts at its own offset within a page (device_state.StateLayout.buffer_bytes says the same), so
// its pages line up with the module's.
uint64_t state_position(uint64_t pos, const StateRange& s) { return (pos + kPage - 1) / kPage * kPage + s.at % kPage; }

// Which pages of a range are resident (one mincore call): one that is not holds zeros — .bss no
// launch has touched in this process, a hole of the state buffer — and is neither read nor
// written, so a large __device__ array that a kernel barely touches costs next to nothing.
std::vector<unsigned char> residency(const volatile unsigned char* p, uint64_t n) {
  uintptr_t first = (uintptr_t)p / kPage * kPage, end = ((uintptr_t)p + n + kPage - 1) / kPage * kPage;
  std::vector<unsigned char> v((end - first) / kPage + 1, 1);
  if (n && mincore((void*)first, end - first, v.data()) != 0) std::fill(v.begin(), v.end(), 1);
  return v;
}

bool zero_bytes(const volatile unsigned char* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

// Page by page (`to` and `from` lie alike within their pages), in volatile loops no sanitizer
// intercepts: with AddressSanitizer the ranges hold the variables' redzones too.
void copy_range(volatile unsigned char* to, const volatile unsigned char* from, uint64_t n) {
  std::vector<unsigned char> t_res = residency(to, n), f_res = residency(from, n);
  for (uint64_t at = 0, page = 0; at < n; ++page) {
    uint64_t len = std::min<uint64_t>(kPage - ((uintptr_t)(to + at) % kPage), n - at);
    const volatile unsigned char* f = from + at;
    volatile unsigned char* t = to + at;
    bool f_in = f_res[page] & 1, t_in = t_res[page] & 1;
    if ((f_in || t_in) && !((!f_in || zero_bytes(f, len)) && (!t_in || zero_bytes(t, len))))
      for (uint64_t i = 0; i < len; ++i) t[i] = f[i];
    at += len;
  }
}

void load_state(unsigned char* buf, uintptr_t base, uint64_t image, const std::vector<StateRange>& ranges) {
  uint64_t was = *(volatile uint64_t*)buf, pos = kPage;
  for (const StateRange& s : ranges) {
    pos = state_position(pos, s);
    copy_range((unsigned char*)(base + s.at), buf + pos, s.bytes);
    pos += s.bytes;
  }
  if (was == base) return;
  for (const StateRange& s : ranges) {
    uintptr_t from = base + s.at, first = from / kPage * kPage;
    std::vector<unsigned char> res = residency((const volatile unsigned char*)from, s.bytes);
    for (uintptr_t w = (from + 7) / 8 * 8; w + 8 <= from + s.bytes; w += 8) {
      if (!(res[(w - first) / kPage] & 1)) continue;  // zeros
      volatile uint64_t* p = (volatile uint64_t*)w;
      if (*p >= was && *p < was + image) *p = *p - was + base;
    }
  }
}

void save_state(unsigned char* buf, uintptr_t base, const std::vector<StateRange>& ranges) {
  *(volatile uint64_t*)buf = base;
  uint64_t pos = kPage;
  for (const StateRange& s : ranges) {
    pos = state_position(pos, s);
    copy_range(buf + pos, (const unsigned char*)(base + s.at), s.bytes);
    pos += s.bytes;
  }
}

typedef int (*SigFn)(unsigned long long*, int*, int);
typedef int (*LaunchFn)(void (*)(void**), void**, int, const unsigned long long*, int, const unsigned*,
                        const unsigned*, unsigned long long, int, int, unsigned long long, int, int, int, char*,
                        int, const unsigned long long*, int);

const uint32_t MAX_ARGS = 320;        // the kernel's (at most 64) and the hidden buffers after them
const uint32_t MAX_RELOCS = 1u << 17;

// Request: magic "ASTR", then (little-endian) u32 nargs, nbuffers, entry index, grid[3], block[3];
// u64 shmem; i32 order, rounding; u64 seed; i32 workers, stack_kib, handlers, copy_buffers;
// f64 cpu seconds; i32 the index of the buffer that holds the module's __device__ variables (-1:
// none), i32 whether to load them from it before the launch, u64 the module's extent in memory,
// u32 count and (u64 offset, u64 bytes) of each range of them in the module; u64 bytes and u64
// address of each buffer (where every launch maps it, as a GPU keeps a buffer's device pointer;
// 0: anywhere); then each argument: u8 kind (1 buffer, 0 value, 2 a hidden buffer: reached
// through another argument, not passed to the kernel; hidden ones come last), u32 buffer index or
// value length, and a value's bytes; then u32 relocations, each u32 argument, u64 offset in it,
// u32 buffer argument, u64 offset in that: the address of the second written at the offset of
// the first (a struct's pointer fields, a table of pointers).
// Descriptors: module, buffers in order.
// A value argument of a pointer's size, all zero bytes: a null pointer (the spec's `p = "null"`,
// an optional input left out) — the one value a pointer parameter takes.
bool null_pointer(const std::vector<char>& bytes, unsigned long long given, unsigned long long size) {
  return given == size && given <= bytes.size() &&
         zero_bytes(reinterpret_cast<const unsigned char*>(bytes.data()), given);
}

std::string run_launch(const std::vector<char>& msg, const std::vector<int>& fds) {
  Reader r{msg.data(), msg.data() + msg.size()};
  char magic[4];
  for (char& m : magic) m = r.get<char>();
  uint32_t nargs = r.get<uint32_t>(), nbuf = r.get<uint32_t>(), entry_index = r.get<uint32_t>();
  unsigned grid[3], block[3];
  for (unsigned& g : grid) g = r.get<uint32_t>();
  for (unsigned& b : block) b = r.get<uint32_t>();
  uint64_t shmem = r.get<uint64_t>();
  int32_t order = r.get<int32_t>(), rounding = r.get<int32_t>();
  uint64_t seed = r.get<uint64_t>();
  int32_t workers = r.get<int32_t>(), stack_kib = r.get<int32_t>(), handlers = r.get<int32_t>(),
          copy_buffers = r.get<int32_t>();
  double cpu_s = r.get<double>();
  int32_t state = r.get<int32_t>(), load = r.get<int32_t>();
  uint64_t image = r.get<uint64_t>();
  uint32_t nranges = r.get<uint32_t>();
  std::vector<StateRange> ranges(nranges <= 64 ? nranges : 0);
  uint64_t state_bytes = kPage;
  for (StateRange& s : ranges) {
    s.at = r.get<uint64_t>();
    s.bytes = r.get<uint64_t>();
    if (s.at > image || s.bytes > image - s.at) r.ok = false;
    state_bytes = state_position(state_bytes, s) + s.bytes;
  }
  if (!r.ok || memcmp(magic, "ASTR", 4) != 0 || nbuf + 1 != fds.size() || nargs > MAX_ARGS || nranges > 64 ||
      state < -1 || state >= (int64_t)nbuf)
    return "{\"ok\": false, \"error\": \"the executor got a malformed request\"}";
  std::vector<void*> maps(nbuf);
  std::vector<unsigned long long> nbytes(nbuf);
  for (uint32_t i = 0; i < nbuf; ++i) {
    nbytes[i] = r.get<uint64_t>();
    void* at = (void*)(uintptr_t)r.get<uint64_t>();
    size_t n = nbytes[i] ? nbytes[i] : 1;
    maps[i] = at ? mmap(at, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fds[i + 1], 0) : MAP_FAILED;
    if (maps[i] == MAP_FAILED)  // the place is taken here (or none was given): anywhere
      maps[i] = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i + 1], 0);
    if (maps[i] == MAP_FAILED) return "{\"ok\": false, \"error\": \"cannot map a buffer\"}";
    close(fds[i + 1]);
  }
  std::vector<unsigned char> kinds(nargs);
  std::vector<void*> ptrs(nargs);                    // a buffer argument: its address
  std::vector<std::vector<char>> values(nargs);      // a value argument: its bytes (>= 16)
  std::vector<unsigned long long> lengths(nargs);    // ... and how many were given
  std::vector<void*> argv(nargs ? nargs : 1);
  std::vector<unsigned long long> sizes(nargs ? nargs : 1, 0);
  uint32_t visible = 0;  // arguments the kernel takes: those before the first hidden one
  for (uint32_t i = 0; i < nargs; ++i) {
    kinds[i] = r.get<uint8_t>();
    uint32_t a = r.get<uint32_t>();
    if (kinds[i] != 2 && visible != i)
      return "{\"ok\": false, \"error\": \"the executor got a malformed request\"}";
    if (kinds[i] != 2) visible = i + 1;
    if (kinds[i] == 1 || kinds[i] == 2) {
      if (a >= nbuf) return "{\"ok\": false, \"error\": \"the executor got a malformed request\"}";
      ptrs[i] = maps[a];
      sizes[i] = nbytes[a];
      argv[i] = &ptrs[i];
    } else if (kinds[i] == 0) {
      if (r.end - r.p < (long)a) return "{\"ok\": false, \"error\": \"the executor got a malformed request\"}";
      values[i].assign(std::max<size_t>(a, 16), 0);
      memcpy(values[i].data(), r.p, a);
      r.p += a;
      sizes[i] = 0;
      argv[i] = values[i].data();
      lengths[i] = a;
    } else {
      return "{\"ok\": false, \"error\": \"the executor got a malformed request\"}";
    }
  }
  uint32_t nrelocs = r.get<uint32_t>();
  if (!r.ok || nrelocs > MAX_RELOCS) return "{\"ok\": false, \"error\": \"the executor got a malformed request\"}";
  std::vector<unsigned long long> relocs(4 * (size_t)nrelocs + 1);
  for (uint32_t k = 0; k < nrelocs; ++k) {
    uint32_t target = r.get<uint32_t>();
    uint64_t at = r.get<uint64_t>();
    uint32_t source = r.get<uint32_t>();
    uint64_t within = r.get<uint64_t>();
    if (!r.ok || target >= nargs || source >= nargs || kinds[source] == 0 || within > sizes[source])
      return "{\"ok\": false, \"error\": \"the executor got a malformed request\"}";
    unsigned long long room = kinds[target] == 0 ? lengths[target] : sizes[target];
    if (room < 8 || at > room - 8) return "{\"ok\": false, \"error\": \"the executor got a malformed request\"}";
    relocs[4 * k] = target;
    relocs[4 * k + 1] = at;
    relocs[4 * k + 2] = source;
    relocs[4 * k + 3] = within;
  }
  if (!r.ok) return "{\"ok\": false, \"error\": \"the executor got a malformed request\"}";

  // The descriptor stays open: the sanitizers' symbolizers read the module through it.
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::string e = std::string("cannot load the compiled module (") + dlerror() + "); compile again";
    return "{\"ok\": false, \"error\": " + json_string(e.c_str()) + "}";
  }
  char name[64];
  snprintf(name, sizeof name, "astra_sig_%u", entry_index);
  SigFn sig = (SigFn)dlsym(lib, name);
  snprintf(name, sizeof name, "astra_entry_%u", entry_index);
  void* entry = dlsym(lib, name);
  LaunchFn launch = (LaunchFn)dlsym(lib, "astra_launch");
  if (!sig || !entry || !launch) return "{\"ok\": false, \"error\": \"the compiled module lacks its entry points\"}";
  // The module's __device__ variables as its last launch left them: this process is new.
  uintptr_t base = 0;
  if (state >= 0) {
    struct link_map* map = nullptr;
    if (nbytes[state] != state_bytes || dlinfo(lib, RTLD_DI_LINKMAP, &map) != 0 || !map)
      return "{\"ok\": false, \"error\": \"the module's __device__ variables changed size; compile again\"}";
    base = map->l_addr;
    if (load) load_state((unsigned char*)maps[state], base, image, ranges);
  }

  unsigned long long psizes[64];
  int pkinds[64];
  int n = sig(psizes, pkinds, 64);
  char problem[256] = "";
  if ((uint32_t)n != visible) {
    snprintf(problem, sizeof problem, "the kernel takes %d argument(s), %u given", n, visible);
  } else {
    for (uint32_t i = 0; i < visible && !*problem; ++i) {
      if (kinds[i] == 1 && pkinds[i] != 1)
        snprintf(problem, sizeof problem,
                 "argument %u: the kernel takes a value (%llu bytes) here, a buffer was given", i + 1, psizes[i]);
      else if (kinds[i] == 0 && pkinds[i] == 1 && !null_pointer(values[i], lengths[i], psizes[i]))
        snprintf(problem, sizeof problem, "argument %u: the kernel takes a pointer here, a scalar was given", i + 1);
      else if (kinds[i] == 0 && lengths[i] != psizes[i])
        snprintf(problem, sizeof problem,
                 "argument %u: the kernel parameter is %llu bytes, the scalar given is %llu bytes", i + 1,
                 psizes[i], lengths[i]);
    }
  }
  if (*problem) return std::string("{\"ok\": false, \"error\": ") + json_string(problem) + "}";

  struct rusage used;
  getrusage(RUSAGE_SELF, &used);
  double spent = used.ru_utime.tv_sec + used.ru_stime.tv_sec + (used.ru_utime.tv_usec + used.ru_stime.tv_usec) / 1e6;
  limit(RLIMIT_CPU, (unsigned long long)(spent + cpu_s) + 2);

  static char err[8192];
  int rc = launch((void (*)(void**))entry, argv.data(), (int)nargs, sizes.data(), copy_buffers, grid, block, shmem,
                  order, rounding, seed, workers, stack_kib, handlers, err, (int)sizeof err, relocs.data(),
                  (int)nrelocs);
  fflush(stdout);
  if (rc == 0 && state >= 0) save_state((unsigned char*)maps[state], base, ranges);
  if (rc == 0) return "{\"ok\": true}";
  err[sizeof err - 1] = 0;
  return std::string("{\"ok\": false, \"error\": ") + json_string(err) + "}";
}

[[noreturn]] void launch_process(int ctl, int sock, const std::vector<Rule>& rules,
                                 const std::vector<SockFilter>& program, pid_t zygote) {
  close(ctl);  // the zygote's channel is the parent's only
  setpgid(0, 0);
  die_with_parent(zygote);
  std::vector<Rule> mine = rules;
  char own[32];
  snprintf(own, sizeof own, "/proc/%d", (int)getpid());
  open_rule(own, FS_READ_FILE | FS_READ_DIR, mine);  // the sanitizers read its maps
  for (int step = 0; step < 2; ++step) {
    std::string why = step == 0 ? restrict_files(mine) : load_seccomp(program, getpid());
    if (why.empty()) continue;
    if (g_required) {
      say("sandbox", "%s", why.c_str());
      _exit(kSandboxExit);
    }
    say("running WITHOUT part of the sandbox (ASTRA_UNSAFE_NO_SANDBOX=1)", "%s", why.c_str());
  }
  for (size_t i = rules.size(); i < mine.size(); ++i) close(mine[i].fd);
  for (const Rule& r : rules) close(r.fd);

  std::vector<char> msg(1 << 20);
  char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  struct iovec iov{msg.data(), msg.size()};
  struct msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  ssize_t got = recvmsg(sock, &mh, 0);
  if (got <= 0) _exit(0);  // the parent closed: no launch
  msg.resize((size_t)got);
  std::vector<int> fds;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const int* p = (const int*)CMSG_DATA(c);
      fds.insert(fds.end(), p, p + k);
    }
  if (fds.empty()) _exit(kChildFailed);
  std::string reply = run_launch(msg, fds);
  if (send(sock, reply.data(), reply.size(), 0) < 0) _exit(kChildFailed);
  _exit(0);  // never through exit handlers (a module's may never return)
}

bool send_msg(int ctl, const std::string& text, const int* fds, int nfds) {
  struct iovec iov{(void*)text.data(), text.size()};
  struct msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  char control[CMSG_SPACE(sizeof(int) * 2)];
  if (nfds) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  return sendmsg(ctl, &mh, MSG_NOSIGNAL) >= 0;
}

// Fork a launch process and announce it; its pid (0: the parent is gone).
pid_t spawn(int ctl, const std::vector<Rule>& rules, const std::vector<SockFilter>& program) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  pid_t zygote = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    launch_process(ctl, sv[1], rules, program, zygote);
  }
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    return 0;
  }
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  int fds[2] = {sv[0], pidfd};
  bool sent = pidfd >= 0 && send_msg(ctl, "{\"spare\": " + std::to_string(pid) + "}", fds, 2);
  close(sv[0]);
  if (pidfd >= 0) close(pidfd);
  if (!sent) {
    kill(pid, SIGKILL);
    return 0;
  }
  return pid;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    say("executor", "usage: astra-executor CTL_FD ADDRESS_LIMIT THREADS PARENT SECCOMP_FD NAME RULE...");
    return kChildFailed;
  }
  int ctl = atoi(argv[1]);
  bool address_limit = atoi(argv[2]) != 0;
  unsigned long long threads = strtoull(argv[3], nullptr, 10);
  pid_t parent = (pid_t)atoi(argv[4]);
  int seccomp_fd = atoi(argv[5]);
  const char* opt_out = getenv("ASTRA_UNSAFE_NO_SANDBOX");
  g_required = !(opt_out && strcmp(opt_out, "1") == 0);

  if (address_limit) limit(RLIMIT_AS, kMemoryLimit);
  limit(RLIMIT_FSIZE, kFileLimit);
  limit(RLIMIT_CORE, 0);
  limit(RLIMIT_NOFILE, kOpenFiles);
  limit(RLIMIT_CPU, kCpuLifetime);

  std::vector<SockFilter> program;
  if (seccomp_fd >= 0) {
    SockFilter f;
    while (read(seccomp_fd, &f, sizeof f) == (ssize_t)sizeof f) program.push_back(f);
    close(seccomp_fd);
  }
  std::vector<Rule> rules;
  open_rule("/proc/self/exe", READ_EXEC, rules);  // the sanitizers' symbolizer reads it
  for (int i = 7; i < argc; ++i) open_rule(argv[i], READ_EXEC, rules);

  own_namespace(threads);
  // After the last change of credentials, which clears both: dumpable as any user's process is
  // (else its /proc entries belong to root and the sanitizers' symbolizer cannot read them).
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  die_with_parent(parent);

  pid_t current = spawn(ctl, rules, program);
  while (current) {
    pid_t following = spawn(ctl, rules, program);
    int status = 0;
    while (waitpid(current, &status, 0) < 0 && errno == EINTR) {
    }
    if (!send_msg(ctl, "{\"pid\": " + std::to_string(current) + ", \"status\": " + std::to_string(status) + "}",
                  nullptr, 0))
      return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == kSandboxExit) return kSandboxExit;  // the next cannot either
    current = following;
  }
  return 0;
}
