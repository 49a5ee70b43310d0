"""UI-format workflow helpers for the tests: validation against node specs and conversion to the API format.

Node specs are /object_info-shaped dicts ({"input": {"required": {...}, "optional": {...}}, "output": [...],
...}): from a real ComfyUI server, or built from node classes (`object_info_from_classes`). The conversion
follows what the frontend's graphToPrompt does for plain graphs: links become [source id, slot], widget values
are read in input order (required, then optional) skipping the extra control_after_generate value, frontend-only
nodes (notes) are dropped and unconnected optional inputs are omitted.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
FRONTEND_ONLY = {"Note", "MarkdownNote", "PrimitiveNode", "Reroute"}
CONTROL_VALUES = {"fixed", "increment", "decrement", "randomize"}


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def object_info_from_classes(classes) -> dict:
    """ComfyUI-like /object_info entries from V3 node classes (real or fake `comfy_api.latest`)."""
    info = {}
    for cls in classes:
        s = cls.GET_SCHEMA()
        req, opt = {}, {}
        for i in s.inputs or []:
            (opt if i.optional else req)[i.id] = [i.io_type, i.as_dict()]
        outs = s.outputs or []
        info[s.node_id] = {
            "input": {"required": req, "optional": opt}, "input_order": {"required": list(req), "optional": list(opt)},
            "output": [o.io_type for o in outs], "output_name": [o.display_name or o.io_type for o in outs],
            "output_node": s.is_output_node, "category": s.category, "display_name": s.display_name,
            "description": s.description, "name": s.node_id,
        }
    return info


def _inputs(spec: dict) -> list[tuple[str, Any, dict, bool]]:
    """(name, type, options, optional) in the frontend's order: required, then optional."""
    out = []
    for group in ("required", "optional"):
        entries = spec["input"].get(group, {})
        order = spec.get("input_order", {}).get(group, list(entries))
        for name in order:
            t, *rest = entries[name]
            out.append((name, t, rest[0] if rest else {}, group == "optional"))
    return out


def is_widget(t: Any, opts: dict) -> bool:
    return (isinstance(t, list) or t in WIDGET_TYPES) and not opts.get("forceInput")


def widget_names(spec: dict) -> list[tuple[str, Any, dict]]:
    return [(n, t, o) for n, t, o, _ in _inputs(spec) if is_widget(t, o)]


def _widget_values(node: dict, spec: dict) -> dict[str, Any]:
    """Map widgets_values to widget names (skipping the control_after_generate entries)."""
    values = list(node.get("widgets_values") or [])
    out, i = {}, 0
    for name, t, opts in widget_names(spec):
        if i >= len(values):
            break
        out[name] = values[i]
        i += 1
        if opts.get("control_after_generate") and i < len(values) and values[i] in CONTROL_VALUES:
            i += 1
    return out


