"""UI-format workflow helpers for the tests: validation against node specs and conversion to the API format.

Node specs are /object_info-shaped dicts ({"input": {"required": {...}, "optional": {...}}, "output": [...],
...}): from a real ComfyUI server, or built from node classes (`object_info_from_classes`). The conversion
follows what the frontend's graphToPrompt does for plain graphs: links become [source id, slot], widget values
are read in widget order skipping the extra control_after_generate value, frontend-only nodes (notes) are dropped
and unconnected optional inputs are omitted.

Which inputs are widgets, and in which order their values lie in `widgets_values`, is learned from the host's own
spec of each input (`widget_slots`), not from a list of type names: a combo (a list of choices, or `options`), an
input with a `default`, or a primitive (INT, FLOAT, STRING, BOOLEAN) is a widget unless it is `forceInput`; a
`hidden` one keeps no value in the file and is sent with its default. A dynamic combo (V3 `COMFY_DYNAMICCOMBO_V3`: options of {key, inputs}) is a widget followed by the
widgets of the option it holds, named `<combo>.<sub input>` as the frontend names them in the prompt, at any depth.
A workflow saved before the host added a widget has no value for it: the spec's default is used, as the frontend
fills it in.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Sequence

# INT/FLOAT/STRING/BOOLEAN take a widget even without a default (the frontend's primitive widgets)
PRIMITIVE_WIDGETS = {"INT", "FLOAT", "STRING", "BOOLEAN"}
FRONTEND_ONLY = {"Note", "MarkdownNote", "PrimitiveNode", "Reroute"}
CONTROL_VALUES = {"fixed", "increment", "decrement", "randomize"}
SUB_KEY = "."  # the frontend names a dynamic combo's nested widgets <combo>.<input> in the prompt


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


def _group_inputs(spec_inputs: dict, order: dict | None = None) -> list[tuple[str, Any, dict, bool]]:
    out = []
    for group in ("required", "optional"):
        entries = spec_inputs.get(group, {})
        for name in (order or {}).get(group, list(entries)):
            t, *rest = entries[name]
            out.append((name, t, rest[0] if rest else {}, group == "optional"))
    return out


def _inputs(spec: dict) -> list[tuple[str, Any, dict, bool]]:
    """(name, type, options, optional) in the frontend's order: required, then optional."""
    return _group_inputs(spec["input"], spec.get("input_order"))


def dynamic_options(opts: dict) -> list[dict] | None:
    """The options of a dynamic combo ([{key, inputs: {required, optional}}]), or None for any other input."""
    options = opts.get("options")
    if isinstance(options, list) and options and all(isinstance(o, dict) and "key" in o for o in options):
        return options
    return None


def is_widget(t: Any, opts: dict) -> bool:
    """Whether the frontend gives this input a widget, from its spec alone (see the module docstring)."""
    if opts.get("forceInput") or opts.get("hidden"):
        return False
    return isinstance(t, list) or t in PRIMITIVE_WIDGETS or "options" in opts or "default" in opts


def combo_choices(t: Any, opts: dict) -> list | None:
    """A combo's values (a dynamic combo's option keys), None when the widget is no combo."""
    if isinstance(t, list):
        return t
    dyn = dynamic_options(opts)
    if dyn is not None:
        return [o["key"] for o in dyn]
    return opts.get("options") if isinstance(opts.get("options"), list) else None


def default_value(t: Any, opts: dict) -> Any:
    """What the frontend puts in a widget the saved workflow has no value for: the default, else the first choice."""
    if "default" in opts:
        return opts["default"]
    choices = combo_choices(t, opts)
    if choices:
        return choices[0]
    return {"INT": 0, "FLOAT": 0.0, "STRING": "", "BOOLEAN": False}.get(t)


def widget_names(spec: dict) -> list[tuple[str, Any, dict]]:
    """Top-level widgets of a spec (name, type, options), in order."""
    return [(n, t, o) for n, t, o, _ in _inputs(spec) if is_widget(t, o)]


