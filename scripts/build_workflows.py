#!/usr/bin/env python3
"""Write the example workflows (UI format 0.4) in workflows/ from a compact description.

    .venv/bin/python scripts/build_workflows.py            # node specs from the pack + the test fakes of core nodes
    .venv/bin/python scripts/build_workflows.py --check    # only compare with the files on disk (exit 1 if stale)

Either way it exits 1 when a layout hides a report or a video player at the saved view (under the frontend's minimap,
or a node over a report: tests/workflow_tools.py layout_problems).

Input/output lists follow the frontend's layout (socket inputs first, then widget inputs with "widget"),
widgets_values follow the input order with "fixed" after every control_after_generate widget, and every file a
workflow needs is listed in the node's properties.models (the frontend offers the download when it is missing).
tests/test_comfy_host.py loads each file in the real frontend (chromium) to check nothing is missing.
"""
from __future__ import annotations

import argparse
import functools
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
    "longlive": {"name": "longlive_base.pt", "directory": "diffusion_models",
                 "url": f"{HF}/Efficient-Large-Model/LongLive-1.3B/resolve/main/models/longlive_base.pt"},
    "longlive_lora": {"name": "lora.pt", "directory": "loras",
                      "url": f"{HF}/Efficient-Large-Model/LongLive-1.3B/resolve/main/models/lora.pt"},
    "umt5": {"name": "umt5_xxl_fp8_e4m3fn_scaled.safetensors", "directory": "text_encoders",
             "url": f"{HF}/Comfy-Org/Wan_2.1_ComfyUI_repackaged/resolve/main/split_files/text_encoders/"
                    "umt5_xxl_fp8_e4m3fn_scaled.safetensors"},
}
SELF_FORCING_FILE = "- `models/diffusion_models/self_forcing_dmd.pt`: drafter, [gdhe17/Self-Forcing](https://huggingface.co/gdhe17/Self-Forcing) `checkpoints/self_forcing_dmd.pt`\n"
LONGLIVE_FILES = ("- `models/diffusion_models/longlive_base.pt` + `models/loras/lora.pt`: the LongLive drafter (kind longlive, "
                  "its LoRA merged at load), [Efficient-Large-Model/LongLive-1.3B](https://huggingface.co/Efficient-Large-Model/LongLive-1.3B) "
                  "`models/longlive_base.pt`, `models/lora.pt`\n")
FILES_NOTE = """**Files** (nothing is downloaded at run time):
{drafter}- `models/diffusion_models/krea-realtime-video-14b.safetensors`: target, [krea/krea-realtime-video](https://huggingface.co/krea/krea-realtime-video)
- `models/image_reward/ImageReward.pt` + `vocab.txt`: [THUDM/ImageReward](https://huggingface.co/THUDM/ImageReward) and [google-bert/bert-base-uncased](https://huggingface.co/google-bert/bert-base-uncased) `vocab.txt`
- `models/vae/wan_2.1_vae.safetensors`, `models/text_encoders/umt5_xxl_fp8_e4m3fn_scaled.safetensors`: [Comfy-Org/Wan_2.1_ComfyUI_repackaged](https://huggingface.co/Comfy-Org/Wan_2.1_ComfyUI_repackaged)

Low VRAM: load the 14B with **Load Diffusion Model** (weight_dtype fp8_e4m3fn) and connect its MODEL to the target loader's `model` input.
Skip the 11 GB text encoder on later runs: **SDVG Save Prompt Embeddings** once, then **SDVG Load Prompt Embeddings**."""


def files_note(drafter: str = SELF_FORCING_FILE) -> str:
    return FILES_NOTE.replace("{drafter}", drafter)


NOTE_POS, NOTE_SIZE = (380, 390), (360, 690)  # the notes sit under the prompt, in the second column


