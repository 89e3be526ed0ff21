"""Issue 25: kernels whose parameters are structs passed by value — minimal cases written here of
what public kernels show. flash-attention's layer norm (`ln_fwd_kernel(FwdParams params)`) reads
and writes its `void*` fields through the methods of plain local vector objects (`Wvec gamma[LDGS];
gamma[it].load_from(params.gamma, idx)`, a `static_cast<const Vec_type*>(base)[idx]` inside):
those methods were not followed, so each field was one byte, and the kernel's stores past it
changed the next buffer (`params.dmask`, "the read-only input was modified")."""
import re

from astra_cuda import api
from tests.realcode.test_infer_asm_accesses import infer

VEC = ("#include <cstddef>\n"
       "template <typename T, int N> struct Vec {\n  union { float4 vec; T elt[N]; } data;\n"
       "  __device__ void load_from(const void* base, const size_t idx) {\n"
       "    data.vec = static_cast<const float4*>(base)[idx];\n  }\n"
       "  __device__ void store_to(void* base, const size_t idx) { static_cast<float4*>(base)[idx] = data.vec; }\n"
       "};\n")


def test_void_fields_read_and_written_through_a_local_vector_objects_methods(project):
    """`v[it].load_from(p.x, i)` / `v[it].store_to(p.z, i)` over float4s: each field is four
    floats a column (16 bytes), `z` is written and `x` only read."""
    s, p = infer(project, "ln.cu", VEC +
                 "struct P { void* x; void* z; int rows; int cols; };\n"
                 "__global__ void copy_rows(P p) {\n  using Wvec = Vec<float, 4>;\n  Wvec v[2];\n"
                 "  int row = blockIdx.x;\n"
                 "  for (int c = threadIdx.x; c < p.cols / 4; c += blockDim.x) {\n"
                 "    v[c & 1].load_from(p.x, row * p.cols / 4 + c);\n"
                 "    v[c & 1].store_to(p.z, row * p.cols / 4 + c);\n  }\n}\n"
                 "void run(P p) { copy_rows<<<p.rows, 128>>>(p); }\n", "copy_rows")
    x, z = s.args["p.x"], s.args["p.z"]
    assert x.shape == z.shape == ("rows", "4 * cols")
    assert z.output and not x.output and not x.inout


def test_a_plain_objects_method_handed_no_pointer_touches_no_parameter(project):
    """A method called with numbers only (`v.zero_()`) is not a call Astra cannot see into with
    the kernel's pointers: the buffers keep the shapes their own accesses give."""
    s, p = infer(project, "z.cu", VEC.replace("};\n", "  __device__ void fill(float f) { data.vec = make_float4(f, f, f, f); }\n};\n") +
                 "__global__ void fill_rows(void* out, int n) {\n  Vec<float, 4> v;\n  v.fill(1.f);\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) v.store_to(out, i);\n}\n"
                 "void run(void* o, int n) { fill_rows<<<(n + 127) / 128, 128>>>(o, n); }\n", "fill_rows")
    assert s.args["out"].shape == ("16 * n",) and s.args["out"].output



def test_an_index_handed_to_a_method_of_a_class_not_read_reaches_an_unknown_extent(project):
    """flash-attention's `ln_fwd_kernel` as its traits class leaves it (`using Ovec = typename
    Ktraits::Ovec; z.store_to(params.z, idx_z)`, a class Astra does not read): the store reaches
    `idx` vectors of unknown size — said so, never the pointer's one first byte (the kernel's stores
    past a one-byte `params.x` changed the next buffer, `params.dmask`)."""
    s, p = infer(project, "t.cu", "struct Traits;\n"
                 "__global__ void store_rows(void* out, int n) {\n  using Ovec = typename Traits::Ovec;\n"
                 "  Ovec v;\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) v.store_to(out, i);\n}\n"
                 "void run(void* o, int n) { store_rows<<<(n + 127) / 128, 128>>>(o, n); }\n", "store_rows")
    assert s.args["out"].shape != ("1",) and s.args["out"].output, p.comment
    assert any("`out`" in n and "could not be read" in n for n in p.notes), p.notes