def widget_slots(spec: dict, values: Sequence[Any]) -> Iterator[tuple[str, Any, dict, int | None, int | None]]:
    """Walk the widgets of a node in the frontend's order against its saved `widgets_values`.

    Yields (prompt key, type, options, index of its value or None when the saved workflow predates the widget,
    index of its control_after_generate value or None). A dynamic combo yields itself, then the widgets of the
    option its value selects, keyed `<combo>.<input>` (recursively). A hidden widget holds no saved value: the
    frontend sends its default (as frontend 1.49.6 does for Save Video's hidden `codec`)."""
    pos = [0]

    def walk(entries: list[tuple[str, Any, dict, bool]], prefix: str):
        for name, t, opts, _ in entries:
            hidden = bool(opts.get("hidden")) and is_widget(t, {**opts, "hidden": False})
            if not is_widget(t, opts) and not hidden:
                continue
            if hidden:  # a hidden widget (0.33's Save Video codec kept for old prompts): its default, no saved value
                yield prefix + name, t, opts, None, None
                continue
            i = pos[0] if pos[0] < len(values) else None
            pos[0] += 1
            ctrl = None
            if opts.get("control_after_generate") and pos[0] < len(values) and values[pos[0]] in CONTROL_VALUES:
                ctrl = pos[0]
                pos[0] += 1
            yield prefix + name, t, opts, i, ctrl
            dyn = dynamic_options(opts)
            if dyn is not None:
                chosen = values[i] if i is not None else default_value(t, opts)
                option = next((o for o in dyn if o["key"] == chosen), None)
                if option is not None:
                    yield from walk(_group_inputs(option.get("inputs") or {}), prefix + name + SUB_KEY)

    yield from walk(_inputs(spec), "")


def _widget_values(node: dict, spec: dict) -> dict[str, Any]:
    """{prompt key: value} of a node's widgets (nested keys dotted); defaults for widgets the workflow predates."""
    values = list(node.get("widgets_values") or [])
    return {key: values[i] if i is not None else default_value(t, opts)
            for key, t, opts, i, _ in widget_slots(spec, values)}


def validate(wf: dict, specs: dict, host_newer: bool = False) -> list[str]:
    """Problems in a UI workflow: unknown node types or inputs, broken links, type mismatches, bad widget values.

    Every widget needs its value in the file; with `host_newer` (specs of a host newer than the workflow) a widget
    the workflow predates is fine when the host gives it a default or makes it optional (the frontend fills it in)."""
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
        values = list(n.get("widgets_values") or [])
        for name, typ, opts, i, ctrl in widget_slots(spec, values):
            if i is None:
                if opts.get("hidden"):
                    continue
                if not host_newer or (SUB_KEY not in name and "default" not in opts and not optional_input(spec, name)):
                    problems.append(f"node {n['id']} {t}: no widget value for {name!r}")
                continue
            v = values[i]
            options = combo_choices(typ, opts)
            if options is not None:
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
                flat = values[ctrl] if ctrl is not None else None
                if flat != "fixed":
                    problems.append(f"node {n['id']} {t}: {name} control_after_generate is {flat!r}, ship 'fixed'")
    return problems


def optional_input(spec: dict, name: str) -> bool:
    return name in spec["input"].get("optional", {})


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
        for name, l in linked.items():  # a grown input (V3 Autogrow `values.a`) has no entry of its own in the spec
            if name not in inputs and SUB_KEY in name:
                inputs[name] = [str(l[1]), l[2]]
        for key, value in vals.items():  # widgets (a dynamic combo's nested ones dotted), unless linked
            if key.split(SUB_KEY)[0] not in linked:
                inputs[key] = value
        api[str(n["id"])] = {"inputs": inputs, "class_type": n["type"],
                             "_meta": {"title": n.get("title") or spec.get("display_name") or n["type"]}}
    return api


def flatten_subgraphs(wf: dict, specs: dict) -> dict:
    """The workflow with every subgraph node replaced by the nodes inside it (ids `<subgraph node>:<inner id>`, as the
    frontend names them in a queued prompt), one level deep: a link into a subgraph input feeds each inner input it
    was wired to (an input left unconnected leaves the inner widget its own value), a link out of a subgraph output
    comes from the inner node feeding it, a value set on the subgraph node's promoted widget (properties.proxyWidgets)
    replaces the inner widget's, and a muted or bypassed subgraph node mutes its inner nodes."""
    defs = {g["id"]: g for g in wf.get("definitions", {}).get("subgraphs", [])}
    out = json.loads(json.dumps(wf))
    links = {l[0]: list(l) for l in out.get("links", [])}
    next_id = [max([0, *links], default=0) + 1]
    nodes = []

    def new_link(origin, origin_slot, target, target_slot, typ) -> int:
        lid = next_id[0]
        next_id[0] += 1
        links[lid] = [lid, origin, origin_slot, target, target_slot, typ]
        return lid

    for n in out["nodes"]:
        g = defs.get(n["type"])
        if g is None:
            nodes.append(n)
            continue
        if any(x["type"] in defs for x in g["nodes"]):
            raise ValueError(f"subgraph {g.get('name')!r} holds another subgraph: only one level is flattened")
        prefix = f"{n['id']}:"
        inner_links = {l["id"]: l for l in g.get("links", [])}
        outer_in = {i["name"]: i.get("link") for i in n.get("inputs", [])}
        inner = json.loads(json.dumps(g["nodes"]))
        by_id = {str(x["id"]): x for x in inner}
        for (inner_id, widget), value in zip(n.get("properties", {}).get("proxyWidgets") or [], n.get("widgets_values") or []):
            x = by_id[str(inner_id)]
            spec = specs[x["type"]]
            slot = next(i for key, _, _, i, _ in widget_slots(spec, x.get("widgets_values") or []) if key == widget)
            x["widgets_values"][slot] = value
        for x in inner:
            for slot, i in enumerate(x.get("inputs", [])):
                if i.get("link") is None:
                    continue
                l = inner_links[i["link"]]
                if l["origin_id"] == -10:  # the subgraph's own input number origin_slot
                    outer = outer_in.get(g["inputs"][l["origin_slot"]]["name"])
                    i["link"] = None if outer is None else new_link(links[outer][1], links[outer][2], prefix + str(x["id"]),
                                                                    slot, l["type"])
                else:
                    i["link"] = new_link(prefix + str(l["origin_id"]), l["origin_slot"], prefix + str(x["id"]), slot,
                                         l["type"])
            x["id"] = prefix + str(x["id"])
            if n.get("mode", 0) in (2, 4):
                x["mode"] = n["mode"]
            nodes.append(x)
        for lid, l in list(links.items()):
            if l[3] == n["id"]:  # into the subgraph node: replaced by the inner links above
                del links[lid]
            elif l[1] == n["id"]:  # out of it: from the inner node feeding that subgraph output
                (src,) = [x for x in inner_links.values() if x["target_id"] == -20 and x["target_slot"] == l[2]]
                l[1], l[2] = prefix + str(src["origin_id"]), src["origin_slot"]
    out["nodes"], out["links"] = nodes, list(links.values())
    out.get("definitions", {}).pop("subgraphs", None)
    return out


