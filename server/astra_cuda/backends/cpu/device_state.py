"""A module's writable data on the CPU backend — its `__device__`/`__managed__` variables, template
and inline variables, device functions' static locals, the shim's clock — which a GPU keeps for
the module's life, while every launch here runs in a fresh process. The link puts the unit's
`.data`/`.bss` into sections of their own (`runtime/astra_state.ld`); `layout` reads where they
are from the module's section headers (pyelftools), never from anything the module's code says;
the executor (`runtime/astra_executor.cpp`) copies them into each launch and out after it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from astra_cuda.backends.base import CompileError

MAX_STATE_BYTES = 1 << 30
MAX_STATE_RANGES = 64
SCRIPT = Path(__file__).parent / "runtime" / "astra_state.ld"
# The writable sections a link makes of its own (the runtime's data, the dynamic linker's tables):
# any other writable section of a module holds the unit's data (SCRIPT's two, or a section
# the source named in an attribute).
LINKER_SECTIONS = (".data", ".bss", ".data.rel.ro", ".init_array", ".fini_array", ".preinit_array", ".dynamic",
                   ".got", ".got.plt", ".tm_clone_table", ".ctors", ".dtors", ".jcr")


@dataclass(frozen=True)
class StateLayout:
    """Where a module's __device__ variables are, as offsets from where it is loaded: a GPU keeps
    them for the module's life, and the executor carries them from one launch (each in a fresh
    process) to the next."""
    ranges: tuple[tuple[int, int], ...]  # (offset, bytes) of each writable section of the unit's data
    image_bytes: int                     # the module's extent in memory (a pointer into it moves with it)

    @property
    def nbytes(self) -> int:
        return sum(n for _, n in self.ranges)

    @property
    def buffer_bytes(self) -> int:
        """The size of the buffer that holds them between launches (astra_executor.cpp,
        state_position): a page for where the module was loaded, then each range at its own
        offset within a page, so that its pages line up with the module's."""
        pos = 4096
        for at, n in self.ranges:
            pos = -(-pos // 4096) * 4096 + at % 4096 + n
        return pos


def layout(module: Path) -> StateLayout:
    """Read from the compiled module's section headers (pyelftools), never from anything its code
    says about itself."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.constants import SH_FLAGS
    from elftools.elf.elffile import ELFFile
    try:
        with open(module, "rb") as f:
            elf = ELFFile(f)
            image = max((int(seg["p_vaddr"]) + int(seg["p_memsz"]) for seg in elf.iter_segments("PT_LOAD")),
                        default=0)
            ranges = []
            for sec in elf.iter_sections():
                flags = int(sec["sh_flags"])
                if (flags & SH_FLAGS.SHF_ALLOC and flags & SH_FLAGS.SHF_WRITE and not flags & SH_FLAGS.SHF_TLS
                        and sec.name not in LINKER_SECTIONS and int(sec["sh_size"])):
                    ranges.append((int(sec["sh_addr"]), int(sec["sh_size"])))
    except (OSError, ELFError) as e:
        raise CompileError(f"cannot read the compiled module {module.name}: {e}")
    layout = StateLayout(tuple(sorted(ranges)), image)
    if layout.nbytes > MAX_STATE_BYTES:
        raise CompileError(f"the kernel's __device__ variables take {layout.nbytes >> 20} MiB: the CPU backend "
                           f"keeps at most {MAX_STATE_BYTES >> 20} MiB of them between launches")
    if len(ranges) > MAX_STATE_RANGES or any(at + n > image for at, n in ranges):
        raise CompileError(f"the compiled module {module.name} has writable sections the CPU backend cannot keep")
    return layout
