"""The node layer by concept: node files hold nodes only, one module builds a run from node inputs, no import circles,
every choice list and rule is sdvg_core's (its ValueError becomes the node's message), SDVG Generate drives
`Engine.generate`, and a run sizes its model calls on its own view of a shared model, never on the model itself.

The layout checks read the source with ast (tests/test_layers.py's import reader); the behaviour runs on tiny models
against the fake host (tests/fake_comfy)."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

import fake_host
import node_env as ne
from test_layers import circles, imported_modules

NODES_DIR = Path(__file__).resolve().parents[1] / "nodes"
W, H = 64, 48
# Choice values and bounds whose one definition is sdvg_core's (engine DECODE_RULES, the recipe registry's names,
# demo/cli_args MAX_BLOCKS): a node module that spells them out again keeps a second copy of the rule.
CORE_CHOICES = {"standard", "krea", "self_forcing", "longlive", "longlive_infinity"}
CORE_NAMES = {"DECODE_RULES", "RECIPE_NAMES", "RECIPES", "MAX_BLOCKS"}


def _modules() -> dict[str, ast.Module]:
    return {f"nodes.{p.stem}" if p.stem != "__init__" else "nodes": ast.parse(p.read_text())
            for p in sorted(NODES_DIR.glob("*.py"))}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, tree in mods.items():
        deps = set()
        for _, imported in imported_modules(ast.unparse(tree), name, name == "nodes"):
            while imported and imported not in mods:  # `from .run import Run` -> nodes.session
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                deps.add(imported)
        graph[name] = deps
    return graph


def _node_classes(tree: ast.Module) -> list[str]:
    return [c.name for c in tree.body if isinstance(c, ast.ClassDef)
            and any(ast.unparse(b).endswith("ComfyNode") for b in c.bases)]


def test_no_import_circles_in_nodes():
    graph = _graph()
    assert len(graph) >= 15 and "nodes.session" in graph["nodes.start"]
    assert circles(graph) == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in circles(graph))


def test_node_files_hold_nodes_and_no_module_imports_one():
    """A module that defines nodes is imported by the package's registration only; the shared parts live in library
    modules that define no node (what start.py once lent generate.py, steps.py and finish.py is in session.py)."""
    mods, graph = _modules(), _graph()
    node_files = {name for name, tree in mods.items() if _node_classes(tree)}
    assert {"nodes.start", "nodes.generate", "nodes.steps", "nodes.finish"} <= node_files
    lenders = {(m, d) for m, deps in graph.items() if m != "nodes" for d in deps if d in node_files}
    assert not lenders, f"node files imported by other modules: {sorted(lenders)}"
    for name in node_files:  # besides its nodes, a node file defines at most private helpers and constants
        public = [d.name for d in mods[name].body if isinstance(d, (ast.FunctionDef, ast.ClassDef))
                  and not d.name.startswith("_") and d.name not in _node_classes(mods[name])]
        assert not public, f"{name} defines {public}: move them to the module of their concept"


def test_choice_lists_and_bounds_are_the_cores():
    """No node module defines DECODE_RULES, the recipe names or MAX_BLOCKS, nor spells out a list of them."""
    found = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found += [f"{name}: {t.id} =" for t in targets if isinstance(t, ast.Name) and t.id in CORE_NAMES]
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if len(words & CORE_CHOICES) >= 2:
                    found.append(f"{name}:{node.lineno} {sorted(words)}")
    assert not found, "choice lists defined again in nodes/:\n" + "\n".join(found)


# ------------------------------------------------------------------------------------------------ behaviour
@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy_run")
    with fake_host.installed(base) as pack:
        ne.write_tiny_models(base, pack.sdvg_core)
        models = ne.loaded_models(pack)
        yield pack, models


def _start(pack, models, **kw):
    args = dict(models, width=W, height=H, num_blocks=3, seed=1, recipe="krea", decode_rule="standard", cache_gb=1.0)
    return pack.nodes.SDVGStart.execute(**{**args, **kw}).args[0]


@pytest.mark.slow
def test_a_run_sizes_its_calls_on_its_own_view_of_a_shared_model(env):
    """Two graphs share the loaded models: each Start sizes the calls of its own run (a LongLive drafter's window is
    not Krea's rebuild), and the loaded model keeps its load-time reservation."""
    pack, models = env
    shared = models["drafter"].dit
    loaded = shared.work_bytes
    krea = _start(pack, models, num_blocks=8)
    longlive = _start(pack, models, num_blocks=8, drafter_recipe="longlive")
    assert krea.session.drafter.dit.work_bytes != longlive.session.drafter.dit.work_bytes
    assert shared.work_bytes == loaded and models["drafter"].dit is shared
    assert krea.session.drafter.dit.shared is shared  # the same weights and caches, the run's reservation
    assert krea.session.drafter.key == models["drafter"].key


def test_the_engines_refusals_are_the_nodes_messages(env):
    pack, models = env
    err = pack.nodes.surface.SDVGError
    with pytest.raises(err, match=r"SDVG Start: decode_rule must be one of \('standard', 'krea'\), got 'nope'"):
        _start(pack, models, decode_rule="nope")
    with pytest.raises(err, match="SDVG Start: recipe must be one of"):
        _start(pack, models, recipe="nope")
    s = _start(pack, models, num_blocks=1)
    s = pack.nodes.SDVGRoute.execute(s, -0.7, True).args[0]
    with pytest.raises(err, match="SDVG Route: all blocks are committed"):
        pack.nodes.SDVGRoute.execute(s, -0.7, True)
    with pytest.raises(err, match="SDVG Decode Draft: no pending latents"):
        pack.nodes.SDVGDecodeBlock.execute(_start(pack, models))


def test_generate_drives_engine_generate_with_a_per_block_callback(env, monkeypatch):
    pack, models = env
    engine_cls = pack.sdvg_core.engine.engine.Engine
    calls = []
    real = engine_cls.generate

    def spy(self, spec, policy, on_block=None, state=None):
        calls.append(on_block is not None)
        return real(self, spec, policy, on_block=on_block, state=state)

    monkeypatch.setattr(engine_cls, "generate", spy)
    args = dict(models, prompt="", width=W, height=H, num_blocks=2, seed=3, policy="sdvg", tau=-5.0,
                force_reject_first=True, recipe="krea", decode_rule="standard", cache_gb=1.0)
    out = pack.nodes.SDVGGenerate.execute(**args)
    assert calls == [True] and out.args[0].shape[0] == 1 + 4 * (3 * 2 - 1)


def test_finish_plot_explains_tau_plus_inf(env, monkeypatch):
    """tau = +inf reaches the score plot, which then says why every block came from the target (as the demo)."""
    pack, models = env
    seen = []
    plot = pack.nodes.outputs.render_report_plot
    monkeypatch.setattr(pack.nodes.outputs, "render_report_plot", lambda report, tau=None: seen.append(report.tau)
                        or plot(report, tau))
    s = _start(pack, models, num_blocks=2)
    while not s.state.done:
        s = pack.nodes.SDVGRoute.execute(s, math.inf, True).args[0]
    pack.nodes.SDVGFinish.execute(s)
    assert seen == [math.inf]


def test_generate_takes_a_length_in_frames_with_a_shorter_last_block(env):
    """`frames` 25 instead of num_blocks: 7 latent frames in blocks of 3 + 3 + 1 (core's AR rule); 25 frames out,
    the short block drafted, scored on its 4 frames and routed like the others."""
    import json

    pack, models = env
    args = dict(models, prompt="", width=W, height=H, num_blocks=9, seed=3, policy="sdvg", tau=-5.0,
                force_reject_first=True, recipe="krea", decode_rule="standard", cache_gb=1.0, frames=25)
    out = pack.nodes.SDVGGenerate.execute(**args)
    report = json.loads(out.args[3])
    assert out.args[0].shape[0] == 25 and [b["latent_frames"] for b in report["blocks"]] == [3, 3, 1]
    assert [len(b["frame_scores"]) for b in report["blocks"]] == [0, 12, 4]


def test_a_conditioning_wan_cuts_is_said_once_and_a_combined_one_is_refused(env, caplog):
    """SDVG's own path reads Wan's 512 rows: a ConditioningConcat of two prompts (1024 rows) is cut to the first
    prompt, said once (with the 512 rows dropped), not again for the same conditioning; ConditioningCombine's two
    entries are refused with the reason, never reduced to the first."""
    import logging

    import torch

    pack, models = env
    emb = models["positive"][0][0]
    concat = [[torch.cat([emb, emb.flip(1)], 1), {}]]
    args = dict(models, prompt="p", width=W, height=H, num_blocks=1, seed=3, policy="target_only", tau=-5.0,
                force_reject_first=True, recipe="krea", decode_rule="standard", cache_gb=1.0)
    with caplog.at_level(logging.WARNING, logger="SDVG"):
        pack.nodes.SDVGGenerate.execute(**{**args, "positive": concat})
        pack.nodes.SDVGGenerate.execute(**{**args, "positive": concat, "seed": 4})
    said = [r.getMessage() for r in caplog.records if "rows are dropped" in r.getMessage()]
    assert len(said) == 1 and "has 1024 rows" in said[0] and "last 512 rows are dropped" in said[0], said
    with pytest.raises(pack.nodes.surface.SDVGError, match=r"holds 2 entries \(ConditioningCombine.*ConditioningConcat"):
        pack.nodes.SDVGGenerate.execute(**{**args, "positive": models["positive"] + models["positive"]})