def nodes_of_type(wf: dict, node_type: str) -> list[dict]:
    """Every node of a type in the workflow and inside its subgraph definitions."""
    inner = [x for g in wf.get("definitions", {}).get("subgraphs", []) for x in g["nodes"]]
    return [x for x in wf["nodes"] + inner if x["type"] == node_type]


def swap_node_type(wf: dict, old: str, new: str) -> dict:
    """The workflow with every `old` node (in subgraphs too) made a `new` node in its place: same id, links, widget
    values in their order (the new node's widgets past them take their defaults), as a user swapping a node would
    wire it."""
    out = json.loads(json.dumps(wf))
    for x in nodes_of_type(out, old):
        x["type"] = new
        x.get("properties", {}).pop("Node name for S&R", None)
    return out


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


def unmuted(wf: dict) -> dict:
    """The workflow with every muted or bypassed node switched on (as a user would)."""
    out = json.loads(json.dumps(wf))
    for n in out["nodes"]:
        n["mode"] = 0
    return out


def ar_start_image(api: dict) -> dict:
    """Core's AR workflow from a start image (the API prompt of the unmuted workflow): the guider's MODEL and the
    sampler's latent come from AR Video I2V instead of the loader and Empty AR Video Latent (which goes), as the
    workflow's note tells a user to wire them."""
    out = json.loads(json.dumps(api))
    i2v = next(k for k, v in out.items() if v["class_type"] == "ARVideoI2V")
    empty = [k for k, v in out.items() if v["class_type"] == "EmptyARVideoLatent"]
    for node in out.values():
        if node["class_type"] == "BasicGuider":
            node["inputs"]["model"] = [i2v, 0]
        if node["class_type"] in ("SamplerCustomAdvanced", "SamplerCustom"):
            node["inputs"]["latent_image"] = [i2v, 1]
    for k in empty:
        del out[k]
    return out


# What a real-host test runs core's AR workflow on (tests/test_comfy_host.py writes them; tests/frontend_probe.py
# --run-small uses them): Wan networks ComfyUI's own loader can read (dim 128 = one 128-wide head, umT5's 4096-wide
# text), marked causal_ar in their safetensors metadata, and embeddings of that width.
AR_TEST_FILES = {"target": "tiny_causal_target.safetensors", "drafter": "tiny_causal_drafter.safetensors",
                 "embeddings": "test_prompt_4096.safetensors"}
AR_SMALL = {"width": 64, "height": 48}


def ar_blocks_length(blocks: int, start_image: bool = False, frames_per_block: int = 3) -> int:
    """The `length` widget giving `blocks` whole blocks (after a start image's latent frame)."""
    return 1 + 4 * (blocks * frames_per_block + (1 if start_image else 0) - 1)


