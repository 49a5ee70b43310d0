#!/usr/bin/env python3
"""Write the example workflows (UI format 0.4) in workflows/ from a compact description.

    .venv/bin/python scripts/build_workflows.py            # node specs from the pack + the test fakes of core nodes
    .venv/bin/python scripts/build_workflows.py --check    # only compare with the files on disk (exit 1 if stale)

Input/output lists follow the frontend's layout (socket inputs first, then widget inputs with "widget"),
widgets_values follow the input order with "fixed" after every control_after_generate widget, and every file a
workflow needs is listed in the node's properties.models (the frontend offers the download when it is missing).
tests/test_comfy_host.py loads each file in the real frontend (chromium) to check nothing is missing.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
import workflow_tools  # noqa: E402  (tests/workflow_tools.py: conversion, validation, the saved view)

PROMPT = ("A corgi puppy runs through a sunny meadow full of yellow flowers, its ears flapping, the camera tracking it "
          "at ground level, shallow depth of field, warm late-afternoon light, cinematic.")
HF = "https://huggingface.co"
MODELS = {
    "target": {"name": "krea-realtime-video-14b.safetensors", "directory": "diffusion_models",
               "url": f"{HF}/krea/krea-realtime-video/resolve/main/krea-realtime-video-14b.safetensors"},
    "drafter": {"name": "self_forcing_dmd.pt", "directory": "diffusion_models",
                "url": f"{HF}/gdhe17/Self-Forcing/resolve/main/checkpoints/self_forcing_dmd.pt"},
    "reward": {"name": "ImageReward.pt", "directory": "image_reward",
               "url": f"{HF}/THUDM/ImageReward/resolve/main/ImageReward.pt"},
    "vae": {"name": "wan_2.1_vae.safetensors", "directory": "vae",
            "url": f"{HF}/Comfy-Org/Wan_2.1_ComfyUI_repackaged/resolve/main/split_files/vae/wan_2.1_vae.safetensors"},
    "umt5": {"name": "umt5_xxl_fp8_e4m3fn_scaled.safetensors", "directory": "text_encoders",
             "url": f"{HF}/Comfy-Org/Wan_2.1_ComfyUI_repackaged/resolve/main/split_files/text_encoders/"
                    "umt5_xxl_fp8_e4m3fn_scaled.safetensors"},
}
FILES_NOTE = """**Files** (nothing is downloaded at run time):
- `models/diffusion_models/self_forcing_dmd.pt`: drafter, [gdhe17/Self-Forcing](https://huggingface.co/gdhe17/Self-Forcing) `checkpoints/self_forcing_dmd.pt`
- `models/diffusion_models/krea-realtime-video-14b.safetensors`: target, [krea/krea-realtime-video](https://huggingface.co/krea/krea-realtime-video)
- `models/image_reward/ImageReward.pt` + `vocab.txt`: [THUDM/ImageReward](https://huggingface.co/THUDM/ImageReward) and [google-bert/bert-base-uncased](https://huggingface.co/google-bert/bert-base-uncased) `vocab.txt`
- `models/vae/wan_2.1_vae.safetensors`, `models/text_encoders/umt5_xxl_fp8_e4m3fn_scaled.safetensors`: [Comfy-Org/Wan_2.1_ComfyUI_repackaged](https://huggingface.co/Comfy-Org/Wan_2.1_ComfyUI_repackaged)

Low VRAM: load the 14B with **Load Diffusion Model** (weight_dtype fp8_e4m3fn) and connect its MODEL to the target loader's `model` input.
Skip the 11 GB text encoder on later runs: **SDVG Save Prompt Embeddings** once, then **SDVG Load Prompt Embeddings**."""


NOTE_POS, NOTE_SIZE = (380, 390), (360, 690)  # the notes sit under the prompt, in the second column


def specs() -> dict:
    """Node specs of the pack and of the core nodes used, from the classes (fake host; no ComfyUI needed)."""
    import tempfile

    import fake_host  # tests/fake_host.py
    import workflow_tools

    with fake_host.installed(Path(tempfile.mkdtemp(prefix="sdvg-wf-"))) as pack:
        return workflow_tools.object_info_from_classes(list(pack.nodes.NODES) + list(pack.core_nodes.CORE_NODES))


class Graph:
    """Builds the frontend's JSON: nodes with input/output slots, links, groups."""

    def __init__(self, specs: dict, wid: str):
        self.specs, self.wid = specs, wid
        self.nodes: list[dict] = []
        self.links: list[list] = []
        self.groups: list[dict] = []

    def node(self, type_: str, pos: tuple[int, int], widgets: dict | None = None, title: str | None = None,
             size: tuple[int, int] | None = None, models: list[str] | None = None) -> dict:
        import workflow_tools as wt

        spec = self.specs[type_]
        inputs, wvals = [], []
        ordered = wt._inputs(spec)
        for name, t, opts, optional in ordered:  # sockets first
            if not wt.is_widget(t, opts):
                inputs.append({"localized_name": name, "name": name, "type": t, "link": None})
        for name, t, opts, optional in ordered:  # then widgets (in input order)
            if wt.is_widget(t, opts):
                typ = "COMBO" if isinstance(t, list) else t
                inputs.append({"localized_name": name, "name": name, "type": typ, "widget": {"name": name}, "link": None})
                value = (widgets or {}).get(name, opts.get("default"))
                if value is None and typ == "COMBO":
                    value = (t if isinstance(t, list) else opts.get("options") or [""])[0]
                wvals.append(value)
                if opts.get("control_after_generate"):
                    wvals.append("fixed")
        outputs = [{"localized_name": n, "name": n, "type": t, "links": []}
                   for t, n in zip(spec["output"], spec["output_name"])]
        n_slots = max(len([i for i in inputs if "widget" not in i]), len(outputs)) + len(wvals)
        node = {"id": len(self.nodes) + 1, "type": type_, "pos": list(pos),
                "size": list(size or (340, 46 + 24 * n_slots)), "flags": {}, "order": len(self.nodes), "mode": 0,
                "inputs": inputs, "outputs": outputs,
                "properties": {"Node name for S&R": type_, **({"models": [MODELS[m] for m in models]} if models else {})},
                "widgets_values": wvals}
        if title:
            node["title"] = title
        self.nodes.append(node)
        return node

    def note(self, text: str, pos: tuple[int, int] = NOTE_POS, size: tuple[int, int] = NOTE_SIZE) -> dict:
        node = {"id": len(self.nodes) + 1, "type": "MarkdownNote", "pos": list(pos), "size": list(size), "flags": {},
                "order": len(self.nodes), "mode": 0, "inputs": [], "outputs": [], "properties": {},
                "widgets_values": [text], "color": "#432", "bgcolor": "#653"}
        self.nodes.append(node)
        return node

    def link(self, src: dict, out_name: str, dst: dict, in_name: str) -> None:
        si = next(i for i, o in enumerate(src["outputs"]) if o["name"] == out_name)
        di = next(i for i, o in enumerate(dst["inputs"]) if o["name"] == in_name)
        lid = len(self.links) + 1
        typ = src["outputs"][si]["type"]
        self.links.append([lid, src["id"], si, dst["id"], di, typ])
        src["outputs"][si]["links"].append(lid)
        dst["inputs"][di]["link"] = lid

    def group(self, title: str, bounding: tuple[int, int, int, int], color: str = "#3f789e") -> None:
        self.groups.append({"id": len(self.groups) + 1, "title": title, "bounding": list(bounding), "color": color,
                            "font_size": 24, "flags": {}})

    def to_json(self) -> dict:
        for n in self.nodes:
            for o in n["outputs"]:
                if not o["links"]:
                    o["links"] = None
        wf = {"id": self.wid, "revision": 0, "last_node_id": len(self.nodes), "last_link_id": len(self.links),
              "nodes": self.nodes, "links": self.links, "groups": self.groups, "config": {}, "extra": {}, "version": 0.4}
        wf["extra"]["ds"] = workflow_tools.saved_view(wf)
        return wf


def loaders(g: Graph, start_below: bool = False) -> dict:
    """The shared left columns: target, drafter and ImageReward loaders in the first; the prompt, its encoding and
    the VAE and text-encoder loaders in the second (`start_below`: room for SDVG Start under the first column),
    or the VAE and text-encoder loaders in the first (the note then has the second column's lower part)."""
    # properties.models lets the frontend offer the download of a missing file; it only downloads .safetensors,
    # so the two .pt files are listed in the note instead (and in the nodes' error messages)
    target = g.node("SDVGLoadTarget", (0, 0), {"model_name": MODELS["target"]["name"]}, models=["target"])
    drafter = g.node("SDVGLoadDrafter", (0, 200), {"model_name": MODELS["drafter"]["name"]})
    reward = g.node("SDVGLoadImageReward", (0, 400), {"reward_name": MODELS["reward"]["name"]})
    vae_pos, clip_pos = ((380, 400), (380, 500)) if start_below else ((0, 560), (0, 660))
    vae = g.node("VAELoader", vae_pos, {"vae_name": MODELS["vae"]["name"]}, models=["vae"], size=(340, 60))
    clip = g.node("CLIPLoader", clip_pos, {"clip_name": MODELS["umt5"]["name"], "type": "wan", "device": "default"},
                  models=["umt5"], size=(340, 110))
    text = g.node("PrimitiveStringMultiline", (380, 0), {"value": PROMPT}, title="Prompt", size=(360, 190))
    enc = g.node("CLIPTextEncode", (380, 250), {"text": PROMPT}, size=(360, 100))
    g.link(clip, "CLIP", enc, "clip")
    g.link(text, "STRING", enc, "text")
    return {"target": target, "drafter": drafter, "reward": reward, "vae": vae, "text": text, "enc": enc}


def wire_run(g: Graph, m: dict, node: dict) -> None:
    g.link(m["target"], "target", node, "target")
    g.link(m["drafter"], "drafter", node, "drafter")
    g.link(m["reward"], "image_reward", node, "image_reward")
    g.link(m["vae"], "VAE", node, "vae")
    g.link(m["enc"], "CONDITIONING", node, "positive")
    g.link(m["text"], "STRING", node, "prompt")


def save_video(g: Graph, frames_src: dict, pos: tuple[int, int], prefix: str,
               size: tuple[int, int] = (420, 440), save_pos: tuple[int, int] | None = None) -> None:
    """Create Video (at `pos`) -> Save Video (below it, or at `save_pos`)."""
    cv = g.node("CreateVideo", pos, {"fps": 16.0}, size=(270, 80))
    sv = g.node("SaveVideo", save_pos or (pos[0], pos[1] + 120), {"filename_prefix": prefix}, size=size)
    g.link(frames_src, "frames", cv, "images")
    g.link(cv, "VIDEO", sv, "video")


# SDVG Generate with room for what a run adds below its widgets (the newest block's preview, about 200 px at
# 832x480, and the report's first lines), so it grows over no other node
GENERATE_SIZE = (340, 740)


def loop_workflow(sp: dict) -> dict:
    g = Graph(sp, "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000001")
    m = loaders(g, start_below=True)
    start = g.node("SDVGStart", (0, 600), {"num_blocks": 9}, size=(340, 400))
    wire_run(g, m, start)
    # the body's nodes keep room for what a run adds: Decode Draft its frames, Score its text, Route its text and the
    # newest block's preview (about 200 px at 832x480), so nothing grows over the report below the group
    ls = g.node("SDVGLoopStart", (800, 80), size=(240, 70))
    draft = g.node("SDVGDraftBlock", (1080, 80), size=(240, 50))
    dec = g.node("SDVGDecodeBlock", (1360, 80), size=(260, 260))
    score = g.node("SDVGScoreBlock", (1660, 80), size=(300, 170))
    route = g.node("SDVGRoute", (800, 210), {"tau": -0.7, "force_reject_first": True}, size=(400, 380))
    le = g.node("SDVGLoopEnd", (1660, 320), size=(240, 70))
    fin = g.node("SDVGFinish", (2060, 0), size=(300, 120))
    g.link(start, "state", ls, "state")
    g.link(ls, "state", draft, "state")
    g.link(draft, "state", dec, "state")
    g.link(dec, "state", score, "state")
    g.link(ls, "state", route, "state")
    g.link(score, "state", route, "scored")
    g.link(ls, "loop", le, "loop")
    g.link(route, "state", le, "state")
    g.link(le, "state", fin, "state")
    rep = g.node("PreviewAny", (780, 690), title="Report (which blocks were reused, what was recomputed)",
                 size=(1240, 390))
    g.link(fin, "report", rep, "source")
    plot = g.node("PreviewImage", (2060, 180), title="Scores vs tau", size=(480, 330))
    g.link(fin, "plot", plot, "images")
    save_video(g, fin, (2060, 560), "video/SDVG", size=(480, 400))
    g.group("One block (repeated by SDVG Loop End until every block is committed)", (780, 0, 1240, 620))
    g.note("## SDVG, step by step\n\nEach iteration: the 1.3B **drafter** proposes a block, the VAE "
                     "decodes it, **ImageReward** scores every frame and **SDVG Route** keeps the draft when the "
                     "lowest frame score is >= **tau**; otherwise the 14B **target** redoes the block from the "
                     "same noise. Block 0 always comes from the target (its draft is never computed: the route's "
                     "`scored` input is lazy).\n\nMove **tau** and queue again: only the blocks from the first "
                     "changed decision are recomputed; the **Report** says per block whether this run computed it "
                     "and how many forwards it recomputed.\n\n" + FILES_NOTE, pos=(380, 670), size=(360, 410))
    return g.to_json()


def generate_workflow(sp: dict) -> dict:
    g = Graph(sp, "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000002")
    m = loaders(g)
    gen = g.node("SDVGGenerate", (780, 0), {"num_blocks": 9, "policy": "sdvg", "tau": -0.7}, size=GENERATE_SIZE)
    wire_run(g, m, gen)
    rep = g.node("PreviewAny", (1160, 0), title="Report", size=(700, 340))
    g.link(gen, "report", rep, "source")
    plot = g.node("PreviewImage", (1160, 390), title="Scores vs tau", size=(700, 420))
    g.link(gen, "plot", plot, "images")
    save_video(g, gen, (1900, 0), "video/SDVG")
    g.note("## SDVG Generate (all in one)\n\nThe drafter proposes each block, ImageReward scores its "
                     "frames (min over frames) and the target redoes the block when the score < **tau** (block 0 "
                     "always from the target). Higher tau: closer to the 14B, slower. Paper: tau -0.7 gives 1.59x "
                     "at ~98% of the target's quality.\n\n" + FILES_NOTE)
    return g.to_json()


def baseline_workflow(sp: dict) -> dict:
    g = Graph(sp, "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000003")
    m = loaders(g)
    for i, (policy, title, prefix, color) in enumerate((
            ("target_only", "Target only (14B every block)", "video/target_only", "#8A8"),
            ("sdvg", "SDVG (tau -0.7)", "video/SDVG", "#88A"))):
        x = 800 + i * 400
        gen = g.node("SDVGGenerate", (x, 0), {"num_blocks": 9, "policy": policy, "tau": -0.7, "fresh_run": True},
                     title=title, size=GENERATE_SIZE)
        wire_run(g, m, gen)
        save_video(g, gen, (x, 800), prefix, size=(480, 380), save_pos=(1580 + i * 500, 700))
        g.group(title, (x - 20, -70, 380, 990), color)
        rep = g.node("PreviewAny", (1580, i * 340), title=f"Report: {policy}", size=(620, 300))
        g.link(gen, "report", rep, "source")
        plot = g.node("PreviewImage", (2220, i * 340), title=f"Scores: {policy}", size=(340, 300))
        g.link(gen, "plot", plot, "images")
    g.note("## Target-only vs SDVG\n\nSame prompt, seed and noise. Both nodes have **fresh_run** on: "
                     "neither takes blocks from the other's run (block 0 is the same target block in both), so each "
                     "report's wall time is a fresh run's. Compare the two videos and the reports: wall time, "
                     "counted forwards, acceptance, counted speedup.\n\n" + FILES_NOTE)
    return g.to_json()


WORKFLOWS = {"sdvg_loop_step_by_step.json": loop_workflow, "sdvg_generate.json": generate_workflow,
             "sdvg_vs_target_only.json": baseline_workflow}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with workflows/ instead of writing")
    a = ap.parse_args()
    sp = specs()
    stale = []
    for name, build in WORKFLOWS.items():
        text = json.dumps(build(sp), indent=2) + "\n"
        path = REPO / "workflows" / name
        if a.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print("wrote", path)
    if stale:
        print("stale workflows:", stale)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
