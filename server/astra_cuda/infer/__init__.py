"""Propose a harness spec for a kernel that has none.

From the signature: const pointers are inputs, other pointers outputs, integer scalars are
sizes, float scalars get a value from their name. From a launch site: the grid and block
expressions, rewritten over the kernel's own parameter names. Everything guessed is listed in
`notes`, so the user knows what to check.

Modules: `types` (element types), `template_args` (template arguments; `template_names`,
`dispatch_types`, `project_instances`), `launches` (the launch's grid and block; `launch_locals`,
`launch_conditions`, `launch_callers`), `hostexprs` (host C++ expressions -> spec expressions),
`roles` (shapes and roles from the kernel's accesses; `shape_fits`), `sizes` (size values, bench
sizing, repair), `program` (the file and its siblings: launches, calls, instantiations),
`proposal` (the entry) around `draft` (the assembled comment; `body_facts`, `requirements`,
`notes`), `validate` (proposed only after it runs: drafts tried in order, the run injected).
"""
from . import validate
from .hostexprs import HostExprs
from .draft import Proposal
from .proposal import infer

__all__ = ["Proposal", "infer", "validate", "HostExprs"]
