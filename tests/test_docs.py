"""The repository explains itself: no citations of files a cloner lacks, every cited design section exists,
report.json is documented field by field, and the README's local links resolve."""
from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest

from sdvg_core import BlockReport, RunReport

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "design.md"
REPORT_DOC = REPO / "docs" / "report-json.md"
TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".txt", ".json", ".yaml", ".yml", ".cfg", ".ini", ""}
# Patterns that point at files outside the pack (the project's private design notes and data folder).
FOREIGN = ("DESIGN.md", "../shared")
# Test code that reads the golden tensors in place is allowed to name the folder it reads.
ALLOWED = {"tests/conftest.py", "tests/test_docs.py"}
SKIP_DIRS = {".git", ".venv", "out", "__pycache__", "node_modules"}
SECTION_REF = re.compile(r"docs/design\.md\s*§\s*(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{2,4}\s*§(\d+(?:\.\d+)*)\s", re.MULTILINE)


def _repo_files() -> list[str]:
    """Tracked plus untracked-but-not-ignored files (git), or every file outside SKIP_DIRS without git."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
        files = [f for f in out.splitlines() if (REPO / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        files = [str(p.relative_to(REPO)) for p in REPO.rglob("*")
                 if p.is_file() and not SKIP_DIRS.intersection(p.relative_to(REPO).parts)]
    return [f for f in files if Path(f).suffix in TEXT_SUFFIXES]


def _read(rel: str) -> str:
    return (REPO / rel).read_text(encoding="utf-8", errors="replace")


def test_no_citations_of_files_a_cloner_does_not_have():
    offenders = []
    for rel in _repo_files():
        if rel in ALLOWED or rel.startswith("docs/"):
            continue
        for n, line in enumerate(_read(rel).splitlines(), 1):
            offenders += [f"{rel}:{n}: {pat!r} in {line.strip()[:100]}" for pat in FOREIGN if pat in line]
    assert not offenders, ("these cite files a cloner of the pack does not have; cite docs/design.md §n instead:\n"
                           + "\n".join(offenders))


def _sections() -> set[str]:
    return set(HEADING.findall(DESIGN.read_text(encoding="utf-8")))


def test_design_doc_has_numbered_sections():
    secs = _sections()
    assert {"1", "2", "3", "5", "6", "7"} <= secs, f"docs/design.md sections found: {sorted(secs)}"


def test_every_cited_design_section_exists():
    secs = _sections()
    missing = []
    for rel in _repo_files():
        for n, line in enumerate(_read(rel).splitlines(), 1):
            missing += [f"{rel}:{n}: §{ref}" for ref in SECTION_REF.findall(line) if ref not in secs]
    assert not missing, (f"cited sections that docs/design.md does not have (it has {sorted(secs, key=str)}):\n"
                         + "\n".join(missing))


@pytest.mark.parametrize("cls", [RunReport, BlockReport])
def test_report_json_documents_every_field(cls):
    doc = REPORT_DOC.read_text(encoding="utf-8")
    undocumented = [f.name for f in dataclasses.fields(cls) if f"`{f.name}`" not in doc]
    assert not undocumented, f"docs/report-json.md does not describe {cls.__name__} fields {undocumented}"


def test_report_json_documents_every_work_key():
    from sdvg_core.derived.tally import PHASES, WORK_KEYS

    doc = REPORT_DOC.read_text(encoding="utf-8")
    assert [k for k in (*WORK_KEYS, *PHASES) if f"`{k}`" not in doc] == []


def test_readme_local_links_exist():
    text = _read("README.md")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link and not link.startswith("mailto:")]
    assert [link for link in local if not (REPO / link).exists()] == []
    for doc in ("docs/design.md", "docs/report-json.md", "LICENSE"):
        assert doc in text, f"the README should point at {doc}"


def test_the_module_map_names_every_module_of_the_core():
    """docs/design.md §3.6 lists every module of sdvg_core where it is (a moved or new module without its row fails)."""
    text = (REPO / "docs" / "design.md").read_text()
    table = text[text.index("### §3.6 Module map"):]
    table = table[:table.index("\n\n", table.index("| module |"))]
    core = REPO / "sdvg_core"
    modules = sorted(str(p.relative_to(core)) for p in core.rglob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    missing = [m for m in modules if f"`{m}`" not in table]
    assert not missing, f"docs/design.md §3.6 does not name: {missing}"
    listed = {m for m in re.findall(r"`([a-z_]+/[a-z_/]+\.py)`", table) if m.split("/")[0] not in ("nodes", "tests")}
    assert not listed - set(modules), f"§3.6 names modules that are not there: {sorted(listed - set(modules))}"
