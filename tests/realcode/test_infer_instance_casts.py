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
