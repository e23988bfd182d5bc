"""Hydra's run mode without a second composition (harness/hydra_mode.py): where no override and no
config can set `hydra.mode`, `get_mode` answers without composing; wherever one can, Hydra's own
`get_mode` composes and answers. Either way the answer is the one Hydra's composition gives."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_automatic_config_search_path
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

from harness.hydra_mode import mode_is_unset, mode_without_composing
from harness.schema import register_configs

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture
def hydra_for():
    """A Hydra object on a config dir, as `_run_hydra` makes it (plugins and ConfigStore included)."""
    register_configs()

    def make(config_dir: Path) -> Hydra:
        return Hydra.create_main_hydra2(task_name="t", config_search_path=create_automatic_config_search_path(
            None, None, str(config_dir)))

    yield make
    GlobalHydra.instance().clear()


@pytest.fixture
def composes(monkeypatch):
    """How many times Hydra composed a config."""
    calls: list[int] = []
    compose = Hydra.compose_config

    def counted(self, *args, **kwargs):
        calls.append(1)
        return compose(self, *args, **kwargs)

    monkeypatch.setattr(Hydra, "compose_config", counted)
    return calls


def _answers(hydra: Hydra, overrides: list[str], config_name: str = "config") -> tuple[object, object]:
    """(Hydra's own answer, the answer with the shortcut)."""
    own = hydra.get_mode(config_name=config_name, overrides=list(overrides))
    with mode_without_composing():
        fast = hydra.get_mode(config_name=config_name, overrides=list(overrides))
    return own, fast


@pytest.mark.parametrize("overrides", [
    [],
    ["workload.num_requests=10", "analysis.figures=false", "hydra.run.dir=/tmp/x"],
    ["deployment=homogeneous_pd,prfaas_pd", "hydra.sweep.dir=/tmp/x", "hydra/launcher=local_parallel"],
    ["experiment=burstiness_sweep", "mode=live"],  # the harness's own `mode` is not hydra.mode
])
def test_shipped_configs_need_no_composition(hydra_for, composes, overrides):
    hydra = hydra_for(CONF)
    with mode_without_composing():
        assert hydra.get_mode(config_name="config", overrides=list(overrides)) is None
    assert composes == []
    assert hydra.get_mode(config_name="config", overrides=list(overrides)) is None  # Hydra's own answer
    assert composes == [1]


@pytest.mark.parametrize("override, mode", [
    ("hydra.mode=MULTIRUN", RunMode.MULTIRUN),
    ("hydra.mode=RUN", RunMode.RUN),
    ("+hydra.mode=MULTIRUN", RunMode.MULTIRUN),
    ("++hydra.mode=RUN", RunMode.RUN),
    ("hydra={mode: MULTIRUN}", RunMode.MULTIRUN),
])
def test_an_override_that_can_set_the_mode_is_composed(hydra_for, composes, override, mode):
    hydra = hydra_for(CONF)
    own, fast = _answers(hydra, ["workload.num_requests=10", override])
    assert fast == own == mode
    assert len(composes) == 2  # the shortcut composed, as Hydra does


@pytest.mark.parametrize("overrides", [["hydra.searchpath=[file:///nowhere]"], ["+extra@hydra=x"],
                                       ["hydra.mode=MULTIRUN"], ["hydra={mode: RUN}"]])
def test_overrides_that_could_set_the_mode_are_not_decided_without_composing(hydra_for, overrides):
    assert not mode_is_unset(hydra_for(CONF).config_loader, overrides)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


BASE = {"config.yaml": "defaults:\n  - part: a\n  - _self_\nmode: sim\nx: 1\n",
        "part/a.yaml": "y: 2\nmode: fast\n"}

# Each sets hydra.mode in a way a Hydra user can write; the shortcut must not answer None for any.
SETS_MODE = {
    "a key under hydra": {"config.yaml": "defaults:\n  - _self_\nhydra:\n  mode: MULTIRUN\n"},
    "flow style": {"config.yaml": "defaults:\n  - _self_\nhydra: {job: {chdir: false}, mode: MULTIRUN}\n"},
    "a _global_ option": {**BASE, "part/a.yaml": "# @package _global_\nhydra:\n  mode: MULTIRUN\n"},
    "a hydra-package option": {**BASE, "part/a.yaml": "# @package hydra\nmode: MULTIRUN\n"},
    "an option moved to hydra": {**BASE, "config.yaml": "defaults:\n  - part@hydra: b\n  - _self_\n",
                                 "part/b.yaml": "mode: MULTIRUN\n"},
    "an option moved to the root": {**BASE, "config.yaml": "defaults:\n  - part@_global_: b\n  - _self_\n",
                                    "part/b.yaml": "hydra:\n  mode: MULTIRUN\n"},
    "an option set on the command line": {**BASE, "part/c.yaml": "# @package _global_\nhydra:\n  mode: MULTIRUN\n"},
}


@pytest.mark.parametrize("case", sorted(SETS_MODE))
def test_a_config_that_sets_the_mode_gets_hydras_answer(tmp_path, hydra_for, composes, case):
    hydra = hydra_for(_tree(tmp_path, SETS_MODE[case]))
    overrides = ["part=c"] if case == "an option set on the command line" else []
    own, fast = _answers(hydra, overrides)
    assert own == RunMode.MULTIRUN  # the case is real: Hydra's composition finds the mode
    assert fast == own
    assert not mode_is_unset(hydra.config_loader, overrides)


def test_a_hydra_group_option_with_a_mode_is_composed_not_guessed(tmp_path, hydra_for):
    """A hydra/launcher option moved to `hydra` that sets `mode` (hydra/config's own `mode: null` is merged
    after it, so Hydra finds None): not provable from the text, so Hydra composes, and both say None."""
    files = {"config.yaml": "defaults:\n  - override hydra/launcher: mine\n  - _self_\n",
             "hydra/launcher/mine.yaml": "# @package hydra\nmode: MULTIRUN\nlauncher:\n"
                                         "  _target_: hydra._internal.core_plugins.basic_launcher.BasicLauncher\n"}
    hydra = hydra_for(_tree(tmp_path, files))
    assert not mode_is_unset(hydra.config_loader, [])
    assert _answers(hydra, []) == (None, None)


def test_a_hydra_node_set_by_interpolation_is_composed(tmp_path, hydra_for):
    files = {**BASE, "part/c.yaml": "# @package _global_\nhydra: ${oc.create:{}}\n"}
    assert not mode_is_unset(hydra_for(_tree(tmp_path, files)).config_loader, [])


def test_an_unused_option_that_sets_the_mode_is_still_composed(tmp_path, hydra_for):
    """Every option of the search path counts, selected or not (an override could select it)."""
    hydra = hydra_for(_tree(tmp_path, {**BASE, "part/c.yaml": "# @package _global_\nhydra:\n  mode: RUN\n"}))
    assert not mode_is_unset(hydra.config_loader, [])


def test_mode_keys_elsewhere_and_relocations_elsewhere_are_not_the_mode(tmp_path, hydra_for, composes):
    files = {**BASE, "config.yaml": "defaults:\n  - part@deep.part: a\n  - /part@other: a\n  - _self_\nmode: sim\n",
             "hydra/launcher/mine.yaml": "mode: fast\n"}  # hydra.launcher.mode, not hydra.mode
    hydra = hydra_for(_tree(tmp_path, files))
    with mode_without_composing():
        assert hydra.get_mode(config_name="config", overrides=[]) is None
    assert composes == []
    assert hydra.get_mode(config_name="config", overrides=[]) is None  # Hydra agrees


def test_a_stored_node_that_sets_the_mode_is_composed(tmp_path, hydra_for):
    hydra = hydra_for(_tree(tmp_path, BASE))
    assert mode_is_unset(hydra.config_loader, [])
    store = ConfigStore.instance()
    store.store(group="stored_mode_test", name="on", node={"hydra": {"mode": "MULTIRUN"}}, package="_global_")
    try:
        assert not mode_is_unset(hydra.config_loader, [])
    finally:
        del store.repo["stored_mode_test"]  # the store is process-wide: leave it as it was


def test_the_original_get_mode_is_restored(hydra_for):
    original = Hydra.get_mode
    with mode_without_composing():
        assert Hydra.get_mode is not original
    assert Hydra.get_mode is original