def specs() -> dict:
    """Node specs of the pack and of the core nodes used, from the classes (fake host; no ComfyUI needed)."""
    import tempfile

    import fake_host  # tests/fake_host.py
    import workflow_tools

    with fake_host.installed(Path(tempfile.mkdtemp(prefix="sdvg-wf-"))) as pack:
        # core nodes in the shape the workflows are saved in (the oldest supported host's; newer ones convert on load),
        # and the newest host's nodes the oldest lacks (core's AR video nodes: workflows using them need that host)
        return workflow_tools.object_info_from_classes(list(pack.nodes.NODES) + pack.core_nodes.saved_shape())


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

    def mute(self, *nodes: dict) -> None:
        """Nodes the frontend shows greyed and leaves out of the prompt until the user unmutes them (mode 2)."""
        for n in nodes:
            n["mode"] = 2

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

    def to_json(self, needs: tuple[str, list[str]] | None = None) -> dict:
        """The UI JSON; `needs`: (the oldest ComfyUI version that has every core node used, those nodes) when that is
        newer than the oldest supported host (tests/workflow_tools.py `workflow_needs`)."""
        for n in self.nodes:
            for o in n["outputs"]:
                if not o["links"]:
                    o["links"] = None
        wf = {"id": self.wid, "revision": 0, "last_node_id": len(self.nodes), "last_link_id": len(self.links),
              "nodes": self.nodes, "links": self.links, "groups": self.groups, "config": {}, "extra": {}, "version": 0.4}
        if needs is not None:
            wf["extra"]["sdvg_needs"] = {"comfyui": needs[0], "core_nodes": needs[1]}
        wf["extra"]["ds"] = workflow_tools.saved_view(wf)
        return wf


# the first column's loaders, each below the one before (heights as the frontend draws them, plus a title bar's gap)
TARGET_Y, DRAFTER_Y, REWARD_Y, VAE_Y, CLIP_Y = 0, 230, 540, 730, 840
LONG_PROMPT = ("A red fox trots through fresh snow in a quiet pine forest, its breath steaming, the camera tracking it "
               "at ground level, soft morning light, cinematic.")
SCHEDULE = ("0: A red fox trots through fresh snow in a quiet pine forest, soft morning light, the camera tracking it "
            "at ground level, cinematic.\n"
            "10: The red fox stops at the edge of a frozen stream and looks around, snow starting to fall.\n"
            "20: The red fox leaps across the frozen stream into deep snow, slow motion, snowflakes swirling.")
LONG_BLOCKS, SCHEDULE_BLOCKS = 40, 30  # 40 blocks = 120 latent frames = 477 frames (29.8 s at 16 fps); 30: 22.3 s


def loaders(g: Graph, second_column: bool = False, longlive: bool = False, encoder: bool = True) -> dict:
    """The shared left columns: the target, drafter and (unless `second_column`) ImageReward, VAE and text-encoder
    loaders in the first; the prompt and its encoding in the second (`second_column`: the ImageReward, VAE and
    text-encoder loaders too, under the prompt, leaving the first column's lower part to SDVG Start). `longlive`:
    the LongLive drafter with its LoRA; `encoder` False: no prompt and CLIP Text Encode (a schedule encodes)."""
    # properties.models lets the frontend offer the download of a missing file; it only downloads .safetensors,
    # so the .pt files are listed in the note instead (and in the nodes' error messages)
    target = g.node("SDVGLoadTarget", (0, TARGET_Y), {"model_name": MODELS["target"]["name"]}, models=["target"],
                    size=(340, 190))
    widgets = ({"model_name": MODELS["longlive"]["name"], "kind": "longlive",
                "lora_name": MODELS["longlive_lora"]["name"]} if longlive else {"model_name": MODELS["drafter"]["name"]})
    drafter = g.node("SDVGLoadDrafter", (0, DRAFTER_Y), widgets, title="SDVG Load Drafter (LongLive 1.3B)" if longlive
                     else None, size=(340, 262))
    col2 = 380
    reward_pos, vae_pos, clip_pos = (((col2, 670), (col2, 400), (col2, 510)) if second_column
                                     else ((0, REWARD_Y), (0, VAE_Y), (0, CLIP_Y)))
    reward = g.node("SDVGLoadImageReward", reward_pos, {"reward_name": MODELS["reward"]["name"]}, size=(340, 142))
    vae = g.node("VAELoader", vae_pos, {"vae_name": MODELS["vae"]["name"]}, models=["vae"], size=(340, 60))
    clip = g.node("CLIPLoader", clip_pos, {"clip_name": MODELS["umt5"]["name"], "type": "wan", "device": "default"},
                  models=["umt5"], size=(340, 110))
    out = {"target": target, "drafter": drafter, "reward": reward, "vae": vae, "clip": clip}
    if encoder:
        prompt = LONG_PROMPT if longlive else PROMPT
        out["text"] = g.node("PrimitiveStringMultiline", (col2, 0), {"value": prompt}, title="Prompt", size=(360, 190))
        out["enc"] = g.node("CLIPTextEncode", (col2, 250), {"text": prompt}, size=(360, 100))
        g.link(clip, "CLIP", out["enc"], "clip")
        g.link(out["text"], "STRING", out["enc"], "text")
    return out


