#!/usr/bin/env python3
"""Use SDVG Live from ComfyUI's real frontend in headless Chromium, the way a person does, and say what the page saw.

    $COMFYUI_PYTHON tests/live_probe.py --url http://127.0.0.1:8188 --scenario controls|camera \\
        [--shots DIR] [--size 32x16] [--max-blocks 40] [--schedule-files a.safetensors,b,c]

Needs only aiohttp (a ComfyUI dependency) and tests/frontend_probe.py + tests/workflow_tools.py. Chromium runs with a
fake camera (`--use-fake-device-for-media-stream --use-fake-ui-for-media-stream`: a moving test picture, permission
granted). The page loads workflows/sdvg_live.json; the run is queued from the page at a small size with the tiny test
models (the schedule's text encoder swapped for saved embeddings, no CLIP on SDVG Live: tests/workflow_tools.py).
Everything is then done through the panel's own elements (values set and input/change events dispatched on them, its
buttons clicked), and what the panel measured is read from `window.__sdvgLive[run_id]` (stats, blocks, controls).

Scenarios (one JSON object on stdout):
- controls: tab A queues; tab B (another browser context, the same workflow) watches. A sees blocks drawn, moves tau
  (slider), switches the prompt (prepared prompt 1), A's page is closed, B sees more blocks and presses Stop; then B
  presses Replay (the node's `replay` widget takes the report) and queues again: the replay run plays to its end.
- camera: the node's `input` widget set to camera, the panel's Camera button pressed, queued; after blocks are drawn
  the strength slider moves; Stop.
With --shots DIR: DIR/<scenario>_panel.png (the node and its panel, zoomed to it, mid-run) and <scenario>_page.png.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import frontend_probe as fp  # noqa: E402
import workflow_tools as wt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "workflows" / "sdvg_live.json"
FAKE_CAMERA = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]
APP = fp.APP
# the SDVG Live node's panel in this page (web/sdvg_live.js keeps it on the node)
PANEL = f"(({APP}.graph._nodes || {APP}.graph.nodes).find(n => n.type === 'SDVGLive') || {{}}).__sdvgLive"
WAIT_S = float(os.environ.get("SDVG_LIVE_WAIT_S", 1800))  # a block of the tiny models takes seconds to tens of seconds on a busy 2-core CPU (the Wan VAE is full size)


# ------------------------------------------------------------------------------------------------ the browser
class Browser:
    """Headless Chromium with a fake camera; pages in browser contexts of their own (no shared local storage)."""

    def __init__(self, chromium: str):
        self.chromium, self.port, self.profile = chromium, fp.free_port(), tempfile.mkdtemp(prefix="sdvg-live-")
        self.proc = None

    async def __aenter__(self) -> "Browser":
        self.proc = subprocess.Popen([self.chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      "--disable-background-networking", "--disable-dev-shm-usage",
                                      "--window-size=1920,1080", "--remote-allow-origins=*", *FAKE_CAMERA,
                                      # a page in a second context must keep its timers: it plays the video too
                                      "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                                      "--disable-backgrounding-occluded-windows",
                                      f"--remote-debugging-port={self.port}", f"--user-data-dir={self.profile}",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.http = aiohttp.ClientSession()
        for _ in range(150):
            try:
                async with self.http.get(f"http://127.0.0.1:{self.port}/json/version") as r:
                    ws_url = (await r.json())["webSocketDebuggerUrl"]
                break
            except aiohttp.ClientError:
                await asyncio.sleep(0.2)
        self.bws = await self.http.ws_connect(ws_url, max_msg_size=0)
        self.b = fp.Page(self.bws)
        return self

    async def page(self, url: str) -> "LivePage":
        ctx = (await self.b.call("Target.createBrowserContext"))["result"]["browserContextId"]
        tid = (await self.b.call("Target.createTarget", url="about:blank", browserContextId=ctx))["result"]["targetId"]
        ws = await self.http.ws_connect(f"ws://127.0.0.1:{self.port}/devtools/page/{tid}", max_msg_size=0)
        p = LivePage(ws, self, tid, ctx)
        await fp.open_app(p, url)
        for _ in range(2):  # a first start opens the template browser (1.5x): Escape closes dialogs
            await p.call("Input.dispatchKeyEvent", type="keyDown", key="Escape", code="Escape", windowsVirtualKeyCode=27)
            await p.call("Input.dispatchKeyEvent", type="keyUp", key="Escape", code="Escape", windowsVirtualKeyCode=27)
            await asyncio.sleep(0.3)
        await p.eval(fp.CLOSE)
        p.errors.clear()  # the start-up's own ("graph accessed before initialization": the wait above polls it)
        return p

    async def close_page(self, p: "LivePage") -> None:
        """Close a page as a person closes a tab."""
        p.reader.cancel()
        await self.b.call("Target.closeTarget", targetId=p.tid)
        await p.ws.close()
        await self.b.call("Target.disposeBrowserContext", browserContextId=p.ctx)

    async def __aexit__(self, *exc) -> None:
        try:
            self.b.reader.cancel()
            await self.bws.close()
            await self.http.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)


class LivePage(fp.Page):
    """One tab of the frontend, with the SDVG Live workflow and its panel."""

    def __init__(self, ws, browser: Browser, tid: str, ctx: str):
        super().__init__(ws)
        self.browser, self.tid, self.ctx = browser, tid, ctx

    async def js(self, expression: str):
        return await self.eval(expression)

    async def wait(self, expression: str, what: str, timeout: float = WAIT_S, every: float = 0.5):
        """The value of `expression` once it is truthy (RuntimeError naming `what` after `timeout` seconds)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            value = await self.eval(expression)
            if value:
                return value
            await asyncio.sleep(every)
        raise RuntimeError(f"the page did not get to: {what} (within {timeout:.0f} s); errors: {self.errors[:5]}")

    async def load(self, wf: dict) -> None:
        await self.eval(f"(async () => {{ await {APP}.loadGraphData({json.dumps(wf)}, true, true, 'sdvg_live'); "
                        "return true; })()")
        await self.wait(f"!!{PANEL}", "the SDVG Live node shows its panel", timeout=30)

    async def prompt(self) -> dict:
        return json.loads(await self.eval(f"(async () => JSON.stringify((await {APP}.graphToPrompt()).output))()"))

    async def queue(self, api: dict) -> str:
        return json.loads(await self.eval(fp.QUEUE % json.dumps(api)))["prompt_id"]

    # ---------------------------------------------------------------------------------------------- the panel
    async def control(self, name: str, value=None, events: tuple[str, ...] = ("input", "change")) -> None:
        """Set a panel element's value and dispatch the events a person's edit makes (a button: a click)."""
        sel = json.dumps(f'[data-control="{name}"]')
        if value is None:
            script = f"{PANEL}.root.querySelector({sel}).click()"
        else:
            fire = "; ".join(f"e.dispatchEvent(new Event({json.dumps(ev)}, {{bubbles: true}}))" for ev in events)
            script = (f"(() => {{ const e = {PANEL}.root.querySelector({sel}); "
                      f"{'e.checked = ' + json.dumps(value) if isinstance(value, bool) else 'e.value = ' + json.dumps(str(value))}; "
                      f"{fire}; return true; }})()")
        await self.eval(script)

    async def confirmed(self, run_id: str, n: int, what: str) -> dict:
        """The n-th control request the panel sent, once the server answered it."""
        ctl = await self.wait(f"(() => {{ const c = window.__sdvgLive[{json.dumps(run_id)}].stats.controls; "
                              f"return c.length >= {n} && JSON.stringify(c[{n - 1}]); }})()", what, timeout=30)
        return json.loads(ctl)

    async def run_state(self, run_id: str) -> dict:
        return json.loads(await self.eval(f"(() => {{ const r = window.__sdvgLive[{json.dumps(run_id)}]; "
                                          "return JSON.stringify({start: r.start, settings: r.settings, end: r.end, "
                                          "stats: r.stats, blocks: r.blocks}); })()"))

    async def new_run(self, known: list[str], what: str) -> str:
        """The id of a run this page saw start that is not in `known`."""
        return await self.wait(f"Object.keys(window.__sdvgLive).find(k => window.__sdvgLive[k].start && "
                               f"!{json.dumps(known)}.includes(k))", what, timeout=WAIT_S)

    async def drawn(self, run_id: str, blocks: int, what: str) -> None:
        await self.wait(f"window.__sdvgLive[{json.dumps(run_id)}].stats.blocksDrawn >= {blocks}", what)

    async def change(self, run_id: str, name: str, value, n: int, what: str,
                     events: tuple[str, ...] = ("input", "change")) -> dict:
        """Change a panel control as a person does, wait for the server's answer (the run's n-th control request)
        and for 2 more blocks drawn after it; the request as the page logged it."""
        await self.control(name, value, events=events)
        sent = await self.confirmed(run_id, n, f"the server confirms the new {what}")
        drawn = (await self.run_state(run_id))["stats"]["blocksDrawn"]
        await self.drawn(run_id, drawn + 2, f"2 more blocks after the {what} change")
        return sent

    async def text(self) -> dict:
        """What the panel shows, element by element."""
        return json.loads(await self.eval(
            f"(() => {{ const p = {PANEL}; const t = e => e.innerText; return JSON.stringify({{caption: t(p.caption), "
            "stats: t(p.stats), confirmed: t(p.confirmed), note: t(p.promptNote), files: t(p.files), "
            "error: t(p.error), idle: p.idle.style.display === 'none' ? '' : t(p.idle), "
            "strip: p.strip.children.length, disabled: Object.fromEntries([...p.root.querySelectorAll('[data-control]')]"
            ".map(e => [e.dataset.control, e.disabled])), "
            # on screen: in the document, laid out (not display: none up the tree) and of some size
            "visible: p.root.isConnected && p.root.offsetParent !== null && p.root.getBoundingClientRect().width > 0 "
            "&& p.root.getBoundingClientRect().height > 0}); })()"))

    async def widget(self, name: str, value) -> None:
        """Set one of the node's own widgets (a combo, a text) as the frontend does when a person picks a value."""
        await self.eval(f"(() => {{ const n = ({APP}.graph._nodes || {APP}.graph.nodes).find(n => n.type === 'SDVGLive'); "
                        f"const w = n.widgets.find(w => w.name === {json.dumps(name)}); w.value = {json.dumps(value)}; "
                        "w.callback && w.callback(w.value); n.setDirtyCanvas(true, true); return true; })()")

    async def shot(self, out: Path, stem: str) -> None:
        """<stem>_panel.png: the node and its panel at a zoom where the panel fills the window's height;
        <stem>_page.png: the page."""
        fp._save_png(out, f"{stem}_page", (await self.call("Page.captureScreenshot", format="png"))["result"]["data"])
        box = json.loads(await self.eval(FOCUS))
        await asyncio.sleep(1.0)
        data = (await self.call("Page.captureScreenshot", format="png", clip={**box, "scale": 1}))["result"]["data"]
        fp._save_png(out, f"{stem}_panel", data)


