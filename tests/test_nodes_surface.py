"""What the pack shows ComfyUI, against the fake host (tests/fake_comfy): every node's schema (ids, categories,
tooltips), the root package's import with and without ComfyUI, the model folders it registers, and the policy
widgets (the core's policy grammar; values older workflows saved still load)."""
from __future__ import annotations

import asyncio
import subprocess
import sys

from node_env import EMB_FILE, REPO, env  # noqa: F401 (env: the fake host's fixture)


def test_schemas_ids_categories_tooltips(env):
    pack, _ = env
    ids = set()
    for cls in pack.nodes.NODES:
        s = cls.GET_SCHEMA()
        assert s.node_id.startswith("SDVG") and s.node_id not in ids, s.node_id
        ids.add(s.node_id)
        assert s.category == "SDVG" or s.category.startswith("SDVG/"), (s.node_id, s.category)
        assert s.display_name and s.display_name.startswith("SDVG") and s.description, s.node_id
        for i in s.inputs:
            assert i.tooltip and len(i.tooltip) > 10, (s.node_id, i.id)
            if i.lazy:
                assert i.optional, (s.node_id, i.id)
        for o in s.outputs:
            assert o.tooltip and o.display_name, (s.node_id, o.display_name)
        assert cls.__doc__, s.node_id
    assert pack.nodes.SDVGLoopEnd.GET_SCHEMA().enable_expand
    ext = asyncio.run(pack.comfy_entrypoint())
    assert asyncio.run(ext.get_node_list()) == list(pack.nodes.NODES)
    assert len(ids) == 21


def test_root_imports_without_comfyui():
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('pack', sys.argv[1], "
            "submodule_search_locations=[sys.argv[2]]); m = importlib.util.module_from_spec(s); sys.modules['pack'] = m; "
            "s.loader.exec_module(m); print(hasattr(m, 'comfy_entrypoint'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "__init__.py"), str(REPO)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_root_imports_as_a_package_where_comfy_api_is_installed_but_comfyui_is_not_running(tmp_path):
    """The pip-installable build puts `comfy_api` in its venv: pytest 9, run with that python, imports the checkout's
    root __init__.py as a package (named after its folder) when it sets up a test. Without a running ComfyUI (no
    `folder_paths`) it defines no nodes and raises nothing; with ComfyUI's modules it registers the nodes (the fake
    host's tests)."""
    (tmp_path / "comfy_api").mkdir()
    (tmp_path / "comfy_api" / "__init__.py").write_text("")  # installed, as in the pip build's venv
    code = ("import importlib.util, sys; sys.path.insert(0, sys.argv[3]); "
            "s = importlib.util.spec_from_file_location('checkout', sys.argv[1], submodule_search_locations=[sys.argv[2]]); "
            "m = importlib.util.module_from_spec(s); sys.modules['checkout'] = m; s.loader.exec_module(m); "
            "print(hasattr(m, 'comfy_entrypoint'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "__init__.py"), str(REPO), str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False"]


def test_folders_registered(env):
    pack, _ = env
    import folder_paths

    assert "image_reward" in folder_paths.folder_names_and_paths
    assert {".pt", ".safetensors"} <= folder_paths.folder_names_and_paths["image_reward"][1]
    assert folder_paths.get_filename_list("image_reward") == ["ImageReward.pt"]  # vocab.txt is not a weights file
    assert folder_paths.get_filename_list("sdvg_prompts") == [EMB_FILE]


def test_policy_widgets_speak_the_cores_grammar_and_read_older_workflows(env):
    """SDVG Generate's and the AR sampler's policy options are names of the core's grammar; a value an older workflow
    saved (stride_k2, target_only, draft_only) passes the node's own validation, which the host runs instead of its
    combo check, and runs as the policy it meant; a name the grammar does not know is refused there."""
    pack, _ = env
    core = pack.sdvg_core
    from importlib import import_module

    names = import_module(core.__name__ + ".engine.policy_names")
    gen, ar = pack.nodes.SDVGGenerate, pack.nodes.SDVGSamplerARVideo
    for cls in (gen, ar):
        options = next(i for i in cls.GET_SCHEMA().inputs if i.id == "policy").widget["options"]
        assert all(names.parse_policy(o).name in (o, "sdvg:tau=-0.7") for o in options), options
    assert gen.validate_inputs(policy="stride_k2") is True and gen.validate_inputs(policy="target_only") is True
    assert ar.validate_inputs(policy="draft_only", input_types={"drafter": "MODEL"}) is True
    assert "unknown policy" in gen.validate_inputs(policy="stride_k9")
    assert "must be one of" in ar.validate_inputs(policy="stride:k=2")  # a policy the sampler does not offer
    run = import_module(pack.__name__ + ".nodes.session")
    assert run.node_policy("x", "stride_k3", -0.7, True) == names.policy_by_name("stride:k=3")
    assert run.node_policy("x", "sdvg", -1.25, False) == names.policy_by_name("sdvg:tau=-1.25", force_reject_first=False)