def wire_run(g: Graph, m: dict, node: dict) -> None:
    g.link(m["target"], "target", node, "target")
    g.link(m["drafter"], "drafter", node, "drafter")
    g.link(m["reward"], "image_reward", node, "image_reward")
    g.link(m["vae"], "VAE", node, "vae")
    if "schedule" in m:
        g.link(m["schedule"], "schedule", node, "schedule")
    else:
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
# 832x480, and the report's first lines; with save_video the saved video), so it grows over no other node
GENERATE_SIZE = (340, 860)


def loop_workflow(sp: dict) -> dict:
    g = Graph(sp, "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000001")
    m = loaders(g, second_column=True)
    start = g.node("SDVGStart", (0, 540), {"num_blocks": 9}, size=(340, 440))
    wire_run(g, m, start)
    # the body's nodes keep room for what a run adds: Decode Draft its frames, Score its text, Route its text and the
    # newest block's preview (about 200 px at 832x480), so nothing grows over the report below the group
    ls = g.node("SDVGLoopStart", (800, 80), size=(240, 70))
    draft = g.node("SDVGDraftBlock", (1080, 80), size=(240, 50))
    dec = g.node("SDVGDecodeBlock", (1360, 80), size=(260, 260))
    score = g.node("SDVGScoreBlock", (1660, 80), size=(300, 170))
    route = g.node("SDVGRoute", (800, 210), {"tau": -0.7, "force_reject_first": True}, size=(400, 380))
    le = g.node("SDVGLoopEnd", (1660, 320), size=(240, 70))
    fin = g.node("SDVGFinish", (2060, 0), size=(300, 190))
    g.link(start, "state", ls, "state")
    g.link(ls, "state", draft, "state")
    g.link(draft, "state", dec, "state")
    g.link(dec, "state", score, "state")
    g.link(ls, "state", route, "state")
    g.link(score, "state", route, "scored")
    g.link(ls, "loop", le, "loop")
    g.link(route, "state", le, "state")
    g.link(le, "state", fin, "state")
    # the report's longest line is ~700 canvas units wide: the video player beside it, clear of the minimap
    rep = g.node("PreviewAny", (780, 690), title="Report (which blocks were reused, what was recomputed)",
                 size=(820, 390))
    g.link(fin, "report", rep, "source")
    # Finish shows the report's first lines once it ran: room for them above the plot
    plot = g.node("PreviewImage", (2060, 300), title="Scores vs tau", size=(480, 300))
    g.link(fin, "plot", plot, "images")
    save_video(g, fin, (2060, 650), "video/SDVG", size=(380, 390), save_pos=(1640, 690))
    g.group("One block (repeated by SDVG Loop End until every block is committed)", (780, 0, 1240, 620))
    g.note("## SDVG, step by step\n\nEach iteration: the 1.3B **drafter** proposes a block, the VAE decodes it, "
           "**ImageReward** scores every frame and **SDVG Route** keeps the draft when the lowest frame score is >= "
           "**tau**; otherwise the 14B **target** redoes the block from the same noise. Block 0 always comes from "
           "the target (the route's `scored` input is lazy).\n\nMove **tau** and queue again: only the blocks from "
           "the first changed decision are recomputed (see the **Report**).\n\n" + files_note(),
           pos=(380, 860), size=(360, 220))
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
           "at ~98% of the target's quality.\n\n" + files_note())
    return g.to_json()