FOCUS = r"""
(() => {  // zoom the canvas onto the SDVG Live node (title bar to bottom) and return its page rect
  const app = """ + APP + r""";
  document.querySelectorAll('.p-dialog-close-button, .p-toast-close-button').forEach(b => b.click());
  document.querySelectorAll('.minimap-main-container').forEach(e => { e.style.display = 'none'; });
  const n = (app.graph._nodes || app.graph.nodes).find(n => n.type === 'SDVGLive');
  const c = app.canvas.canvas.getBoundingClientRect(), title = LiteGraph.NODE_TITLE_HEIGHT;
  const top = 110, h = c.height - top - 70;
  const scale = Math.min(1.2, h / (n.size[1] + title + 10));
  app.canvas.ds.scale = scale;
  app.canvas.ds.offset[0] = -n.pos[0] + (c.width / 2 - scale * n.size[0] / 2) / scale;
  app.canvas.ds.offset[1] = -n.pos[1] + title + (top - c.top) / scale;
  app.canvas.setDirty(true, true);
  const x = c.left + (n.pos[0] + app.canvas.ds.offset[0]) * scale, y = c.top + (n.pos[1] - title + app.canvas.ds.offset[1]) * scale;
  return JSON.stringify({x: x - 8, y: y - 8, width: n.size[0] * scale + 16, height: (n.size[1] + title) * scale + 16});
})()
"""


