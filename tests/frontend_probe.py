#!/usr/bin/env python3
"""Open workflows in ComfyUI's real frontend (headless Chromium) and report what it sees.

    $COMFYUI_PYTHON tests/frontend_probe.py --url http://127.0.0.1:8188 [--chromium chromium] WF.json [...]

Needs only aiohttp (a ComfyUI dependency), so run it with ComfyUI's python. For each workflow, in a fresh browser
context (the frontend restores the last workflow from local storage): load it with `app.loadGraphData`, list the
node types the frontend could not create (missing nodes) and the dialogs shown, and return the API prompt the
Queue button would send (`app.graphToPrompt()`). Prints one JSON object {path: {...}}; exit status 1 when a
workflow has missing nodes. Each workflow's entry also says the view it opened at ("view": scale, offset, page and
canvas size) and where each report viewer (PreviewAny) lies on the page ("reports": title, [left, top, right,
bottom] px, title bar included), the same for the video players ("videos": SDVG Show Video, Save Video) and what the
frontend draws over the canvas ("overlays": its minimap, shown by default in 1.5x). With --shots DIR it also saves what a person sees: DIR/<name>.view.png (the
workflow at the view it opened at), DIR/<name>.png (the whole workflow, the view fitted to it) and DIR/<name>.jpg
(a small card image, the size of the template browser's thumbnails); the frontend's version is "frontend".
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp

# the app object: a global in older frontends, only under window.comfyAPI in 1.5x
APP = "(window.app || (window.comfyAPI && window.comfyAPI.app && window.comfyAPI.app.app))"

PROBE = r"""
(async () => {
  const app = """ + APP + r""";
  const wf = %s;
  await app.loadGraphData(wf, true, true, %s);
  await new Promise(r => setTimeout(r, 800));
  const nodes = (app.graph._nodes || app.graph.nodes || []).map(n => ({
      id: n.id, type: n.type, missing: !!n.has_errors || !(n.type in LiteGraph.registered_node_types)}));
  const dialogs = [...document.querySelectorAll('.p-dialog, [role=dialog]')].map(e => e.innerText);
  const api = (await app.graphToPrompt()).output;
  const frontend = window.__COMFYUI_FRONTEND_VERSION__ || (window.comfyAPI && window.comfyAPI.app && '') || '';
  // the view the workflow opened at and where each report viewer is on the page (title bar included)
  const ds = app.canvas.ds, r = app.canvas.canvas.getBoundingClientRect();
  const page = (x, y) => [r.left + (x + ds.offset[0]) * ds.scale, r.top + (y + ds.offset[1]) * ds.scale];
  const rects = types => (app.graph._nodes || app.graph.nodes || []).filter(n => types.includes(n.type)).map(n => {
      const [x0, y0] = page(n.pos[0], n.pos[1] - LiteGraph.NODE_TITLE_HEIGHT);
      const [x1, y1] = page(n.pos[0] + n.size[0], n.pos[1] + n.size[1]);
      return {title: n.title, type: n.type, rect: [x0, y0, x1, y1]}; });
  const reports = rects(['PreviewAny']), videos = rects(['SDVGShowVideo', 'SaveVideo', 'SDVGLive']);
  // what the frontend draws over the canvas' content (1.5x: the minimap, shown by default in a wide window)
  const overlays = [...document.querySelectorAll('.minimap-main-container')].map(e => {
      const b = e.getBoundingClientRect(); return {name: 'minimap', rect: [b.left, b.top, b.right, b.bottom]}; })
      .filter(o => o.rect[2] > o.rect[0] && o.rect[3] > o.rect[1]);
  const view = {scale: ds.scale, offset: [ds.offset[0], ds.offset[1]], page: [window.innerWidth, window.innerHeight],
                canvas: [r.left, r.top, r.width, r.height]};
  return JSON.stringify({nodes, dialogs, api, frontend, view, reports, videos, overlays});
})()
"""


# The pip-installable ComfyUI 0.12.1 serves an extension of its own (comfy_extras/eval_web/eval_python.js) that
# awaits the Ace editor from cdn.jsdelivr.net at module level, with no error path: offline (as here) the frontend
# never finishes starting. A stand-in `window.ace` lets that await resolve; nothing else reads it.
OFFLINE_STUBS = "window.ace = window.ace || {config: {set() {}}, edit() { return null; }};"


class Page:
    """Minimal Chrome DevTools Protocol session over one websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self.ws, self.next_id, self.waiting, self.errors = ws, 0, {}, []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            fut = self.waiting.pop(data.get("id"), None)
            if fut is not None:
                fut.set_result(data)
            elif data.get("method") == "Runtime.exceptionThrown":  # uncaught errors of the page, for the report
                self.errors.append(data["params"]["exceptionDetails"].get("exception", {}).get("description", "")[:300])
            elif data.get("method") == "Runtime.consoleAPICalled" and data["params"].get("type") == "error":
                self.errors.append(" ".join(str(a.get("description") or a.get("value", "")) for a in data["params"]["args"])[:300])

    async def call(self, method: str, **params) -> dict:
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = fut
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        return await asyncio.wait_for(fut, 120)

    async def eval(self, expression: str):
        r = (await self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True))["result"]
        if "exceptionDetails" in r:
            raise RuntimeError(json.dumps(r["exceptionDetails"])[:1500])
        return r["result"].get("value")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def open_app(p: "Page", url: str) -> None:
    """Navigate a fresh page to the frontend and wait until it has started and opened its start-up workflow."""
    await p.call("Page.enable")
    await p.call("Runtime.enable")
    await p.call("Page.addScriptToEvaluateOnNewDocument", source=OFFLINE_STUBS)
    await p.call("Page.navigate", url=url + "/")
    for _ in range(240):
        if await p.eval(f"!!{APP} && !!{APP}.graph && typeof LiteGraph !== 'undefined' && "
                        "Object.keys(LiteGraph.registered_node_types).length > 0"):
            break
        await asyncio.sleep(0.5)
    else:
        raise RuntimeError("the ComfyUI frontend did not start")
    # the frontend opens its start-up workflow (restored or default) asynchronously: wait for it, or it replaces the
    # workflow loaded next (1.5x)
    for _ in range(40):
        if await p.eval(f"({APP}.graph._nodes || {APP}.graph.nodes || []).length > 0"):
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(1.5)


