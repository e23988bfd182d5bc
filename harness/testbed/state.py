"""Who owns which testbed: one state file per prefix under ~/.cache/prfaas-harness/testbed/.

The file is written before any namespace exists and removed after the last one is gone, so a namespace
with the testbed stem is a leftover exactly when no live process owns its prefix: its state file is
missing, or names a process that is dead. The next start and `harness-testbed down` clear leftovers.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import time
from pathlib import Path

from harness.engine.build import cache_root
from harness.testbed import netns


def state_dir() -> Path:
    return cache_root() / "testbed"


def state_path(prefix: str) -> Path:
    return state_dir() / f"{prefix}.json"


def new_prefix() -> str:
    taken = netns.testbed_prefixes() | {p.stem for p in state_dir().glob("*.json")}
    while True:
        prefix = f"{netns.PREFIX_STEM}{secrets.token_hex(2)}"
        if prefix not in taken:
            return prefix


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(prefix: str, **info: object) -> Path:
    path = state_path(prefix)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"prefix": prefix, "pid": os.getpid(), "started": time.time(), **info}))
    return path


def read(prefix: str) -> dict | None:
    try:
        return json.loads(state_path(prefix).read_text())
    except (OSError, ValueError):
        return None


def owner(prefix: str) -> int | None:
    """The live process that owns the prefix, or None (a leftover)."""
    info = read(prefix)
    pid = int(info["pid"]) if info and "pid" in info else None
    return pid if pid is not None and alive(pid) else None


def release(prefix: str) -> None:
    """Remove the prefix's namespaces, veths, slot files and state file."""
    info = read(prefix) or {}
    netns.destroy(prefix)
    slot_dir = Path(str(info.get("slot_dir") or ""))
    if slot_dir.name == prefix:  # only ever a directory named by the prefix
        shutil.rmtree(slot_dir, ignore_errors=True)
    state_path(prefix).unlink(missing_ok=True)


def known_prefixes() -> set[str]:
    files = {p.stem for p in state_dir().glob("*.json") if netns.PREFIX_RE.match(p.stem)}
    return files | netns.testbed_prefixes()


def clear_leftovers() -> list[str]:
    """Remove every testbed whose owner is gone (a killed run); returns their prefixes."""
    cleared = []
    for prefix in sorted(known_prefixes()):
        if owner(prefix) is None:
            release(prefix)
            cleared.append(prefix)
    return cleared


def stop_all(kinds: tuple[str, ...] | None = ("up",), grace_s: float = 15.0) -> list[str]:
    """`harness-testbed down`: ask each live owner of a testbed of one of `kinds` (None: any) to stop
    (SIGTERM: it tears its testbed down), wait, then remove whatever remains; leftovers (no live owner)
    always go. Returns the prefixes handled."""
    handled = []
    for prefix in sorted(known_prefixes()):
        pid = owner(prefix)
        if pid is not None and kinds is not None and (read(prefix) or {}).get("kind") not in kinds:
            continue  # a live run's testbed: it tears down its own
        if pid is not None and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace_s
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        release(prefix)
        handled.append(prefix)
    return handled