# ------------------------------------------------------------------------------------------------ the run
async def set_up(p: LivePage, a: argparse.Namespace, **widgets) -> None:
    """The node's widgets as a person sets them before queueing: a small size, max_blocks, the start tau."""
    for name, value in {"width": a.size[0], "height": a.size[1], "max_blocks": a.max_blocks, "tau": a.tau[0],
                        **widgets}.items():
        await p.widget(name, value)


def small_run(api: dict, a: argparse.Namespace, seen: dict) -> dict:
    """The page's API prompt for the tiny test models: saved embeddings for the schedule (no umT5 here) and no CLIP on
    SDVG Live (so the page can switch among the prepared prompts only); the widgets are the page's own. A node the
    page could not register (no class_type: the pip build 0.12.1's frontend registers no Note / MarkdownNote) is
    left out, as a person deletes the missing note to queue there; its id goes to seen["unregistered"]."""
    out = json.loads(json.dumps(api))
    seen.setdefault("unregistered", []).extend(k for k, n in out.items() if "class_type" not in n)
    out = {k: n for k, n in out.items() if "class_type" in n}
    for node in out.values():
        if node["class_type"] == "SDVGLive":
            node["inputs"].pop("clip", None)
            got = {k: node["inputs"][k] for k in ("width", "height", "max_blocks", "tau")}
            if got != {"width": a.size[0], "height": a.size[1], "max_blocks": a.max_blocks, "tau": a.tau[0]}:
                raise RuntimeError(f"the page queues SDVG Live with {got}, not the widgets the probe set")
    return wt.swap_schedule_encoder(out, a.schedule_files)