def baseline_workflow(sp: dict) -> dict:
    g = Graph(sp, "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000003")
    m = loaders(g)
    for i, (policy, title, prefix, color) in enumerate((
            ("target-only", "Target only (14B every block)", "video/target_only", "#8A8"),
            ("sdvg", "SDVG (tau -0.7)", "video/SDVG", "#88A"))):
        x = 800 + i * 400
        gen = g.node("SDVGGenerate", (x, 0), {"num_blocks": 9, "policy": policy, "tau": -0.7, "fresh_run": True},
                     title=title, size=GENERATE_SIZE)
        wire_run(g, m, gen)
        # the players beside the reports, the plots under them: the bottom-right corner is the minimap's
        save_video(g, gen, (x, 920), prefix, size=(340, 300), save_pos=(2220, i * 340))
        g.group(title, (x - 20, -70, 380, 1100), color)
        rep = g.node("PreviewAny", (1580, i * 340), title=f"Report: {policy}", size=(620, 300))
        g.link(gen, "report", rep, "source")
        plot = g.node("PreviewImage", (1580 + i * 265, 700), title=f"Scores: {policy}", size=(255, 300))
        g.link(gen, "plot", plot, "images")
    g.note("## Target-only vs SDVG\n\nSame prompt, seed and noise. Both nodes have **fresh_run** on: "
           "neither takes blocks from the other's run (block 0 is the same target block in both), so each "
           "report's wall time is a fresh run's. Compare the two videos and the reports: wall time, "
           "counted forwards, acceptance, counted speedup.\n\n" + files_note())
    return g.to_json()


LONG_GENERATE_SIZE = (340, 900)


def long_outputs(g: Graph, gen: dict, preview_title: str) -> None:
    """A long video's report (a row per block: a tall viewer), plot and preview; the video itself is saved by
    SDVG Generate block by block and played by SDVG Show Video."""
    rep = g.node("PreviewAny", (1160, 0), title="Report (a row per block)", size=(760, 640))
    g.link(gen, "report", rep, "source")
    plot = g.node("PreviewImage", (1160, 690), title="Scores vs tau (per block)", size=(760, 400))
    g.link(gen, "plot", plot, "images")
    # the player on top, the preview under it, both above the minimap (bottom right at the saved view)
    show = g.node("SDVGShowVideo", (1960, 0), size=(480, 380))
    g.link(gen, "video", show, "video")
    prev = g.node("PreviewImage", (1960, 430), title=preview_title, size=(480, 370))
    g.link(gen, "frames", prev, "images")


LONG_NOTE = ("The **LongLive** drafter runs its own context recipe (frame sink + sliding window: flat cost per "
             "block), the 14B **Krea** target its rebuild (any length): SDVG Generate's `drafter_recipe` auto picks "
             "LongLive's from the loader's kind. With **save_video** on, each block goes to "
             "`output/video/SDVG_long_*.mp4` as soon as it is committed: the whole video never sits in memory, "
             "and `frames` is only a preview (every 15th frame); **SDVG Show Video** plays the file.")


def long_video_workflow(sp: dict) -> dict:
    g = Graph(sp, "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000004")
    m = loaders(g, longlive=True)
    gen = g.node("SDVGGenerate", (780, 0), {"num_blocks": LONG_BLOCKS, "policy": "sdvg", "tau": -0.7,
                                            "save_video": True, "filename_prefix": "video/SDVG_long"},
                 title="SDVG Generate (40 blocks, saved as they commit)", size=LONG_GENERATE_SIZE)
    wire_run(g, m, gen)
    long_outputs(g, gen, "Preview (every 15th frame; the video is in the file)")
    g.note("## A long video (40 blocks, 30 s)\n\n" + LONG_NOTE + "\n\n" + files_note(LONGLIVE_FILES),
           pos=(380, 390), size=(360, 700))
    return g.to_json()


