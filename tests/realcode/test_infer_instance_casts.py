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
