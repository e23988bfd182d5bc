"""The paper's Table 6 outputs never reach harness/ code or conf/ inputs (README "Honest numbers").

They may live only in tests and conf/gates/ (targets with tolerances). An input fitted to one says so
where it lives: its provenance carries "[I]". This guard scans every harness/**/*.py and every
conf/**/*.yaml outside conf/gates/ for the outputs, so a `3.24` added as a constant, a threshold set to
19400 or a comment quoting "~13 Gbps" without an [I] tag fails here.

The rule, precisely:
- The outputs (paper-facts 12.3, 12.5; [P]): Lambda_max 3.24 / 2.45 / 2.11, Theta_prfaas / Theta_pd-p /
  Theta_pd-d 1.61 / 1.64 / 3.91, 2.35, 2.45 / 6.25, mean / P90 TTFT 2.22 / 3.51, 4.44 / 9.73, 1.74 / 3.51,
  ratios 1.54 / 1.16 / 1.32, offload 49.6% (0.496), threshold 19.4K (19400, 19,400, 19_400), the
  "~13 Gbps" egress, the ~15% equal-cost gain (1.15), l_long "44K".
- A decimal output matches as a number of its own: not inside a longer one (13.24, 2.115, 1.611) and
  not as part of a dotted version (2.11.0); trailing zeros still match (3.240). The egress matches only
  with its unit ("13 Gbps", "13.0 Gbps"): a bare 13 is everywhere. "19.4K" and "44K" need their K
  (a bare 19.4 is not the threshold); the threshold in tokens matches as 19400 / 19,400 / 19_400.
- Python: a numeric literal equal to an output (any spelling: 3.240, 324e-2, 19_400) is never allowed;
  a string or comment token may quote one only if that token carries "[I]".
- YAML: a line may hold one only if the line carries "[I]", or it lies inside a string scalar (e.g. a
  folded `provenance: >-` block) whose text carries "[I]".
- ALLOWED (below) lists exceptions by (path, matched text) with the reason: an unrelated number that
  happens to equal an output. It is empty today; an entry needs its reason.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TAG = "[I]"
# decimal outputs (Table 6 and section 4.3-4.4 [P]); 13 Gbps, 19.4K and 44K are handled apart below
DECIMALS = ("3.24", "2.45", "2.11", "1.61", "1.64", "3.91", "2.35", "6.25", "2.22", "3.51", "4.44", "9.73",
            "1.74", "1.54", "1.16", "1.32", "1.15", "0.496", "49.6")
NUMBERS = {float(d) for d in DECIMALS} | {19400.0}
_NOT_AFTER = r"(?<![0-9.])"  # not the tail of a longer number or version
_NOT_BEFORE = r"(?![0-9]|\.[0-9])"  # not the head of a longer number or version
PATTERN = re.compile("|".join(
    [_NOT_AFTER + re.escape(d) + "0*" + _NOT_BEFORE for d in DECIMALS]
    + [_NOT_AFTER + r"19[,_]?400" + _NOT_BEFORE,
       _NOT_AFTER + r"19\.40*\s*[Kk]\b",
       _NOT_AFTER + r"13(?:\.0+)?\s*Gbps",
       _NOT_AFTER + r"44\s*K\b"]))
ALLOWED: dict[tuple[str, str], str] = {}  # (path from the repo root, matched text) -> why it is not the output


def python_hits(source: str) -> list[tuple[int, str]]:
    """(line, text) of every output in a Python source that its rule does not allow."""
    hits = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NUMBER:
            try:
                value = float(tok.string.replace("_", ""))
            except ValueError:  # a complex literal
                continue
            if value in NUMBERS:
                hits.append((tok.start[0], tok.string))
        elif tok.type in (tokenize.STRING, tokenize.COMMENT) and TAG not in tok.string:
            hits.extend((tok.start[0] + tok.string[:m.start()].count("\n"), m.group())
                        for m in PATTERN.finditer(tok.string))
    return hits


def _tagged_string_lines(text: str) -> set[int]:
    """1-based lines inside a string scalar whose text carries the [I] tag."""
    lines: set[int] = set()
    stack = [yaml.compose(text, Loader=yaml.SafeLoader)]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if isinstance(node, yaml.ScalarNode):
            if TAG in str(node.value):
                lines.update(range(node.start_mark.line + 1, node.end_mark.line + 2))
        elif isinstance(node, yaml.MappingNode):
            stack.extend(n for pair in node.value for n in pair)
        else:
            stack.extend(node.value)
    return lines


def yaml_hits(text: str) -> list[tuple[int, str]]:
    """(line, text) of every output in a YAML file that its rule does not allow."""
    tagged = _tagged_string_lines(text)
    return [(i, m.group()) for i, line in enumerate(text.splitlines(), 1) if TAG not in line and i not in tagged
            for m in PATTERN.finditer(line)]


def _files() -> list[Path]:
    conf = sorted(p for p in (ROOT / "conf").rglob("*.yaml") if "gates" not in p.relative_to(ROOT / "conf").parts)
    return sorted((ROOT / "harness").rglob("*.py")) + conf


def test_the_scan_covers_the_code_and_the_inputs():
    files = _files()
    assert ROOT / "harness" / "planner" / "__init__.py" in files
    assert ROOT / "conf" / "model" / "internal_1t.yaml" in files
    assert not any("gates" in p.parts for p in files) and len(files) > 100


def test_no_table6_output_in_harness_code_or_conf_inputs():
    found = []
    for path in _files():
        rel = str(path.relative_to(ROOT))
        text = path.read_text()
        for line, match in (python_hits(text) if path.suffix == ".py" else yaml_hits(text)):
            if (rel, match) not in ALLOWED:
                found.append(f"{rel}:{line}: {match!r}")
    assert not found, ("Table 6 outputs outside tests and conf/gates/ (tag a fitted input's provenance [I], "
                       "or list an unrelated number in ALLOWED with its reason): " + "; ".join(found))


@pytest.mark.parametrize(("source", "expected"), [
    ("LAMBDA = 3.24\n", ["3.24"]),
    ("x = 3.240 + 324e-2\n", ["3.240", "324e-2"]),
    ("t = 19_400\n", ["19_400"]),
    ("n = 19400\n", ["19400"]),
    ("y = 0.496  # the paper's offload, 49.6%\n", ["0.496", "49.6"]),
    ('doc = "about 13 Gbps at the optimum"\n', ["13 Gbps"]),
    ('doc = "t = 19.4K, l_long 44K"\n', ["19.4K", "44K"]),
    ("y = 0.496  # [I] fitted to Table 6\n", ["0.496"]),  # the comment may quote it; the constant may not
    ('doc = "[I] fitted: 3/1.64 s"\n', []),
    ("a = 13.24 + 2.115 + 12.11 + 1.611\n", []),
    ('v = "2.11.0"; w = "1.16.3"\n', []),
    ("n = 13; gbps = 13.5; ms = 19.4; k = '2.45x'[0]\n", ["2.45"]),
    ("z = 3j\n", []),
])
def test_the_python_rule(source, expected):
    assert [text for _, text in python_hits(source)] == expected


def test_the_yaml_rule():
    text = ("threshold_tokens: 19400\n"            # 1: an input set to an output
            "lambda: 2.45  # [I] fitted\n"         # 2: tagged on its line
            "provenance: >-\n"                     # 3
            "  [I] fitted through 3/1.64 s and\n"  # 4
            "  9/2.11 s\n"                         # 5: inside a tagged string
            "note: >-\n"                           # 6
            "  egress ~13 Gbps\n"                  # 7: a string without the tag
            "# Theta 3.91 from the paper\n"        # 8: a comment without the tag
            "version: 2.11.0\n"                    # 9: not the number
            "rate: 12.45\n")                       # 10: not the number
    assert yaml_hits(text) == [(1, "19400"), (7, "13 Gbps"), (8, "3.91")]
