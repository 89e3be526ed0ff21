"""Spec format growth (issue 25, item 6): a struct passed by value described by its fields, a
table of device pointers — each problem at its key, the flat `[args]` of a plain kernel unchanged."""
import re

import pytest

from astra_cuda.model import source, spec

STRUCTS = "struct Dims { int n; float scale; };\nstruct P { const float* x; float* y; Dims d; };\n"
KERNEL = "__global__ void k(P p, const float* const* t, int m) {}\n"
GOOD = '''grid = ["n"]
block = [32]
[sizes]
n = [1, 5]
[args]
p.x = { type = "float", shape = ["n"] }
p.y = { type = "float", shape = ["n"], output = true }
p.d.n = "n"
p.d.scale = { value = 2.5, type = "float" }
t = { type = "float", shape = ["n"], table = 3 }
m = "n"
'''


def load(body: str):
    text = f"{STRUCTS}/* @astra\n{body}*/\n{KERNEL}"
    m = source.parse(text)
    return spec.load(m.kernel("k"), m), text


def error_of(body: str):
    text = f"{STRUCTS}/* @astra\n{body}*/\n{KERNEL}"
    with pytest.raises(spec.SpecErrors) as e:
        load(body)
    d = e.value.diagnostics[0]
    return d, text.splitlines()[d.line][d.col:d.end_col]


def test_a_struct_is_its_fields_and_a_table_its_rows():
    s, _ = load(GOOD)
    p = s.args["p"]
    assert p.struct and p.fields == ("x", "y", "d.n", "d.scale") and not p.pointer and not p.is_scalar
    assert s.args["p.y"].output and s.args["p.y"].member_of == "p" and not s.args["p.y"].param
    assert s.args["p.d.n"].is_scalar and not s.args["p.d.n"].typed and s.args["p.d.scale"].typed
    assert s.args["t"].table == "3" and s.shape("t", {"n": 5}) == (3, 5)
    assert [n for n, a in s.args.items() if a.param] == ["p", "t", "m"]
    assert s.bytes_moved({"n": 5}) == 4 * 5 * 2 + 4 * 15   # fields' buffers and the table's rows count


@pytest.mark.parametrize("old,new,message,at", [
    ('p.d.n = "n"', 'p."d;n" = "n"', "a field is a member's name", '"d;n"'),
    ('p.x = { type = "float", shape = ["n"] }', 'p.x = { type = "float", shape = ["w"] }', "unknown size", '"w"'),
    ('p.x = { type = "float", shape = ["n"] }', 'p.x = { type = "float", shape = ["n"], table = 2 }',
     "unknown key", "table"),
    ('p.d.n = "n"', 'p.d.n = true', "is a scalar", "n"),
    ('t = { type = "float", shape = ["n"], table = 3 }', 't = { type = "float", shape = ["n"] }',
     "table of device pointers", "t"),
    ('m = "n"', 'm = { type = "float", shape = ["n"], table = 3 }', "is a scalar (int)", "m"),
])
def test_each_problem_at_its_place(old, new, message, at):
    d, where = error_of(GOOD.replace(old, new))
    assert message in d.message, d.message
    if at is not None:
        assert where == at, (where, d.message)


def test_inference_reads_a_struct_through_its_fields():
    from astra_cuda import infer
    text = ("struct Params { float* out; const float* inp; int rows; int cols; };\n"
            "__global__ void scale(Params p) {\n"
            "    int r = blockIdx.x, c = threadIdx.x;\n"
            "    if (c < p.cols) p.out[r * p.cols + c] = 2.0f * p.inp[r * p.cols + c];\n}\n"
            "void run(Params params) { scale<<<params.rows, params.cols>>>(params); }\n")
    m = source.parse(text)
    prop = infer.infer(m.kernel("scale"), m)
    assert prop.valid, prop.problems
    flat = " ".join(prop.comment.split())
    assert 'p.out = { type = "float", shape = ["rows", "cols"], output = true }' in flat, prop.comment
    assert 'p.rows = "rows"' in flat and 'grid = ["rows"]' in flat and 'block = ["cols"]' in flat, prop.comment
    assert any("given by their fields" in n for n in prop.notes)


