"""Issue 25: a `void*` buffer written through a pointer cast to a type of the instance's — minimal
cases written here of flash-attention's layer norm (`ln_fwd_kernel`: `compute_t *mu_ptr =
static_cast<compute_t *>(params.mu)` with `using compute_t = typename Ktraits::compute_t`). The walk
counted each `compute_t` as one byte of the `void*`, so the spec gave `mu` `rows` bytes while the
kernel wrote `rows` floats: on a GPU the stores past it changed the next buffer (the read-only
`params.dmask`, which that instance, `Is_dropout` false, never writes itself)."""
from tests.realcode.test_infer_asm_accesses import infer

KERNEL = ("template <typename Ktraits>\n"
          "__global__ void stats(void* mu, int rows) {\n"
          "  using compute_t = typename Ktraits::compute_t;\n"
          "  compute_t* p = static_cast<compute_t*>(mu);\n"
          "  int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
          "  if (r < rows) p[r] = 0;\n}\n")


def test_a_cast_to_a_member_type_of_the_instances_traits_class_gives_the_buffers_type(project):
    """`Ktraits::compute_t` with Ktraits the launch's `Traits<float>`: `mu` is `rows` floats, no
    vector requirement (one float an access)."""
    s, p = infer(project, "stats.cu", "template <typename T> struct Traits { using compute_t = T; };\n" + KERNEL +
                 "void run(void* m, int rows) { stats<Traits<float>><<<(rows + 127) / 128, 128>>>(m, rows); }\n",
                 "stats")
    mu = s.args["mu"]
    assert (mu.dtype.name, mu.shape, mu.output) == ("float", ("rows",), True), p.comment
    assert not s.require, p.comment


def test_a_member_type_a_traits_class_takes_from_its_base_parameter(project):
    """flash-attention's `Kernel_traits<…, typename Base = Kernel_traits_base<…>> : public Base`
    with `using compute_t = typename Base::compute_t`, its Base spelled out as nvcc's front end
    names the instance: `compute_t` is the base's, a double here."""
    s, p = infer(project, "stats.cu", "template <typename T> struct TraitsBase { using compute_t = T; };\n"
                 "template <typename T, typename Base = TraitsBase<T>> struct Traits : public Base {\n"
                 "  using compute_t = typename Base::compute_t;\n};\n" + KERNEL +
                 "void run(void* m, int rows) {\n"
                 "  stats<Traits<float, TraitsBase<double>>><<<(rows + 127) / 128, 128>>>(m, rows);\n}\n", "stats")
    assert (s.args["mu"].dtype.name, s.args["mu"].shape) == ("double", ("rows",)), p.comment


def test_a_cast_to_a_type_of_unknown_size_is_no_count_of_bytes(project):
    """A traits class Astra does not read (declared only): the size of `compute_t` is unknown, so
    the extent is said to be unread — never `rows` bytes, a quarter of what the kernel writes."""
    s, p = infer(project, "stats.cu", "struct Opaque;\n" + KERNEL.replace("template <typename Ktraits>\n", "")
                 .replace("Ktraits", "Opaque") +
                 "void run(void* m, int rows) { stats<<<(rows + 127) / 128, 128>>>(m, rows); }\n", "stats")
    assert any("`mu`" in n and "could not be read" in n for n in p.notes), p.notes


TRAITS = ("template <int N> struct TraitsBase { enum { THREADS_PER_WARP = 32 }; };\n"
          "template <typename T, int WARPS, typename Base = TraitsBase<WARPS>> struct Traits : public Base {\n"
          "  enum { THREADS_PER_CTA = WARPS * Base::THREADS_PER_WARP };\n  enum { ELTS = 16 / sizeof(T) };\n};\n")


def test_the_numbers_of_the_instances_traits_class_bound_the_block_and_the_indices(project):
    """flash-attention's layer norm: `__launch_bounds__(Ktraits::THREADS_PER_CTA)` and a body's
    `enum { ELTS = Ktraits::ELTS }`, members of the instance's class (one through its base): the
    caller's block (a guess of 256) is kept within the bound, 4 warps of 32, and each row's
    `cols / ELTS` float4s read as `cols` floats."""
    s, p = infer(project, "traits.cu", TRAITS +
                 "template <typename Ktraits>\n__global__ __launch_bounds__(Ktraits::THREADS_PER_CTA)\n"
                 "void copy_rows(float* out, const float* in, int rows, int cols) {\n"
                 "  enum { ELTS = Ktraits::ELTS };\n  int row = blockIdx.x;\n"
                 "  for (int c = threadIdx.x; c < cols / ELTS; c += blockDim.x)\n"
                 "    reinterpret_cast<float4*>(out)[row * cols / ELTS + c] =\n"
                 "        reinterpret_cast<const float4*>(in)[row * cols / ELTS + c];\n}\n"
                 "void run(float* o, const float* i, int rows, int cols, int threads) {\n"
                 "  copy_rows<Traits<float, 4, TraitsBase<4>>><<<rows, threads>>>(o, i, rows, cols);\n}\n", "copy_rows")
    assert s.block == ("128",), p.comment
    assert s.args["out"].shape == s.args["in"].shape == ("rows", "cols"), p.comment
    assert not any("could not be read from the kernel's indexing" in n for n in p.notes), p.notes