async def end_of(p: LivePage, run_id: str, what: str) -> dict:
    """The run's state once it ended and the panel played what it had buffered."""
    await p.wait(f"!!window.__sdvgLive[{json.dumps(run_id)}].end", what)
    await p.wait(f"{PANEL}.player.queue.length === 0", f"{what}: the panel played its buffer", timeout=120)
    await asyncio.sleep(0.5)
    return await p.run_state(run_id)


async def controls_scenario(br: Browser, url: str, a: argparse.Namespace, out: dict) -> None:
    wf = wt.load(WORKFLOW)
    tab_a, tab_b = await br.page(url), await br.page(url)
    for p in (tab_a, tab_b):
        await p.load(wf)
    out["before_run"] = await tab_a.text()
    for p in (tab_a, tab_b):
        await set_up(p, a)
    api = small_run(await tab_a.prompt(), a, out)
    out["prompt_id"] = await tab_a.queue(api)
    run = await tab_a.new_run([], "the run's start event")
    out["run_id"] = run
    await tab_a.drawn(run, 4, "4 blocks drawn in tab A")
    # tau: the slider, as a person drags it (input events, then the release's change)
    out["tau_change"] = await tab_a.change(run, "tau", a.tau[1], 1, "tau")
    # the prompt: the second prepared prompt, picked in the select
    out["prompt_change"] = await tab_a.change(run, "prompt", 1, 2, "prompt", events=("change",))
    out["panel_a"] = await tab_a.text()
    if a.shots:
        await tab_a.shot(a.shots, "controls")
    out["tab_a"] = await tab_a.run_state(run)
    # closing the page that queued the run does not stop it: tab B goes on seeing blocks
    await br.close_page(tab_a)
    out["closed_a_at_block"] = max(b["block"] for b in out["tab_a"]["blocks"])
    seen = (await tab_b.run_state(run))["stats"]["blocksReceived"]
    await tab_b.wait(f"window.__sdvgLive[{json.dumps(run)}].stats.blocksReceived >= {seen + 2}",
                     "2 more blocks in tab B after tab A closed")
    await tab_b.control("stop")
    out["stop"] = await tab_b.confirmed(run, 1, "the server confirms Stop")
    out["tab_b"] = await end_of(tab_b, run, "the run's end in tab B")
    out["panel_b_end"] = await tab_b.text()
    if a.shots:
        await tab_b.shot(a.shots, "controls_end")
    # replay: the panel puts the report into the node's `replay` widget; queue again from this page
    await tab_b.control("replay")
    api = await tab_b.prompt()
    out["replay_widget"] = next(n["inputs"]["replay"] for n in api.values() if n.get("class_type") == "SDVGLive")
    out["replay_prompt_id"] = await tab_b.queue(small_run(api, a, out))
    replay = await tab_b.new_run([run], "the replay's start event")
    out["replay_run_id"] = replay
    out["replay"] = await end_of(tab_b, replay, "the replay's end")
    out["panel_replay"] = await tab_b.text()
    out["errors"] = {"b": tab_b.errors[:20]}