def prompt_changes_workflow(sp: dict) -> dict:
    g = Graph(sp, "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000005")
    m = loaders(g, longlive=True, encoder=False)
    sched = g.node("SDVGPromptSchedule", (380, 0), {"schedule": SCHEDULE}, title="Prompt schedule (block: prompt)",
                   size=(360, 300))
    g.link(m["clip"], "CLIP", sched, "clip")
    m["schedule"] = sched
    gen = g.node("SDVGGenerate", (780, 0), {"num_blocks": SCHEDULE_BLOCKS, "policy": "sdvg", "tau": -0.7,
                                            "save_video": True, "filename_prefix": "video/SDVG_prompts"},
                 title="SDVG Generate (30 blocks, 3 prompts)", size=LONG_GENERATE_SIZE)
    wire_run(g, m, gen)
    long_outputs(g, gen, "Preview (every 12th frame; the video is in the file)")
    g.note("## A long video with prompt changes\n\nThree prompts over 30 blocks: each `block: prompt` line holds "
           "from its block until the next line's; each prompt is encoded once. At a change the LongLive drafter "
           "recaches its window under the new prompt (motion stays continuous), the Krea target rebuilds with the "
           "block's own prompt, and ImageReward scores every block against **its** prompt (the report shows which). "
           "Edit the third prompt and queue again: nothing before block 20 is recomputed.\n\n"
           + LONG_NOTE.replace("SDVG_long", "SDVG_prompts").replace("every 15th", "every 12th") + "\n\n"
           + files_note(LONGLIVE_FILES), pos=(380, 350), size=(360, 740))
    return g.to_json()


# the input files the pixels-in workflows name (in ComfyUI's input folder; pick your own in Load Image / Load Video)
START_IMAGE, INPUT_VIDEO = "sdvg_start.png", "sdvg_input.mp4"
# the given-pixels loaders stack in the second column under the prompt nodes; their saved heights are what the
# frontend shows once a file is loaded (its image / video preview included), so nothing lies under them
GIVEN_X, GIVEN_TOP, GIVEN_GAP = 380, 390, 20
# the note under them fills the column down to where sdvg_generate's note ends (its text scrolls), so the workflow
# is no taller than sdvg_generate and opens at a readable zoom (tests: MIN_READABLE_SCALE)
COLUMN_BOTTOM = 1090
PIXELS_NOTE = ("The picture or video is centre-cropped to the width/height's aspect and resized (a picture that would "
               "lose more than half is refused); the report says the mode and the strength.")


def pixels_workflow(sp: dict, wid: str, title: str, text: str, given: list[tuple[str, dict, tuple]],
                    widgets: dict) -> dict:
    """SDVG Generate fed by core loaders of given pixels (`given`: (type, widgets, size), chained and stacked in the
    second column, the last one's first output into SDVG Generate), its report, plot and video as in sdvg_generate."""
    g = Graph(sp, wid)
    m = loaders(g)
    gen = g.node("SDVGGenerate", (780, 0), {"num_blocks": 9, "policy": "sdvg", "tau": -0.7, **widgets},
                 size=GENERATE_SIZE)
    wire_run(g, m, gen)
    prev, y = None, GIVEN_TOP
    for type_, w, size in given:
        node = g.node(type_, (GIVEN_X, y), w, size=size)
        y += size[1] + GIVEN_GAP
        if prev is not None:
            g.link(prev, prev["outputs"][0]["name"], node, node["inputs"][0]["name"])
        prev = node
    g.link(prev, prev["outputs"][0]["name"], gen, "input_video" if "video_mode" in widgets else "start_image")
    if any(o["name"] == "fps" for o in prev["outputs"]):  # the video's own rate: resampled to 16 fps, duration kept
        g.link(prev, "fps", gen, "fps")
    rep = g.node("PreviewAny", (1160, 0), title="Report (mode and strength first)", size=(700, 340))
    g.link(gen, "report", rep, "source")
    plot = g.node("PreviewImage", (1160, 390), title="Scores vs tau", size=(700, 420))
    g.link(gen, "plot", plot, "images")
    save_video(g, gen, (1900, 0), "video/SDVG")
    g.note(f"## {title}\n\n{text} {PIXELS_NOTE}\n\n" + files_note(), pos=(GIVEN_X, y), size=(360, COLUMN_BOTTOM - y))
    return g.to_json()