FIT = r"""
(() => {  // fit the view to every node and group (with the title bars), close dialogs and side panels
  const app = """ + APP + r""";
  // only dialogs and toasts: a workflow tab's close button would close the workflow itself (1.5x)
  document.querySelectorAll('.p-dialog-close-button, .p-toast-close-button').forEach(b => b.click());
  const ns = app.graph._nodes || app.graph.nodes || [];
  let x0 = 1e9, y0 = 1e9, x1 = -1e9, y1 = -1e9;
  for (const n of ns) { x0 = Math.min(x0, n.pos[0]); y0 = Math.min(y0, n.pos[1] - 40);
                        x1 = Math.max(x1, n.pos[0] + n.size[0]); y1 = Math.max(y1, n.pos[1] + n.size[1]); }
  for (const g of (app.graph._groups || app.graph.groups || [])) { const b = g._bounding || g.bounding;
      x0 = Math.min(x0, b[0]); y0 = Math.min(y0, b[1]); x1 = Math.max(x1, b[0] + b[2]); y1 = Math.max(y1, b[1] + b[3]); }
  // the visible part of the canvas: 1.5x draws its side bar, tabs and graph tool bar over the canvas' edges
  const c = app.canvas.canvas, r = c.getBoundingClientRect();
  const v = (window.__COMFYUI_FRONTEND_VERSION__ || '1.0').split('.').map(Number);
  const m = v[0] > 1 || v[1] >= 30 ? {l: 72, t: 104, r: 24, b: 56} : {l: 8, t: 8, r: 8, b: 8};
  const w = r.width - m.l - m.r, h = r.height - m.t - m.b;
  const scale = Math.min(w / (x1 - x0 + 40), h / (y1 - y0 + 40));
  app.canvas.ds.scale = scale;
  app.canvas.ds.offset[0] = -x0 + (m.l + (w - scale * (x1 - x0)) / 2) / scale;
  app.canvas.ds.offset[1] = -y0 + (m.t + 20) / scale;
  // 1.5x: its minimap would cover a corner of the fitted picture; hidden on this page only (setting it would
  // persist in the server's user settings and hide it from the saved-view shots taken later)
  document.querySelectorAll('.minimap-main-container').forEach(e => { e.style.display = 'none'; });
  app.canvas.min_font_size_for_lod = 0;  // 1.5x: keep the text at overview zoom (no low-quality mode)
  app.canvas.setDirty(true, true);
  return JSON.stringify({left: r.left + m.l, top: r.top + m.t, width: w, height: h});  // the card's clip
})()
"""


