"""The documentation holds together: the README stays a front door (at most 15,000 bytes), and every
relative link in README.md, docs/, bench/README.md and deploy/README.md reaches a file that exists
and, where it names one, a heading (or an explicit ``<a id>``) that exists in it.

Anchors follow GitHub's rule (the same as ``tests/deploy/test_alerts.py``): lower case, punctuation
dropped, spaces to hyphens, a repeated heading numbered ``-1``, ``-2``... Code blocks and code spans
are not Markdown, so links and headings inside them are ignored.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
README_MAX_BYTES = 15_000
DOCUMENTS = sorted([README, REPO / "bench" / "README.md", REPO / "deploy" / "README.md",
                    *(REPO / "docs").glob("*.md")])

WRITTEN_ELSEWHERE = {REPO / "docs" / "cancel-protocol.md", REPO / "docs" / "architecture.md"}
"""Documents linked before they exist: another branch writes them. A link to one passes while it is
missing; once it exists, its anchors are checked like any other's."""

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", flags=re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", flags=re.DOTALL)
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", flags=re.MULTILINE)
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", flags=re.IGNORECASE)


def _prose(markdown: str) -> str:
    """The Markdown without fenced code blocks and code spans."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def _slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings, and its explicit ``<a id>``s."""
    without_fences = FENCE.sub("", markdown)
    seen: Counter[str] = Counter()
    found = set(EXPLICIT_ANCHOR.findall(without_fences))
    for heading in HEADING.findall(without_fences):
        slug = _slug(heading)
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def relative_links(markdown: str) -> list[str]:
    """Every link and image target (an image inside a link's text too) that is neither external
    nor an e-mail address."""
    targets = []
    for text, target in LINK.findall(_prose(markdown)):
        targets += [*relative_links(text), *([] if EXTERNAL.match(target) else [target])]
    return targets


def broken_links(document: Path) -> list[str]:
    problems = []
    for target in relative_links(document.read_text()):
        path_part, _, anchor = target.partition("#")
        path = (document.parent / unquote(path_part)).resolve() if path_part else document
        if not path.exists():
            if path not in WRITTEN_ELSEWHERE:
                problems.append(f"{target}: no such file")
            continue
        if anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
            problems.append(f"{target}: no heading #{anchor} in {_shown(path)}")
    return problems


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def test_the_readme_is_a_front_door() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size:,} bytes; move reference into docs/"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_resolves(document: Path) -> None:
    assert broken_links(document) == []


def test_the_link_check_sees_what_it_must() -> None:
    page = """# Herald
## The `make demo` story, again
## Roles
## Roles
<a id="kept"></a>
See [a](docs/x.md#y), ![b](img.png), [c](https://example.com), <https://example.com>,
[![e](shot.png)](docs/console.md),
`[not a link](nowhere.md)` and [d](#roles-1).
```
[nor this](nowhere.md)
# not a heading
```
"""
    assert relative_links(page) == ["docs/x.md#y", "img.png", "shot.png", "docs/console.md",
                                   "#roles-1"]
    assert anchors(page) == {"herald", "the-make-demo-story-again", "roles", "roles-1", "kept"}


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    document = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# Here\n")
    document.write_text("[ok](there.md#here) [gone](missing.md) [wrong](there.md#elsewhere)\n")
    assert broken_links(document) == ["missing.md: no such file",
                                      "there.md#elsewhere: no heading #elsewhere in there.md"]