# FlashInfer's `paged_kv_t<DType, IdType>` (page.cuh, AppendPagedKVCacheKernel): a class template
# passed by value, plain fields plus a method that computes an address from them and an index table
KV = ("#include <cstdint>\n"
      "template <typename D, typename I> struct kv_t {\n  uint32_t num_heads;\n  uint32_t head_dim;\n"
      "  D* k_data;\n  I* indices;\n"
      "  __device__ D* get_k_ptr(I page, uint32_t h, uint32_t i) const {\n"
      "    return k_data + (size_t(indices[page]) * num_heads + h) * head_dim + i;\n  }\n};\n")
APPEND = ("template <typename DType, typename IdType>\n"
          "__global__ void append(kv_t<DType, IdType> kv, const DType* key, uint32_t nnz) {\n"
          "  for (uint32_t i = blockIdx.x; i < nnz; i += gridDim.x)\n"
          "    STORE = key[(i * kv.num_heads + threadIdx.y) * kv.head_dim + threadIdx.x];\n}\n"
          "void run(kv_t<float, int> kv, const float* key, uint32_t nnz) {\n"
          "  append<float, int><<<nnz, dim3(kv.head_dim, kv.num_heads)>>>(kv, key, nnz);\n}\n")


def test_a_class_template_instance_is_read_from_the_templates_definition(project):
    """`kv_t<DType, IdType>` is the template `kv_t<D, I>` with D = DType, I = IdType: its fields
    are split off (no longer 'no definition of `kv_t<DType, IdType>` read')."""
    s, p = infer(project, "kv.cu", KV + APPEND.replace(
        "STORE", "kv.k_data[(i * kv.num_heads + threadIdx.y) * kv.head_dim + threadIdx.x]"), "append")
    assert not p.problems, p.problems
    assert s.args["kv.k_data"].output and s.args["kv.k_data"].dtype.name == "float"
    assert s.args["kv.num_heads"].value == "num_heads" and s.args["kv.head_dim"].value == "head_dim"


def test_a_method_of_the_struct_the_kernel_calls_is_followed_over_its_fields(project):
    """`*kv.get_k_ptr(i, ty, tx) = …` writes `k_data` at pages `indices` names: `k_data` is an
    output with a row per page and `indices` the pages (a scatter: a permutation), not one element each."""
    s, p = infer(project, "kvm.cu", KV + APPEND.replace("STORE", "*kv.get_k_ptr(i, threadIdx.y, threadIdx.x)"),
                 "append")
    assert not p.problems, p.problems
    assert s.args["kv.k_data"].output and s.args["kv.k_data"].shape == ("nnz", "num_heads", "head_dim")
    assert s.args["kv.indices"].shape == ("nnz",)


def test_a_class_field_the_instance_uses_is_refused_not_left_zero(project):
    """FlashInfer's `uint_fastdiv page_size` (magic numbers the host's constructor computes) read by
    every instance: no spec, the field named — zero would divide by zero. One only a template argument
    switching it off reaches (flash-attention's `philox_args` under `if (Is_dropout)`) is left zero."""
    div = ("struct fastdiv {\n  uint32_t d, m, s;\n  __device__ uint32_t div(uint32_t n) const {\n"
           "    return uint32_t((uint64_t(n) * m) >> 32) >> s;\n  }\n};\n")
    kv = KV.replace("  uint32_t num_heads;\n", "  fastdiv page_size;\n  uint32_t num_heads;\n")
    store = "kv.k_data[(i * kv.num_heads + threadIdx.y) * kv.head_dim + threadIdx.x]"
    s, p = infer(project, "fd.cu", div + kv + APPEND.replace(
        "STORE", store + " = kv.page_size.div(i) + 0 * key[0]; if (0) " + store), "append")
    assert any("`kv.page_size` is a `fastdiv`" in n for n in p.problems), p.problems
    text = div + kv + APPEND.replace("template <typename DType, typename IdType>",
                                     "template <typename DType, typename IdType, bool Paged = false>")
    s, p = infer(project, "fd2.cu", text.replace(
        "STORE", "if (Paged) kv.k_data[kv.page_size.div(i)] = 0;\n    " + store), "append")
    assert not p.problems, p.problems
    assert s.args["kv.k_data"].output


