"""Every relative link in README.md and docs/ resolves: the file or folder exists in the checkout, and
an anchor (`page.md#heading`, `#heading`) names a heading of that page as GitHub writes its ids."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The page without its code: links and headings in code blocks are not links or headings."""
    return FENCED.sub("", text)


def links(text: str) -> list[str]:
    return LINK.findall(INLINE_CODE.sub("", prose(text)))


def slug(heading: str) -> str:
    """GitHub's heading id: lower case, punctuation dropped (hyphens and underscores kept), spaces
    to hyphens. Markdown link syntax keeps only its text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    ids = set()
    for heading in HEADING.findall(prose(page.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        ids.add(base if count == 0 else f"{base}-{count}")
    return ids


def relative_links() -> list[tuple[Path, str]]:
    found = []
    for page in PAGES:
        for target in links(page.read_text()):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not ours
                found.append((page, target))
    return found


def test_the_pages_are_found_and_link_to_each_other() -> None:
    assert len(PAGES) > 10
    targets = {(page.name, target) for page, target in relative_links()}
    assert ("README.md", "docs/configuration.md") in targets
    assert len(targets) > 50


@pytest.mark.parametrize(
    ("page", "target"), relative_links(), ids=lambda v: v.name if isinstance(v, Path) else str(v)
)
def test_relative_link_resolves(page: Path, target: str) -> None:
    path_part, _, anchor = target.partition("#")
    resolved = (page.parent / unquote(path_part)).resolve() if path_part else page
    assert resolved.exists(), f"{page.relative_to(ROOT)}: {target} -> {resolved} does not exist"
    assert resolved.is_relative_to(ROOT), f"{page.relative_to(ROOT)}: {target} leaves the checkout"
    if anchor:
        assert resolved.suffix == ".md", f"{page.relative_to(ROOT)}: {target}: an anchor into a non-page"
        assert anchor in anchors(resolved), (
            f"{page.relative_to(ROOT)}: {target}: no heading with id '{anchor}' in {resolved.name}"
        )


def test_the_slugs_follow_github() -> None:
    assert slug("Where Python's stack is the limit") == "where-pythons-stack-is-the-limit"
    assert slug("The latest run (`bench/results/compare-20261122-1959.md`)") == (
        "the-latest-run-benchresultscompare-20261122-1959md"
    )
    assert slug("Access: tokens") == "access-tokens"
