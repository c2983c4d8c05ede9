"""Command-line interface: `semcheck verify kernel.py` (placeholder until the CLI lands)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="semcheck")
    parser.add_argument("--version", action="store_true")
    args = parser.parse_args(argv)
    if args.version:
        from semcheck import __version__

        print(f"semcheck {__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