def ar_test_models(api: dict, blocks: int) -> dict:
    """Core's AR workflow on the AR_TEST_FILES at AR_SMALL's size: the guider's loader reads the tiny target, the
    drafter comes from Load Diffusion Model into the sampler's `drafter` MODEL input (SDVG Load Drafter goes: the tiny
    .pt drafter's text width differs), the text encoder is the embeddings file."""
    out = swap_text_encoder(api, AR_TEST_FILES["embeddings"])
    for nid, node in list(out.items()):
        ct = node["class_type"]
        if ct == "UNETLoader":
            node["inputs"]["unet_name"] = AR_TEST_FILES["target"]
        elif ct == "SDVGLoadDrafter":
            out[nid] = {"class_type": "UNETLoader", "inputs": {"unet_name": AR_TEST_FILES["drafter"],
                                                               "weight_dtype": "default"}}
        elif ct == "SDVGSamplerARVideo" and "sdvg_drafter" in node["inputs"]:
            node["inputs"]["drafter"] = node["inputs"].pop("sdvg_drafter")
        elif ct == "EmptyARVideoLatent":
            node["inputs"].update(AR_SMALL, length=ar_blocks_length(blocks))
        elif ct == "ARVideoI2V":
            node["inputs"].update(AR_SMALL, length=ar_blocks_length(blocks, start_image=True))
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
VIDEO_TYPES = ("SDVGShowVideo", "SaveVideo", "SDVGLive")  # SDVG Live plays the run on itself


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


# ------------------------------------------------------------------------------------------------ fakes vs host
def _kind(t: Any, opts: dict) -> str:
    """What a frontend makes of an input: a combo (any list of choices), a dynamic combo, or its type name."""
    if dynamic_options(opts) is not None:
        return "DYNAMIC_COMBO"
    return "COMBO" if isinstance(t, list) or t == "COMBO" else str(t)


def _input_differences(where: str, real: dict, fake: dict) -> list[str]:
    out = []
    for group in ("required", "optional"):
        r, f = real.get(group) or {}, fake.get(group) or {}
        if list(r) != list(f):
            missing, extra = [k for k in r if k not in f], [k for k in f if k not in r]
            out.append(f"{where} {group} inputs: host {list(r)}, fake {list(f)}"
                       + (f" (fake lacks {missing})" if missing else "") + (f" (host lacks {extra})" if extra else ""))
        for k in [k for k in r if k in f]:
            (rt, *ro), (ft, *fo) = r[k], f[k]
            ro, fo = (ro[0] if ro else {}), (fo[0] if fo else {})
            at = f"{where} {group}.{k}"
            if _kind(rt, ro) != _kind(ft, fo):
                out.append(f"{at}: host {_kind(rt, ro)}, fake {_kind(ft, fo)}")
                continue
            if bool(ro.get("hidden")) != bool(fo.get("hidden")) or bool(ro.get("forceInput")) != bool(fo.get("forceInput")):
                out.append(f"{at}: hidden/forceInput host {ro.get('hidden')}/{ro.get('forceInput')}, fake "
                           f"{fo.get('hidden')}/{fo.get('forceInput')}")
            rd, fd = dynamic_options(ro), dynamic_options(fo)
            if rd is not None:
                if [o["key"] for o in rd] != [o["key"] for o in fd]:
                    out.append(f"{at}: options host {[o['key'] for o in rd]}, fake {[o['key'] for o in fd]}")
                for ro_, fo_ in zip(rd, fd):
                    if ro_["key"] == fo_["key"]:
                        out += _input_differences(f"{at}[{ro_['key']}]", ro_.get("inputs") or {}, fo_.get("inputs") or {})
    return out


def schema_differences(real: dict, fake: dict) -> list[str]:
    """Every difference between a host's /object_info and the fakes' for the nodes the fakes define: input names and
    order per group, each input's kind (combo, dynamic combo with its options and their inputs at any depth, or
    socket type), hidden/forceInput, outputs and output_node. Combo choices of files and the growing lists of model
    types are not compared (they depend on the installation)."""
    out = []
    for name, f in fake.items():
        if name not in real:
            out.append(f"{name}: not on the host")
            continue
        r = real[name]
        out += _input_differences(name, r["input"], f["input"])
        if list(r["output"]) != list(f["output"]):
            out.append(f"{name} outputs: host {r['output']}, fake {f['output']}")
        if bool(r.get("output_node")) != bool(f.get("output_node")):
            out.append(f"{name} output_node: host {r.get('output_node')}, fake {f.get('output_node')}")
    return out


def workflow_needs(wf: dict) -> tuple[tuple[int, ...], list[str]]:
    """(the oldest ComfyUI version whose core nodes the workflow uses all exist on, those nodes) from its
    extra.sdvg_needs (scripts/build_workflows.py); ((0,), []) when any supported host has them."""
    needs = wf.get("extra", {}).get("sdvg_needs") or {}
    return (host_version(needs["comfyui"]) if "comfyui" in needs else (0,)), list(needs.get("core_nodes", []))


def host_version(text: str) -> tuple[int, ...]:
    """'0.33.0' (a host's comfyui_version) as a comparable tuple."""
    return tuple(int(p) for p in text.split("+")[0].split("-")[0].split(".")[:3] if p.isdigit())
