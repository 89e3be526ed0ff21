"""A launcher that sets its block count inside the `switch` case holding the launch (bitsandbytes'
optimizerStatic8bitBlockwise: `int num_blocks = 0; switch (OPTIMIZER) { case ADAM: num_blocks = n / 256;
... <<<num_blocks, 256>>> }`): the declaration's 0 is not the grid the launch sees (it was, and the
inferred grid (0, 1, 1) could not be launched)."""
from astra_cuda.infer.launch_paths import path_locals
from astra_cuda.model.syntax import parser, walk

SRC = b"""
template <int OPT> void launch(float* p, int n) {
    int num_blocks = 0;
    switch (OPT) {
    case 0:
        num_blocks = n / 256;
        num_blocks = n % 256 == 0 ? num_blocks : num_blocks + 1;
        k<<<num_blocks, 256>>>(p, n);
        break;
    }
}
"""


def test_a_local_set_in_the_launchs_switch_case_is_not_its_declared_zero() -> None:
    root = parser().parse(SRC).root_node
    fn = next(n for n in walk(root) if n.type == "function_definition")
    call = next(n for n in walk(fn) if n.type == "call_expression" and b"<<<" in (n.text or b""))
    assert path_locals(fn, call, {}).get("num_blocks") != "0"
