"""`python -m oracles.spin export --promela KERNEL.py --devices N [--spin]` (from the repository's root)."""

import sys

from oracles.spin.export import export_main

if sys.argv[1:2] != ["export"]:
    print("usage: python -m oracles.spin export --promela KERNEL.py[::target] [--devices N] [--dma-mode M] "
          "[-o FILE] [--spin]", file=sys.stderr)
    sys.exit(2)
sys.exit(export_main(sys.argv[2:]))
