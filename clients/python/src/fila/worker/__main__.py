"""`python -m fila.worker module:app`: imports `module`, takes its `app`
(a `fila.worker.App`) and runs it until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from . import App, WorkerError


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fila.worker", description=__doc__)
    p.add_argument("target", help="module:attribute naming a fila.worker.App")
    p.add_argument("--log-level", default=os.environ.get("FILA_LOG", "INFO"))
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module, _, attr = args.target.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        app = getattr(importlib.import_module(module), attr or "app")
    except (ImportError, AttributeError) as e:
        print(f"fila.worker: cannot load {args.target}: {e}", file=sys.stderr)
        return 2
    if not isinstance(app, App):
        print(f"fila.worker: {args.target} is a {type(app).__name__}, not a fila.worker.App", file=sys.stderr)
        return 2
    try:
        app.run()
    except WorkerError as e:
        print(f"fila.worker: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