CLOSE = r"""
(() => {  // close dialogs and toasts only: a workflow tab's close button would close the workflow itself (1.5x)
  document.querySelectorAll('.p-dialog-close-button, .p-toast-close-button').forEach(b => b.click());
  return true;
})()
"""


def _save_png(out: Path, stem: str, data: str) -> None:
    """A 256-colour PNG: the UI has few colours, the file a third of the size."""
    import base64

    (out / f"{stem}.png").write_bytes(base64.b64decode(data))
    try:
        from PIL import Image

        Image.open(out / f"{stem}.png").convert("RGB").quantize(256).save(out / f"{stem}.png", optimize=True)
    except ImportError:
        pass


async def screenshot(p: "Page", stem: str, out: Path, expect_types: list[str], fit: bool = True) -> None:
    """<stem>.view.png: the workflow at the view it opened at (its saved view, the frontend's own settings);
    <stem>.png: the whole workflow fitted to the canvas (text drawn at any zoom); <stem>.jpg: the card."""
    import base64

    for _ in range(2):  # a first start opens the template browser (1.5x): Escape closes dialogs
        await p.call("Input.dispatchKeyEvent", type="keyDown", key="Escape", code="Escape", windowsVirtualKeyCode=27)
        await p.call("Input.dispatchKeyEvent", type="keyUp", key="Escape", code="Escape", windowsVirtualKeyCode=27)
        await asyncio.sleep(0.3)
    await p.eval(CLOSE)
    await asyncio.sleep(1.0)
    _save_png(out, f"{stem}.view", (await p.call("Page.captureScreenshot", format="png"))["result"]["data"])
    if not fit:
        return
    box = json.loads(await p.eval(FIT))
    await asyncio.sleep(1.0)
    shown = json.loads(await p.eval(f"JSON.stringify(({APP}.graph._nodes || {APP}.graph.nodes).map(n => n.type).sort())"))
    if shown != sorted(expect_types):
        raise RuntimeError(f"{stem}: the canvas shows another workflow ({shown[:6]}...) than the one loaded")
    _save_png(out, stem, (await p.call("Page.captureScreenshot", format="png"))["result"]["data"])
    clip = {"x": box["left"], "y": box["top"], "width": box["width"], "height": box["height"],
            "scale": 512 / box["width"]}
    jpg = (await p.call("Page.captureScreenshot", format="jpeg", quality=80, clip=clip))["result"]["data"]
    (out / f"{stem}.jpg").write_bytes(base64.b64decode(jpg))


QUEUE = r"""
(async () => {  // queue an API prompt from this page (its client id: the frontend shows the outputs on the nodes)
  const app = """ + APP + r""";
  const api = app.api || (window.comfyAPI && window.comfyAPI.api && window.comfyAPI.api.api);
  const workflow = (await app.graphToPrompt()).workflow;
  return JSON.stringify(await api.queuePrompt(0, {output: %s, workflow}));
})()
"""
# --run-small: the size the run uses instead of the workflow's (tiny test models, a CPU); the text encoder is swapped
# for SDVG Load Prompt Embeddings, and a prompt schedule reads that file for every entry, as in the tests (ComfyUI's
# umT5-XXL cannot be loaded there)
SMALL_RUN = {"width": 64, "height": 48, "num_blocks": 3}