def validate(wf: dict, specs: dict) -> list[str]:
    """Problems in a UI workflow: unknown node types or inputs, broken links, type mismatches, bad widget values."""
    problems = []
    nodes = {n["id"]: n for n in wf["nodes"]}
    links = {l[0]: l for l in wf.get("links", [])}
    if wf.get("version") != 0.4:
        problems.append(f"version {wf.get('version')} != 0.4")
    for link_id, src, src_slot, dst, dst_slot, typ in links.values():
        if src not in nodes or dst not in nodes:
            problems.append(f"link {link_id} joins missing nodes {src}->{dst}")
            continue
        out = nodes[src]["outputs"][src_slot]
        inp = nodes[dst]["inputs"][dst_slot]
        if link_id not in (out.get("links") or []) or inp.get("link") != link_id:
            problems.append(f"link {link_id} not recorded on both ends ({src}.{src_slot} -> {dst}.{dst_slot})")
        if out["type"] != typ or (inp["type"] != typ and inp["type"] not in ("*", "COMBO") and typ != "*"):
            problems.append(f"link {link_id} type {typ}: output {out['type']} / input {inp['type']}")
    for n in wf["nodes"]:
        t = n["type"]
        if t in FRONTEND_ONLY:
            continue
        if t not in specs:
            problems.append(f"node {n['id']}: unknown type {t}")
            continue
        spec = specs[t]
        names = {name: (typ, opts, optional) for name, typ, opts, optional in _inputs(spec)}
        for inp in n.get("inputs", []):
            if inp["name"] not in names:
                problems.append(f"node {n['id']} {t}: no input named {inp['name']!r}")
            elif inp.get("link") is not None and inp["link"] not in links:
                problems.append(f"node {n['id']} {t}: input {inp['name']} uses missing link {inp['link']}")
        for name, (typ, opts, optional) in names.items():
            linked = any(i["name"] == name and i.get("link") is not None for i in n.get("inputs", []))
            if not optional and not is_widget(typ, opts) and not linked:
                problems.append(f"node {n['id']} {t}: required input {name!r} is not connected")
        for oi, out in enumerate(n.get("outputs", [])):
            if oi >= len(spec["output"]) or out["type"] != spec["output"][oi]:
                problems.append(f"node {n['id']} {t}: output {oi} type {out['type']} != {spec['output'][oi:oi + 1]}")
        vals = _widget_values(n, spec)
        for name, typ, opts in widget_names(spec):
            if name not in vals:
                problems.append(f"node {n['id']} {t}: no widget value for {name!r}")
                continue
            v = vals[name]
            options = typ if isinstance(typ, list) else opts.get("options")
            if options is not None and (typ == "COMBO" or isinstance(typ, list)):
                if options and v not in options and not opts.get("_files"):
                    problems.append(f"node {n['id']} {t}: {name}={v!r} not in {options}")
            elif typ in ("INT", "FLOAT"):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    problems.append(f"node {n['id']} {t}: {name}={v!r} is not a number")
                elif ("min" in opts and v < opts["min"]) or ("max" in opts and v > opts["max"]):
                    problems.append(f"node {n['id']} {t}: {name}={v} outside [{opts.get('min')}, {opts.get('max')}]")
                elif typ == "INT" and not isinstance(v, int):
                    problems.append(f"node {n['id']} {t}: {name}={v!r} is not an integer")
            elif typ == "BOOLEAN" and not isinstance(v, bool):
                problems.append(f"node {n['id']} {t}: {name}={v!r} is not a boolean")
            elif typ == "STRING" and not isinstance(v, str):
                problems.append(f"node {n['id']} {t}: {name}={v!r} is not a string")
            if opts.get("control_after_generate"):
                idx = [w[0] for w in widget_names(spec)].index(name)
                flat = _control_value(n, spec, idx)
                if flat != "fixed":
                    problems.append(f"node {n['id']} {t}: {name} control_after_generate is {flat!r}, ship 'fixed'")
    return problems


def _control_value(node: dict, spec: dict, widget_index: int) -> Any:
    values, i = list(node.get("widgets_values") or []), 0
    for k, (name, t, opts) in enumerate(widget_names(spec)):
        i += 1
        if opts.get("control_after_generate"):
            if k == widget_index:
                return values[i] if i < len(values) else None
            i += 1
    return None


def to_api(wf: dict, specs: dict) -> dict:
    """The API-format prompt the frontend would queue for this (plain, subgraph-free) workflow."""
    links = {l[0]: l for l in wf.get("links", [])}
    api = {}
    for n in wf["nodes"]:
        if n["type"] in FRONTEND_ONLY or n.get("mode", 0) in (2, 4):
            continue
        spec = specs[n["type"]]
        vals = _widget_values(n, spec)
        linked = {i["name"]: links[i["link"]] for i in n.get("inputs", []) if i.get("link") is not None}
        inputs = {}
        for name, typ, opts, optional in _inputs(spec):
            if name in linked:
                l = linked[name]
                inputs[name] = [str(l[1]), l[2]]
            elif is_widget(typ, opts) and name in vals:
                inputs[name] = vals[name]
        api[str(n["id"])] = {"inputs": inputs, "class_type": n["type"],
                             "_meta": {"title": n.get("title") or spec.get("display_name") or n["type"]}}
    return api