# mamba's selective scan (`selective_scan_fwd_kernel<Ktraits>`): a traits class of `static constexpr`
# members, some computed from others and from its template arguments; the kernel copies them into
# `constexpr` locals, the launcher names the instance through `using Ktraits = …;` in a dispatch
# lambda and launches `Ktraits::kNThreads` threads
SCAN = ("struct Params { int batch, dim, seqlen; long u_batch_stride, u_d_stride; void* u_ptr; void* out_ptr; };\n"
        "template <int kNThreads_, int kNItems_, int kNRows_, typename input_t_> struct ScanTraits {\n"
        "  using input_t = input_t_;\n  static constexpr int kNThreads = kNThreads_;\n"
        "  static constexpr int kNItems = kNItems_;\n  static constexpr int kNRows = kNRows_;\n"
        "  static constexpr int kNBytes = sizeof(input_t);\n"
        "  static constexpr int kNElts = kNBytes == 4 ? 4 : 8;\n  static constexpr int kNLoads = kNItems / kNElts;\n};\n"
        "template <typename Ktraits>\n__global__ __launch_bounds__(Ktraits::kNThreads) void scan(Params params) {\n"
        "  constexpr int kNRows = Ktraits::kNRows;\n  constexpr int kChunk = Ktraits::kNThreads * Ktraits::kNLoads;\n"
        "  using input_t = typename Ktraits::input_t;\n"
        "  input_t* u = reinterpret_cast<input_t*>(params.u_ptr) + blockIdx.x * params.u_batch_stride\n"
        "      + blockIdx.y * kNRows * params.u_d_stride;\n"
        "  input_t* out = reinterpret_cast<input_t*>(params.out_ptr) + blockIdx.x * params.u_batch_stride\n"
        "      + blockIdx.y * kNRows * params.u_d_stride;\n"
        "  for (int i = threadIdx.x; i < params.seqlen; i += kChunk) out[i] = 2 * u[i];\n}\n"
        "template <int kNThreads, int kNItems, typename input_t> void launch(Params& params) {\n"
        "  constexpr int kNRows = 1;\n  auto body = [&] {\n"
        "    using Ktraits = ScanTraits<kNThreads, kNItems, kNRows, input_t>;\n"
        "    dim3 grid(params.batch, params.dim / kNRows);\n"
        "    scan<Ktraits><<<grid, Ktraits::kNThreads>>>(params);\n  };\n  body();\n}\n"
        "template void launch<32, 4, float>(Params& params);\n")


def test_the_launchers_alias_of_the_traits_instance_gives_the_block_and_the_body_its_numbers(project):
    """`Ktraits::kNThreads` at the launch (through the lambda's `using Ktraits`) is 32, not a guess;
    the body's `constexpr` locals are numbers (`kChunk` = 32 * (4 / 4)), so each block's row is
    `seqlen` elements of the instance's `input_t` (float), the strides those of [batch, dim, seqlen]."""
    s, p = infer(project, "scan.cu", SCAN, "scan")
    assert s.block == ("32",) and s.grid == ("batch", "dim / 1"), p.comment
    assert s.args["params.u_ptr"].dtype.name == s.args["params.out_ptr"].dtype.name == "float", p.comment
    assert s.args["params.out_ptr"].shape == ("batch", "dim", "seqlen") and s.args["params.out_ptr"].output, p.comment
    assert (s.args["params.u_d_stride"].value, s.args["params.u_batch_stride"].value) == ("seqlen", "dim * seqlen")
    assert not any("could not be read over the sizes" in n for n in p.notes), p.notes


def test_constexpr_locals_of_the_body_are_read_in_order_through_the_instances_members():
    """`kChunk` names two members, one (`kNLoads`) computed through two others (`kNItems / kNElts`,
    `kNElts` a choice on `sizeof(input_t)`): with half, 8 elements a load, 16 / 8 = 2 loads."""
    from astra_cuda.infer.class_numbers import instance_numbers
    from astra_cuda.infer.types import Types
    from astra_cuda.model import source
    model = source.parse("#include <cuda_fp16.h>\n" + SCAN)
    got = instance_numbers(model.kernel("scan"), {"Ktraits": "ScanTraits<64, 16, 1, __half>"}, Types(model, None, None))
    assert (got["kNRows"], got["kChunk"], got["Ktraits::kNThreads"]) == (1, 128, 64), got


def test_a_one_return_constexpr_function_of_the_project_computes_a_member():
    """mamba's `kNElts = kNBytes == 4 ? 4 : constexpr_min(8, kNItems)` with `constexpr T
    constexpr_min(T a, T b) { return std::min(a, b); }`: with half and 4 items, 4 elements a load
    (one load); a function of more than one statement is no number."""
    from astra_cuda.infer.class_numbers import instance_numbers
    from astra_cuda.infer.types import Types
    from astra_cuda.model import source
    text = ("#include <algorithm>\ntemplate <typename T> constexpr T cmin(T a, T b) { return std::min(a, b); }\n"
            "template <typename T> constexpr T loud(T a) { int b = a; return b; }\n" +
            SCAN.replace("kNBytes == 4 ? 4 : 8", "kNBytes == 4 ? 4 : cmin(8, kNItems)")
            .replace("kNLoads = kNItems / kNElts;", "kNLoads = kNItems / kNElts;\n  static constexpr int kOdd = loud(3);")
            .replace("Ktraits::kNThreads * Ktraits::kNLoads;", "Ktraits::kNThreads * Ktraits::kNLoads;\n"
                     "  constexpr int kOdd = Ktraits::kOdd;"))
    model = source.parse(text)
    got = instance_numbers(model.kernel("scan"), {"Ktraits": "ScanTraits<32, 4, 1, __half>"}, Types(model, None, None))
    assert got["kChunk"] == 32 and "kOdd" not in got, got
    got = instance_numbers(model.kernel("scan"), {"Ktraits": "ScanTraits<32, 16, 1, __half>"}, Types(model, None, None))
    assert got["kChunk"] == 64, got
