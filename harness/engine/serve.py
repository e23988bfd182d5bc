"""`python -m harness.engine.serve [--slots N] [--threads N] [--context TOKENS] [--port P]`: the project's
engine (built and cached on first use, as `make engine`) on 127.0.0.1 until Ctrl-C.

Prints `listening on http://127.0.0.1:PORT`; point `harness-profile target.url=...` or
`python -m harness mode=url target.url=...` at it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness.engine.build import BuildError, ensure_engine
from harness.engine.server import serve_until_interrupted, start_server
from harness.errors import install_signal_handlers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.engine.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", type=int, default=4, help="parallel sequences (-np); default 4")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (-t); default 2")
    ap.add_argument("--context", type=int, default=16384, help="KV tokens shared by the slots (-c); default 16384")
    ap.add_argument("--port", type=int, default=0, help="0 (default): a free port")
    args = ap.parse_args(argv)
    install_signal_handlers()  # Ctrl-C / SIGTERM raise KeyboardInterrupt, so the server is stopped, not orphaned
    try:
        engine = ensure_engine()
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log = Path(tempfile.mkdtemp(prefix="llama-server-")) / "server.log"
    server = start_server(engine.binary, engine.model, log, slots=args.slots, threads=args.threads,
                          context=args.context, port=args.port)
    print(f"listening on {server.url} (model {engine.model.name}, {args.slots} slots; log {log})", flush=True)
    return serve_until_interrupted(server)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