def test_a_struct_template_argument_with_array_members_is_refused_naming_the_array(project):
    """apex's `multi_tensor_apply_kernel(…, T tl, …)` with T = `TensorListMetadata<3>` (arrays of
    addresses and sizes the launcher packs): the refusal names the class and the array member, read
    in the template's definition, whether the kernel reads the members or hands the object on whole."""
    tl = "template <int depth> struct TL {\n  void* addresses[depth][4];\n  int sizes[4];\n};\n"
    read = ("template <typename T>\n__global__ void apply(T tl) {\n"
            "  ((float*)tl.addresses[0][blockIdx.x])[threadIdx.x] = tl.sizes[blockIdx.x];\n}\n"
            "void run(TL<2> tl) { apply<<<4, 128>>>(tl); }\n")
    passed = ("template <typename T> __device__ void consume(T& t, int i) { ((float*)t.addresses[0][0])[i] = 0; }\n"
              "template <typename T>\n__global__ void apply(T tl) { consume(tl, threadIdx.x); }\n"
              "void run(TL<2> tl) { apply<<<4, 128>>>(tl); }\n")
    for name, text in (("read.cu", read), ("passed.cu", passed)):
        path = project(name, tl + text)
        p = api.infer_spec(api.snapshot(tl + text, str(path)), "apply", run=False)
        assert not p.valid and "`TL<2>`" in p.problems[0] and "`void* addresses[depth][4];` is an array" in \
            p.problems[0], p.problems


def test_a_struct_handed_whole_to_a_helper_is_refused_not_a_float(project):
    """flash-attention's `flash_fwd_kernel`: its head a macro writes (`KERNEL_PARAM_MODIFIER const
    Flash_fwd_params params`) and its body hands the struct whole to `compute_attn<…>(params)`.
    Proposed as `params = { value = 1.0, type = "float" }`, the kernel read its pointers from bytes
    the launch never gave (cudaErrorIllegalAddress on an H200): no draft is proposed, and the note
    names the call."""
    _, p = infer(project, "fwd.cu", "struct P { const float* x; float* y; int n; };\n"
                 "#define DEFINE_KERNEL(name, ...) template <typename Traits, __VA_ARGS__> "
                 "__global__ void name(const P params)\n"
                 "template <bool Even> __device__ void body(const P& p) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < p.n) p.y[i] = 2.f * p.x[i];\n}\n"
                 "DEFINE_KERNEL(scale, bool Even) { body<Even>(params); }\n"
                 "void run(P p) { scale<float, true><<<(p.n + 127) / 128, 128>>>(p); }\n", "scale")
    assert not p.valid, p.comment
    assert any("hands whole to `body<Even>(params)`" in n for n in p.problems + p.notes), p.problems


# FlashInfer's `paged_kv_t` (page.cuh, AppendPagedKVCacheKernel): its field `uint_fastdiv page_size`
# is a class with a host constructor of one number (`uint_fastdiv(uint32_t d)`), and the struct's
# own host constructor builds the field from its size parameter (`: page_size(page_size)`)
BUILT = ("#include <cstdint>\nnamespace fi {\nstruct fastdiv {\n"
         "  __host__ __device__ fastdiv() : d(0), m(0), s(0) {}\n"
         "  __host__ fastdiv(uint32_t d_) : d(d_), m(0), s(0) {\n    while ((1ull << s) < d) ++s;\n"
         "    m = (uint32_t)((((1ull << 32) * ((1ull << s) - d)) / d) + 1);\n  }\n"
         "  __device__ uint32_t div(uint32_t n) const { return (uint32_t)((((uint64_t)n * m >> 32) + n) >> s); }\n"
         "  uint32_t d, m, s;\n};\n"
         "struct rows_t {\n  float* out;\n  uint32_t n;\n  fastdiv page_size;\n"
         "  __host__ rows_t(float* o, uint32_t n_, uint32_t page_size) : out(o), n(n_), page_size(INIT) {}\n};\n}\n"
         "__global__ void page_of(fi::rows_t p, const float* in) {\n"
         "  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i < p.n) p.out[i] = in[i] + (float)p.page_size.div(i);\n}\n"
         "void run(fi::rows_t p, const float* in) { page_of<<<(p.n + 127) / 128, 128>>>(p, in); }\n")