def test_inference_reads_a_table_of_device_pointers_through_one_entry():
    from astra_cuda import infer
    text = ("template <typename scalar_t>\n"
            "__global__ void copy_rows(long long* caches, const long long* mapping, const int numel) {\n"
            "  const int layer = blockIdx.x;\n"
            "  scalar_t* cache = reinterpret_cast<scalar_t*>(caches[layer]);\n"
            "  long long src = mapping[2 * blockIdx.y], dst = mapping[2 * blockIdx.y + 1];\n"
            "  for (int i = threadIdx.x; i < numel; i += blockDim.x) cache[dst * numel + i] = cache[src * numel + i];\n"
            "}\nvoid run(long long* c, const long long* m, int layers, int pairs, int numel) {\n"
            "  dim3 grid(layers, pairs);\n  copy_rows<float><<<grid, 256>>>(c, m, numel);\n}\n")
    m = source.parse(text)
    prop = infer.infer(m.kernel("copy_rows"), m)
    assert prop.valid, prop.problems
    flat = " ".join(prop.comment.split())
    assert 'caches = { type = "float", shape = ["V", "numel"], inout = true, table = "layers" }' in flat, prop.comment
    assert any("table of device pointers" in n for n in prop.notes)


def test_records_read_through_a_pointer_are_proposed_by_the_fields_read():
    """DeepSpeed's ragged ops read counts and offsets from descriptor structs in device memory
    (`batch->n_seqs`, `seqs[i].start`): a pointer read at its first record gives numbers, one
    read at an index arrays of the records' count, each proposed as a field of `records`."""
    from astra_cuda import infer
    text = ("struct Batch { int n_seqs; int unused; };\nstruct Seq { int start; int len; };\n"
            "__global__ void last_rows(float* out, const float* acts, const Batch* batch, const Seq* seqs, int d) {\n"
            "  if (blockIdx.x >= batch->n_seqs) return;\n"
            "  const Seq s = seqs[blockIdx.x];\n  const int row = s.start + seqs[blockIdx.x].len - 1;\n"
            "  for (int i = threadIdx.x; i < d; i += blockDim.x) out[blockIdx.x * d + i] = acts[row * d + i];\n}\n")
    m = source.parse(text)
    prop = infer.infer(m.kernel("last_rows"), m)
    assert prop.valid, prop.problems
    flat = " ".join(prop.comment.split())
    assert 'batch = { records = 1, n_seqs = "n_seqs" }' in flat and "unused" not in flat, prop.comment
    assert 'seqs = { records = "n_seqs", start = { init = "randint(0, V)" }, len = { init = "randint(0, V)" } }' \
        in flat, prop.comment


def test_a_pointer_to_records_used_whole_is_still_refused_with_why():
    from astra_cuda import infer
    text = ("struct Batch { int n_seqs; };\n__device__ int count(const Batch* b) { return b->n_seqs; }\n"
            "__global__ void k(float* out, const Batch* batch) {\n"
            "  if (threadIdx.x < count(batch) && batch->n_seqs > 0) out[threadIdx.x] = 1.0f;\n}\n")
    m = source.parse(text)
    prop = infer.infer(m.kernel("k"), m)
    assert not prop.valid
    assert any("`batch` points to `Batch` records" in p for p in prop.problems), prop.problems


