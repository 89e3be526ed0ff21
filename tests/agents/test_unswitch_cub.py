"""`unswitch` on a guarded CUB block load: `Loader(tmp).Load(p, items, valid, 0)` of a vectorized
`cub::BlockLoad` is CUB's guarded loop of one narrow load an item (flashinfer's PackBits,
bitsandbytes' int32 dequantizer); where all of the thread's items are valid and the start is
aligned, the unguarded call (CUB's vector load) reads the same items. Kernel written here; the
rewrite passes the CPU gate at sizes with partial tiles, a variant without the thread's check
is caught, and loads whose arguments compute something or whose loader is not the vectorized
four-argument one are left alone."""
import pytest

from agent_helpers import cpu_evaluator, loaded_kernel
from astra_cuda.agents.offline import TRANSFORMS, context_from_text

KERNEL = r'''
#include <cub/cub.cuh>
#include <cstdint>

/* @astra
grid = ["cdiv(n, 64 * 8)"]
block = ["64"]

[sizes]
n = [1, 13, 512, 1100]

[bench]
n = [16777216]

[args]
in  = { type = "uint8", shape = ["n"] }
out = { type = "uint8", shape = ["cdiv(n, 8)"], output = true }
n   = "n"
*/
__global__ void pack_bytes(const uint8_t* in, uint8_t* out, int n) {
  typedef cub::BlockLoad<uint8_t, 64, 8, cub::BLOCK_LOAD_VECTORIZE> Loader;
  __shared__ typename Loader::TempStorage tmp;
  const int start = blockIdx.x * 64 * 8;
  uint8_t v[8];
  Loader(tmp).Load(in + start, v, n - start, 0);
  uint8_t r = 0;
  for (int i = 0; i < 8; ++i) r |= (v[i] & 1) << i;
  if (start + threadIdx.x * 8 < n) out[start / 8 + threadIdx.x] = r;
}
'''
LOAD = "  Loader(tmp).Load(in + start, v, n - start, 0);\n"
ALIAS = "  typedef cub::BlockLoad<uint8_t, 64, 8, cub::BLOCK_LOAD_VECTORIZE> Loader;\n"


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "cub_load.cu"
    p.write_text(KERNEL)
    return p


def rewritten(path, text=None):
    text, sp = loaded_kernel(path, "pack_bytes", text)
    return TRANSFORMS["unswitch"].apply(text, context_from_text("pack_bytes", text, sp))


def test_a_guarded_vectorized_block_load_takes_the_vector_load_where_the_thread_is_whole(path):
    rw = rewritten(path)
    assert rw is not None, "the guarded CUB load is unswitched"
    assert "const int astra_valid0 = n - start;" in rw.text
    assert "if (astra_valid0 >= ((long long)threadIdx.x + 1) * (8) &&" in rw.text
    assert "Loader(tmp).Load(in + start, v);" in rw.text
    assert "Loader(tmp).Load(in + start, v, astra_valid0, 0);" in rw.text
    evaluate = cpu_evaluator(path, "pack_bytes")
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # a partial tile's last thread must keep the guarded load: without the check it reads past n
    cheat = rw.text.replace("astra_valid0 >= ((long long)threadIdx.x + 1) * (8) &&", "true &&")
    assert cheat != rw.text and not evaluate(cheat).passed
    assert TRANSFORMS["unswitch"].apply(rw.text, context_from_text("pack_bytes", rw.text)) is None


@pytest.mark.parametrize("old,new", [
    (LOAD, "  Loader(tmp).Load(in + start, v, n - start++, 0);\n"),             # an argument changes a name
    (LOAD, "  Loader(tmp, threadIdx.x).Load(in + start, v, n - start, 0);\n"),  # a linear index given
    (LOAD, "  Loader(tmp).Load(in + start, v);\n"),                            # already unguarded
    (ALIAS, ALIAS.replace("BLOCK_LOAD_VECTORIZE", "BLOCK_LOAD_TRANSPOSE")),   # a collective exchange
    (ALIAS, ALIAS.replace("BLOCK_LOAD_VECTORIZE>", "BLOCK_LOAD_VECTORIZE, 2>")),  # a y extent
])
def test_loads_the_check_cannot_cover_are_left_alone(path, old, new):
    assert old in KERNEL
    assert rewritten(path, KERNEL.replace(old, new)) is None


def test_the_kernels_own_alias_hides_the_files(path):
    # the file's `Loader` is the vectorized one, the kernel's own (a transposing one) is what it calls
    text = KERNEL.replace("/* @astra", ALIAS.strip() + "\n/* @astra").replace(
        ALIAS, ALIAS.replace("BLOCK_LOAD_VECTORIZE", "BLOCK_LOAD_TRANSPOSE"))
    assert text.count("BLOCK_LOAD_VECTORIZE") == 1 and text.count("BLOCK_LOAD_TRANSPOSE") == 1
    assert rewritten(path, text) is None