def swap_text_encoder(api: dict, embeddings_file: str) -> dict:
    """Replace CLIPTextEncode (+ its CLIPLoader) by SDVG Load Prompt Embeddings, keeping node ids and links.

    ComfyUI's `wan` text encoder is the 5.7 B umT5-XXL: no test can load it. The embeddings file holds what it
    would have produced (for tiny models: tiny-width embeddings) plus the prompt text.
    """
    out = json.loads(json.dumps(api))
    for nid, node in list(out.items()):
        if node["class_type"] == "CLIPTextEncode":
            clip = node["inputs"].get("clip")
            out[nid] = {"inputs": {"embeddings": embeddings_file}, "class_type": "SDVGLoadPromptEmbeddings",
                        "_meta": {"title": "SDVG Load Prompt Embeddings (test swap for the text encoder)"}}
            if isinstance(clip, list) and out.get(clip[0], {}).get("class_type") == "CLIPLoader":
                del out[clip[0]]
    return out


def swap_schedule_encoder(api: dict, embeddings_file: str | Sequence[str], num_blocks: int | None = None) -> dict:
    """SDVG Prompt Schedule without the text encoder: its `block: prompt` lines become the JSON form whose entries
    name `embeddings_file` (in models/sdvg_prompts; several files: entry i reads file i, cycling), the CLIP link
    (and an unused CLIPLoader) go. With `num_blocks`, a schedule reaching past it is spread evenly over that many
    blocks (a small test run), in order."""
    import re

    files = [embeddings_file] if isinstance(embeddings_file, str) else list(embeddings_file)
    out = json.loads(json.dumps(api))
    for nid, node in list(out.items()):
        if node["class_type"] != "SDVGPromptSchedule" or not isinstance(node["inputs"].get("schedule"), str):
            continue
        lines = [m.groups() for m in (re.match(r"^\s*(\d+)\s*:\s*(.+?)\s*$", ln)
                                      for ln in node["inputs"]["schedule"].splitlines()) if m]
        entries = [{"block": int(b), "prompt": p, "embeddings": files[i % len(files)]}
                   for i, (b, p) in enumerate(lines)]
        if num_blocks is not None and entries and entries[-1]["block"] >= num_blocks:
            for i, e in enumerate(entries):
                e["block"] = i * num_blocks // len(entries)
        node["inputs"]["schedule"] = json.dumps(entries)
        clip = node["inputs"].pop("clip", None)
        if isinstance(clip, list) and out.get(clip[0], {}).get("class_type") == "CLIPLoader" and not any(
                v == clip for n in out.values() for v in n["inputs"].values()):
            del out[clip[0]]
    return out


def set_inputs(api: dict, class_type: str, **values: Any) -> dict:
    """Set constant inputs on every node of a class (e.g. a small size for tiny models)."""
    out = json.loads(json.dumps(api))
    for node in out.values():
        if node["class_type"] == class_type:
            node["inputs"].update(values)
    return out


# ------------------------------------------------------------------------------------------------ saved view
# The view a workflow opens at (its extra.ds) is fitted to the whole workflow in a reference browser window, so every
# node, the report above all, is on screen and readable when it is opened. Reference: the page of a 1920x1080
# window (1920x993 CSS px in headless Chromium, what tests/frontend_probe.py shoots), minus what frontend 1.5x
# draws over the canvas' edges (side bar 72 px, tabs and menu 104 px, right 24 px, graph toolbar 56 px).
VIEW_PAGE = (1920, 993)
VIEW_MARGINS = {"left": 72, "top": 104, "right": 24, "bottom": 56}
TITLE_HEIGHT = 40  # a node's title bar sits above its pos (LiteGraph's NODE_TITLE_HEIGHT 30, plus its outline)
VIEW_PAD = 20  # canvas units around the fitted content
# Below this zoom the node text is under ~10 px (14 px fonts); frontend 1.5x stops drawing text below 8 px
# (its default minimum font size for detailed rendering), so the saved view must stay above it.
MIN_READABLE_SCALE = 0.7