def test_a_struct_with_a_member_type_a_base_and_a_constructor_is_read_through_its_fields():
    """mamba's SSMParamsBase declares `using index_t = uint64_t;` among its fields; flash-attention's
    FwdParams derives from ParamsBase and has a constructor and a field of a class type: the
    fields are the base's then its own, a member type is written out, methods hold no data, and a
    class-typed field no number stands for is left out (zero) with a note."""
    from astra_cuda import infer
    text = ("namespace at { struct Seed { unsigned long long s; }; }\n"
            "struct Base { Base() : n(0) {} int n; };\n"
            "struct Params : public Base {\n  using index_t = unsigned long;\n  Params() : Base(), out(nullptr) {}\n"
            "  __device__ int rows() const { return n; }\n  static constexpr int K = 4;\n"
            "  index_t stride; float* out; at::Seed seed;\n};\n"
            "__global__ void fill(Params p) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < p.n) p.out[i * p.stride] = 1.0f;\n}\n"
            "void run(Params params) { fill<<<(params.n + 255) / 256, 256>>>(params); }\n")
    m = source.parse(text)
    prop = infer.infer(m.kernel("fill"), m)
    assert prop.valid, prop.problems
    flat = " ".join(prop.comment.split())
    assert 'p.n = "n"' in flat and "p.out = {" in flat and "p.stride" in flat and "p.seed" not in flat, prop.comment
    assert any("`p.seed` (a `at::Seed`) left out" in n for n in prop.notes), prop.notes


RECORD_STRUCTS = "struct Batch { int n; };\nstruct Seq { int start; int len; };\nstruct W { const Seq* seqs; float* y; };\n"
RECORD_KERNEL = "__global__ void r(const Batch* b, const Seq* s, W w, float* out) {}\n"
RECORDS_GOOD = '''grid = ["n"]
block = [32]
[sizes]
n = [1, 5]
[args]
b = { records = 1, n = "n" }
s = { records = "n", start = { init = "randint(0, n)" }, len = 1 }
w.seqs = { records = "n + 1", start = { init = "arange", type = "int32" } }
w.y = { type = "float", shape = ["n"], output = true }
out = { type = "float", shape = ["n"], output = true }
'''


def load_records(body: str):
    text = f"{RECORD_STRUCTS}/* @astra\n{body}*/\n{RECORD_KERNEL}"
    m = source.parse(text)
    return spec.load(m.kernel("r"), m), text


def test_pointers_to_records_are_structs_laid_out_in_device_memory():
    s, _ = load_records(RECORDS_GOOD)
    assert s.args["b"].struct and s.args["b"].records == "1" and s.args["b"].fields == ("n",)
    assert s.args["s"].records == "n" and s.args["s.start"].drawn and not s.args["s.start"].is_scalar
    assert str(s.args["s.start"].init) == "randint(0, n)" and s.args["s.len"].is_scalar
    assert s.args["w"].fields == ("seqs", "y") and s.args["w.seqs"].records == "n + 1"
    assert s.args["w.seqs"].member_of == "w" and s.args["w.seqs.start"].member_of == "w.seqs"
    assert s.args["w.seqs.start"].typed and s.args["w.seqs.start"].dtype.name == "int32"
    assert [n for n, a in s.args.items() if a.param] == ["b", "s", "w", "out"]


@pytest.mark.parametrize("old,new,message,at", [
    ('out = { type = "float", shape = ["n"], output = true }', 'out = { records = 1, x = 1 }',
     "describes a pointer to structs", "records"),
    ('len = 1 }', 'len = { type = "float", shape = ["n"] } }', "a record's fields are numbers", "len"),
    ('w.y = { type = "float", shape = ["n"], output = true }', 'w.y = { init = "ones" }',
     "belongs to a pointer to structs", "init"),
    ('s = { records = "n",', 's = { records = "m",', "unknown size", '"m"'),
    ('b = { records = 1,', 'b = { records = "n - 1",', "0 records", None),
])
def test_each_records_problem_at_its_place(old, new, message, at):
    text = f"{RECORD_STRUCTS}/* @astra\n{RECORDS_GOOD.replace(old, new)}*/\n{RECORD_KERNEL}"
    m = source.parse(text)
    with pytest.raises(spec.SpecErrors) as e:
        spec.load(m.kernel("r"), m)
    d = e.value.diagnostics[0]
    assert message in d.message, d.message
    if at is not None:
        assert text.splitlines()[d.line][d.col:d.end_col] == at, d.message


