"""The testbed's network: two namespaces, a tbf-shaped veth link between them, two control veths to the root.

Every object carries the testbed's prefix (`pfhtb<4 hex>`), so clean-up can only ever touch what a testbed
made. Addresses come from 198.18.0.0/15 (RFC 2544's benchmarking range), one /24 per testbed chosen from its
prefix, split into /30s that exist only on these veths:

    .0/30  the link     remote `<p>-rl` .1  <->  local `<p>-lr` .2    (tbf on `<p>-rl`: remote -> local)
    .4/30  control      root `<p>-cr` .5    <->  remote `<p>-rc` .6   (unshaped)
    .8/30  control      root `<p>-cl` .9    <->  local `<p>-lc` .10   (unshaped)
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
from dataclasses import dataclass

from harness.errors import InputError

PREFIX_STEM = "pfhtb"
PREFIX_RE = re.compile(rf"^{PREFIX_STEM}[0-9a-f]{{4}}$")
_NET_BASE = int(ipaddress.IPv4Address("198.18.0.0"))
MAX_RATE_GBPS = 5.0  # an unshaped veth moves 8.8-12.6 Gbit/s here: above ~5 tbf is no longer the bottleneck
TBF_HZ = 250  # tbf needs burst >= rate / HZ bytes to reach its rate (kernel timer granularity, conservative)
MTU_FRAME_BYTES = 1514


class CommandError(RuntimeError):
    """An `ip`/`tc` command failed: its command line and stderr, in one line."""


def check_prefix(prefix: str) -> str:
    if not PREFIX_RE.match(prefix):
        raise InputError(f"testbed.prefix={prefix!r} must be {PREFIX_STEM} followed by 4 hex digits, e.g. "
                         f"{PREFIX_STEM}0a1f (every namespace and veth of a testbed carries it)")
    return prefix


@dataclass(frozen=True)
class Topology:
    """Names and addresses of one testbed's namespaces and veths, all derived from its prefix."""

    prefix: str

    @property
    def remote_ns(self) -> str:
        return f"{self.prefix}-remote"

    @property
    def local_ns(self) -> str:
        return f"{self.prefix}-local"

    @property
    def link_dev(self) -> str:
        """The remote end of the link: the shaped device (KV flows remote -> local)."""
        return f"{self.prefix}-rl"

    @property
    def link_peer(self) -> str:
        return f"{self.prefix}-lr"

    def _addr(self, host: int) -> str:
        octet = int(self.prefix[-4:], 16) % 512  # /24 index inside 198.18.0.0/15
        return str(ipaddress.IPv4Address(_NET_BASE + octet * 256 + host))

    @property
    def subnet(self) -> str:
        return self._addr(0) + "/24"

    @property
    def remote_link_addr(self) -> str:
        return self._addr(1)

    @property
    def local_link_addr(self) -> str:
        return self._addr(2)

    @property
    def remote_ctl_addr(self) -> str:
        """The remote namespace's address on its control veth (engines and agent bind it)."""
        return self._addr(6)

    @property
    def local_ctl_addr(self) -> str:
        return self._addr(10)

    def veths(self) -> list[tuple[str, str | None, str, str, str, str]]:
        """(dev, its ns, peer, peer ns, dev addr, peer addr) for the three pairs; ns None = the root."""
        p = self.prefix
        return [
            (self.link_dev, self.remote_ns, self.link_peer, self.local_ns, self._addr(1), self._addr(2)),
            (f"{p}-cr", None, f"{p}-rc", self.remote_ns, self._addr(5), self._addr(6)),
            (f"{p}-cl", None, f"{p}-lc", self.local_ns, self._addr(9), self._addr(10)),
        ]


def tbf_args(rate_gbps: float, burst_bytes: int, latency_ms: float) -> list[str]:
    """`tc qdisc ... tbf` arguments for a rate in Gbit/s; InputError when tbf cannot shape it."""
    if not 0 < rate_gbps <= MAX_RATE_GBPS:
        raise InputError(f"link.capacity_gbps={rate_gbps:g}: the testbed's tbf link shapes 0 < rate <= "
                         f"{MAX_RATE_GBPS:g} Gbit/s (a veth does ~9-12 Gbit/s unshaped; scale the link down)")
    need = max(MTU_FRAME_BYTES, int(rate_gbps * 1e9 / 8 / TBF_HZ))
    if burst_bytes < need:
        raise InputError(f"testbed.tbf_burst_bytes={burst_bytes}: tbf at {rate_gbps:g} Gbit/s needs a burst of at "
                         f"least {need} bytes (rate / {TBF_HZ} Hz, and one frame)")
    if latency_ms <= 0:
        raise InputError(f"testbed.tbf_latency_ms={latency_ms:g} must be > 0")
    rate_kbit = max(1, round(rate_gbps * 1e6))
    return ["rate", f"{rate_kbit}kbit", "burst", str(burst_bytes), "latency", f"{latency_ms:g}ms"]


