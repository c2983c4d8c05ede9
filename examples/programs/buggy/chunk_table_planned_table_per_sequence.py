"""BUGGY: the chunk-table metadata call of examples/programs/chunk_table_planned.py with one table entry per
sequence, where a sequence may need several chunks.

Pattern (written for semcheck): as examples/programs/chunk_table_planned.py: a metadata kernel walks the sequences
in a `fori_loop`, carrying the number of chunks so far, and stores each chunk's entry at `count + j`; a second call
copies the chunks the tables list.

BUG: the tables are sized SEQS (4 entries, one per sequence), but the sequences (3, 17, 9 and 1 rows, chunks of
8) need 1 + 3 + 2 + 1 = 7 chunks: the accumulated index reaches 4 in the second sequence's last chunk and runs
past the tables.

What the interpreter does: the metadata call's store at index 4 of a 4-entry SMEM table raises `ValueError`
(out-of-bounds write, specs/semantics/accesses.md ACC-10) on every device in both DMA modes; the whole jitted
program raises it and the second call never starts. On a TPU the store lands past the table (Mosaic checks SMEM
indices only where bounds checks are on, and a kernel may turn them off): the tables the second call reads are
not the interpreter's, so semcheck decides nothing of the second call there (specs/deciding/programs.md PRG-169,
PRG-229: the accumulated index is bounded, but the table's end is not what PRG-202 asks).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _planned():
    path = Path(__file__).resolve().parents[1] / "chunk_table_planned.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_chunk_table_planned", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


planned = _planned()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return planned.build_with(num_devices, planned.interpret_params(dma_mode, interpret), table=planned.SEQS)