# the pixels-in workflows: (workflow id, title, what it does, the core nodes giving the pixels, Generate's widgets)
PIXEL_WORKFLOWS = {
    "sdvg_image_to_video.json": (
        "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000006", "Image to video (SDVG)",
        "**Load Image** gives the first frame: the video begins with it and continues under the prompt. Block 0 "
        "still comes from the 14B target (it fixes the scene); the drafter proposes the rest and the target redoes "
        "a block when its lowest ImageReward frame score is < **tau**.",
        [("LoadImage", {"image": START_IMAGE}, (360, 330))], {}),
    "sdvg_video_to_video.json": (
        "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000007", "Video to video (SDVG)",
        "**Load Video** -> **Get Video Components** gives the frames and their **fps** (resampled to 16 fps by time, "
        "so the output lasts as long as the input): each input block is noised at **strength** and denoised by the "
        "drafter under the prompt, scored, and redone by the target from the same noised input when rejected "
        "(`video_mode` extend continues the video instead). The run ends where the input ends.",
        [("LoadVideo", {"file": INPUT_VIDEO}, (360, 380)),  # 1.49.6 grows it to about 370 for its player
         ("GetVideoComponents", {}, (360, 70))],
        {"video_mode": "video_to_video", "strength": 0.7}),
}


# core's AR workflow (ComfyUI 0.33+) with SDVG's sampler in place of Sampler AR Video
AR_SIGMAS = "1.0, 0.9375, 0.8333333, 0.625, 0.0"  # Self-Forcing's four steps (shift 5) and the clean end
AR_LENGTH, AR_I2V_LENGTH = 81, 85  # 21 latent frames = 7 blocks of 3; from a start image 22 = the start + 7 blocks
AR_CORE_NODES = ["EmptyARVideoLatent", "ARVideoI2V", "ManualSigmas"]  # new in 0.33.0


