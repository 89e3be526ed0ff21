"""Pure parts: the fenced-block protocol, splicing a kernel back into its file, the evaluation
records, the speedup chart."""
import math

from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.coder import fenced_blocks, signature, splice
from astra_cuda.evaluation import CachedEvaluate

from agent_helpers import example


def test_fenced_blocks_languages_and_unterminated():
    reply = "text\n```cuda\nA\n```\n```python\nB\n```\n```c++\nC\n```\n```cpp\nD"
    assert fenced_blocks(reply) == ["A", "C", "D"]
    assert fenced_blocks("no code here") == []


def test_splice_replaces_kernel_and_helpers():
    text, _, kernel = example("silu_and_mul")
    block = """__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }
__device__ float twice(float x) { return 2.0f * x; }
__global__ void silu_and_mul(__half* __restrict__ out, const __half* __restrict__ input, const int d) {
  out[0] = input[0];
}"""
    new, problem = splice(text, kernel, block)
    assert problem == "" and new is not None
    assert "__expf(-x)" in new and new.count("float silu(") == 1     # helper replaced, not duplicated
    assert new.index("float twice(") < new.index("/* @astra")          # new helper above the spec
    assert "int main()" in new and "out[0] = input[0];" in new


def test_splice_problems():
    text, _, kernel = example("silu_and_mul")
    assert "does not define the kernel" in splice(text, kernel, "__global__ void other() {}")[1]
    assert "does not parse" in splice(text, kernel, "__global__ void silu_and_mul(int d) { if (")[1]


def test_splice_refuses_what_the_file_does_not_include():
    """A model's kernel may not read another file: `#include ".env"` (in any spelling) is refused;
    what the file already includes may stay."""
    text, _, kernel = example("silu_and_mul")
    head = "__global__ void silu_and_mul(__half* __restrict__ out, const __half* __restrict__ input, const int d) {\n"
    for inc in ('#include ".env"', "%:include </etc/passwd>", '# /* x */ include_next "../x"', '#inc\\\nlude "a"',
                '#embed "key.pem"'):
        new, problem = splice(text, kernel, head + inc + "\n  out[0] = input[0];\n}")
        assert new is None, (inc, problem)  # refused (some spellings already fail to parse)
        if inc.startswith(("#include", "#embed")):
            assert "a candidate may include only what the file already includes" in problem, (inc, problem)
    included = next(line for line in text.splitlines() if line.startswith("#include"))
    new, problem = splice(text, kernel, head + included + "\n  out[0] = input[0];\n}")
    assert problem == "", problem


def test_signature_text():
    text, _, kernel = example("silu_and_mul")
    assert signature(text, kernel) == ("__global__ void silu_and_mul(__half* __restrict__ out, "
                                       "const __half* __restrict__ input, const int d)")


def test_evaluation_json_roundtrip_and_geomean():
    p = ProfileSummary((SizeTiming({"n": 1}, 20.0, 10.0, 0.8), SizeTiming({"n": 2}, 10.0, 10.0, None)), "memory", 32, 0.5)
    e = Evaluation(Check(True, "ok", "", 12, "passed"), p)
    back = Evaluation.from_json(e.to_json())
    assert back == e and math.isclose(back.speedup, math.sqrt(2.0)) and back.profile.best_copy_share == 0.8
    assert Evaluation(Check(True, "ok")).speedup is None


def test_cached_evaluate_once_and_errors_become_failures():
    seen = []

    def ev(text):
        seen.append(text)
        if "boom" in text:
            raise RuntimeError("kaput")
        return Evaluation(Check(True, "ok"))

    c = CachedEvaluate(ev)
    assert c("a").passed and c("a").passed and seen == ["a"]
    bad = c("boom")
    assert not bad.passed and "kaput" in bad.check.feedback
