"""Issue 25: mamba's `selective_scan_fwd_kernel(SSMParamsBase params)` — a params struct passed by
value whose `void *__restrict__` data fields the kernel casts to its template's element type and
indexes with the struct's own strides (`reinterpret_cast<input_t *>(params.u_ptr) + batch_id *
params.u_batch_stride + dim_id * params.u_d_stride`), launched over `dim3 grid(params.batch,
params.dim)`. A minimal case written here of that pattern."""
from astra_cuda import api
from tests.realcode.test_infer_asm_accesses import infer

SCAN = ("#include <cstdint>\n"
        "struct ScanParams {\n  using index_t = uint64_t;\n  int batch, dim, seqlen;\n"
        "  index_t u_batch_stride, u_d_stride, out_batch_stride, out_d_stride;\n"
        "  void *__restrict__ u_ptr;\n  void *__restrict__ out_ptr;\n};\n"
        "template <int kNThreads, typename input_t>\n__global__ void scan(ScanParams params) {\n"
        "  input_t *u = reinterpret_cast<input_t *>(params.u_ptr) + blockIdx.x * params.u_batch_stride\n"
        "      + blockIdx.y * params.u_d_stride;\n"
        "  input_t *out = reinterpret_cast<input_t *>(params.out_ptr) + blockIdx.x * params.out_batch_stride\n"
        "      + blockIdx.y * params.out_d_stride;\n  float acc = 0.f;\n"
        "  for (int i = threadIdx.x; i < params.seqlen; i += kNThreads) { acc += float(u[i]); out[i] = input_t(acc); }\n"
        "}\n"
        "template <int kNThreads, typename input_t> void scan_launch(ScanParams &params) {\n"
        "  dim3 grid(params.batch, params.dim);\n  scan<kNThreads, input_t><<<grid, kNThreads>>>(params);\n}\n"
        "template void scan_launch<128, float>(ScanParams &params);\n")


def test_void_fields_cast_to_the_template_type_are_measured_in_its_elements(project):
    """The grid is the struct's `batch` and `dim`; `u_ptr` is `float` (the kernel casts it to
    `input_t`, float in the instance), [batch, dim, seqlen], and the strides take the contiguous
    values the host gives them (`u.stride(1)` = seqlen) — in bytes they were `4 * seqlen`, rows
    with gaps, and the 27 strides of mamba's struct each a size of its own."""
    s, p = infer(project, "scan.cu", SCAN, "scan")
    assert not p.problems, p.problems
    assert [str(g) for g in s.grid[:2]] == ["batch", "dim"]
    assert s.args["params.batch"].value == "batch" and s.args["params.dim"].value == "dim"
    for f in ("u", "out"):
        assert s.args[f"params.{f}_ptr"].dtype.name == "float"
        assert s.args[f"params.{f}_ptr"].shape == ("batch", "dim", "seqlen"), p.comment
        assert s.args[f"params.{f}_d_stride"].value == "seqlen"
        assert s.args[f"params.{f}_batch_stride"].value == "dim * seqlen"
    assert s.args["params.out_ptr"].output and not s.args["params.u_ptr"].output


def test_restrict_qualified_void_fields_run_as_buffers(project):
    """The layout probe reads a `void *__restrict__` member as a pointer: the proposal runs (it was
    refused as "`params.u_ptr` is described as a buffer, but the field is an other of 8 bytes")."""
    project("scan.cu", SCAN)
    path = project.root / "scan.cu"
    p = api.infer_spec(api.snapshot(SCAN, str(path)), "scan")
    assert p.valid, p.problems
    assert p.notes[0].startswith("ran before it was proposed"), p.notes[:2]


def test_a_struct_passed_as_a_member_of_the_launchers_own_is_split_and_its_grid_connected(project):
    """flash-attention's layer norm launches `kernel<<<ctas_per_col, …>>>(launch_params.params)`
    after `auto ctas_per_col = launch_params.params.ctas_per_col`: the struct is a member of the
    launcher's own, its fields are split there too, and the grid is the field's size — it was a
    size of its own beside the field's (`rows` and `p__rows`, drawn apart)."""
    s, p = infer(project, "ln.cu", "struct P { float* x; int rows; int cols; };\n"
                 "struct LaunchParams { P params; int smem; };\n"
                 "__global__ void scale_rows(P p) {\n  int r = blockIdx.x;\n  if (r >= p.rows) return;\n"
                 "  for (int c = threadIdx.x; c < p.cols; c += blockDim.x) p.x[r * p.cols + c] *= 2.f;\n}\n"
                 "void run(LaunchParams &lp) {\n  auto ctas = lp.params.rows;\n"
                 "  scale_rows<<<ctas, 128>>>(lp.params);\n}\n", "scale_rows")
    assert not p.problems, p.problems
    assert [str(g) for g in s.grid[:1]] == ["rows"] and s.args["p.rows"].value == "rows", p.comment
    assert s.args["p.x"].shape == ("rows", "cols") and "p__rows" not in p.comment