def check_tools() -> None:
    """Root and iproute2, or one line saying what is missing."""
    import os

    if os.geteuid() != 0:
        raise InputError("the testbed needs root (network namespaces, veths and tc): run it as root, e.g. in CI "
                         "or with sudo")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise InputError(f"`{tool}` not found: the testbed needs iproute2 (`apt-get install -y iproute2`)")


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise CommandError(f"`{' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done


def list_namespaces() -> list[str]:
    out = sh("ip", "-j", "netns", "list", check=False).stdout.strip()
    try:
        return [str(entry["name"]) for entry in json.loads(out or "[]")]
    except (ValueError, KeyError, TypeError):
        return [line.split()[0] for line in out.splitlines() if line.strip()]


def testbed_prefixes() -> set[str]:
    """Prefixes of every testbed namespace present (made by any testbed, alive or left over)."""
    found = set()
    for name in list_namespaces():
        head = name.split("-", 1)[0]
        if PREFIX_RE.match(head):
            found.add(head)
    return found


def create(topo: Topology, rate_gbps: float, burst_bytes: int, latency_ms: float) -> None:
    """Make the namespaces, veths, addresses and the tbf qdisc (remove whatever a failure left)."""
    shape = tbf_args(rate_gbps, burst_bytes, latency_ms)  # bad rates fail before anything exists
    clash = sh("ip", "route", "show", "to", "match", topo.local_link_addr, check=False).stdout
    if any(line and not line.startswith("default") for line in clash.splitlines()):
        raise InputError(f"{topo.subnet} (testbed.prefix={topo.prefix}) is already routed on this host: "
                         f"choose another testbed.prefix")
    try:
        for ns in (topo.remote_ns, topo.local_ns):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for dev, dev_ns, peer, peer_ns, dev_addr, peer_addr in topo.veths():
            sh("ip", "link", "add", dev, "type", "veth", "peer", "name", peer)
            ends: tuple[tuple[str, str | None, str], ...] = ((dev, dev_ns, dev_addr), (peer, peer_ns, peer_addr))
            for name, home, addr in ends:
                if home is not None:
                    sh("ip", "link", "set", name, "netns", home)
                where = ["-n", home] if home is not None else []
                sh("ip", *where, "addr", "add", f"{addr}/30", "dev", name)
                sh("ip", *where, "link", "set", name, "up")
        sh("ip", "netns", "exec", topo.remote_ns, "tc", "qdisc", "replace", "dev", topo.link_dev, "root", "tbf",
           *shape)
    except BaseException:
        destroy(topo.prefix)
        raise


def set_link(topo: Topology, up: bool) -> None:
    """Take the link down or up (a fault): both ends, so neither side keeps queueing."""
    state = "up" if up else "down"
    sh("ip", "-n", topo.remote_ns, "link", "set", topo.link_dev, state)
    sh("ip", "-n", topo.local_ns, "link", "set", topo.link_peer, state)


def tx_bytes(topo: Topology) -> int:
    """Bytes the shaped device has put on the wire (its own counter, read inside the namespace)."""
    out = sh("ip", "netns", "exec", topo.remote_ns, "cat", f"/sys/class/net/{topo.link_dev}/statistics/tx_bytes")
    return int(out.stdout.strip())


def kill_namespace_pids(ns: str) -> None:
    import os
    import signal

    for line in sh("ip", "netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(line), signal.SIGKILL)
        except (ValueError, ProcessLookupError, PermissionError):
            pass


def destroy(prefix: str) -> list[str]:
    """Kill every process inside the prefix's namespaces, delete them (their veths go with them) and any
    root-side veth of the prefix left without a peer; returns what was removed."""
    check_prefix(prefix)
    removed = []
    for ns in list_namespaces():
        if ns.startswith(prefix + "-"):
            kill_namespace_pids(ns)
            removed.append(ns)
    for ns in removed:
        sh("ip", "netns", "del", ns, check=False)
    for dev in (f"{prefix}-cr", f"{prefix}-cl", f"{prefix}-rl", f"{prefix}-lr"):
        if sh("ip", "link", "show", dev, check=False).returncode == 0:
            sh("ip", "link", "del", dev, check=False)
            removed.append(dev)
    return removed
