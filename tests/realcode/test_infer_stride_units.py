"""Issue 25: a stride added to an index before the sum is scaled by a size counts rows of that
size (DeepSpeed apply_rotary_pos_half's key cache: `k_offset = (cur_seq_idx + (head_idx /
seq_len) * max_out_tokens) * head_size`). Its contiguous value is the token count, `seq_len`; taken
in elements (`seq_len * head_size`) the key rows were `head_size` times too far apart, the key's
shape could not be read and the kernel wrote past it (the GPU's two runs disagreed)."""
from tests.realcode.test_infer_asm_accesses import infer

CACHE = ("__global__ void scale_keys(float* q, float* k, unsigned seq_len, unsigned head_size,\n"
         "                           unsigned total, int max_tokens) {\n"
         "  const int head = blockIdx.x * 8 + threadIdx.x / 32;\n"
         "  const int seq = head % seq_len;\n"
         "  const int k_offset = (seq + (head / seq_len) * max_tokens) * head_size;\n"
         "  if (head < total) for (int i = threadIdx.x % 32; i < head_size; i += 32) {\n"
         "    q[head * head_size + i] *= 2.0f;\n    k[k_offset + i] *= 2.0f;\n  }\n}\n"
         "void run(float* q, float* k, unsigned head_size, unsigned seq_len, unsigned heads, unsigned batch, int max_tokens) {\n"
         "  const int total = batch * heads * seq_len;\n"
         "  scale_keys<<<(total + 7) / 8, 256>>>(q, k, seq_len, head_size, total, max_tokens);\n}\n")


def test_a_stride_scaled_with_its_index_counts_rows_of_the_scale(project):
    s, p = infer(project, "cache.cu", CACHE, "scale_keys")
    assert s.args["max_tokens"].value.replace(" ", "") == "seq_len", s.args["max_tokens"].value
    assert s.args["k"].shape == s.args["q"].shape and s.args["k"].shape[-1] == "head_size", (s.args["k"].shape,
                                                                                             s.args["q"].shape)
    assert any("`max_tokens` is a stride of a contiguous layout: took seq_len" in n for n in p.notes), p.notes


def test_a_stride_of_elements_stays_the_extent_in_elements(project):
    # the same offset with the stride outside the scaled sum: it counts elements, as before
    text = CACHE.replace("(seq + (head / seq_len) * max_tokens) * head_size",
                         "seq * head_size + (head / seq_len) * max_tokens")
    s, _ = infer(project, "cache.cu", text, "scale_keys")
    assert s.args["max_tokens"].value.replace(" ", "") in ("seq_len*head_size", "head_size*seq_len"), \
        s.args["max_tokens"].value
