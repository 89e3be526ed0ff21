"""Objects of a class the host builds, passed by value: a kernel parameter or a struct's field
given as `{ construct = "uint_fastdiv(page_size)" }` (FlashInfer's `paged_kv.page_size`, a
divisor whose constructor computes a multiplier and a shift; CuTe's `make_shape(M, N, K)`).

No number stands for such an object, and Astra never computes a class's bytes itself: the
expression is C++ over the spec's sizes, evaluated by a small host program compiled with the
unit it launches (`program`: the unit's text, then a `main` that declares each size as an `int`
from its command line, builds each object in zeroed storage, with placement new, of the very type
the kernel's parameter or field has, and prints its bytes in hex, one line each). The backend
builds it with the compiler that builds the kernel (nvcc's host side for the GPU, the CPU
backend's g++ for the CPU: each lays the class out as its kernel reads it) and runs it confined
like a compiler (`compile.hostprog`); the gate places the bytes where the parameter or field
lies (`gate.checks`).

The expression is checked here with tree-sitter before anything is built: calls, names and
template arguments, numbers and arithmetic only; each plain name it reads (not a function's or a
type's) is a size of the spec. Pure.
"""
from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from . import syntax

PROGRAM_FILE = "<astra-construct>"   # the appended main's name in compiler messages
MAX_CHARS = 200
# What an expression may be made of: a constructor or factory call over sizes, numbers and
# arithmetic. Nothing that declares, assigns, takes an address, indexes or runs a lambda.
_NODES = {"call_expression", "argument_list", "identifier", "qualified_identifier", "namespace_identifier",
          "template_function", "template_type", "template_argument_list", "type_descriptor", "primitive_type",
          "type_identifier", "sized_type_specifier", "number_literal", "binary_expression", "unary_expression",
          "parenthesized_expression", "compound_literal_expression", "initializer_list", "conditional_expression",
          "true", "false"}
_TOKENS = {"(", ")", "{", "}", "<", ">", ",", "::", "+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "~",
           "?", ":", "==", "!=", "<=", ">=", "&&", "||", "!", "unsigned", "signed", "long", "short", "int", "char"}


@dataclass(frozen=True)
class Target:
    """One object to build: the kernel's parameter `param` (its index), or its field `field`
    (a path, as the spec gives it), by `expression`."""
    param: int
    field: str
    expression: str


def sizes_used(expression: str) -> set[str]:
    """The sizes an expression reads. ValueError, saying why, if it is not one a spec may give."""
    if not expression.strip() or len(expression) > MAX_CHARS:
        raise ValueError(f"a constructor expression of 1 to {MAX_CHARS} characters, e.g. \"uint_fastdiv(n)\"")
    node = syntax.parse_expression(expression)
    if node is None:
        raise ValueError(f"{expression!r} is not one C++ expression")
    if node.type not in ("call_expression", "compound_literal_expression"):
        raise ValueError(f"{expression!r}: give a constructor or a function call that builds the object, "
                         f"e.g. \"uint_fastdiv(n)\" or \"make_shape(M, N, K)\"")
    names: set[str] = set()
    for n in syntax.walk(node):
        if not n.is_named and n.type not in _TOKENS:
            raise ValueError(f"{expression!r}: `{syntax.text(n)}` is not allowed here (calls, sizes, numbers "
                             f"and arithmetic only)")
        if n.is_named and n.type not in _NODES:
            raise ValueError(f"{expression!r}: `{syntax.text(n)}` is not allowed here (calls, sizes, numbers "
                             f"and arithmetic only)")
        if n.type == "identifier" and _reads(n):
            names.add(syntax.text(n))
    return names


def _reads(n: Node) -> bool:
    """Whether an identifier is a value the expression reads (a size), not a function's name."""
    parent = n.parent
    if parent is None:
        return True
    if parent.type in ("qualified_identifier", "template_function"):
        return False
    if parent.type == "call_expression" and parent.child_by_field_name("function") == n:
        return False
    return True


def _param_type(i: int, name_expression: str) -> str:
    return f"astra_layout_::bare<astra_layout_::param<{i}, decltype(&{name_expression})>::type>::type"


def program(name_expression: str, targets: list[Target], sizes: list[str], helpers: str) -> str:
    """C++ to append to a unit (after its layout probe, whose `helpers` it needs: pass
    `layout.HELPERS` where the unit has no probe, "" where it has) whose kernel is
    `name_expression`: a `main(argc, argv)` that reads each of `sizes` in order as an `int`
    and prints, for each target, the object's bytes in hex on a line of its own."""
    out = [f'\n#line 1 "{PROGRAM_FILE}"\n', helpers, "#include <new>\n#include <cstdio>\n#include <cstdlib>\n"
           "#include <cstring>\n"]
    for k, t in enumerate(targets):
        ty = _param_type(t.param, name_expression)
        if t.field:
            ty = f"astra_layout_::bare<decltype((({ty}*)0)->{t.field})>::type"
        out.append(f"typedef {ty} astra_construct_t{k}_;\n")
    out.append("static void astra_construct_print_(const void* p, unsigned long n) {\n"
               "  const unsigned char* b = (const unsigned char*)p;\n"
               "  for (unsigned long i = 0; i < n; ++i) std::fprintf(stdout, \"%02x\", b[i]);\n"
               "  std::fputc('\\n', stdout);\n}\n")
    out.append(f"int main(int argc, char** argv) {{\n  if (argc != {len(sizes) + 1}) return 2;\n")
    for j, s in enumerate(sizes):
        out.append(f"  const int {s} = (int)std::strtol(argv[{j + 1}], 0, 10);\n")
    for k, t in enumerate(targets):
        # Zeroed storage first: padding the constructor leaves alone prints as zeros, the same each run.
        out.append(f"  {{\n#line {k + 1} \"{PROGRAM_FILE}\"\n"
                   f"    alignas(astra_construct_t{k}_) unsigned char astra_b_[sizeof(astra_construct_t{k}_)];\n"
                   f"    std::memset(astra_b_, 0, sizeof astra_b_);\n"
                   f"    new (astra_b_) astra_construct_t{k}_(({t.expression}));\n"
                   f"    astra_construct_print_(astra_b_, sizeof astra_b_);\n  }}\n")
    for s in sizes:
        out.append(f"  (void){s};\n")
    out.append("  return 0;\n}\n")
    return "".join(out)


def parse_output(text: str, count: int) -> list[bytes]:
    """The program's output: one object's bytes per line. ValueError if it is not that."""
    lines = text.split()
    if len(lines) != count:
        raise ValueError(f"the constructor program printed {len(lines)} objects, {count} expected")
    try:
        return [bytes.fromhex(ln) for ln in lines]
    except ValueError:
        raise ValueError("the constructor program printed something other than an object's bytes") from None
