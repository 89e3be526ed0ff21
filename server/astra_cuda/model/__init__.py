"""The kernel model: what a CUDA file and its kernels are, read without compiling or running
anything — the tree-sitter model (`source`, `syntax`), the harness spec (`spec`, `tomlpos`,
`spec_help`), size expressions and element types (`exprs`, `dtypes`), what a kernel body reads and
writes (`access`), struct layouts (`layout`), launch changes (`launch_change`), the size ladder
(`ladder`) and text edits (`textedit`). Pure: it imports no other layer of the package but the
shared errors and diagnostics."""
