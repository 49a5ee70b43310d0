"""The flags and checks the two command lines share (sdvg_core/demo/cli_args.py): one module both import, the
node's block bound, the output-folder probe that leaves nothing behind."""
from __future__ import annotations

import ast
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from sdvg_core.demo.cli_args import PROBE_PREFIX, blocks_problem, output_folder_problem
from sdvg_core.engine.state import MAX_BLOCKS
from sdvg_core.io.drafters import drafter_own_recipe

REPO = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    """Every module a file imports (absolute names; relative imports resolved against its package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}
    return names


def test_the_evaluation_does_not_import_the_demo_command_line():
    """Both command lines import their shared flags from one module; sdvg_eval never reaches into the demo's CLI."""
    offenders = {str(p.relative_to(REPO)): sorted(n for n in _imports(p) if n == "sdvg_core.demo.cli" or n.startswith("sdvg_core.demo.cli."))
                 for p in (REPO / "sdvg_eval").glob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}
    assert "sdvg_core.demo.cli_args" in _imports(REPO / "sdvg_eval" / "eval.py")
    assert "sdvg_core.demo.cli_args" in _imports(REPO / "sdvg_core" / "demo" / "cli.py")


def test_the_block_bound_is_the_nodes():
    """--blocks is bounded as the ComfyUI Start node's widget is: the node defines or imports the same number."""
    found = []
    for p in (REPO / "nodes").glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MAX_BLOCKS" for t in node.targets):
                found.append(("defined", p.name, ast.literal_eval(node.value)))
            elif isinstance(node, ast.ImportFrom) and any(a.name == "MAX_BLOCKS" for a in node.names):
                found.append(("imported", p.name, MAX_BLOCKS))
    assert found and all(v == MAX_BLOCKS for _, _, v in found), found
    assert blocks_problem(MAX_BLOCKS) is None and blocks_problem(1) is None and blocks_problem(None) is None
    assert "more than 10,000" in blocks_problem(MAX_BLOCKS + 1)
    assert "must be >= 2" in blocks_problem(1, minimum=2)


def test_output_folder_probe_writes_nothing_and_names_what_is_wrong(tmp_path):
    new = tmp_path / "a" / "b"
    assert output_folder_problem(new) is None and not (tmp_path / "a").exists()  # probed in tmp_path, not created
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(PROBE_PREFIX)]
    f = tmp_path / "file"
    f.write_text("x")
    assert "exists and is not a folder" in output_folder_problem(f)
    assert "cannot be created" in output_folder_problem(f / "sub")


@contextmanager
def unwritable_folder(tmp_path: Path):
    """A folder below which nothing can be written: one without write permission, or, for root (who writes through
    permissions), a path under /sys (read-only here); skips where neither exists. Found by trying, not by the probe."""
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            yield ro / "out"
        finally:
            ro.chmod(0o700)
        return
    try:
        (Path("/sys") / f"{PROBE_PREFIX}test").write_bytes(b"")
    except OSError:
        yield Path("/sys/sdvg-out")
        return
    pytest.skip("/sys is writable here: no read-only folder to test against as root")


def test_output_folder_probe_finds_a_folder_that_cannot_be_written(tmp_path):
    with unwritable_folder(tmp_path) as target:
        msg = output_folder_problem(target)
        assert msg is not None and msg.startswith(f"--out {target}: cannot write there") and "give a folder" in msg


def test_a_longlive_drafter_runs_its_own_recipe_unless_told():
    assert drafter_own_recipe("longlive") == "longlive"
    assert drafter_own_recipe(None) is None and drafter_own_recipe("self_forcing") is None
    assert drafter_own_recipe("causal_forcing") is None and drafter_own_recipe("causal_forcing_framewise") is None


def test_frames_give_the_length_with_a_shorter_last_block(tmp_path, capsys):
    """--frames N: (N - 1) // 4 + 1 latent frames in blocks of 3, the last one shorter (as ComfyUI core's AR loop
    runs it); the video has N frames; --frames with --blocks, or below 1, is refused before anything loads."""
    import json

    av = pytest.importorskip("av")
    from sdvg_core.demo.cli import main

    out = tmp_path / "run"
    assert main(["--frames", "25", "--quiet", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["num_blocks"] == 3 and [b["latent_frames"] for b in report["blocks"]] == [3, 3, 1]
    with av.open(str(out / "sdvg.mp4")) as video:
        assert sum(1 for _ in video.decode(video=0)) == 25
    for argv, said in ((["--frames", "25", "--blocks", "2"], "--frames 25 and --blocks 2 both"),
                       (["--frames", "0"], "--frames 0 must be >= 1")):
        assert main([*argv, "--quiet", "--out", str(tmp_path / "x")]) == 2
        assert said in capsys.readouterr().err