def test_records_a_struct_field_points_to_are_proposed_through_the_struct():
    """DeepSpeed's BatchWrapperCPP: `struct { … } typedef W;` (typedef after the type, an `#ifdef`
    between `struct` and a descriptor's body), passed by value, its fields pointing to records;
    a nested struct field no number gives (`kv`) is left out."""
    from astra_cuda import infer
    text = ("struct\n#ifdef __CUDA_CC__\n    __align__(8)\n#endif\n{ int n_tokens; int n_seqs; }\ntypedef Batch;\n"
            "struct { int blocks; } typedef Kv;\n"
            "struct { const Batch* batch; const int* tok2seq; const Kv kv; } typedef W;\n"
            "__global__ void k(float* out, const float* x, const W w, int d) {\n"
            "  const int t = blockIdx.y;\n  if (t >= w.batch->n_tokens) return;\n"
            "  for (int i = threadIdx.x; i < d; i += blockDim.x) out[t * d + i] = x[t * d + i];\n}\n"
            "void run(float* out, const float* x, W w, int tokens, int d) { k<<<dim3(1, tokens), 256>>>(out, x, w, d); }\n")
    m = source.parse(text)
    prop = infer.infer(m.kernel("k"), m)
    assert prop.valid, prop.problems
    flat = " ".join(prop.comment.split())
    assert "w.batch = { records = 1, n_tokens = " in flat and "w.kv" not in flat, prop.comment


def test_a_count_a_block_returns_early_at_is_the_grids_count():
    """DeepSpeed's logits_gather: `if (seq_id >= ragged_batch->n_sequences) return;` with seq_id the
    block index along y: the count is the grid's along y (every block of a padded batch works),
    not a size of its own that would leave output rows unwritten."""
    from astra_cuda import infer
    text = ("struct Batch { int n_seqs; };\nstruct Seq { int start; int len; };\n"
            "__global__ void last_rows(float* out, const float* acts, const Batch* batch, const Seq* seqs, int d) {\n"
            "  const int s = blockIdx.y;\n  if (s >= batch->n_seqs) return;\n"
            "  const Seq q = seqs[s];\n  const int off = (q.start + q.len - 1) * d;\n"
            "  const int t = threadIdx.x + blockIdx.x * blockDim.x;\n  if (t < d) out[s * d + t] = acts[off + t];\n}\n"
            "void run(float* out, const float* acts, const Batch* b, const Seq* q, int n_seqs, int d) {\n"
            "  dim3 grid((d + 511) / 512, n_seqs, 1);\n  last_rows<<<grid, 512>>>(out, acts, b, q, d);\n}\n")
    m = source.parse(text)
    prop = infer.infer(m.kernel("last_rows"), m)
    assert prop.valid, prop.problems
    flat = " ".join(prop.comment.split())
    assert 'batch = { records = 1, n_seqs = "n_seqs" }' in flat and "batch_n_seqs" not in flat, prop.comment
    assert 'out = { type = "float", shape = ["n_seqs", "d"], output = true }' in flat, prop.comment


