"""The example workflow files (workflows/*.json) as saved: valid against the nodes' schemas in the oldest supported
host's shape and loadable on the newest, the files the builder (scripts/build_workflows.py) writes, every report
shown on a text node, and every report and SDVG node readable at the saved view."""
from __future__ import annotations

import pytest
import subprocess
import sys

import workflow_tools as wt
from node_env import REPO, WORKFLOWS, env  # noqa: F401 (env: the fake host's fixture)


def test_workflows_valid(env):
    pack, classes = env
    specs = wt.object_info_from_classes(classes.values())
    # saved in the oldest supported host's shape (strict: every widget has its value), and loadable on the newest
    saved = wt.object_info_from_classes(list(pack.nodes.NODES) + pack.core_nodes.saved_shape())
    oldest = {c.GET_SCHEMA().node_id for c in pack.core_nodes.core_nodes(pack.core_nodes.WORKFLOW_HOST)}
    assert len(WORKFLOWS) >= 3
    for path in WORKFLOWS:
        wf = wt.load(path)
        assert wt.validate(wf, saved) == [], path.name
        assert wt.validate(wf, specs, host_newer=True) == [], path.name
        types = {n["type"] for n in wf["nodes"]}
        assert types <= set(specs) | wt.FRONTEND_ONLY, path.name
        # a core node the oldest supported host lacks is named with the version the workflow needs (hosts before it
        # skip the workflow with that reason)
        version, named = wt.workflow_needs(wf)
        newer = sorted(t for t in types if t in saved and not t.startswith("SDVG") and t not in oldest)
        assert newer == sorted(named) and (version > pack.core_nodes.WORKFLOW_HOST) == bool(newer), (path.name, newer)
        assert any(t.startswith("SDVG") for t in types)
        listed = {m["name"] for n in wf["nodes"] for m in n.get("properties", {}).get("models", [])}
        assert {"krea-realtime-video-14b.safetensors", "wan_2.1_vae.safetensors"} <= listed, path.name
        assert all(name.endswith(".safetensors") for name in listed), path.name  # the frontend downloads only those
        notes = " ".join(str(v) for n in wf["nodes"] if n["type"] == "MarkdownNote" for v in n["widgets_values"])
        assert "ImageReward.pt" in notes and "vocab.txt" in notes, path.name
        # every file a loader reads that the frontend cannot offer for download (.pt) is named in the notes
        pt = {v for n in wf["nodes"] if n["type"].startswith("SDVGLoad") for v in n["widgets_values"]
              if isinstance(v, str) and v.endswith(".pt")}
        assert pt and all(f in notes for f in pt), (path.name, pt)
        api = wt.to_api(wf, specs)
        for nid, node in api.items():  # every link points at an existing node's existing output
            for v in node["inputs"].values():
                if isinstance(v, list):
                    assert v[0] in api and v[1] < len(specs[api[v[0]]["class_type"]]["output"]), (path.name, nid)


@pytest.mark.slow
def test_workflow_files_match_builder():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "build_workflows.py"), "--check"], capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_workflow_shows_the_report_on_screen():
    """Node 'ui text' is not drawn by the frontend: every Finish/Generate report must feed a text-display node."""
    for path in WORKFLOWS:
        wf = wt.load(path)
        nodes = {n["id"]: n for n in wf["nodes"]}
        sources = [n for n in wf["nodes"] if n["type"] in ("SDVGFinish", "SDVGGenerate", "SDVGARReport", "SDVGLive")]
        assert sources, path.name
        for src in sources:
            slot = next(i for i, o in enumerate(src["outputs"]) if o["name"] == "report")
            shown = [nodes[l[3]]["type"] for l in wf["links"] if l[1] == src["id"] and l[2] == slot]
            assert "PreviewAny" in shown, (path.name, src["id"], shown)


def test_every_report_is_readable_at_the_saved_view():
    """A workflow opens at its saved view (extra.ds): there, in the reference window (1920x1080, frontend 1.5x's bars
    over the canvas' edges), every report viewer and every SDVG node lies inside the visible canvas area, at a zoom
    where the frontend draws text (tests/frontend_probe.py checks the same in the real frontend)."""
    left, top, w, h = wt.visible_area()
    for path in WORKFLOWS:
        wf = wt.load(path)
        assert wf["extra"]["ds"]["scale"] >= wt.MIN_READABLE_SCALE, (path.name, wf["extra"]["ds"])
        shown = [n for n in wf["nodes"] if n["type"] == "PreviewAny" or n["type"].startswith("SDVG")]
        assert any(n["type"] == "PreviewAny" for n in shown), path.name
        for n in shown:
            x0, y0, x1, y1 = wt.screen_rect(wf, n)
            assert left <= x0 and x1 <= left + w and top <= y0 and y1 <= top + h, (path.name, n["type"], n.get("title"),
                                                                                  (x0, y0, x1, y1))
