"""Stand a testbed up and tear it down: namespaces and link, engines, transfer agents, in that order.

`Testbed.up()` clears leftovers of killed runs first, claims a prefix (its state file exists before any
namespace does), builds the network, starts every process and waits for their /health. `down()` stops
them and removes everything carrying the prefix; any failure during `up()` runs `down()` before it raises.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import InputError
from harness.testbed import netns, procs, state
from harness.testbed.engines import EngineSpec, engine_args
from harness.testbed.settings import Layout, TestbedSettings


@dataclass(frozen=True)
class AgentSpec:
    name: str
    ns: str
    ctl_host: str
    ctl_port: int

    @property
    def url(self) -> str:
        return f"http://{self.ctl_host}:{self.ctl_port}"


def find_engine(settings: TestbedSettings) -> tuple[Path, Path]:
    """The llama-server binary and model: the configured ones, else those `make engine` cached."""
    from harness.engine.build import LLAMA_CPP_PYTHON, cache_root

    binary = Path(settings.engine_binary) if settings.engine_binary else (
        cache_root() / f"llama-cpp-python-{LLAMA_CPP_PYTHON}" / "bin" / "llama-server")
    if not binary.is_file():
        raise InputError(f"engine binary {binary} not found: build it with `make engine` (or set "
                         f"testbed.engine_binary)")
    if settings.engine_model:
        model = Path(settings.engine_model)
    else:
        found = sorted((cache_root() / "models").glob("**/*.gguf"))
        if not found:
            raise InputError(f"no model under {cache_root() / 'models'}: build it with `make engine` (or set "
                             f"testbed.engine_model)")
        model = found[0]
    if not model.is_file():
        raise InputError(f"engine model {model} not found: build it with `make engine`")
    return binary, model


@dataclass
class Testbed:
    """One running testbed. Units: link rate in Gbit/s (the tbf rate); paths absolute."""

    settings: TestbedSettings
    layout: Layout
    link_gbps: float
    log_dir: Path
    kind: str = "run"  # "up" (harness-testbed up) or "run" (mode=testbed): `down` stops only "up" ones
    prefix: str = ""
    engines: dict[str, EngineSpec] = field(default_factory=dict)
    agents: dict[str, AgentSpec] = field(default_factory=dict)
    processes: list[procs.NsProcess] = field(default_factory=list)

    @property
    def topology(self) -> netns.Topology:
        return netns.Topology(self.prefix)

    @property
    def slot_dir(self) -> Path:
        return self.settings.slot_root_path / self.prefix

    def up(self) -> Testbed:
        netns.check_tools()
        netns.tbf_args(self.link_gbps, self.settings.tbf_burst_bytes, self.settings.tbf_latency_ms)
        if self.settings.prefix:
            netns.check_prefix(self.settings.prefix)
        binary, model = find_engine(self.settings)
        state.clear_leftovers()
        self.prefix = netns.check_prefix(self.settings.prefix) if self.settings.prefix else state.new_prefix()
        if state.owner(self.prefix) is not None:
            raise InputError(f"testbed.prefix={self.prefix} is in use by process {state.owner(self.prefix)}")
        state.claim(self.prefix, kind=self.kind, log_dir=str(self.log_dir), slot_dir=str(self.slot_dir))
        try:
            self._build(binary, model)
        except BaseException:
            self.down()
            raise
        return self

    def _build(self, binary: Path, model: Path) -> None:
        s, topo = self.settings, self.topology
        netns.create(topo, self.link_gbps, s.tbf_burst_bytes, s.tbf_latency_ms)
        local = (topo.local_ns, topo.local_ctl_addr)
        for i, role in enumerate(self.layout.roles):
            ns, host = (topo.remote_ns, topo.remote_ctl_addr) if role == "remote_prefill" else local
            spec = EngineSpec(role, ns, host, s.engine_port + i, self.slot_dir / role)
            spec.slot_dir.mkdir(parents=True, exist_ok=True)
            self.engines[role] = spec
            args = engine_args(binary, model, spec, slots=s.slots, slot_context_tokens=s.slot_context_tokens,
                               threads=s.threads)
            self.processes.append(procs.start(role, ns, args, spec.url, self.log_dir / f"{role}.log"))
        dests = [arg for role in self.layout.decode_roles for arg in ("--dest", str(self.engines[role].slot_dir))]
        for side, ns, host, role in (("remote", topo.remote_ns, topo.remote_ctl_addr, "remote_prefill"),
                                     ("local", topo.local_ns, topo.local_ctl_addr, "local_prefill")):
            agent = AgentSpec(f"agent_{side}", ns, host, s.agent_ctl_port)
            self.agents[side] = agent
            source = self.slot_dir / role
            args = [sys.executable, "-m", "harness.testbed.agent", "--ctl", f"{host}:{s.agent_ctl_port}",
                    "--data", str(s.agent_data_port), *dests, "--source", str(source),
                    "--timeout-s", str(s.transfer_timeout_s)]
            self.processes.append(procs.start(agent.name, ns, args, agent.url, self.log_dir / f"{agent.name}.log"))
        procs.wait_healthy(self.processes, s.ready_timeout_s)

    def down(self) -> None:
        for proc in self.processes:
            proc.stop()
        self.processes.clear()
        if self.prefix:
            state.release(self.prefix)
            shutil.rmtree(self.slot_dir, ignore_errors=True)

    def __enter__(self) -> Testbed:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
