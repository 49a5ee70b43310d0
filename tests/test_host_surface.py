"""The scan behind the fake-vs-real host drift check (tests/host_surface.py; the check itself runs in the real-host
suite): it finds the host names the pack's code uses, the calls it makes, and `drift` names each kind of drift."""
from __future__ import annotations

import host_surface as hs


def test_scan_finds_the_host_names_the_pack_uses():
    used = hs.pack_uses()
    for name in ("comfy.model_management.load_models_gpu", "comfy.model_patcher.ModelPatcher",
                 "comfy_api.latest.io.Combo.Input", "comfy_api.latest.io.Schema", "folder_paths.get_filename_list",
                 "comfy_execution.graph_utils.GraphBuilder", "comfy_execution.graph.DynamicPrompt.get_node"):
        assert name in used, name
    assert (1, ["force_full_load", "memory_required"]) in [tuple(c) for c in used["comfy.model_management.load_models_gpu"]]
    assert "comfy.model_patcher.ModelPatcher.partially_unload" in hs.pack_overrides()


def test_the_fake_provides_most_of_them(tmp_path):
    import fake_host

    with fake_host.installed(tmp_path):
        surface = hs.fake_surface()
    assert "comfy.model_management.load_models_gpu" in surface and "comfy.model_patcher.ModelPatcher.detach" in surface
    assert surface["comfy_api.latest.io.Int.Input"]["fake"]["widget_kwargs"]  # the widget keywords it accepts
    assert len(surface) >= 50


def test_drift_names_each_kind_of_difference():
    fake = {"kind": "routine", "params": [["a", "POSITIONAL_OR_KEYWORD", False], ["b", "POSITIONAL_OR_KEYWORD", True]],
            "var_kw": False, "var_pos": False}
    entry = {"fake": fake, "calls": [(1, ("b",))]}
    assert hs.drift(entry, dict(fake)) == []
    assert hs.drift(entry, None) == ["missing on the host"]
    assert "a class on the host" in hs.drift(entry, {**fake, "kind": "class"})[0]
    narrower = {**fake, "params": [["a", "POSITIONAL_OR_KEYWORD", False]]}
    assert any("the fake accepts ['b']" in d for d in hs.drift(entry, narrower))
    assert any("the pack passes ['b']" in d for d in hs.drift(entry, narrower))
    moved = {**fake, "params": [["x", "POSITIONAL_OR_KEYWORD", False], ["a", "POSITIONAL_OR_KEYWORD", True],
                                ["b", "POSITIONAL_OR_KEYWORD", True]]}
    assert any("positional parameters the pack fills" in d for d in hs.drift(entry, moved))
    required = {**fake, "params": fake["params"] + [["c", "KEYWORD_ONLY", False]]}
    assert any("leaves out required ['c']" in d for d in hs.drift(entry, required))


def test_the_newest_hosts_compiler_names_are_in_the_fake_surface(tmp_path):
    """The model compiler's switches and pause (nodes/comfy_compiler.py) are checked against a host that has them."""
    import fake_host

    names = hs.optional_names()
    assert "comfy.cli_args.args.disable_comfy_compiler" in names and "comfy.model_prefetch.pause_malloc_graph" in names
    with fake_host.installed(tmp_path):
        surface = hs.fake_surface()
    assert all(n in surface for n in names), [n for n in names if n not in surface]
    assert surface["comfy.cli_args.args.disable_comfy_compiler"]["fake"]["kind"] == "value"
