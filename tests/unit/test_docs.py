"""The README and docs/ stay a user's reference, not a lab notebook.

The README is short (the rest lives in docs/), no wall-clock times, scratch paths or issue numbers
leak into the README, config comments or code comments and docstrings (dated measurement records
belong in docs/results/), and every relative link in the Markdown points at a file that exists.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250

# A wall-clock stamp, a scratch path, an issue number ("issue 11", "Issue #3", "#17").
FORBIDDEN = {
    "UTC time": re.compile(r"\bUTC\b"),
    "/tmp/ path": re.compile(r"/tmp/"),
    "issue number": re.compile(r"\b[Ii]ssues? #?\d+|(?<![\w&/#])#\d+\b"),
}
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def _findings(text: str) -> list[str]:
    return [f"{name}: {m.group(0)!r}" for name, rx in FORBIDDEN.items() for m in rx.finditer(text)]


def yaml_comments(text: str) -> list[tuple[int, str]]:
    """(line number, comment text) of each `#` comment: at a line's start or after a blank, outside quotes."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        quote = None
        for i, ch in enumerate(line):
            if quote:
                quote = None if ch == quote else quote
            elif ch in "'\"" and (i == 0 or line[i - 1] in " \t:[{,-"):
                quote = ch
            elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
                out.append((number, line[i + 1:]))
                break
    return out


def python_prose(source: str) -> list[tuple[int, str]]:
    """(line number, text) of each comment and docstring: what a reader reads as prose, not code."""
    out = [(tok.start[0], tok.string[1:]) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                out.append((first.lineno, first.value.value))
    return out


def markdown_links(text: str) -> list[tuple[str, str]]:
    """(path, fragment) of each relative link outside fenced code blocks (no scheme; a bare #anchor's path is '')."""
    targets = []
    for target in LINK.findall(FENCE.sub("", text)):
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
            path, _, fragment = target.partition("#")
            targets.append((path, fragment))
    return targets


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", FENCE.sub("", text), re.MULTILINE)}


def test_readme_is_short() -> None:
    """A newcomer reads the README in minutes; the reference lives in docs/."""
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move reference to docs/"


def test_readme_has_no_notebook_traces() -> None:
    """No wall-clock times, scratch paths or issue numbers in the README."""
    assert _findings((ROOT / "README.md").read_text(encoding="utf-8")) == []


def test_config_comments_have_no_notebook_traces() -> None:
    """Config comments say what a key means; dated history goes to docs/results/ (values may carry dates)."""
    bad = [f"{path.relative_to(ROOT)}:{n}: {f}"
           for path in sorted((ROOT / "conf").rglob("*.yaml"))
           for n, comment in yaml_comments(path.read_text(encoding="utf-8"))
           for f in _findings(comment)]
    assert bad == []


def test_code_comments_have_no_notebook_traces() -> None:
    """Comments and docstrings in harness/ say why, not when or on which machine."""
    sources = {path: path.read_text(encoding="utf-8") for path in sorted((ROOT / "harness").rglob("*.py"))}
    bad = [f"{path.relative_to(ROOT)}:{n}: {f}"
           for path, source in sources.items() if _findings(source)  # only files with a candidate are parsed
           for n, prose in python_prose(source)
           for f in _findings(prose)]
    assert bad == []


PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page: str) -> None:
    """Every relative link in the README and docs/ points at a file or folder that exists, and at a
    heading of that page when it names one."""
    path = ROOT / page
    broken = []
    for target, fragment in markdown_links(path.read_text(encoding="utf-8")):
        dest = path.parent / target if target else path
        if not dest.exists():
            broken.append(target)
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text(encoding="utf-8")):
            broken.append(f"{target}#{fragment}")
    assert broken == [], f"{page}: broken links {broken}"


@pytest.mark.parametrize(("text", "expected"), [
    ("a: 1  # measured 12:00 UTC", ["UTC time: 'UTC'"]),
    ("see /tmp/x and issue 11", ["/tmp/ path: '/tmp/'", "issue number: 'issue 11'"]),
    ("since #17; colour '#0173B2'; &#8212;", ["issue number: '#17'"]),
    ("a UTCx token, tissue 5", []),
])
def test_findings_catch_what_they_should(text: str, expected: list[str]) -> None:
    """The patterns flag stamps, scratch paths and issue numbers, and nothing that merely looks alike."""
    assert _findings(text) == expected


def test_yaml_comments_skip_quoted_hashes() -> None:
    """A `#` inside a quoted value or a word is data, not a comment."""
    text = "a: '#1 x'  # real\nb: c#d\n# whole line\n"
    assert yaml_comments(text) == [(1, " real"), (3, " whole line")]


def test_markdown_links_skip_code_and_urls() -> None:
    """Links inside fenced code, to URLs or to an anchor on the same page are not files."""
    text = "[a](docs/x.md#y) [b](https://e.org) [c](#top)\n```\n[d](nope.md)\n```\n![e](img.png)"
    assert markdown_links(text) == [("docs/x.md", "y"), ("", "top"), ("img.png", "")]


def test_anchors_follow_github() -> None:
    """Heading anchors as GitHub makes them, so links to a section are checked too."""
    text = "# Top\n## harness-profile on the project's engine\n```\n# not a heading\n```\n### Sweeps on Ray\n"
    assert anchors(text) == {"top", "harness-profile-on-the-projects-engine", "sweeps-on-ray"}
