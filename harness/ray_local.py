"""Settings of a Ray instance the harness starts itself (conf/hydra/launcher/ray_cluster.yaml).

With `hydra.launcher.ray.init.address=null` the Ray launcher starts a private Ray instance on this machine
for the sweep. Its servers listen on every interface (Ray binds them so, whatever it is told), so the
launcher config asks `ray.init` to announce the loopback address and start no dashboard, and
`PrivateRayToken` makes every connection need a token made for the sweep. Joining an existing cluster
(an address given, or `auto`) all of this stays unset: the cluster's own settings apply. `local_only` is
the resolver the config uses to tell the two apart.
"""

from __future__ import annotations

from typing import Any


def local_only(address: Any, value: Any) -> Any:
    """`value` when `address` is null (a Ray instance started for this sweep), else None (ray.init's default)."""
    return value if address is None else None


class PrivateRayToken:
    """A Hydra callback (conf/hydra/launcher/ray_cluster.yaml): a Ray instance started for this sweep
    (`address: null`) requires a token on every connection, a random one made for the sweep.

    Ray's servers listen on every interface whatever `ray.init` is told (its node address only changes what
    it announces), so a private instance is protected by Ray's token authentication instead: before the
    launcher starts Ray, RAY_AUTH_MODE=token and a fresh RAY_AUTH_TOKEN go into this process's environment,
    which Ray's processes inherit. Nothing is written to disk; the token dies with the sweep. A user's own
    RAY_AUTH_MODE (or a cluster joined by address) is left as it is.
    """

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        import os
        import secrets

        launcher = config.hydra.launcher
        init = launcher.get("ray", {}).get("init", {}) if "ray" in launcher else {}
        if init.get("address", "auto") is not None or "RAY_AUTH_MODE" in os.environ:
            return
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
