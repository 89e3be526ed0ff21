"""The attack catalogue: hostile kernels, headers, specs, inputs and endpoints, each with what
must be contained. `tests/security/test_attacks.py` runs every entry on this machine (CI too);
`python -m tests.security.catalogue` writes the table in docs/attack-catalogue.md.

Kinds:
- sandbox: host code in a kernel module, compiled with the name screen switched OFF and launched
  on the CPU backend, so the sandbox alone must contain it (no file written, no secret read, no
  process left, the parent unharmed). `body` runs once in thread 0 of block 0; `prelude` is
  file-scope code (constructors, initialisers run when the module is loaded).
- exec: what a launch or a compile leaves behind — threads, handlers, forged replies, compiler
  processes — and whether it reaches the next launch, outlives its caller or a time limit.
- reference: what a candidate leaves for the reference it is judged against (`__device__`
  variables, threads) when both run in one worker: whether it changes the reference's outputs
  or its time (tests/security/test_reference_apart.py).
- truth: what the candidate is judged against — the reference's outputs, the inputs the reference
  runs on — where a candidate's launch can write any allocation of the worker (one CUDA context):
  values it could not have written (tests/security/test_ground_truth.py).
- overrun: a kernel or draft spec that writes past the end of a buffer: the gate's guard bytes.
- compile: a hostile unit given to the CPU compiler (screen off): the compiler's own sandbox.
- nvrtc: a hostile file through extract and NVRTC in this process (the static checks; the same
  entries run through nvcc on the whole file, and through the GPU backend's CuPy compile on a GPU
  machine): `arg` says where the `#include` stands — at "file" scope or inside the "kernel". The
  unit is cut from the device pass's preprocessor output (devicepp, confined like every compiler
  of user code), which meets every include first; NVRTC's confined thread is the second wall.
- bounds: memory, output and time of every compile before anything runs (NVRTC and nvcc).
- project: a hostile compile_commands.json in the project (include folders, flags, macros).
- screen: a known bypass of the name screen, which must now be refused before any compile.
- gate: a file or candidate through the whole gate on the CPU backend (GPU first, screen, ...).
- spec / input: a hostile spec or input through the `astra` CLI: exit code 2 with a message,
  quickly, never a traceback, never exit 0.
- secret / file: keys in URLs, in the environment, echoed by an endpoint; `--write` on links;
  `.astra/` made a link.
- editor: what the language server shows and answers (tests/security/test_editor.py drives a real
  server process with pytest-lsp).
- reply: what an endpoint sends back (size, encoding, invalid Unicode).
- hostprog: a constructor program (compile/hostprog.py) that tries what a program that computes
  and prints never needs (tests/security/test_hostprog_attacks.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Attack:
    name: str
    kind: str
    what: str                  # what the hostile code or input does
    contained: str             # what must hold afterwards
    stopped_by: str            # the layer expected to stop it
    body: str = ""             # sandbox: C++ run in thread 0 (sets `r`); others: the hostile text
    prelude: str = ""          # sandbox: file-scope C++
    fatal: bool = False        # sandbox: the executor is expected to be killed (a LaunchError)
    arg: str = ""              # spec/input: extra detail (the spec line, the CLI arguments)


# `CANARY` is a folder outside everything the sandbox may touch; `SECRET` a file holding a secret
# (and the same secret is the parent's OPENAI_API_KEY); the runner fills both in.
SANDBOX = [
    Attack("fopen_write", "sandbox", "fopen(\"…/pwned\", \"w\") and fputs from kernel code",
           "no file written", "seccomp: open for writing refused (EPERM)",
           body='FILE* f = fopen(CANARY "/pwned", "w"); if (f) { fputs("x", f); fclose(f); r = 1; }'),
    Attack("freopen64_fputs", "sandbox", "freopen64 on stdout to a file, then fputs (not on any name list)",
           "no file written", "seccomp: open for writing refused (EPERM)",
           body='FILE* f = freopen64(CANARY "/pwned", "w", stdout); if (f) { fputs("x", f); fflush(f); r = 1; }'),
    Attack("mkostemp_renameat2", "sandbox", "mkostemp in the canary folder, then renameat2",
           "no file written", "seccomp: open for writing refused (EPERM)",
           body='char t[] = CANARY "/pwnedXXXXXX"; int fd = mkostemp(t, 0); '
                'if (fd >= 0) { r = 1; syscall(SYS_renameat2, AT_FDCWD, t, AT_FDCWD, CANARY "/pwned", 0); }'),
    Attack("raw_syscall_openat", "sandbox", "a raw openat system call with O_CREAT (no libc name at all)",
           "no file written", "seccomp: open for writing refused (EPERM)",
           body='r = syscall(SYS_openat, AT_FDCWD, CANARY "/pwned", O_WRONLY | O_CREAT, 0644);'),
    Attack("inline_asm_syscall", "sandbox", "the `syscall` instruction in inline assembly: open(…, O_CREAT)",
           "no file written", "seccomp: open for writing refused (EPERM)",
           body='long ret; const char* p = CANARY "/pwned"; '
                'asm volatile("syscall" : "=a"(ret) : "a"(257L), "D"(-100L), "S"(p), "d"(0101L) : "rcx", "r11", "memory"); r = ret;'),
    Attack("read_parent_environ", "sandbox", "reads /proc/<parent>/environ for OPENAI_API_KEY into the output",
           "no secret in any output", "Landlock: /proc of other processes unreadable (EACCES)",
           body='char p[64]; snprintf(p, sizeof p, "/proc/%d/environ", (int)getppid()); '
                'int fd = open(p, O_RDONLY); if (fd >= 0) { r = read(fd, (char*)(out + 2), 400); }'),
    Attack("read_own_environ", "sandbox", "reads its own environment (/proc/self/environ, getenv) for a key",
           "no secret in any output", "empty environment",
           body='int fd = open("/proc/self/environ", O_RDONLY); if (fd >= 0) { r = read(fd, (char*)(out + 2), 400); } '
                'const char* k = getenv("OPENAI_API_KEY"); if (k) { strncpy((char*)(out + 2), k, 400); r = 2; }'),
    Attack("read_secret_file", "sandbox", "opens a secret file of the user's (read-only) and copies it out",
           "no secret in any output", "Landlock: no file outside the runtime readable (EACCES)",
           body='int fd = open(SECRET, O_RDONLY); if (fd >= 0) { r = read(fd, (char*)(out + 2), 400); }'),
    Attack("read_via_proc_root", "sandbox", "reaches the secret through /proc/self/root and /proc/self/cwd/..",
           "no secret in any output", "Landlock: the real path decides (EACCES)",
           body='int fd = open("/proc/self/root" SECRET, O_RDONLY); if (fd >= 0) r = read(fd, (char*)(out + 2), 400);'),
    Attack("overwrite_cached_module", "sandbox", "opens the compile cache to replace another kernel's module",
           "no file written, cache unreadable", "seccomp (write) and Landlock (read)",
           body='r = open(CACHE "/poison.so", O_RDWR | O_CREAT, 0755); '
                'int d = open(CACHE, O_RDONLY | O_DIRECTORY); if (d >= 0) r = 100 + d;'),
    Attack("symlink_plant", "sandbox", "plants a symbolic link to /etc/passwd in the canary folder",
           "no file written", "seccomp: symlink refused (EPERM)",
           body='r = symlink("/etc/passwd", CANARY "/pwned");'),
    Attack("fork_setsid", "sandbox", "fork() then setsid() in the child, leaving a process behind",
           "no process left", "seccomp: fork kills the executor (SIGSYS)", fatal=True,
           body='pid_t p = fork(); if (p == 0) { setsid(); sleep(30); _exit(0); } r = p;'),
    Attack("raw_clone_process", "sandbox", "a raw clone(SIGCHLD) system call (a process, not a thread)",
           "no process left", "seccomp: clone without CLONE_THREAD kills (SIGSYS)", fatal=True,
           body='r = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0); if (r == 0) { sleep(30); _exit(0); }'),
    Attack("system_via_pointer", "sandbox", "calls system() through a function pointer",
           "no process left, no file written", "seccomp: process creation kills (SIGSYS)", fatal=True,
           body='int (*volatile f)(const char*) = system; r = f("touch " CANARY "/pwned");'),
    Attack("execve_shell", "sandbox", "execl(\"/bin/sh\", …) to run a shell",
           "no program run, no file written", "seccomp: execve kills (SIGSYS)", fatal=True,
           body='r = execl("/bin/sh", "sh", "-c", "touch " CANARY "/pwned", (char*)0);'),
    Attack("memfd_execveat", "sandbox", "memfd_create + execveat (fileless execution)",
           "no program run", "seccomp: memfd_create refused, execveat kills", fatal=True,
           body='int fd = syscall(SYS_memfd_create, "x", 0); r = fd; '
                'syscall(SYS_execveat, fd < 0 ? 0 : fd, "", 0, 0, 0x1000);'),
    Attack("constructor_at_load", "sandbox", "__attribute__((constructor)) writes a file when the module is loaded",
           "no file written", "the sandbox is applied before the module is loaded",
           prelude='__attribute__((constructor)) static void astra_pwn() { FILE* f = fopen(CANARY "/pwned", "w"); '
                   'if (f) fclose(f); }'),
    Attack("dynamic_initialiser", "sandbox", "a global's dynamic initialiser spawns a shell at load time",
           "no process left, no file written", "seccomp: the load-time fork kills (SIGSYS)", fatal=True,
           prelude='static int astra_pwned = system("touch " CANARY "/pwned");'),
    Attack("unix_socket_on_disk", "sandbox", "connects to a Unix socket on disk (the parent listens there)",
           "nothing connects", "seccomp: socket refused (EPERM)",
           body='int s = socket(AF_UNIX, SOCK_STREAM, 0); r = s; if (s >= 0) { sockaddr_un a{}; a.sun_family = AF_UNIX; '
                'strcpy(a.sun_path, CANARY "/listen.sock"); r = connect(s, (sockaddr*)&a, sizeof a) == 0 ? 7 : -7; }'),
    Attack("tcp_loopback", "sandbox", "opens a TCP connection to 127.0.0.1",
           "no socket", "seccomp: socket refused (EPERM); Landlock refuses TCP too",
           body='int s = socket(AF_INET, SOCK_STREAM, 0); r = s; if (s >= 0) { sockaddr_in a{}; a.sin_family = AF_INET; '
                'a.sin_port = htons(9); a.sin_addr.s_addr = htonl(0x7f000001); r = connect(s, (sockaddr*)&a, sizeof a); }'),
    Attack("kill_parent", "sandbox", "kill(getppid(), SIGKILL): the worker holding the gate",
           "the parent survives", "seccomp: signals only to itself (EPERM)",
           body='r = kill(getppid(), SIGKILL);'),
    Attack("ptrace_parent", "sandbox", "ptrace(PTRACE_ATTACH) on the parent to read its memory (the key)",
           "the parent untouched", "seccomp: ptrace kills (SIGSYS)", fatal=True,
           body='r = ptrace(PTRACE_ATTACH, getppid(), 0, 0);'),
    Attack("io_uring_bypass", "sandbox", "io_uring_setup (file I/O that a seccomp filter would not see)",
           "no ring created", "seccomp: io_uring refused (EPERM)",
           body='char params[120] = {0}; r = syscall(SYS_io_uring_setup, 4, params);'),
    Attack("raise_limits", "sandbox", "raises its CPU-time and address-space limits to unlimited",
           "limits stay", "hard limits (EPERM)",
           body='rlimit l{RLIM_INFINITY, RLIM_INFINITY}; r = setrlimit(RLIMIT_CPU, &l) + 10 * setrlimit(RLIMIT_AS, &l);'),
    Attack("new_user_namespace", "sandbox", "unshare(CLONE_NEWUSER) to gain capabilities in a new namespace",
           "no namespace", "seccomp: unshare refused (EPERM)",
           body='r = unshare(0x10000000);'),
    Attack("write_proc_self_mem", "sandbox", "opens /proc/self/mem for writing", "refused",
           "seccomp: open for writing refused (EPERM)",
           body='r = open("/proc/self/mem", O_RDWR);'),
    Attack("dev_shm_drop", "sandbox", "creates a file in /dev/shm for a later process to pick up",
           "no file written", "seccomp: open for writing refused (EPERM)",
           body='r = open("/dev/shm/astra-pwned", O_WRONLY | O_CREAT, 0644);'),
    Attack("memory_bomb", "sandbox", "asks for 40 GiB of memory", "the executor stops, the machine does not",
           "RLIMIT_AS (ENOMEM); sanitizer builds: the parent's resident-memory watch",
           body='void* p = mmap(0, (size_t)40 << 30, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); '
                'r = p == MAP_FAILED ? -1 : 1;'),
    Attack("printf_flood", "sandbox", "prints 200 MiB into the log", "the log stays within 64 MiB",
           "RLIMIT_FSIZE (writes past it fail: EFBIG)",
           body='static char b[1 << 20]; memset(b, 97, sizeof b - 1); for (int i = 0; i < 200; ++i) printf("%s\\n", b); r = 1;'),
    Attack("infinite_loop", "sandbox", "never returns", "stopped", "the launch timeout (its process killed)",
           fatal=True, body='for (volatile int i = 0; ; ) (void)i;'),
    Attack("fcntl_setown_sigio", "sandbox", "fcntl F_SETOWN(parent), F_SETSIG and O_ASYNC on every descriptor: the "
           "next message on its socket signals the worker (Landlock before ABI 6 does not scope it)",
           "no signal reaches the parent", "seccomp: F_SETOWN/F_SETSIG/F_SETFL with O_ASYNC refused (EPERM)",
           body='long ok = 0; for (int fd = 0; fd < 64; ++fd) { ok += fcntl(fd, F_SETOWN, getppid()) == 0; '
                'ok += fcntl(fd, F_SETSIG, SIGWINCH) == 0; ok += fcntl(fd, F_SETFL, O_ASYNC | O_NONBLOCK) == 0; '
                'f_owner_ex o{F_OWNER_PID, getppid()}; ok += fcntl(fd, F_SETOWN_EX, &o) == 0; } r = ok ? ok : -1;'),
    Attack("signal_parent_other_calls", "sandbox", "tgkill, rt_sigqueueinfo, pidfd_send_signal and kill(-1) at the parent",
           "the parent survives", "seccomp: signals only to itself (EPERM)",
           body='siginfo_t si{}; si.si_signo = SIGWINCH; si.si_code = SI_QUEUE; long ok = 0; '
                'ok += syscall(SYS_tgkill, getppid(), getppid(), SIGWINCH) == 0; '
                'ok += syscall(SYS_rt_sigqueueinfo, getppid(), SIGWINCH, &si) == 0; '
                'int pfd = syscall(SYS_pidfd_open, getppid(), 0); ok += pfd >= 0; '
                'ok += syscall(SYS_pidfd_send_signal, pfd, SIGWINCH, 0, 0) == 0; ok += kill(-1, SIGWINCH) == 0; '
                'r = ok ? ok : -1;'),
    Attack("process_vm_write_parent", "sandbox", "process_vm_writev into the parent's memory",
           "the parent untouched", "seccomp: process_vm_* kill (SIGSYS)", fatal=True,
           body='char b[8] = {0}; iovec l{b, 8}, rr{(void*)0x400000, 8}; r = process_vm_writev(getppid(), &l, 1, &rr, 1, 0);'),
    Attack("thread_flood", "sandbox", "starts 3,000 threads that sleep (the machine's pid space is shared)",
           "at most a few dozen threads", "RLIMIT_NPROC in the executor's user namespace; the parent's thread watch "
           "where there is none", prelude='static void* astra_idle(void*) { sleep(30); return 0; }',
           body='pthread_attr_t a; pthread_attr_init(&a); pthread_attr_setstacksize(&a, 65536); long n = 0; '
                'for (; n < 3000; ++n) { pthread_t t; if (pthread_create(&t, &a, astra_idle, 0)) break; '
                'pthread_detach(t); } r = n;'),
]

# Macros that double: `#define B1 B0 B0` ... `B24`, a few hundred bytes that expand 2**N times.
def doubling(n: int, term: str = "1+", name: str = "B") -> str:
    return "\n".join([f"#define {name}0 {term}"] + [f"#define {name}{i} {name}{i - 1} {name}{i - 1}"
                                                     for i in range(1, n + 1)]) + "\n"


# Compiles before anything runs: each bounded in memory, output and time (tests/security/test_attacks.py
# runs them through `astra check` with NVRTC, as a machine without a CUDA toolkit does).
BOUNDS = [
    Attack("macro_explosion_screen", "bounds", "an 835-byte file whose macro doubles 24 times inside "
           "`#if __has_include(<unistd.h>)` (NVRTC never sees it; the name screen's preprocessor and what read its "
           "output took 22.5 GB)", "a clear error within 60 s, the preprocessor under 1 GiB",
           "the screen's g++ -E: 1 GiB of memory, 64 MiB of output, 60 s; at most 8 MiB of the user's lines parsed",
           body=doubling(24, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx+"),
           arg="1.0f;\n#if __has_include(<unistd.h>)\n  { int y = B24 0; }\n#endif\n  x[0] = 1.0f"),
    Attack("expression_explosion", "bounds", "a macro-made expression of 2**16 terms (NVRTC's worker died, "
           "SIGSEGV, a traceback; g++'s front end needs minutes: the CPU backend's check took 74 s to its error)",
           "exit 2 naming the line, within seconds, before any compiler",
           "the cut: code may grow only so much once macros are expanded (its 131,000 nodes from 516 bytes; see "
           "initializer_explosion), and at most 1,000 levels of C++ structure below a declaration (real code: 82); "
           "behind it NVRTC on a 512 MiB stack and g++ of user code 45 s",
           body=doubling(16), arg="B16 1"),
    Attack("initializer_explosion", "bounds", "a ~600-byte file whose doubling macros make a 2**20-element "
           "initialiser list (3 MiB and 2.1 million syntax nodes once expanded, flat: under the depth bound; "
           "`astra check --backend cpu` ran 6 minutes to a verdict, the cut, the screen and the source model "
           "walking it in Python)", "exit 2 naming the line, within seconds, before any walk or compiler",
           "the cut: the project's code may grow, once macros are expanded, to 512 KiB and 100,000 syntax nodes "
           "plus 8 bytes and 2 nodes per byte of the project's files read (real code: at most 1.8 and 0.5; "
           "CUTLASS read in as a project's headers: 4.1 MiB, 1.2 million nodes)",
           body=doubling(20, "1,", "C") + "__device__ int astra_table[] = {C20 1};\n", arg="astra_table[i]"),
    Attack("comment_padding", "bounds", "the 2**18-element list of doubling macros behind 280 KB of padding: "
           "line comments, a block comment and blank lines (each padded byte earned 8 bytes and 2 nodes of "
           "allowance: the list passed the bound, `astra check --backend cpu` ran 2 min 8 s to a verdict; 4 MB of "
           "padding would have let the 2**20 list through)", "exit 2 naming the line, within seconds, before any "
           "walk or compiler", "the cut: only code earns allowance (the files' bytes less comments and blank "
           "space, lexed in linear time), and never past 6 MiB and 1.8 million nodes (1.5 times CUTLASS's)",
           body=("// " + "x" * 77 + "\n") * 1750 + "/*" + ("y" * 79 + "\n") * 875 + "*/\n" + (" " * 79 + "\n") * 875
           + doubling(18, "1,", "C") + "__device__ int astra_table[] = {C18 1};\n", arg="astra_table[i]"),
    Attack("namespace_nesting", "bounds", "5,000 nested `namespace a {` blocks (Python's recursion ran out "
           "reading them: a RecursionError traceback)", "exit 2 naming the line, no traceback",
           "the source model reads 100 nested blocks, the cut refuses more",
           body="namespace a {" * 5000 + "}" * 5000 + "\n", arg="1.0f"),
    Attack("slow_parse", "bounds", "`a<a<…` (4 MB of it, under the 4 MiB file limit: tree-sitter took 16 s of CPU per "
           "parse, and a check parses the file several times, 3 min 51 s of wall time at load 20; here 0.75 MB, "
           "under the token ceiling of token_flood, which refuses the 4 MB first)",
           "exit 2 naming the file within seconds, before any compiler; the language server answers on",
           "model.parse_time: every parse keeps a pace of 1.5 s of CPU per MiB it reads (real code: at most 0.6), "
           "0.1 s beyond it per file at most, checked while it parses, which stops there",
           body="int astra_z = " + "a<" * 375_000 + "1;\n", arg="1.0f"),
    Attack("slow_parse_macros", "bounds", "the same text as macro bodies of 4 KB (`#define M1 a<a<…`; 1,000 of them: "
           "the file's own parse skips them, the source model parses each body alone, each fast, together 20 s of CPU; "
           "here 190, under the token ceiling)",
           "exit 2 within seconds", "model.parse_time: the time beyond the pace is summed over all the parses "
           "made for one file", body="".join(f"#define ASTRA_M{i}(x) x " + "a<" * 2000 + "\n" for i in range(190)),
           arg="1.0f"),
    Attack("syntax_node_flood", "bounds", "3.7 MiB of `a;` on one line (under the 4 MiB file limit; tree-sitter "
           "reads it within its pace, 0.7 s of CPU per MiB, but makes 5.9 million syntax nodes: `astra check` took "
           "38 s of CPU and 1.4 GB, the source model walking 2 million items, before the cut's node ceiling refused "
           "it; the language server's GIL was held 5 s by a second parse from bytes)",
           "exit 2 naming the file within seconds and under 2 GiB, before any walk or compiler; the language server "
           "answers on", "parse_time.MAX_TOKENS first (3.9 million tokens, counted before any parse: see "
           "token_flood); behind it parse_time.MAX_NODES: at most 1.8 million nodes per parse (the largest real file: "
           "0.95 million), counted by tree-sitter as it builds the tree, checked before any walk; one parse per text, "
           "through a callable (py-tree-sitter lets the GIL go at each callback)",
           body="a;" * 1_950_000 + "\n", arg="1.0f"),
    Attack("token_flood", "bounds", "1.15 MiB of `a;` (1.18 million tokens, 1.77 million syntax nodes: just under "
           "the node ceiling, so read in full; `astra check --backend static` came to a compile error after 13 s of "
           "CPU and 706 MB, 79 s of wall time at load 14: the source model's and the cut's walks of 590,000 items)",
           "exit 2 naming the file within seconds, before any parse", "parse_time.MAX_TOKENS: at most 800,000 tokens "
           "in a file's own parse (a header's too; the largest real file: 568,009), counted in linear time before "
           "tree-sitter reads it (~0.1 s of CPU per MiB); real code and floods alike make 1.5-1.7 nodes a token, "
           "what is read after costs per node: 0.8 million tokens of `a;` take 9 s of CPU",
           body="a;" * 590_000 + "\n", arg="1.0f"),
    Attack("header_byte_flood", "bounds", "a small file that includes ten project headers of 3.9 MB each (`aaaaaaaaaa;`: "
           "each under the file size, token and node bounds); every header is parsed for its own #includes (the "
           "PyTorch-extension check, the header digest) before any bound on the unit: 16 such headers took 11 s of "
           "CPU, 74 s of wall time at load 13, before the cut refused the unit", "exit 2 within seconds, having "
           "parsed none of them", "headers.MAX_HEADER_BYTES: one walk of a file's project headers reads at most 32 "
           "MiB (the largest real walk: 13.6 MB, flash-attention with CUTLASS and CuTe as its own headers), counted "
           "as each is read, before it is parsed", body="aaaaaaaaaa;" * 350_000 + "\n", arg="1.0f"),
    Attack("static_array_module", "bounds", "a ~700-byte file with a 300 MB initialised `__device__` array (902 MB "
           "added to the module cache; NVRTC grew its worker to 4.4 GB)",
           "no file over 64 MiB written, the compile stopped at its memory bound",
           "compilers of user code write files of at most 64 MiB; an in-process compile's growth watched (2 GiB)",
           body="__device__ char astra_big[300 << 20] = {1};\n", arg="astra_big[i]"),
    Attack("torch_budget_claimed", "bounds", "a project that claims to be a PyTorch extension to get its compile "
           "budgets (6 GiB, 240 s): compile_commands.json with `-DTORCH_API_INCLUDE_EXTENSION_H` and `-I` of a "
           "folder of its own named torch/include, then the 300 MB array",
           "nvcc stopped at 2 GiB within 60 s", "confine.heavy: only the installed torch's own include "
           "folders (by real path) buy the larger budgets, never a define or a project folder",
           body='#include <torch/extension.h>\n__device__ char astra_big[300 << 20] = {1};\n', arg="astra_big[i]"),
    Attack("module_cache_flood", "bounds", "many large modules (each under the file bound) filling the module cache",
           "the cache stays under its byte quota, the oldest first", "toolchain.prune_cache: 1 GiB of modules"),
]

COMPILE = [
    Attack("include_secret_file", "compile", "#include of a secret file by absolute path, to see it in a diagnostic",
           "the secret in no message", "compiler sandbox: Landlock (Permission denied)",
           body='#include SECRET_Q\n'),
    Attack("include_etc_shadow", "compile", "#include \"/etc/shadow\"", "no content in any message",
           "compiler sandbox: Landlock (Permission denied)", body='#include "/etc/shadow"\n'),
    Attack("include_dev_zero", "compile", "#include \"/dev/zero\" (a read that never ends)",
           "no hang", "compiler sandbox: Landlock (Permission denied)", body='#include "/dev/zero"\n'),
    Attack("include_fifo", "compile", "#include of a FIFO nobody writes to", "no hang",
           "compiler sandbox: Landlock (Permission denied)", body='#include FIFO_Q\n'),
    Attack("include_dotdot_escape", "compile", "#include \"../../../../../../../etc/passwd\"",
           "no content in any message", "compiler sandbox: Landlock (Permission denied)",
           body='#include "../../../../../../../../etc/passwd"\n'),
]

# SECRET_Q is a private file outside the project, LINK_Q a symbolic link to it inside the project,
# FIFO_OUT_Q / FIFO_IN_Q FIFOs outside / inside the project, HUGE_Q a 6 MB header in the project.
NVRTC = [
    Attack("absolute_include_at_file_scope", "nvrtc", "#include of a private file by absolute path at file scope",
           "the secret in no unit, message or log; a clear refusal", "the device pass's preprocessor, confined by Landlock: refused before any compile",
           body="#include SECRET_Q\n", arg="file"),
    Attack("absolute_include_in_kernel", "nvrtc", "the same #include inside a kernel's body",
           "the secret in no message or log; a clear refusal", "the device pass's preprocessor, confined by Landlock: refused before any compile",
           body="#include SECRET_Q\n", arg="kernel"),
    Attack("etc_shadow_in_kernel", "nvrtc", "#include \"/etc/shadow\" inside a kernel", "no content in any message",
           "the device pass's preprocessor, confined by Landlock: refused before any compile", body='#include "/etc/shadow"\n', arg="kernel"),
    Attack("dotdot_escape", "nvrtc", "#include \"../../../../../../../../etc/passwd\" at file scope and in a kernel",
           "no content in any unit or message", "the device pass's preprocessor, confined by Landlock: refused before any compile",
           body='#include "../../../../../../../../etc/passwd"\n', arg="both"),
    Attack("device_header_traversal", "nvrtc", "#include <cooperative_groups/../../../../../../../../etc/passwd> "
           "(passes for a CUDA header)", "no content in any message",
           "the device pass's preprocessor: not found in the toolkit's folders, refused", body="#include <cooperative_groups/../../../../../../../../etc/passwd>\n",
           arg="file"),
    Attack("symlink_escape", "nvrtc", "a symbolic link in the project to a private file, #include'd at file scope and in a kernel",
           "the secret in no unit or message", "the device pass's preprocessor, confined by Landlock: refused before any compile (Landlock: the real path decides)",
           body="#include LINK_Q\n", arg="both"),
    Attack("proc_environ", "nvrtc", "#include \"/proc/self/environ\" (the worker's environment)",
           "no environment in any message", "the device pass's preprocessor, confined by Landlock: refused before any compile", body='#include "/proc/self/environ"\n',
           arg="kernel"),
    Attack("dev_zero", "nvrtc", "#include \"/dev/zero\" (a read that never ends)", "no hang",
           "the device pass's preprocessor, confined by Landlock: refused before any compile", body='#include "/dev/zero"\n', arg="kernel"),
    Attack("fifo_outside_project", "nvrtc", "#include of a FIFO outside the project", "no hang",
           "the device pass's preprocessor, confined by Landlock: refused before any compile", body="#include FIFO_OUT_Q\n", arg="kernel"),
    Attack("fifo_in_project", "nvrtc", "#include of a FIFO inside the project, which nobody writes to",
           "no hang beyond the compile time limit (45 s); a clear refusal",
           "the device pass's time limit: its process group is killed", body="#include FIFO_IN_Q\n", arg="kernel"),
    Attack("huge_header", "nvrtc", "a 6 MB header in the project, #include'd at file scope",
           "none of it in the unit, quickly", "the device pass's preprocessor (confined, time-limited); the cut keeps no comment",
           body="#include HUGE_Q\n", arg="file"),
]

PROJECT = [
    Attack("cc_include_home", "project", "compile_commands.json: `-I /root` and `-I ~` (dotfiles, keys)",
           "not passed to any compiler; reported as ignored", "project: include folders outside the project dropped",
           arg="-I/root"),
    Attack("cc_include_etc", "project", "compile_commands.json: `-I /etc`, `-isystem /etc`, `--include-path=/etc`, "
           "then #include \"shadow\"", "no content in any message; reported as ignored",
           "project: include folders outside the project dropped; Landlock", arg="-I/etc"),
    Attack("cc_hostile_flags", "project", "compile_commands.json: `-include /etc/shadow`, `--pre-include`, "
           "`-Xcompiler -fplugin=…`, `-ccbin`, `--options-file`, `--split-compile`, `-Wp,…`, `-B`, `--compiler-bindir`",
           "none reaches a compiler; each reported as ignored",
           "project: only DEVICE_FLAGS, -I/-isystem inside the project, -D and -std pass", arg="flags"),
    Attack("cc_define_names_a_file", "project", "compile_commands.json: `-DH=\"/etc/shadow\"`, then `#include H` in a kernel",
           "no content in any message", "the device pass's preprocessor, confined by Landlock: refused before any compile", arg="define"),
]

SCREEN = [
    Attack("line_marker_pointer", "screen", "`# 1 \"/usr/include/stdlib.h\" 3`, then a pointer to system",
           "refused before compiling", "screen: line marker",
           body='# 1 "/usr/include/stdlib.h" 3\nint (*astra_f)(const char*) = system;\n'),
    Attack("local_named_system", "screen", "a local variable named `system`, then `::system(…)`",
           "refused before compiling", "screen: ::system",
           body='__global__ void k(int* x) { int system = 0; ::system("id"); x[0] = system; }\n'),
    Attack("system_header_pragma", "screen", "`#pragma GCC system_header` in a quoted local header that calls popen",
           "refused before compiling", "screen: system_header in a user header",
           body='#include "evil.cuh"\n__global__ void k(int* x) { x[0] = astra_evil(); }\n'),
    Attack("absolute_system_include", "screen", "quoted #include of libstdc++'s <fstream> by absolute path",
           "refused before compiling", "screen: absolute include",
           body='#include "/usr/include/c++/12/fstream"\n__global__ void k(int* x) { x[0] = 1; }\n'),
    Attack("constructor_attribute", "screen", "__attribute__((constructor)) on a file-scope function",
           "refused before compiling", "screen: load-time attribute",
           body='__attribute__((constructor)) static void f() {}\n__global__ void k(int* x) { x[0] = 1; }\n'),
    Attack("weakref_alias", "screen", "a weakref alias of system under an innocent name",
           "refused before compiling", "screen: weakref",
           body='static int run(const char*) __attribute__((weakref("system")));\n'
                '__global__ void k(int* x) { x[0] = run("id"); }\n'),
    Attack("dlvsym_lookup", "screen", "dlvsym(RTLD_DEFAULT, \"system\", \"GLIBC_2.2.5\") to reach system by "
           "its versioned name (not on the name list)", "refused before compiling", "screen: names",
           body='#include <dlfcn.h>\n__global__ void k(int* x) { void* f = dlvsym(RTLD_DEFAULT, "system", '
                '"GLIBC_2.2.5"); x[0] = f != 0; }\n'),
    Attack("dprintf_to_descriptor", "screen", "dprintf onto an inherited descriptor (a write the list did not "
           "name)", "refused before compiling", "screen: names",
           body='#include <cstdio>\n__global__ void k(int* x) { x[0] = dprintf(3, "x"); }\n'),
    Attack("cxa_atexit_handler", "screen", "__cxa_atexit / atexit registering a handler that runs after the "
           "check (the executor outlived `astra check`)", "refused before compiling", "screen: names",
           body='#include <cstdlib>\nextern "C" int __cxa_atexit(void (*)(void*), void*, void*);\n'
                'static void astra_h(void*) {}\n__global__ void k(int* x) { x[0] = __cxa_atexit(astra_h, 0, 0); }\n'),
    Attack("pthread_create_thread", "screen", "pthread_create from a kernel: a thread that outlives the launch "
           "(the issue's verdict attack: it wrote into the next launch's buffers)", "refused before compiling",
           "screen: names",
           body='#include <pthread.h>\nstatic void* astra_spin(void* p) { for (;;) *(volatile int*)p = 7; return 0; }\n'
                '__global__ void k(int* x) { pthread_t t; x[0] = pthread_create(&t, 0, astra_spin, x); }\n'),
    Attack("thrd_create_thread", "screen", "C11 thrd_create from a kernel (another name for a thread)",
           "refused before compiling", "screen: names",
           body='#include <threads.h>\nstatic int astra_spin(void* p) { for (;;) *(volatile int*)p = 7; return 0; }\n'
                '__global__ void k(int* x) { thrd_t t; x[0] = thrd_create(&t, astra_spin, x); }\n'),
    Attack("mkostemp_plain", "screen", "mkostemp and renameat2 called plainly", "refused before compiling",
           "screen: names", body='__global__ void k(int* x) { char t[] = "/tmp/aXXXXXX"; x[0] = mkostemp(t, 0); '
                                 'renameat2(0, t, 0, "/tmp/b", 0); }\n'),
]

GATE = [
    Attack("zero_click_hidden_payload", "gate", "a correct kernel with freopen64/fputs inside `#ifndef __CUDACC_RTC__` "
           "(the issue's zero-click payload: NVRTC never sees it)", "no file written on open/check",
           "the CPU compile sees NVRTC's macros: the payload is not compiled"),
    Attack("has_include_hidden_payload", "gate", "the same payload inside `#if __has_include(<unistd.h>)` (true for "
           "a host compiler, false for NVRTC: the GPU-first compile never saw it), at file scope and in the kernel",
           "no file written on check; the kernel's copy never compiles", "the unit is cut from nvcc's device pass: "
           "a host variable's initialiser is left out; in a kernel, host I/O does not compile for the GPU"),
    Attack("candidate_with_host_io", "gate", "a candidate calling fopen/fputs in the kernel (NVRTC rejects it)",
           "never run on the CPU, never passes", "GPU first: NVRTC compile fails"),
]

SPEC = [
    Attack("instantiate_injection", "spec", "instantiate pasted into the launcher: `<float> ? (::system(…) ? &k<float> : …)`",
           "exit 2, no pin, no file", "spec: template arguments parsed (tree-sitter)",
           arg='instantiate = "<float> ? (::system(\\"touch CANARY/pwned\\") ? &k<float> : &k<float>)"'),
    Attack("power_tower", "spec", "a scalar `d = \"10**10**10\"` (a GIL-holding big-integer power)",
           "exit 2 within seconds", "exprs: exponent bound checked before computing", arg='"10**10**10"'),
    Attack("huge_shift", "spec", "`1 << 10**12`", "exit 2 within seconds", "exprs: shift bound", arg='"1 << 10**12"'),
    Attack("term_flood", "spec", "a 5,000-term sum (the whole spec under its 16 KiB bound)", "exit 2 within seconds",
           "exprs: length/term bound", arg='"' + "+".join(["n"] * 5_000) + '"'),
    Attack("modulo_zero", "spec", "`n % 0`", "exit 2 with the line", "exprs: modulo by zero", arg='"n % 0"'),
    Attack("seed_flood", "spec", "`seeds = 1000000000` (a worker grew to 16–20 GB)", "exit 2", "spec: seeds cap",
           arg="seeds = 1000000000"),
    Attack("terabyte_case", "spec", "sizes making a 2**46-element buffer", "exit 2 before any allocation",
           "spec: bytes per case", arg="[sizes]\nn = [70368744177664]"),
    Attack("combination_flood", "spec", "ten size names of 40 values each (10**16 cases)", "exit 2 at once",
           "spec: combinations cap", arg="combinations"),
    Attack("size_name_flood", "spec", "1,500 one-value size names in 15 KB (each edge case copies every name: "
           "5,000 took a worker past 4 GB in 13 s)", "exit 2 within seconds", "spec: at most 16 size names",
           arg="\n".join(f"a{i}=[1]" for i in range(1500))),
    Attack("unknown_key_flood", "spec", "20,000 unknown keys (97 s in the CLI, 103 s for a hover: the key's "
           "place was searched once per error)", "exit 2 within seconds",
           "spec: the comment's length (16 KiB); every key placed in one pass; at most 20 errors",
           arg="\n".join(f"u{i} = 1" for i in range(20_000))),
    Attack("deep_nesting", "spec", "a value nested 10,000 `[` deep (a RecursionError traceback)",
           "exit 2 with the line", "spec: too deep a nesting is a spec error", arg="z = " + "[" * 10_000),
]

INPUT = [
    Attack("fifo_input", "input", "a FIFO as the input file", "exit 2 at once", "files: regular files only",
           arg="fifo"),
    Attack("dev_zero_input", "input", "/dev/zero as the input file", "exit 2 at once", "files: regular files only",
           arg="/dev/zero"),
    Attack("negative_rounds", "input", "`--rounds -3`", "exit 2", "CLI: --rounds 1..1000", arg="--rounds -3"),
    Attack("oversized_input", "input", "a 6 MB file", "exit 2", "files: size bound", arg="big"),
]

SECRET = [
    Attack("worker_environment", "secret", "a key in the parent's environment (OPENAI_API_KEY, a *_TOKEN)",
           "absent from the worker's and the executor's environment", "worker: environment allow-list"),
    Attack("key_in_base_url", "secret", "`--base-url https://user:KEY@host/v1?api_key=KEY`", "KEY in no run-log file",
           "redact: URLs in run.json"),
    Attack("endpoint_echoes_key", "secret", "an endpoint answering 401 with the key in its body",
           "KEY in no run-log file, report or message", "redact: configured keys, Bearer, sk-…"),
    Attack("candidate_includes_env", "secret", "a model's kernel does `#include \".env\"` (its compile errors quoted "
           "the project's .env, the repair request carried them to the endpoint, the run log stored them)",
           "no token of the .env in any request, run-log file or message",
           "extract.splice: a candidate includes only what the file includes; the feedback masked"),
    Attack("file_includes_env", "secret", "`#include \".env\"` in a user's file (the compiler quoted its tokens: "
           "diagnostics, SARIF for code scanning, --json)", "no token of the .env in any diagnostic or output",
           "redact.included: a message from a file that is not source keeps only its place"),
]

# The editor: what the language server shows (tests/security/test_editor.py, a real server process).
EDITOR = [
    Attack("hover_markdown_injection", "editor", "a kernel prints a remote image URL carrying data and a "
           "`command:` link that starts an optimization, then traps (the check quotes what it printed; the hover "
           "showed it as live Markdown)", "no image, link or HTML in the rendered hover",
           "plain.md: text from user code escaped where it enters Markdown", arg="output"),
    Attack("report_markdown_injection", "editor", "the same output in the report view (failures were inline "
           "Markdown there)", "no image or link in the page", "report: failures, plans and reasons escaped as text",
           arg="output"),
    Attack("source_markdown_injection", "editor", "a parameter's type holds a comment with a backtick, a remote "
           "image and a `command:` link (`float /* `![i](https://…) [go](command:…)` */ * x`): the spec key's hover and "
           "the parameter's completion showed the type in a plain `…` span, which the backtick closed, the rest live "
           "Markdown", "no image, link or HTML in the rendered hover or completion",
           "plain.code: source text shown as one code span that nothing in it can close", arg="source"),
    Attack("malformed_hover", "editor", "a hover whose parameters do not read (`uri: 5`, `position: \"x\"`): "
           "no reply at all", "an InvalidParams error reply; the server goes on",
           "lsp.runtime: a request that cannot be read is answered with its error", arg="protocol"),
    Attack("hover_during_attacks", "editor", "the memory and time attacks (the macro and expression explosions, the "
           "300 MB array, the spec floods at the issue's sizes: 5,000 size names in 59 KB, 20,000 unknown keys, "
           "50,000-deep nesting) open at once, then hovers on them and on a clean file (a hover took 103 s)",
           "every hover answered within 100 ms; no process of the server's over 2 GiB; none left after shutdown",
           "lsp: checks and compiles in workers, off the server's loop; the bounds above", arg="latency"),
    Attack("hover_while_hostile_kernels_run", "editor", "two open files whose checks launch kernels that never "
           "return (one spins on a core, one rewrites half a GiB), and hovers on a third, clean file while either "
           "launch runs", "the median of at least 15 hovers, each with a hostile launch running before and after it, "
           "within 100 ms", "lsp: checks run in workers, off the server's loop; the launch in a process of its own "
           "(its time and memory watched there)", arg="latency"),
    Attack("server_killed_mid_launch", "editor", "the language server killed (SIGKILL, no shutdown) while a check "
           "on open runs a kernel that never returns (its workers, the executor's zygote and the launch process run in "
           "sessions of their own)", "no process of the server's left within 30 s",
           "workers watch their parent; the executor and its launch processes die with theirs (parent-death signal)",
           arg="lifetime"),
    Attack("hostile_project_header", "editor", "a small file that includes a project header of 3.7 MiB of `a;` "
           "(5.9 million syntax nodes): the file's own parse is small, so the server parsed the header itself, in "
           "the static check's thread (the header digest), and freeing its tree held the GIL: the event loop "
           "stalled 533 ms at load 11, the server grew by 400 MB", "the header refused by name ('h.cuh is too large "
           "to read') from a child's parse (nothing of it counted or parsed in the server's process); hovers "
           "answered meanwhile", "lsp.parse_apart: in the server every text over 256 KiB that tree-sitter reads (a "
           "document, a header, an expanded unit) is counted and parsed first in a child, which refuses it",
           body="a;" * 1_950_000 + "\n", arg="header"),
]

# An endpoint's replies: what a model (or whoever answers at its URL) sends back.
REPLY = [
    Attack("oversized_reply", "reply", "an endpoint answering with a 32 MB reply (100 MB was accepted: 933 MB "
           "peak, a 191 MB run log)", "a clear error; memory and run log stay small",
           "LLM client: every response body bounded (4 MiB) as it arrives, before parsing", arg=str(32 << 20)),
    Attack("gzip_bomb_reply", "reply", "a 100 KB gzip body that inflates to 100 MB", "a clear error, nothing inflated",
           "LLM client: identity encoding asked, compressed bodies refused", arg=str(100 << 20)),
    Attack("surrogate_reply", "reply", "a reply whose kernel holds a lone surrogate (`\\ud800` in the JSON; "
           "`optimize` crashed)", "the run goes on and its log is written",
           "LLM client: text that UTF-8 cannot hold is replaced"),
]

FILES = [
    Attack("write_through_symlink", "file", "`--write` on a symbolic link to the source",
           "the link stays a link, the real file changes", "workspace.replace_if_unchanged follows links"),
    Attack("write_keeps_mode", "file", "`--write` on a 0600 file", "still 0600", "workspace.replace_if_unchanged keeps the mode"),
    Attack("write_changed_file", "file", "the file changes on disk before the write", "not overwritten",
           "workspace.replace_if_unchanged compares first"),
    Attack("astra_dir_symlink", "file", "a committed `.astra -> ../elsewhere`, then check and optimize `k$(id>x).cu` "
           "(pins.json, baselines/ and runs/ were written there, the name in pins.json)",
           "nothing written outside the project; the check stands, unpinned; optimize exit 2",
           "workspace.ensure_astra_dir: `.astra/` must be a real folder with no link inside", arg="top"),
    Attack("astra_inner_symlink", "file", "a real `.astra/` whose `runs` is a link out of the project",
           "nothing written outside the project; optimize exit 2",
           "workspace.ensure_astra_dir: no link anywhere inside `.astra/`", arg="inner"),
    Attack("batch_manifest_id", "file", "a committed batch manifest whose id is `../../../elsewhere/evil`, then "
           "`optimize DIR --resume last` (the next manifest was written there)", "nothing written outside the project",
           "batch: a manifest's id is its own file name"),
    Attack("batch_manifest_target", "file", "a committed batch manifest whose target is a kernel file of another "
           "project (`/…/elsewhere/k.cu`), then `optimize DIR --resume last` (that file was optimized, its run log "
           "written in elsewhere/.astra/; with --write it would have been rewritten)",
           "exit 2 naming the file; nothing read or written outside the project",
           "batch: a resumed manifest's targets lie in the project or the paths given"),
    Attack("runs_read_through_link", "file", "a committed `.astra -> ../elsewhere` holding another place's run log of a "
           "file of the same name and text, then `optimize k.cu --list-runs` and `--resume last` (runs were listed, "
           "and read for the resume, through the link)", "nothing listed or read through the link; resume exit 2",
           "workspace.readable_astra_dir / ensure_astra_dir before any run log or manifest is read"),
    Attack("folder_link_out", "file", "a committed `k.cu -> ../elsewhere/k.cu` in a folder, then `astra check DIR` "
           "(the other project's file was checked and pinned there: elsewhere/.astra/pins.json; optimize DIR --write "
           "would rewrite it)", "nothing written outside the project", "cli.paths.walk: a folder's link whose file "
           "lies outside the folder is not a target (a file named on the command line is followed)"),
    Attack("committed_run_log", "file", "a committed run log of the user's file (`.astra/runs/…`) whose round 1 "
           "'adopted' a candidate its evaluation.json says passed, which no gate ran; then `optimize k.cu --resume last "
           "--write` (a resumed run reuses its log's verdicts: the candidate was written into the file)",
           "exit 2, the file unchanged", "runlog: only a run whose run.json carries this user's mark (an HMAC of its "
           "id and original under a key outside every project) is resumed"),
]

# Executors and compilers over time: what a launch or a compile leaves behind (`astra serve` runs
# every open file's launches through one worker, so a leftover of one file's launch meets the next
# file's). Run by tests/security/test_execution.py.
EXECUTION = [
    Attack("leftover_thread_scribbles", "exec", "a kernel leaves a thread that writes 0x41 into every buffer "
           "mapped after it (the next launch: another open file's in `astra serve`)",
           "the next launch's outputs are its own", "a fresh process per launch, killed before its outputs are read"),
    Attack("background_thread_after_launch", "exec", "a detached thread keeps a core busy and holds 256 MiB after "
           "the launch returned", "nothing of the launch runs after it", "the launch's process ends with the launch"),
    Attack("forged_reply_other_launch", "exec", "a leftover thread writes `{\"ok\": false, \"error\": …}` onto every "
           "socket it holds, for the launches after it", "another launch's result is its own",
           "one channel per launch, owned by that launch's process"),
    Attack("forged_ok_hides_fault", "exec", "the kernel writes `{\"ok\": true}` on its own socket, then traps "
           "(SIGABRT) or reaches a barrier the CPU runtime refuses (the runtime's own failure came second): the first "
           "message was taken as the reply, the launch passed with its fault hidden",
           "the launch fails with its fault or with 'replied more than once'",
           "isolation: the reply counts only as the one message of a process that then exits with status 0"),
    Attack("printf_flood_next_launch", "exec", "a kernel prints up to the 64 MiB file limit into the log every launch "
           "process of its executor writes (the limit is the file's size): the next launch that printed a line, "
           "another open file's in `astra serve`, died of SIGXFSZ ('the kernel printed more than 64 MiB')",
           "the next launch passes with its own output", "isolation: each launch starts the log empty"),
    Attack("exit_after_forged_ok", "exec", "a thread writes `{\"ok\": true}` on its socket and ends the launch "
           "process at once (`_exit(0)`, the status the runtime's own reply ends with): the reply is taken, the other "
           "threads never ran. In every build the unwritten outputs failed the check; where only the race checker's "
           "build (or AddressSanitizer's, with no reference) died so — a kernel that tells the instrumented build "
           "apart at run time — its clean report passed that check, its outputs never looked at",
           "never a pass: with a reference and without one, in the plain and the instrumented builds, the unwritten "
           "outputs fail the check", "the gate judges every launch's outputs, never a reply alone: every output "
           "starts poisoned; an instrumented build's launch must write what the plain build writes "
           "(Instrumented.whole_launch)"),
    Attack("gpu_context_shared_across_documents", "exec", "`astra serve` sent every open document's jobs to one "
           "worker pool, and on the GPU a job's launches run in the worker's own process and CUDA context: one "
           "document's kernel writing past its buffers, or the state a job left in the process, met the next "
           "document's launches", "a worker that ran one document's GPU launches never runs another document's job",
           "worker.Pool: a worker belongs to the document whose code it ran (Job.owner); another document's job "
           "gets a fresh worker, the least recently used of another document killed when the pool is full"),
    Attack("malformed_reply", "exec", "the kernel writes a reply that is not JSON onto its socket",
           "a clear launch error, never a traceback", "replies are validated (shape, size) before use"),
    Attack("no_process_outlives_astra_check", "exec", "`astra check` on the CPU backend run to its end, or killed "
           "(SIGKILL) while its kernel runs: workers, executors and compilers below it", "no process of the check left "
           "within 5 s", "workers watch their parent; executors and compiler wrappers die with theirs (parent-death "
           "signal); process groups killed"),
    Attack("atexit_handler_lingers", "exec", "an atexit / __cxa_atexit handler that never returns, then the caller "
           "exits (after PASS) or is killed", "no process left", "executors never exit through their own handlers; "
           "parent-death signal; the caller kills the group"),
    Attack("compile_timeout_leaves_cc1plus", "exec", "a compile past its time limit (constexpr evaluation that takes "
           "minutes)", "no compiler process left", "a process group per compile, killed on the timeout"),
    Attack("stale_build_folders", "exec", "a check killed (SIGKILL) in the middle of a CPU build leaves its build "
           "folder in the module cache (`~/.cache/astra/cpu/build-*`: 2.5 GB of them were seen)",
           "the folder of a dead owner removed; a live process's, another user's, a link's target never",
           "toolchain.prune_builds: build folders named by their owner (pid, start time, boot and pid namespace), "
           "removed once it is gone; a name it cannot judge only after a day"),
    Attack("compile_outlives_caller", "exec", "the caller is killed (SIGKILL) in the middle of that compile",
           "no compiler process left", "the wrapper's parent-death signal kills the compile's group"),
]

# A full disk, a quota or a read-only folder under every write Astra does (tests/security/
# test_full_disk.py and test_full_disk_editor.py: a tmpfs filled to its last byte, or a read-only
# bind, in a mount namespace of the test's own).
DISK = [
    Attack("full_disk_pin", "disk", "`astra check` with `.astra/` on a full disk (the pin's write failed: a "
           "traceback, or a half-written baseline)", "the verdict stands, \"not pinned\" says why; no half-written file",
           "storage.writing around every write of workspace; atomic writes remove their temporary file"),
    Attack("read_only_astra_optimize", "disk", "`astra optimize --write` with `.astra/` read-only (EROFS)",
           "exit 2 before any round; the file unchanged", "the run log's folder is made first (storage.NoSpace)"),
    Attack("run_log_fills_mid_run", "disk", "the disk fills while an optimization runs (the run log's writes, "
           "`--write`, the report)", "the run goes on; its result is shown whole, with what was not saved; exit 2",
           "RunLog: a write after the start is noted (`unsaved`), never raised; OptimizeResult.unsaved"),
    Attack("full_module_cache", "disk", "the CPU backend's module cache on a full disk (g++ could not write the "
           "module: the check said the kernel failed to compile)", "exit 2 naming the cache, not a verdict",
           "storage.after_compiler: a compiler's \"No space left on device\" confirmed by a real allocation"),
    Attack("full_module_cache_editor", "disk", "the same in the editor: a check on open with the module cache full",
           "a diagnostic naming the cache; the server answers on", "lsp: the check's error shown as a diagnostic"),
    Attack("compile_error_claims_full_disk", "disk", "`#error No space left on device` in a kernel (to pass its "
           "compile error off as the machine's)", "the kernel's own error", "storage.confirm_room: the file "
           "system is asked, the message is not believed"),
    Attack("full_disk_gpu", "disk", "the GPU backend on a full disk: CuPy's kernel cache (NVRTC's modules; CuPy's "
           "failed write was caught with the compile's own errors: \"could not load the compiled module\", a compile "
           "failure of the kernel), nvcc's cache and scratch folder, the project's `.astra/`",
           "exit 2 naming CuPy's kernel cache; a verdict or a clear error, never a kernel's compile failure; the "
           "verdict unpinned; `optimize --write` exit 2 with the file unchanged",
           "storage.writing around CuPy's compile, its failed writes kept apart from compile errors (on a GPU: "
           "`scripts/gpu-check full-disk-gpu`)"),
]

# The reference and the candidate it is judged against, in one worker: two kernels of one file (the
# spec's `reference = "…"`), a rewrite and its original, each check of a document in the worker that
# ran its last. Run by tests/security/test_reference_apart.py on the CPU backend, and on a GPU by
# tests/gpu/test_reference_apart_gpu.py (`scripts/gpu-check pytest-gpu`).
REFERENCE = [
    Attack("device_global_rewrites_reference", "reference", "a wrong rewrite (y = x) that sets the `__device__` "
           "factor its original reads (`gain`, 3) to 1, the two kernels of one file: on the GPU the file was one "
           "cubin, the backend kept one loaded module per cubin (and CuPy one per path), so both kernels had one "
           "`gain` — from the launch after the rewrite's first, the reference computed y = x too, and the next "
           "check of the document in that worker (the editor checks on every save) passed",
           "the rewrite fails the comparison in every check; the reference computes with its own `gain`",
           "CPU: a module of its own per compile (its `__device__` variables carried between its own launches only), "
           "a fresh process per launch; GPU: a loaded module is kept per cubin and role (`compile_unit(role=…)`), "
           "the reference's loaded from a copy of its own (an NVRTC source of its own): never the candidate's"),
    Attack("device_global_slows_reference", "reference", "a right rewrite that raises the `__device__` work count "
           "its original loops over (`passes`) to 2**30 (on a GPU 2**12): the original timed beside it in the "
           "same module ran that many passes, so the rewrite's speedup was the original's slowdown",
           "the reference runs its own passes: on the CPU the check passes (2**30 passes would have been the "
           "reference's time limit); on the GPU the original's time is the original's",
           "the same: the reference's module is its own (gate and profiler compile with their role)"),
    Attack("leftover_thread_rewrites_reference", "reference", "a wrong rewrite (every output 0x41414141) whose "
           "launch leaves a thread (host code in the kernel: the name screen and the GPU-first compile off) that, "
           "once its own launch is over, writes 0x41 into every buffer mapped beside it — the reference's outputs, "
           "where a later launch of the reference shared its process (a constructor's thread: `constructor_at_load`)",
           "the rewrite fails the comparison; the reference's outputs are its own",
           "CPU: a fresh process per launch, gone before its outputs are read; GPU: no host code of a file or a "
           "candidate runs (device code only)"),
]

# What the candidate is judged against, where every allocation of a worker is one address space (a
# GPU's CUDA context; the NumPy fake GPU of tests/profiler here): tests/security/test_ground_truth.py,
# tests/gpu/test_ground_truth_gpu.py.
TRUTH = [
    Attack("guessed_pointers_rewrite_reference_outputs", "truth", "a wrong rewrite (out = x) whose launch writes the "
           "same values into every device buffer shaped like its output — the reference's outputs of the case "
           "wherever they were still on the device when compared (on a GPU one CUDA context: a pointer kept from "
           "an earlier launch into memory CuPy's pool hands out again, or guessed)",
           "the rewrite fails the comparison on the fake GPU's whole gate (control: with the expectations read "
           "from the device when compared, the same rewrite passes); on a GPU, pointers kept from earlier launches",
           "the gate: each case's reference outputs are host copies, downloaded after the reference's launch and "
           "before the candidate's (checks.execute)"),
    Attack("guessed_pointers_rewrite_timing_inputs", "truth", "a rewrite wrong on the real inputs and 5x faster, whose "
           "launches write 0 into every copy of its input they find — the timing's input sets among them, which no "
           "launch is given but from which the loop copies every launch's inputs and the reference's expectations "
           "were computed after the loop — except where the checks sample (it reads the positions): the reference "
           "on the spoiled sets agreed with it everywhere, a valid profile and a 5x speedup",
           "the timed outputs fail against the reference on the host's inputs; the spoiled sets are named",
           "gate.timed: the reference's expectations computed before any launch of the loop (expect), the sets "
           "made again from the host after it and the device's compared with them (resync, TimedSet.changed)"),
    Attack("guessed_global_rewrites_timing_expectations", "truth", "a wrong rewrite (half the result) that, at its "
           "first timed launch, halves the reference's `__device__` `gain` through a guessed address (the "
           "reference's module is its own but kept per worker, one CUDA context): the reference of the timing loop "
           "and of the expectations computed after it agreed with it — a valid profile, 5x faster",
           "the timed outputs fail against expectations computed before any candidate launch of the job",
           "profiler.timing: the reference's expectations computed before the loop (gate.expect(before_loop=True)), "
           "the sets made again from the host after it (gate.resync)"),
    Attack("guessed_global_rewrites_reference_module", "truth", "GPU only: a wrong rewrite that writes its own "
           "value into the reference's `__device__` table through the address of the reference module's global "
           "(one CUDA context: kept, guessed or scanned for) at each launch; the gate runs the reference and the "
           "candidate case after case in that context, and the reference's module, its own but loaded once per "
           "worker, computed the next expected outputs from the candidate's table — the rewrite matched",
           "the reference computes with the table its image holds at every launch; the rewrite fails",
           "backends/own_module.py: every launch (and timing loop, and global read) of the reference runs from a "
           "module loaded afresh from its compiled image kept in memory — no recompile — the load before unloaded; "
           "tests/gpu/test_reference_module_afresh_gpu.py on a GPU"),
    Attack("guessed_pointers_rewrite_timing_expectations", "truth", "a wrong rewrite that writes its own result into "
           "every device buffer shaped like its output during the timing loop — the expectations among them, now "
           "that they are computed before the loop and kept on the device so honest kernels cost no transfer (what "
           "computing them first would open: before, they were computed after the loop)",
           "the profile is invalid, naming the expected outputs that changed",
           "keyed digests of the expectations (gate.sealed, a key no kernel sees), taken when computed and compared "
           "after the loop"),
    Attack("scribbling_every_mapping_reaches_no_reference_output", "truth", "host code in a wrong rewrite (screens "
           "and the GPU-first compile off) writes 0x41 into every buffer mapped in its launch's process but its "
           "input, and outputs how many it found",
           "it found its own arguments and its module's `__device__` variables (3), never the reference's; the "
           "rewrite fails", "CPU: a launch's process maps the buffers of its own arguments only"),
]

# Writes past the end of a buffer (tests/security/test_overrun.py): on a GPU they land in whatever
# the allocator placed next — another argument of the launch, often — and a check failed one way in
# one run and another in the next (TGI's column_remap under a draft spec with `x_new` too small).
OVERRUN = [
    Attack("write_one_past_output", "overrun", "a candidate, right on every element, that also writes one element "
           "past the end of its output (`if (i <= n)`)",
           "the check fails, naming the output and the element reached, the same words on the CPU and the GPU "
           "backend, in every run (before: the write went unseen and the candidate passed)",
           "the guard after every buffer the gate uploads (backends/guard.py), compared after each launch "
           "(gate.checks.overran)"),
    Attack("write_into_next_buffer", "overrun", "a candidate that writes 256 bytes past its output — where CuPy's "
           "pool places the next small allocation, the reference's or another argument's",
           "the check fails, naming the output; no other buffer is changed", "the guard: the buffer and its guard "
           "are one allocation, so the write reaches the guard before any other buffer"),
    Attack("write_past_device_case_buffer", "overrun", "a candidate that writes past the end of a buffer of a "
           "large case drawn and judged on the device (gate/device_case.py: its inputs copied on the device for "
           "each run, its outputs poisoned there), which had no guard after it: the write landed in whatever CuPy's "
           "pool placed next, unnamed",
           "the check fails, naming the buffer and the element reached, in the words an uploaded buffer's overrun "
           "gets; under compute-sanitizer (exact allocations) no guard is placed",
           "Backend.guarded: a device case's run buffers are placed with a keyed guard in the same allocation, "
           "checked after each launch (gate.checks.overran)"),
    Attack("draft_shape_too_small", "overrun", "an inferred draft spec whose output is half the size the kernel "
           "writes (each element two values)",
           "the draft is refused with evidence naming the buffer and the element reached", "the validator's run "
           "of the draft (api._trial) through the gate's guard check"),
]

# The constructor program (compile/hostprog.py): a program built of the user's unit and Astra's
# `main`, run on the host to make the objects a kernel takes by value. `body` is C++ run at the top
# of its `main` (it prints what it got; `r` the result of the attempt); CANARY, PORT and SOCK_Q
# are filled in by the runner. fatal: the program is killed (SIGSYS), the run a clear LaunchError.
HOSTPROG = [
    Attack("hostprog_tcp_connect", "hostprog", "a constructor program opens a TCP connection to 127.0.0.1 (the test "
           "listens there)", "nothing connects, a clear error", "seccomp: socket kills (SIGSYS)", fatal=True,
           body='int s = socket(AF_INET, SOCK_STREAM, 0); sockaddr_in a{}; a.sin_family = AF_INET; '
                'a.sin_port = htons(PORT); a.sin_addr.s_addr = htonl(0x7f000001); '
                'r = connect(s, (sockaddr*)&a, sizeof a);'),
    Attack("hostprog_unix_socket", "hostprog", "connects to a Unix socket on disk (the test listens there)",
           "nothing connects, a clear error", "seccomp: socket kills (SIGSYS)", fatal=True,
           body='int s = socket(AF_UNIX, SOCK_STREAM, 0); sockaddr_un a{}; a.sun_family = AF_UNIX; '
                'strcpy(a.sun_path, SOCK_Q); r = connect(s, (sockaddr*)&a, sizeof a);'),
    Attack("hostprog_ptrace_parent", "hostprog", "ptrace(PTRACE_ATTACH) on its parent, to read or change its memory",
           "the parent untouched, a clear error", "seccomp: ptrace kills (SIGSYS)", fatal=True,
           body='r = ptrace(PTRACE_ATTACH, getppid(), 0, 0);'),
    Attack("hostprog_process_vm_parent", "hostprog", "process_vm_writev into its parent's memory",
           "the parent untouched, a clear error", "seccomp: process_vm_* kill (SIGSYS)", fatal=True,
           body='char b[8] = {0}; iovec l{b, 8}, o{(void*)0x400000, 8}; r = process_vm_writev(getppid(), &l, 1, &o, 1, 0);'),
    Attack("hostprog_fork_exec_shell", "hostprog", "fork(), and the child runs /bin/sh to write a file",
           "no process started, no file written, a clear error", "seccomp: fork kills (SIGSYS)", fatal=True,
           body='pid_t p = fork(); if (p == 0) { execl("/bin/sh", "sh", "-c", "echo x > " CANARY "/pwned", (char*)0); '
                '_exit(1); } r = p;'),
    Attack("hostprog_execve_shell", "hostprog", "execl(\"/bin/sh\", …) in place of itself, to write a file",
           "no program run, no file written, a clear error", "seccomp: execve of any other path kills (SIGSYS)",
           fatal=True, body='r = execl("/bin/sh", "sh", "-c", "echo x > " CANARY "/pwned", (char*)0);'),
    Attack("hostprog_system", "hostprog", "system() (posix_spawn: clone with CLONE_VM|CLONE_VFORK) to write a file",
           "no process started, no file written, a clear error", "seccomp: clone without CLONE_THREAD kills (SIGSYS)",
           fatal=True, body='r = system("echo x > " CANARY "/pwned");'),
    Attack("hostprog_execve_own_path", "hostprog", "a raw execve of its own path again (the one path the filter "
           "lets the loader run), from a string of its own",
           "no program run, a clear error", "seccomp: execve is allowed only from the loader's page at a random "
           "address (SIGSYS)", fatal=True,
           body='if (argc > 1) { printf("ran again\\n"); return 0; } char self[4096]; ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1); '
                'self[n > 0 ? n : 0] = 0; char again[] = "again"; char* a[] = {self, again, 0}; r = syscall(SYS_execve, self, a, (char**)0);'),
    Attack("hostprog_kill_parent", "hostprog", "kill(getppid(), SIGKILL): the sandbox wrapper that waits for it (in "
           "its own Landlock domain, so signal scoping does not refuse it)",
           "the parent survives", "seccomp: signals only to itself (EPERM)",
           body='r = kill(getppid(), SIGKILL);'),
    Attack("hostprog_namespaces_mounts_keys", "hostprog", "unshare(CLONE_NEWUSER|CLONE_NEWNET), mount, keyctl, bpf, "
           "setns, perf_event_open, io_uring_setup: the kernel's larger surfaces",
           "every call refused", "seccomp: EPERM",
           body='long a = unshare(CLONE_NEWUSER | CLONE_NEWNET), b = mount("none", "/tmp", "tmpfs", 0, 0), '
                'c = syscall(SYS_keyctl, 0, 0, 0, 0, 0), d = syscall(SYS_bpf, 0, 0, 0), e = syscall(SYS_setns, 0, 0), '
                'f = syscall(SYS_perf_event_open, 0, 0, -1, -1, 0), g = syscall(SYS_io_uring_setup, 1, 0); '
                'r = (a == -1 && b == -1 && c == -1 && d == -1 && e == -1 && f == -1 && g == -1) ? -1 : 0;'),
    Attack("hostprog_fcntl_setown", "hostprog", "fcntl F_SETOWN(parent) and O_ASYNC on its output pipe: the parent "
           "signalled when it reads (Landlock before ABI 6 does not scope it)",
           "no signal reaches the parent", "seccomp: F_SETOWN/F_SETFL with O_ASYNC refused (EPERM)",
           body='long a = fcntl(1, F_SETOWN, getppid()), b = fcntl(1, F_SETFL, O_ASYNC); r = (a == -1 && b == -1) ? -1 : 0;'),
]

ALL = SANDBOX + EXECUTION + REFERENCE + TRUTH + OVERRUN + BOUNDS + COMPILE + NVRTC + PROJECT + SCREEN + GATE + SPEC + INPUT + SECRET + EDITOR + REPLY + FILES + DISK + HOSTPROG


HOSTILE_FLAGS = ["-include", "/etc/shadow", "--pre-include=/etc/shadow", "-Xcompiler", "-fplugin=/tmp/evil.so",
                 "-ccbin", "/tmp/evil", "--options-file", "/etc/shadow", "--split-compile=0", "-Wp,-include,/etc/shadow",
                 "-B/tmp/evil", "--compiler-bindir=/tmp/evil", "-optf", "/etc/shadow"]


def stage_nvrtc(root, secret) -> tuple[object, dict[str, str]]:
    """The project the nvrtc entries attack (`root`/proj, with `.git`): its link to `secret`, a
    FIFO inside and one outside, a 6 MB header; returns (project folder, placeholder -> text)."""
    import os
    from pathlib import Path
    proj = Path(root) / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / "link.h").symlink_to(secret)
    os.mkfifo(Path(root) / "fifo")
    os.mkfifo(proj / "fifo.h")
    (proj / "huge.cuh").write_text("// x\n" * 1_500_000)
    return proj, {"SECRET_Q": f'"{secret}"', "LINK_Q": '"link.h"', "FIFO_OUT_Q": f'"{Path(root) / "fifo"}"',
                  "FIFO_IN_Q": '"fifo.h"', "HUGE_Q": '"huge.cuh"'}


def nvrtc_source(attack: Attack, subs: dict[str, str]) -> str:
    """The hostile file of an nvrtc entry: its #include at file scope, in the kernel, or both."""
    inc = attack.body
    for k, v in subs.items():
        inc = inc.replace(k, v)
    top = inc if attack.arg in ("file", "both") else ""
    inner = inc if attack.arg in ("kernel", "both") else ""
    return f"{top}__global__ void k(float* x) {{\n{inner}  x[0] = 1.0f;\n}}\n"


