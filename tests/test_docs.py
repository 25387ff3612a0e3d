"""The README and docs/ point only at things that exist: every relative link (and its #anchor),
every repository path and every `python -m` module they name."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A path from the repository root, or a module path inside the package (data/loader.py).
REPO_PATH = re.compile(r"(?<![\w./-])((?:bert_ds|tests|slurm|ds_configs|docs|benchmarks)/[\w./-]*\w)")
PACKAGE_FILE = re.compile(r"(?<![\w./-])((?:data|model|training|finetune|checkpoint|experiments)/[\w/]+\.py)\b")
MODULE = re.compile(r"python -m ([\w.]+)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.name}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_paths_and_modules_exist(page):
    text, missing = page.read_text(encoding="utf-8"), []
    for path in REPO_PATH.findall(text):
        if any(c in path for c in "*{<") or path.endswith("/..."):
            continue
        if not (REPO / path.rstrip(".")).exists():
            missing.append(path)
    for path in PACKAGE_FILE.findall(text):
        if not (REPO / "bert_ds" / path).exists() and not (REPO / path).exists():
            missing.append(path)
    for module in MODULE.findall(text):
        base = REPO / module.replace(".", "/")
        if not (base.with_suffix(".py").exists() or (base / "__main__.py").exists()):
            missing.append(f"python -m {module}")
    assert not missing, f"{page.name} names what does not exist: {sorted(set(missing))}"


def test_every_docs_page_is_in_the_readme_index():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme] == []
