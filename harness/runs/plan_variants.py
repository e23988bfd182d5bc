"""The deployment / model / hardware nodes harness-plan reads beside the run's config, composed once.

`Variants(base, experiment).get(group, name)` is the `group` node of the run's config with
`group=name` (what composing the `base` overrides plus `<group>=<name>` would give), from ONE
composition of every option; `compose_or_input_error` composes a whole config with one-line errors.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra import compose
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.errors import InputError


def compose_or_input_error(overrides: list[str], config_name: str = "config") -> DictConfig:
    """Compose `config_name` with the overrides; a composition error is an InputError of one line."""
    try:
        return compose(config_name=config_name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        # Hydra's message: the problem, then the available options, then the search path (dropped).
        lines = [ln.strip() for ln in str(err).split("Config search path")[0].splitlines() if ln.strip()]
        detail = lines[0] + (f" ({' '.join(lines[1:])})" if len(lines) > 1 else "") if lines else type(err).__name__
        raise InputError(f"cannot compose config with {' '.join(overrides)}: {detail}") from err


def task_overrides(group: str) -> list[str]:
    """This run's command-line overrides, minus any choice of `group` (we set it per plan)."""
    task = list(HydraConfig.get().overrides.task)
    return without(task, group)


def without(overrides: Sequence[str], group: str) -> list[str]:
    return [o for o in overrides if o.lstrip("+~").split("=", 1)[0] != group]


_GROUPS = ("deployment", "model", "hardware")  # the group options the planner reads beside the run's config


class Variants:
    """The `deployment`, `model` and `hardware` nodes the planner needs, each as composing the run's
    overrides with `<group>=<name>` would give it, from ONE composition (~0.5 s; each full
    composition costs about as much, and the planner needs ~20 of them).

    Every option of the three groups is attached under its own key (`+deployment@deployment.<name>=
    <name>`), and the command line's `deployment.*` / `model.*` / `hardware.*` settings are applied
    to each. When something else changes those nodes (an experiment or local file that sets them,
    a nested group choice such as `router@deployment.router=...`, or an unknown experiment), or the
    one composition fails, each node is composed on its own instead, as before (exact, slower).
    """

    def __init__(self, base: Sequence[str], experiment: str | None, known_experiment: bool = True) -> None:
        self.base = [str(o) for o in base]
        touched = set(_GROUPS) if not known_experiment else self._touched_by_overrides() | _sets_groups(experiment)
        self._fast_groups = [g for g in _GROUPS if g not in touched]
        self._nodes: dict[str, DictConfig] | None = None
        self._cache: dict[tuple[str, str], DictConfig] = {}

    def _touched_by_overrides(self) -> set[str]:
        """Groups an override reaches other than by `<group>=<name>` or `<group>.<key>=<value>`."""
        touched = set()
        for line in self.base:
            key = line.lstrip("+~").split("=", 1)[0]
            group, _, package = key.partition("@")
            head = group.split("/")[0].split(".")[0]
            if package.split(".")[0] in _GROUPS:  # e.g. router@deployment.router=...
                touched.add(package.split(".")[0])
            if head in _GROUPS and ("/" in group or key == "hardware"):  # deployment/router=..., hardware=...
                touched.add(head)
        return touched

    def _compose_all(self) -> dict[str, DictConfig] | None:
        from hydra.core.global_hydra import GlobalHydra

        loader = GlobalHydra.instance().config_loader()
        lines: list[str] = []
        for group in self._fast_groups:
            options = [o for o in loader.get_group_options(group) if not o.startswith("base_")]
            lines += [f"+{group}@{group}.{o}={o}" for o in options]
            for line in self.base:  # the command line's settings of this group, on every option
                prefix, _, rest = line.partition(group + ".")
                if prefix.strip("+~") == "" and rest:
                    lines += [f"{prefix}{group}.{o}.{rest}" for o in options]
        try:
            composed = compose(config_name=None, overrides=lines)
        except Exception:  # Hydra also raises AssertionError here: a setting that does not fit every option;
            return None  # the per-option compositions below apply it as before, or report it
        return {group: composed[group] for group in self._fast_groups}

    def get(self, group: str, name: str) -> DictConfig:
        """The `group` node of the run's config with `group=name`."""
        if group in self._fast_groups and self._nodes is None:
            self._nodes = self._compose_all()
            if self._nodes is None:
                self._fast_groups = []
        if self._nodes is not None and group in self._nodes and name in self._nodes[group]:
            node: DictConfig = self._nodes[group][name]
            return node
        key = (group, name)
        if key not in self._cache:
            if group == "hardware":
                self._cache[key] = compose_or_input_error([], config_name=f"hardware/{name}").hardware
            else:
                self._cache[key] = compose_or_input_error([*without(self.base, group), f"{group}={name}"])[group]
        return self._cache[key]



def _sets_groups(experiment: str | None) -> set[str]:
    """Which of the deployment/model/hardware nodes the experiment file (or conf/local/default.yaml)
    sets itself, beyond choosing an option (each planned option of those is composed with it)."""
    from harness.resources import conf_dir

    files = [conf_dir() / "local" / "default.yaml"]
    if experiment:
        files.append(conf_dir() / "experiment" / f"{experiment}.yaml")
        if not files[-1].is_file():
            return set(_GROUPS)  # not a file of conf/ (a store or search-path config): don't guess
    touched: set[str] = set()
    for path in files:
        if not path.is_file():
            continue
        doc = OmegaConf.to_container(OmegaConf.load(path))
        if not isinstance(doc, dict):
            continue
        touched |= {g for g in _GROUPS if g in doc}
        for entry in doc.get("defaults") or []:
            text = " ".join(entry.keys()) if isinstance(entry, dict) else str(entry)
            touched |= {g for g in _GROUPS if f"{g}/" in text or f"@{g}" in text}
    return touched


def run_variants(base: Sequence[str]) -> Variants:
    """Variants for the overrides of this Hydra run (the experiment read from its choices)."""
    try:
        choices = HydraConfig.get().runtime.choices
    except ValueError:  # not inside a Hydra run: don't guess the experiment
        return Variants(base, None, known_experiment=False)
    return Variants(base, choices.get("experiment"))

