"""Short, stable names for a sweep's job directories (conf/config.yaml `hydra.sweep.subdir`).

Hydra's default joins every override of a job into its directory name, which passes the file system's
255-byte limit on a name once a sweep has a dozen overrides. `job_subdir` keeps that readable name while
it is short, and otherwise keeps its start (cut at an override boundary) plus a hash of all the
overrides, so the name stays short and the same sweep point always gets the same name. The overrides
themselves stay in the job's `.hydra/overrides.yaml` (and in report.parquet).
"""

from __future__ import annotations

import hashlib

# Longest name kept as Hydra writes it (bytes); past it, a prefix and a hash. Well under the 255-byte limit
# of a name on common file systems, so a path of several such names stays readable too.
MAX_NAME_BYTES = 96
HASH_CHARS = 10


def job_subdir(num: object, overrides: object) -> str:
    """`<num>_<overrides>` if that is at most MAX_NAME_BYTES, else `<num>_<start of overrides>_<hash>`."""
    joined = "" if overrides is None else str(overrides)
    name = f"{num}_{joined}" if joined else str(num)
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(joined.encode()).hexdigest()[:HASH_CHARS]
    room = MAX_NAME_BYTES - len(f"{num}__{digest}".encode())
    # Config group choices (`deployment=prfaas_pd`) first: they say most about a run in the fewest bytes.
    items = joined.split(",")
    items = [i for i in items if "." not in i.split("=", 1)[0]] + [i for i in items if "." in i.split("=", 1)[0]]
    start = ",".join(items).encode()[:room].decode(errors="ignore")
    if "," in start:  # cut after the last whole override
        start = start[: start.rindex(",")]
    return f"{num}_{start}_{digest}" if start else f"{num}_{digest}"