def test_the_size_of_a_count_read_as_the_grids_is_dropped_where_only_its_field_keeps_the_name():
    """DeepSpeed's logits_gather: the field is `n_sequences`, the launcher's count `n_seqs`; the
    size the field was first given (`n_sequences`) is used by nothing once the field is the grid's
    count, but its name stays as the field's key (`n_sequences = "n_seqs"`): it was kept, an
    orphan size multiplying the cases by three."""
    from astra_cuda import infer
    text = ("struct Batch { int n_sequences; };\nstruct Seq { int start; };\n"
            "__global__ void last_rows(float* out, const float* acts, const Batch* batch, const Seq* seqs, int d) {\n"
            "  const int s = blockIdx.y;\n  if (s >= batch->n_sequences) return;\n"
            "  const int off = seqs[s].start * d;\n"
            "  const int t = threadIdx.x + blockIdx.x * blockDim.x;\n  if (t < d) out[s * d + t] = acts[off + t];\n}\n"
            "void run(float* out, const float* acts, const Batch* b, const Seq* q, int n_seqs, int d) {\n"
            "  dim3 grid((d + 511) / 512, n_seqs, 1);\n  last_rows<<<grid, 512>>>(out, acts, b, q, d);\n}\n")
    m = source.parse(text)
    prop = infer.infer(m.kernel("last_rows"), m)
    assert prop.valid, prop.problems
    flat = " ".join(prop.comment.split())
    assert 'batch = { records = 1, n_sequences = "n_seqs" }' in flat, prop.comment
    assert not re.search(r"^n_sequences\s*=", prop.comment, re.M), prop.comment


def test_a_row_two_record_fields_pick_in_a_vectorised_templated_kernel_is_measured():
    """DeepSpeed's logits_gather: the row read is `seq.start_idx + seq.n_tokens - 1`, two loaded
    values summed: drawn each below the table's rows they reach twice it; each from 1 to half of
    it, the row is 1 … the table's last, so the input is measured as [V, dim]."""
    from astra_cuda import infer
    text = ("#include <stdint.h>\nnamespace lg { constexpr int granularity = 16; constexpr int threads = 512; }\n"
            "namespace mem { template <int N> __device__ void load(void* d, const void* s);\n"
            "template <> __device__ void load<16>(void* d, const void* s) { *(uint4*)d = *(const uint4*)s; }\n"
            "template <int N> __device__ void store(void* d, const void* s);\n"
            "template <> __device__ void store<16>(void* d, const void* s) { *(uint4*)d = *(const uint4*)s; } }\n"
            "struct Batch { int32_t n_sequences; int32_t n_tokens; };\nstruct Seq { int32_t start_idx; int32_t n_tokens; };\n"
            "template <typename T>\n__global__ void gather(T* out, const T* acts, const Batch* batch, const Seq* seqs, "
            "const int32_t dim) {\n"
            "  constexpr int V = lg::granularity / sizeof(T);\n  const int32_t s = blockIdx.y;\n"
            "  if (s >= batch->n_sequences) return;\n  const Seq seq = seqs[s];\n"
            "  const int row = seq.start_idx + seq.n_tokens - 1;\n  const int off = row * dim;\n"
            "  const int t = threadIdx.x * V + blockIdx.x * lg::threads * V;\n  T buf[V];\n"
            "  if (t < dim) { mem::load<lg::granularity>(buf, acts + off + t); "
            "mem::store<lg::granularity>(out + s * dim + t, buf); }\n}\n"
            "template <typename T>\nvoid launch(T* out, const T* acts, const Batch* b, const Seq* q, const int32_t n, "
            "const int32_t dim) {\n  constexpr int V = lg::granularity / sizeof(T);\n"
            "  const dim3 grid((dim + lg::threads * V - 1) / (lg::threads * V), n, 1);\n"
            "  gather<T><<<grid, dim3(lg::threads, 1, 1), 0>>>(out, acts, b, q, dim);\n}\n")
    m = source.parse(text)
    prop = infer.infer(m.kernel("gather"), m)
    flat = " ".join(prop.comment.split())
    assert prop.valid, prop.problems
    assert 'start_idx = { init = "randint(1, V / 2 + 1)" }, n_tokens = { init = "randint(1, V / 2 + 1)" }' in flat, \
        prop.comment
    assert 'acts = { type = "float", shape = ["V", "dim"] }' in flat, prop.comment