async def run_small(p: "Page", http, url: str, api: dict, embeddings: str, stem: str, out: Path,
                    blocks: int | None = SMALL_RUN["num_blocks"], schedule_files: list[str] | None = None) -> dict:
    """Queue the loaded workflow at SMALL_RUN's size from the page (`blocks` blocks; None: the workflow's own count
    and schedule), wait for it, screenshot <stem>.run.png at the view it opened at (the report viewers then show the
    run's report, drawn by the frontend itself). A prompt schedule's entry i reads schedule_files[i] (default: all
    read `embeddings`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import workflow_tools as wt

    if any(n.get("class_type") == "SDVGSamplerARVideo" for n in api.values()):  # core's AR workflow: its own test models
        api = wt.ar_test_models(api, blocks or SMALL_RUN["num_blocks"])
    api = wt.swap_schedule_encoder(wt.swap_text_encoder(api, embeddings), schedule_files or embeddings, blocks)
    size = {k: v for k, v in SMALL_RUN.items() if k != "num_blocks"} | ({} if blocks is None else {"num_blocks": blocks})
    api = wt.set_inputs(api, "SDVGStart", **size)
    api = wt.set_inputs(api, "SDVGGenerate", **size)
    queued = json.loads(await p.eval(QUEUE % json.dumps(api)))
    pid = queued["prompt_id"]
    for _ in range(3600):
        async with http.get(f"{url}/history/{pid}") as r:
            h = await r.json()
        if pid in h and (h[pid]["status"].get("completed") or h[pid]["status"].get("status_str") == "error"):
            break
        await asyncio.sleep(1.0)
    else:
        raise RuntimeError(f"{stem}: the run did not finish")
    await asyncio.sleep(2.0)
    _save_png(out, f"{stem}.run", (await p.call("Page.captureScreenshot", format="png"))["result"]["data"])
    texts = [o["text"][0] for o in h[pid]["outputs"].values() if o.get("text")]
    return {"status": h[pid]["status"].get("status_str"), "texts": texts}


TEMPLATES = r"""
(async () => {  // open the template browser (Comfy.BrowseTemplates) and pick the entry whose label has `name`
  const app = """ + APP + r""";
  await app.extensionManager.command.execute('Comfy.BrowseTemplates');
  await new Promise(r => setTimeout(r, 2500));
  const items = [...document.querySelectorAll('[role=dialog] *')].filter(e => e.children.length === 0 &&
      e.textContent.trim().includes(%s));
  if (items.length) items[0].click();
  await new Promise(r => setTimeout(r, 3000));
  const imgs = [...document.querySelectorAll('[role=dialog] img')].map(i => ({src: i.getAttribute('src'),
      loaded: i.complete && i.naturalWidth > 0}));
  return JSON.stringify({clicked: items.length > 0, imgs});
})()
"""


async def templates_shot(p: "Page", name: str, png: Path) -> dict:
    import base64

    res = json.loads(await p.eval(TEMPLATES % json.dumps(name)))
    data = (await p.call("Page.captureScreenshot", format="png"))["result"]["data"]
    png.write_bytes(base64.b64decode(data))
    return res


async def probe(url: str, chromium: str, paths: list[str], shots: Path | None = None,
                templates: tuple[str, Path] | None = None, run_embeddings: str | None = None,
                run_blocks: int | None = SMALL_RUN["num_blocks"], run_schedule: list[str] | None = None) -> dict:
    port, profile = free_port(), tempfile.mkdtemp(prefix="sdvg-fe-")
    browser = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                "--disable-background-networking", "--disable-dev-shm-usage", "--window-size=1920,1080",
                                "--remote-allow-origins=*",
                                f"--remote-debugging-port={port}", f"--user-data-dir={profile}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = {}
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(150):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/json/version") as r:
                        ws_url = (await r.json())["webSocketDebuggerUrl"]
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.2)
            async with http.ws_connect(ws_url, max_msg_size=0) as bws:
                b = Page(bws)
                for path in paths:
                    ctx = (await b.call("Target.createBrowserContext"))["result"]["browserContextId"]
                    tid = (await b.call("Target.createTarget", url="about:blank", browserContextId=ctx))["result"]["targetId"]
                    async with http.ws_connect(f"ws://127.0.0.1:{port}/devtools/page/{tid}", max_msg_size=0) as ws:
                        p = Page(ws)
                        await open_app(p, url)
                        text = Path(path).read_text(encoding="utf-8")
                        res = json.loads(await p.eval(PROBE % (text, json.dumps(Path(path).name))))
                        out[path] = {"missing": sorted({n["type"] for n in res["nodes"] if n["missing"]}),
                                     "missing_dialog": [d for d in res["dialogs"] if "Missing" in d and "Node" in d],
                                     "node_count": len(res["nodes"]), "api": res["api"],
                                     "frontend": res.get("frontend", ""), "page_errors": p.errors[:20],
                                     "view": res.get("view"), "reports": res.get("reports", []),
                                     "videos": res.get("videos", []), "overlays": res.get("overlays", [])}
                        if shots is not None and run_embeddings:
                            await screenshot(p, Path(path).stem, shots, [n["type"] for n in res["nodes"]], fit=False)
                            out[path]["run"] = await run_small(p, http, url, res["api"], run_embeddings,
                                                               Path(path).stem, shots, run_blocks, run_schedule)
                        elif shots is not None:
                            await screenshot(p, Path(path).stem, shots, [n["type"] for n in res["nodes"]])
                        if templates is not None and path == paths[-1]:
                            out["templates"] = await templates_shot(p, *templates)
                        p.reader.cancel()
                    await b.call("Target.closeTarget", targetId=tid)
                    await b.call("Target.disposeBrowserContext", browserContextId=ctx)
                b.reader.cancel()
    finally:
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()
        shutil.rmtree(profile, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workflows", nargs="+")
    ap.add_argument("--url", default="http://127.0.0.1:8188")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--shots", type=Path, help="save <name>.png (whole workflow) and <name>.jpg (card) here")
    ap.add_argument("--run-small", metavar="EMBEDDINGS",
                    help="with --shots: queue each workflow from the page at a small size (text encoder swapped for "
                         "SDVG Load Prompt Embeddings reading this file of models/sdvg_prompts) and save "
                         "<name>.run.png at its saved view once it ran (instead of the fitted picture and card)")
    ap.add_argument("--run-blocks", type=int, default=SMALL_RUN["num_blocks"],
                    help="with --run-small: blocks per run (0: the workflow's own count, its schedule unchanged)")
    ap.add_argument("--run-schedule", metavar="FILES",
                    help="with --run-small: comma-separated embeddings files of models/sdvg_prompts, one per entry of "
                         "a prompt schedule (default: every entry reads the --run-small file)")
    ap.add_argument("--templates", nargs=2, metavar=("LABEL", "PNG"),
                    help="also open the template browser, pick the category named LABEL, save a screenshot to PNG")
    a = ap.parse_args()
    if a.shots:
        a.shots.mkdir(parents=True, exist_ok=True)
    res = asyncio.run(probe(a.url.rstrip("/"), a.chromium, a.workflows, a.shots,
                            (a.templates[0], Path(a.templates[1])) if a.templates else None, a.run_small,
                            a.run_blocks or None, a.run_schedule.split(",") if a.run_schedule else None))
    print(json.dumps(res))
    return 1 if any(r["missing"] or r["missing_dialog"] for k, r in res.items() if k != "templates") else 0


if __name__ == "__main__":
    sys.exit(main())