async def camera_scenario(br: Browser, url: str, a: argparse.Namespace, out: dict) -> None:
    p = await br.page(url)
    await p.load(wt.load(WORKFLOW))
    await set_up(p, a, input="camera")
    await p.control("camera")  # the panel's Camera button: the fake camera, previewed on the panel
    await p.wait(f"{PANEL}.camera.on && {PANEL}.video.readyState >= 2", "the camera plays on the panel", timeout=60)
    api = small_run(await p.prompt(), a, out)
    out["input"] = next(n["inputs"]["input"] for n in api.values() if n.get("class_type") == "SDVGLive")
    out["prompt_id"] = await p.queue(api)
    run = await p.new_run([], "the camera run's start event")
    out["run_id"] = run
    await p.drawn(run, 4, "4 blocks of the camera run drawn")
    out["strength_change"] = await p.change(run, "strength", a.strength, 1, "strength")
    out["panel"] = await p.text()
    if a.shots:
        await p.shot(a.shots, "camera")
    await p.control("stop")
    out["stop"] = await p.confirmed(run, 2, "the server confirms Stop")
    out["state"] = await end_of(p, run, "the camera run's end")
    out["panel_end"] = await p.text()
    out["errors"] = p.errors[:20]


async def main_async(a: argparse.Namespace) -> dict:
    out: dict = {"scenario": a.scenario}
    async with Browser(a.chromium) as br:
        if a.scenario == "controls":
            await controls_scenario(br, a.url, a, out)
        else:
            await camera_scenario(br, a.url, a, out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8188")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--scenario", choices=("controls", "camera"), required=True)
    ap.add_argument("--shots", type=Path)
    ap.add_argument("--size", default="32x16", help="WxH of the run (multiples of 16)")
    ap.add_argument("--max-blocks", type=int, default=40)
    ap.add_argument("--tau", default="-5,-4.5", help="the start tau, then the tau the slider moves to")
    ap.add_argument("--strength", type=float, default=0.5, help="the camera run's strength after the slider moves")
    ap.add_argument("--schedule-files", default="test_schedule_0.safetensors,test_schedule_1.safetensors,"
                                                "test_schedule_2.safetensors",
                    help="embeddings files (models/sdvg_prompts) for the schedule's prompts, in order")
    a = ap.parse_args()
    a.url = a.url.rstrip("/")
    a.size = tuple(int(x) for x in a.size.lower().split("x"))
    a.tau = [float(x) for x in a.tau.split(",")]
    a.schedule_files = a.schedule_files.split(",")
    if a.shots:
        a.shots.mkdir(parents=True, exist_ok=True)
    print(json.dumps(asyncio.run(main_async(a))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
