"""`python -m benchmarks [NAME ...] [--quick] [--json]`: run benchmarks, print JSON lines."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from . import BENCHMARKS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)}")
    parser.add_argument("--quick", action="store_true", help="smoke-test sizes")
    parser.add_argument("--json", action="store_true", help="JSON lines only (no summary)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHMARKS)}")
    try:
        for name in args.names or list(BENCHMARKS):
            module = importlib.import_module(BENCHMARKS[name])
            for line in module.run(args.quick):
                print(json.dumps(line), flush=True)
                if not args.json:
                    print(_summary(line), file=sys.stderr)
    except BrokenPipeError:  # the reader stopped (`| head -1`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _summary(line: dict[str, object]) -> str:
    text = f"# {line['name']}: {line['value']} {line['unit']}"
    if "baseline" in line:
        text += f" (baseline {line['baseline']}, ratio {line['ratio']})"
    return text


if __name__ == "__main__":
    sys.exit(main())
