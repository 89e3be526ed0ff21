import pathlib



ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = {
    "silu_and_mul": ("examples/silu_and_mul.cu", "silu_and_mul"),
    "fused_add_rmsnorm": ("examples/fused_add_rmsnorm.cu", "fused_add_rmsnorm_kernel"),
    "merge_attn_states": ("examples/merge_attn_states.cu", "merge_attn_states"),
}


def example(name: str) -> tuple[str, str, str]:
    rel, kernel = EXAMPLES[name]
    return (ROOT / rel).read_text(), str(ROOT / rel), kernel