def markdown() -> str:
    out = ["# Attack catalogue", "",
           "Generated from `tests/security/catalogue.py` by `python -m tests.security.catalogue`; "
           "`tests/security/test_attacks.py` runs every entry on the CI machine (`make test`) and checks "
           "what the last column says is contained: no file written outside the sandbox, no process left, "
           "no secret read, no exit 0 for an injected spec. *sandbox* entries run with the name screen "
           "switched off, so the sandbox alone contains them, and under every Landlock ABI from 1 to the "
           "kernel's (the ABI the sandbox asks for capped, as on an older kernel; entries only resource limits "
           "stop run once); *compile* and *nvrtc* entries under ABI 1 and the kernel's.", ""]
    titles = {"sandbox": "Kernel code on the host (CPU backend executor)",
              "exec": "Executors and compilers over time (leftovers, lifetime, other launches)",
              "reference": "The reference and the candidate in one worker (one file's two kernels, a rewrite and its "
                           "original)",
              "truth": "What the candidate is judged against (one device address space)",
              "overrun": "Writes past the end of a buffer",
              "bounds": "Memory and time before anything runs", "compile": "The compiler over hostile source",
              "nvrtc": "NVRTC over hostile source (static checks, GPU backend)",
              "project": "A hostile compile_commands.json",
              "screen": "Known bypasses of the name screen", "gate": "Files and candidates through the gate",
              "spec": "Hostile specs", "input": "Hostile inputs to the CLI", "secret": "Secrets",
              "editor": "The editor (a real language server)", "reply": "Hostile model replies",
              "file": "Writing results", "disk": "A full disk, a quota, a read-only folder",
              "hostprog": "The constructor program (a host program built of the user's code, run on the host)"}
    for kind, title in titles.items():
        rows = [a for a in ALL if a.kind == kind]
        out += [f"## {title} ({len(rows)})", "", "| attack | what it does | stopped by | contained |", "|---|---|---|---|"]
        for a in rows:
            what = a.what.replace("|", "\\|")
            out.append(f"| `{a.name}` | {what} | {a.stopped_by} | {a.contained} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    import os
    import sys

    target = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "attack-catalogue.md")
    if "--stdout" in sys.argv:
        print(markdown())
    else:
        with open(target, "w") as f:
            f.write(markdown())
        print(f"wrote {os.path.normpath(target)}")
