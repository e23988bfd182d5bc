"""Each Hydra command's --help is its own page: what it does, its config groups with one line each,
the key overrides; not Hydra's config dump, and not the same text for every command."""

from __future__ import annotations

import pytest

from .cli import python as _python

# command module -> groups its page must describe (name followed by a description on the same line)
PAGES = {
    "harness": ("workload", "model", "deployment", "link", "loadgen", "planner", "analysis", "faults", "experiment"),
    "harness.plan": ("model", "deployment", "workload", "link", "planner"),
    "harness.serve": ("deployment", "model", "link", "faults"),
    "harness.load": ("workload", "loadgen", "analysis", "deployment"),
}


@pytest.fixture(scope="module")
def pages():
    out = {}
    for module in PAGES:
        proc = _python("-m", module, "--help", timeout=120)
        assert proc.returncode == 0, proc.stderr[-1000:]
        out[module] = proc.stdout
    return out


def test_every_command_has_its_own_page(pages):
    texts = list(pages.values())
    assert len(set(texts)) == len(texts)
    for module, text in pages.items():
        command = "harness" if module == "harness" else "harness-" + module.split(".")[1]
        assert text.startswith(f"{command}:"), text[:200]


@pytest.mark.parametrize("module", PAGES)
def test_a_page_describes_its_groups_and_key_overrides(pages, module):
    text = pages[module]
    lines = text.splitlines()
    for group in PAGES[module]:
        described = [ln for ln in lines if ln.strip().startswith(group + " ") and len(ln.split()) > 3]
        assert described, f"{module}: no one-line description of {group}"
    assert "== Key overrides ==" in text and "Options of each group:" in text
    assert "== Config ==" not in text and len(lines) < 80  # not the config dump