def test_a_class_field_the_structs_constructor_builds_from_a_size_is_constructed(project):
    """The field is proposed as `{ construct = "fi::fastdiv(page_size)" }` (the class named from
    the global scope, as the constructor program names it), `page_size` a size with test values;
    the spec loads as a hand-written one does."""
    s, p = infer(project, "built.cu", BUILT.replace("INIT", "page_size"), "page_of")
    assert not p.problems, p.problems
    assert re.search(r'p.page_size +\= \{ construct = "fi::fastdiv\(page_size\)" \}', p.comment), p.comment
    assert s.args["p.page_size"].construct == "fi::fastdiv(page_size)"
    assert "page_size" in s.sizes and s.args["p.out"].output


def test_a_class_field_built_from_anything_but_a_size_stays_refused(project):
    """Built from an expression (`page_size * 2`), or of a class with no constructor of one number,
    no size stands for the field: the refusal stands, the field named."""
    s, p = infer(project, "twice.cu", BUILT.replace("INIT", "page_size * 2"), "page_of")
    assert any("`p.page_size` is a `fastdiv`" in n for n in p.problems), p.problems
    text = BUILT.replace("INIT", "page_size").replace("  __host__ fastdiv(uint32_t d_)", "  __host__ fastdiv(float d_)")
    s, p = infer(project, "float.cu", text, "page_of")
    assert any("`p.page_size` is a `fastdiv`" in n for n in p.problems), p.problems


def test_a_constructed_field_is_run_before_it_is_proposed(project):
    """The validator runs the proposal as it runs a hand-written one: the CPU backend builds the
    constructor program with g++, and the kernel, given the bytes it prints, runs cleanly."""
    text = BUILT.replace("INIT", "page_size")
    path = project("run.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "page_of", run=True)
    assert not p.problems and "construct" in p.comment, p.problems
    assert any(n.startswith("ran before it was proposed") for n in p.notes), p.notes


# The same class taken by value as a parameter of its own, built by the launcher from its size
# (FlashInfer's `uint_fastdiv`, which its launchers build from a size and pass on)
PARAM = BUILT.split("struct rows_t")[0] + "}\n" + (
    "__global__ void row_of(float* out, const float* in, fi::fastdiv by, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) out[i] = in[i] + (float)by.div((uint32_t)i);\n}\n"
    "void run(float* out, const float* in, int n, uint32_t rows) {\n  BUILD\n"
    "  row_of<<<(n + 127) / 128, 128>>>(out, in, ARG, n);\n}\n")


def test_a_parameter_the_launcher_builds_from_a_size_is_constructed(project):
    """A local built from the size (`fi::fastdiv by(rows);`, which the grammar reads as a function
    declaration), or the object built in place, or `auto by = fi::fastdiv(rows);`: the parameter is
    `{ construct = "fi::fastdiv(by)" }`, `by` a size, and the proposal runs before it is proposed."""
    for build, arg in (("fi::fastdiv by(rows);", "by"), ("", "fi::fastdiv(rows)"),
                       ("auto by = fi::fastdiv(rows);", "by")):
        text = PARAM.replace("BUILD", build).replace("ARG", arg)
        path = project("param.cu", text)
        p = api.infer_spec(api.snapshot(text, str(path)), "row_of", run=True)
        assert not p.problems and re.search(r'by +\= \{ construct = "fi::fastdiv\(by\)" \}', p.comment), p.comment
        assert any(n.startswith("ran before it was proposed") for n in p.notes), p.notes


def test_a_parameter_built_from_a_launcher_expression_it_cannot_name_stays_a_class(project):
    """Built by another function (`make_div(rows)`): no construct is proposed for it."""
    text = PARAM.replace("BUILD", "fi::fastdiv by = make_div(rows);").replace("ARG", "by")
    text = text.replace("void run(", "fi::fastdiv make_div(uint32_t r) { return fi::fastdiv(r); }\nvoid run(")
    path = project("other.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "row_of", run=False)
    assert "construct" not in p.comment, p.comment