def ar_sampler_workflow(sp: dict) -> dict:
    g = Graph(sp, "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000008")
    target = g.node("UNETLoader", (0, 0), {"unet_name": MODELS["target"]["name"], "weight_dtype": "default"},
                    title="Load Diffusion Model (target, 14B)", models=["target"], size=(340, 110))
    drafter = g.node("SDVGLoadDrafter", (0, 160), {"model_name": MODELS["drafter"]["name"]}, size=(340, 262))
    reward = g.node("SDVGLoadImageReward", (0, 470), {"reward_name": MODELS["reward"]["name"]}, size=(340, 142))
    vae = g.node("VAELoader", (0, 660), {"vae_name": MODELS["vae"]["name"]}, models=["vae"], size=(340, 60))
    clip = g.node("CLIPLoader", (0, 770), {"clip_name": MODELS["umt5"]["name"], "type": "wan", "device": "default"},
                  models=["umt5"], size=(340, 110))
    text = g.node("PrimitiveStringMultiline", (380, 0), {"value": PROMPT}, title="Prompt", size=(360, 170))
    enc = g.node("CLIPTextEncode", (380, 220), {"text": PROMPT}, size=(360, 100))
    g.link(clip, "CLIP", enc, "clip")
    g.link(text, "STRING", enc, "text")
    latent = g.node("EmptyARVideoLatent", (380, 370), {"width": 832, "height": 480, "length": AR_LENGTH},
                    size=(360, 130))
    # the optional start image: muted (greyed, left out of the prompt) until the user switches it on (the note says how)
    image = g.node("LoadImage", (380, 600), {"image": START_IMAGE}, size=(360, 230))
    i2v = g.node("ARVideoI2V", (380, 870), {"width": 832, "height": 480, "length": AR_I2V_LENGTH}, size=(360, 170))
    g.link(target, "MODEL", i2v, "model")
    g.link(vae, "VAE", i2v, "vae")
    g.link(image, "IMAGE", i2v, "start_image")
    g.mute(image, i2v)
    g.group("Start image (optional, muted)", (360, 520, 400, 530), "#a1309b")
    guider = g.node("BasicGuider", (800, 0), size=(300, 70))
    g.link(target, "MODEL", guider, "model")
    g.link(enc, "CONDITIONING", guider, "conditioning")
    noise = g.node("RandomNoise", (800, 120), {"noise_seed": 42}, size=(300, 82))
    sigmas = g.node("ManualSigmas", (800, 250), {"sigmas": AR_SIGMAS}, size=(300, 60))
    # the sampler shows each block's decision and the report's path on itself while it runs: room under its widgets
    sampler = g.node("SDVGSamplerARVideo", (800, 360), {"num_frame_per_block": 3, "policy": "sdvg", "tau": -0.7},
                     size=(340, 680))
    g.link(drafter, "drafter", sampler, "sdvg_drafter")
    g.link(vae, "VAE", sampler, "vae")
    g.link(reward, "image_reward", sampler, "image_reward")
    g.link(text, "STRING", sampler, "prompt")
    run = g.node("SamplerCustomAdvanced", (1180, 0), size=(300, 330))
    g.link(noise, "NOISE", run, "noise")
    g.link(guider, "GUIDER", run, "guider")
    g.link(sampler, "SAMPLER", run, "sampler")
    g.link(sigmas, "SIGMAS", run, "sigmas")
    g.link(latent, "LATENT", run, "latent_image")
    decode = g.node("VAEDecode", (1180, 380), size=(300, 50))
    g.link(run, "output", decode, "samples")
    g.link(vae, "VAE", decode, "vae")
    report = g.node("SDVGARReport", (1180, 480), size=(300, 100))
    g.link(run, "output", report, "samples")
    cv = g.node("CreateVideo", (1180, 630), {"fps": 16.0}, size=(270, 80))
    g.link(decode, "IMAGE", cv, "images")
    g.group("Core's AR sampling, SDVG as its sampler", (780, -70, 720, 1110))
    # the report, its plot and the note in one column left of the minimap's corner; the player beside them
    rep = g.node("PreviewAny", (1520, 0), title="Report", size=(540, 420))
    g.link(report, "report", rep, "source")
    plot = g.node("PreviewImage", (1520, 470), title="Scores vs tau", size=(540, 260))
    g.link(report, "plot", plot, "images")
    sv = g.node("SaveVideo", (2100, 0), {"filename_prefix": "video/SDVG_AR"}, size=(420, 440))
    g.link(cv, "VIDEO", sv, "video")
    g.note("## Core's AR video workflow with SDVG\n\nComfyUI 0.33's autoregressive path (Empty AR Video Latent, a "
           "guider, sigmas, **SamplerCustomAdvanced**, VAE Decode) with **SDVG Sampler (AR video)** where core's "
           "*Sampler AR Video* goes. The guider's MODEL is the 14B **target**; the sampler's drafter proposes each "
           "block, ImageReward scores it and the target redoes it when the lowest frame score is < **tau**. Noise, "
           "sigmas, latent, conditioning and start image are core's. Blocks of `num_frame_per_block` latent frames: 3 "
           "here, as the Self-Forcing drafter from SDVG Load Drafter was trained (1 for frame-wise Causal Forcing "
           "models loaded with Load Diffusion Model); a `length` that does not give whole blocks ends in a shorter "
           "block, as in core's loop.\n\n**Start image**: unmute the group, connect **AR Video I2V**'s "
           "MODEL to the guider and its LATENT to SamplerCustomAdvanced's `latent_image`.\n\n" + files_note(),
           pos=(1520, 780), size=(540, 260))
    return g.to_json(needs=("0.33.0", AR_CORE_NODES))


