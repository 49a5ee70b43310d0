"""The UI-workflow -> API-prompt conversion as the frontend does it, for widget kinds a host declares: dynamic combos
with nested keys at any depth, hidden widgets, defaults for widgets a saved workflow predates (ComfyUI 0.33's Save
Video and Create Video; tests/test_comfy_host.py compares the result with the real frontend's graphToPrompt)."""
from __future__ import annotations

import workflow_tools as wt

CODEC = ["COMFY_DYNAMICCOMBO_V3", {"options": [
    {"key": "auto", "inputs": {"required": {}}},
    {"key": "h264", "inputs": {"required": {}, "optional": {"encoding": ["COMFY_DYNAMICCOMBO_V3", {"options": [
        {"key": "auto", "inputs": {"required": {}}},
        {"key": "re-encode", "inputs": {"required": {"crf": ["FLOAT", {"default": 23.0}]}}}]}]}}}]}]
SPECS = {
    "SaveVideo": {"input": {"required": {"video": ["VIDEO", {}], "filename_prefix": ["STRING", {"default": "video/ComfyUI"}],
                                         "format": ["COMFY_DYNAMICCOMBO_V3", {"options": [
                                             {"key": "auto", "inputs": {"required": {"codec": CODEC}}},
                                             {"key": "mp4", "inputs": {"required": {"codec": CODEC}}}]}]},
                            "optional": {"codec": [CODEC[0], {**CODEC[1], "hidden": True}]}},
                  "output": ["VIDEO"]},
    "CreateVideo": {"input": {"required": {"images": ["IMAGE", {}], "fps": ["FLOAT", {"default": 30.0}]},
                              "optional": {"bit_depth": ["INT", {"default": 8, "min": 8, "max": 10}]}},
                    "output": ["VIDEO"]},
}


def _wf(save_values, create_values):
    return {"version": 0.4, "links": [[1, 1, 0, 2, 0, "VIDEO"]], "groups": [], "nodes": [
        {"id": 1, "type": "CreateVideo", "inputs": [], "outputs": [{"type": "VIDEO", "links": [1]}],
         "widgets_values": create_values},
        {"id": 2, "type": "SaveVideo", "inputs": [{"name": "video", "type": "VIDEO", "link": 1}], "outputs": [],
         "widgets_values": save_values}]}


def test_nested_dynamic_combo_keys_hidden_widgets_and_defaults():
    api = wt.to_api(_wf(["v/x", "mp4", "h264", "re-encode", 18.0], [16.0]), SPECS)
    assert api["2"]["inputs"] == {"video": ["1", 0], "filename_prefix": "v/x", "format": "mp4", "format.codec": "h264",
                                  "format.codec.encoding": "re-encode", "format.codec.encoding.crf": 18.0,
                                  "codec": "auto"}
    assert api["1"]["inputs"] == {"fps": 16.0, "bit_depth": 8}  # saved before bit_depth existed: its default


def test_a_workflow_saved_before_the_dynamic_combo_converts_like_the_frontend():
    """A 0.3.64 Save Video (format, codec plain combos: 3 values) on 0.33's spec: what frontend 1.49.6 sends."""
    api = wt.to_api(_wf(["video/SDVG", "auto", "auto"], [16.0]), SPECS)
    assert api["2"]["inputs"] == {"video": ["1", 0], "filename_prefix": "video/SDVG", "format": "auto",
                                  "format.codec": "auto", "codec": "auto"}


def test_validation_allows_what_a_newer_host_added_only_when_asked():
    wf = _wf(["video/SDVG", "auto", "auto"], [16.0])
    unlinked = "node 1 CreateVideo: required input 'images' is not connected"  # this small graph's own gap
    assert wt.validate(wf, SPECS, host_newer=True) == [unlinked]
    assert any("bit_depth" in p for p in wt.validate(wf, SPECS))
    bad = _wf(["video/SDVG", "mkv", "auto"], [16.0])
    assert any("format='mkv' not in ['auto', 'mp4']" in p for p in wt.validate(bad, SPECS, host_newer=True))
