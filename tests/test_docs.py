"""The documents describe the product: an architecture a reader takes in at once, links that
resolve, every code path they name present, and no work diary."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)")
# A backquoted repository path: a package directory or a Python module under world/ or eve_cli/.
CODE_PATH = re.compile(r"`((?:world|eve_cli)/[\w/]*?(?:\.py|/))`")


def test_the_architecture_fits_a_sitting() -> None:
    lines = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"docs/ARCHITECTURE.md has {len(lines)} lines (at most 300)"


def test_links_between_documents_resolve() -> None:
    broken = [
        f"{page.name} -> {target}"
        for page in [ROOT / "README.md", *DOCS.glob("*.md")]
        for target in LINK.findall(page.read_text(encoding="utf-8"))
        if not (page.parent / target).exists()
    ]
    assert broken == []


def test_the_architecture_names_only_code_that_exists() -> None:
    text = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = [p for p in CODE_PATH.findall(text) if not (ROOT / p).exists()]
    assert missing == []


def test_no_work_diary() -> None:
    assert not (DOCS / "notes").exists() and not (DOCS / "STATUS.md").exists()