# SDVG Live: prompts prepared before the run (the panel switches among them by index: instantly), the node with its
# panel (the player and the live controls under its widgets: a tall node), the report, plot and saved video beside it
LIVE_SCHEDULE = ("0: A red fox trots through fresh snow in a quiet pine forest, soft morning light, cinematic.\n"
                 "1: The red fox stops at the edge of a frozen stream, snow starting to fall.\n"
                 "2: The red fox leaps across the frozen stream into deep snow, slow motion.")
LIVE_SIZE = (560, 1110)  # the widgets (~540 canvas units) and the panel: a 16:9 player at 520 wide and its controls


def live_workflow(sp: dict) -> dict:
    g = Graph(sp, "6b1c2f5e-0d3a-4c8e-9a51-5d6c00000009")
    m = loaders(g, encoder=False)
    sched = g.node("SDVGPromptSchedule", (380, 0), {"schedule": LIVE_SCHEDULE},
                   title="Prompts the panel switches among", size=(360, 300))
    g.link(m["clip"], "CLIP", sched, "clip")
    live = g.node("SDVGLive", (780, 0), {"max_blocks": 400, "tau": -0.7}, size=LIVE_SIZE)
    g.link(m["target"], "target", live, "target")
    g.link(m["drafter"], "drafter", live, "drafter")
    g.link(m["reward"], "image_reward", live, "image_reward")
    g.link(m["vae"], "VAE", live, "vae")
    g.link(sched, "schedule", live, "prompts")
    g.link(m["clip"], "CLIP", live, "clip")
    rep = g.node("PreviewAny", (1380, 0), title="Report (with the live timeline's files)", size=(620, 360))
    g.link(live, "report", rep, "source")
    show = g.node("SDVGShowVideo", (1380, 410), title="The saved video (after the run)", size=(420, 380))
    g.link(live, "video", show, "video")
    plot = g.node("PreviewImage", (1380, 840), title="Scores vs tau", size=(420, 270))
    g.link(live, "plot", plot, "images")
    g.note("## SDVG Live\n\nQueue it: the video plays on **SDVG Live** as blocks commit (16 fps), each block marked "
           "drafter or target with its score against tau. While it plays, move **tau**, pick another prompt (the "
           "schedule's lines are the prompts prepared before the run; their block numbers do not matter here), type "
           "a new one (encoded with the connected CLIP), switch the drafter off, and **Stop**: each change takes "
           "effect at the next block. `input` camera restyles your webcam (press **Camera** on the panel).\n\n"
           "The video is saved as it goes (`output/sdvg_live/`), with `report.json`: put its path in `replay` and "
           "queue again for the same video, bit for bit.\n\n" + files_note(), pos=(380, 350), size=(360, 760))
    return g.to_json()


WORKFLOWS = {"sdvg_loop_step_by_step.json": loop_workflow, "sdvg_generate.json": generate_workflow,
             "sdvg_vs_target_only.json": baseline_workflow, "sdvg_long_video.json": long_video_workflow,
             "sdvg_long_video_prompt_changes.json": prompt_changes_workflow,
             **{name: functools.partial(pixels_workflow, wid=a[0], title=a[1], text=a[2], given=a[3], widgets=a[4])
                for name, a in PIXEL_WORKFLOWS.items()},
             "sdvg_core_ar_sampler.json": ar_sampler_workflow, "sdvg_live.json": live_workflow}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with workflows/ instead of writing")
    a = ap.parse_args()
    sp = specs()
    stale, problems = [], []
    for name, build in WORKFLOWS.items():
        wf = build(sp)
        problems += [f"{name}: {p}" for p in workflow_tools.layout_problems(wf)]
        text = json.dumps(wf, indent=2) + "\n"
        path = REPO / "workflows" / name
        if a.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print("wrote", path)
    if problems:  # a report or video hidden at the saved view (tests/workflow_tools.py layout_problems)
        print("layout problems:", *problems, sep="\n  ")
    if stale:
        print("stale workflows:", stale)
    return 1 if stale or problems else 0


if __name__ == "__main__":
    sys.exit(main())