def visible_area(canvas: list[float] | None = None) -> tuple[float, float, float, float]:
    """(left, top, width, height) of the canvas area a person sees in the reference window, in page pixels.

    `canvas`: the canvas element's page rect [left, top, width, height] as a frontend laid it out. Frontends before
    1.30 place their bars beside the canvas (it does not start at the page's corner): all of it is visible then."""
    if canvas is not None and (canvas[0], canvas[1]) != (0, 0):
        return tuple(canvas)
    m = VIEW_MARGINS
    return m["left"], m["top"], VIEW_PAGE[0] - m["left"] - m["right"], VIEW_PAGE[1] - m["top"] - m["bottom"]


# Frontends since 1.25 show a minimap by default (Comfy.Minimap.Visible: on in any window wider than 1024 px) over the
# canvas' bottom-right corner: its rect (left, top, right, bottom) in canvas pixels in the reference window, as
# tests/frontend_probe.py measured it ("overlays"): 1.58.1 draws its canvas from the page's corner; 1.27.10 (ComfyUI
# 0.3.64's own) puts its bars beside the canvas (which starts at page (64, 78); its minimap's page rect is
# (1626, 727, 1876, 927)), so the same saved view sits elsewhere under it. A report or a video under either is hidden.
VIEW_MINIMAPS = {"1.58.1": (1659, 731, 1912, 931), "1.27.10": (1562, 649, 1812, 849)}
REPORT_TYPES = ("PreviewAny",)
VIDEO_TYPES = ("SDVGShowVideo", "SaveVideo")


def overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Whether two (left, top, right, bottom) rects share any area."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def layout_problems(wf: dict) -> list[str]:
    """What a person would not see at the workflow's saved view in the reference window: a report or video player
    under the minimap, or another node over a report (title bars included)."""
    problems = []
    for n in wf["nodes"]:
        name = f"{n['type']} {n.get('title', '')!r} (id {n['id']})"
        for frontend, minimap in VIEW_MINIMAPS.items():
            if n["type"] in REPORT_TYPES + VIDEO_TYPES and overlaps(screen_rect(wf, n), minimap):
                problems.append(f"{name} lies under frontend {frontend}'s minimap at the saved view")
        if n["type"] in REPORT_TYPES:
            for m in wf["nodes"]:
                if m is not n and overlaps(screen_rect(wf, n), screen_rect(wf, m)):
                    problems.append(f"{name} overlaps {m['type']} {m.get('title', '')!r} (id {m['id']})")
    return problems


def content_box(wf: dict) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1) of every node (title bar included) and group, in canvas units."""
    boxes = [(n["pos"][0], n["pos"][1] - TITLE_HEIGHT, n["pos"][0] + n["size"][0], n["pos"][1] + n["size"][1])
             for n in wf["nodes"]]
    boxes += [(g["bounding"][0], g["bounding"][1], g["bounding"][0] + g["bounding"][2], g["bounding"][1] + g["bounding"][3])
              for g in wf["groups"]]
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def saved_view(wf: dict) -> dict:
    """extra.ds: the scale and offset that fit the whole workflow into the reference window's visible canvas area
    (page = (canvas + offset) * scale), centred horizontally, at most 1:1."""
    left, top, w, h = visible_area()
    x0, y0, x1, y1 = content_box(wf)
    scale = min(1.0, w / (x1 - x0 + 2 * VIEW_PAD), h / (y1 - y0 + 2 * VIEW_PAD))
    return {"scale": round(scale, 4),
            "offset": [round(-x0 + (left + (w - scale * (x1 - x0)) / 2) / scale, 1),
                       round(-y0 + (top + VIEW_PAD * scale) / scale, 1)]}


def screen_rect(wf: dict, node: dict) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) canvas pixels of a node (title bar included) at the workflow's saved view (page
    pixels in frontend 1.5x, whose canvas starts at the page's corner)."""
    ds = wf["extra"]["ds"]
    s, (ox, oy) = ds["scale"], ds["offset"]
    x, y = node["pos"]
    w, hh = node["size"]
    return ((x + ox) * s, (y - TITLE_HEIGHT + oy) * s, (x + w + ox) * s, (y + hh + oy) * s)
