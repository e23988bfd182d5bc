"""`harness-testbed up|down|status`: the PD testbed by hand (a `mode=testbed` run stands up its own).

    harness-testbed up [overrides]   stand it up from the same configs a run uses (experiment=testbed_scale unless
                                     another is given), print the router URL on stdout, serve until Ctrl-C or
                                     SIGTERM, then tear it down
    harness-testbed down [--all]     stop testbeds made by `up` and clear leftovers of killed runs
                                     (--all: also stop testbeds that live runs own)
    harness-testbed status           one line per testbed: prefix, owner, kind, namespaces
    harness-testbed probe [--out F] [overrides]  calibration probes (link, save/restore, engines) -> JSON
                                     with the emulator overrides they imply (harness/testbed/probes.py)
    harness-testbed check [overrides]  up, one request per route (a short prompt local, a long one across the
                                     link), each KV file checked byte for byte in size, down (`make testbed`)

Exit 0 ok, 2 bad input (not root, no ip/tc, a rate tbf cannot shape, no engine: `make engine`), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import InputError, run_command

PROG = "harness-testbed"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="stand the testbed up and serve its router until Ctrl-C")
    up.add_argument("--port", type=int, default=0, help="router port on 127.0.0.1 (0: a free one)")
    up.add_argument("--log-dir", type=Path, default=None, help="engine and agent logs (default: the state dir)")
    up.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. deployment=naive_hetero link.capacity_gbps=0.5")
    down = sub.add_parser("down", help="tear down testbeds made by `up` and every leftover")
    down.add_argument("--all", action="store_true", help="also stop testbeds owned by running runs")
    sub.add_parser("status", help="list testbeds")
    probe = sub.add_parser("probe", help="calibration probes -> JSON (never the validation workload)")
    probe.add_argument("--out", type=Path, default=None, help="default: <cache>/testbed/probes.json")
    probe.add_argument("overrides", nargs="*", help="Hydra overrides")
    check = sub.add_parser("check", help="self-check: up, one request per route, down")
    check.add_argument("overrides", nargs="*", help="Hydra overrides")
    return parser.parse_args(argv)


def compose_config(overrides: list[str]):  # -> DictConfig
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from harness.cli import with_testbed_preset
    from harness.hydra_entry import CONF_DIR
    from harness.schema import register_configs

    register_configs()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            return compose("config", overrides=with_testbed_preset(["mode=testbed", *overrides]))
    except (HydraException, OmegaConfBaseException) as err:
        raise InputError(" ".join(str(err).split())) from err


def up(args: argparse.Namespace) -> int:
    import signal
    import threading

    from harness.testbed.cluster import Testbed
    from harness.testbed.run import settings_of
    from harness.testbed.service import ServiceThread, build_router
    from harness.testbed.settings import layout_of
    from harness.testbed.state import state_dir

    cfg = compose_config(list(args.overrides))
    settings, layout = settings_of(cfg), layout_of(cfg.deployment)
    router = build_router(cfg.deployment.router, settings.threshold_tokens)
    log_dir = args.log_dir or state_dir() / "logs"
    testbed = Testbed(settings, layout, float(cfg.link.capacity_gbps), log_dir, kind="up")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        testbed.up()
        service = ServiceThread(testbed, router, model_name=str(cfg.model.name), port=args.port)
        try:
            url = service.start()
            print(url, flush=True)
            print(f"testbed {testbed.prefix}: {', '.join(layout.roles)}; link {testbed.link_gbps:g} Gbit/s; "
                  f"logs {log_dir}; Ctrl-C or `{PROG} down` stops it", file=sys.stderr, flush=True)
            while not stop.wait(0.5):
                pass
        finally:
            service.stop()
    finally:
        testbed.down()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def down(args: argparse.Namespace) -> int:
    from harness.testbed import netns, state

    netns.check_tools()
    handled = state.stop_all(kinds=None if args.all else ("up",))
    print(f"removed {len(handled)} testbed(s){': ' + ', '.join(handled) if handled else ''}")
    return 0


def status() -> int:
    from harness.testbed import netns, state

    namespaces = netns.list_namespaces()
    for prefix in sorted(state.known_prefixes()):
        info = state.read(prefix) or {}
        owner = state.owner(prefix)
        mine = [ns for ns in namespaces if ns.startswith(prefix + "-")]
        print(f"{prefix}  owner={owner if owner else 'none (leftover)'}  kind={info.get('kind', '?')}  "
              f"namespaces={','.join(mine) or '-'}")
    return 0


def probe(args: argparse.Namespace) -> int:
    import asyncio
    import tempfile

    from harness.testbed.cluster import Testbed
    from harness.testbed.probes import model_kv_bytes_per_token, run_probes, write_probes
    from harness.testbed.run import settings_of
    from harness.testbed.settings import layout_of
    from harness.testbed.state import state_dir

    cfg = compose_config(["deployment=prfaas_pd", *args.overrides])
    settings, layout = settings_of(cfg), layout_of(cfg.deployment)
    with (tempfile.TemporaryDirectory(prefix="harness-testbed-probe-") as logs,
          Testbed(settings, layout, float(cfg.link.capacity_gbps), Path(logs), kind="run") as testbed):
        doc = asyncio.run(run_probes(testbed, model_kv_bytes_per_token(cfg.model)))
    path = write_probes(doc, args.out or state_dir() / "probes.json")
    print(f"probes: {path}")
    print(" ".join(doc["overrides"]))
    return 0


def self_check(overrides: list[str]) -> int:
    """One short and one long request through PrfaaS-PD on the real engines; 1 if any record is wrong."""
    import tempfile

    from harness.testbed.check import run_check

    with tempfile.TemporaryDirectory(prefix="harness-testbed-check-") as logs:
        cfg = compose_config(["deployment=prfaas_pd", *overrides])
        problems = run_check(cfg, Path(logs))
    for line in problems:
        print(f"FAIL {line}", file=sys.stderr)
    print("testbed check: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    commands = {"up": lambda: up(args), "down": lambda: down(args), "status": status,
                "check": lambda: self_check(list(args.overrides)), "probe": lambda: probe(args)}
    run_command(commands[args.command], PROG)


if __name__ == "__main__":
    main()
