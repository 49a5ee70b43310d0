#!/usr/bin/env python3
"""Open workflows in ComfyUI's real frontend (headless Chromium) and report what it sees.

    $COMFYUI_PYTHON tests/frontend_probe.py --url http://127.0.0.1:8188 [--chromium chromium] WF.json [...]

Needs only aiohttp (a ComfyUI dependency), so run it with ComfyUI's python. For each workflow, in a fresh browser
context (the frontend restores the last workflow from local storage): load it with `app.loadGraphData`, list the
node types the frontend could not create (missing nodes) and the dialogs shown, and return the API prompt the
Queue button would send (`app.graphToPrompt()`). Prints one JSON object {path: {...}}; exit status 1 when a
workflow has missing nodes.
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

PROBE = r"""
(async () => {
  const wf = %s;
  await app.loadGraphData(wf, true, true, %s);
  await new Promise(r => setTimeout(r, 800));
  const nodes = (app.graph._nodes || app.graph.nodes || []).map(n => ({
      id: n.id, type: n.type, missing: !!n.has_errors || !(n.type in LiteGraph.registered_node_types)}));
  const dialogs = [...document.querySelectorAll('.p-dialog, [role=dialog]')].map(e => e.innerText);
  const api = (await app.graphToPrompt()).output;
  return JSON.stringify({nodes, dialogs, api});
})()
"""


class Page:
    """Minimal Chrome DevTools Protocol session over one websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self.ws, self.next_id, self.waiting = ws, 0, {}
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            fut = self.waiting.pop(data.get("id"), None)
            if fut is not None:
                fut.set_result(data)

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


async def probe(url: str, chromium: str, paths: list[str]) -> dict:
    port, profile = free_port(), tempfile.mkdtemp(prefix="sdvg-fe-")
    browser = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                "--disable-background-networking", "--disable-dev-shm-usage", "--window-size=1600,1000",
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
                        await p.call("Page.enable")
                        await p.call("Page.navigate", url=url + "/")
                        for _ in range(240):
                            if await p.eval("typeof window.app !== 'undefined' && !!window.app.graph && "
                                            "typeof LiteGraph !== 'undefined' && "
                                            "Object.keys(LiteGraph.registered_node_types).length > 0"):
                                break
                            await asyncio.sleep(0.5)
                        else:
                            raise RuntimeError("the ComfyUI frontend did not start")
                        await asyncio.sleep(1.0)
                        text = Path(path).read_text(encoding="utf-8")
                        res = json.loads(await p.eval(PROBE % (text, json.dumps(Path(path).name))))
                        out[path] = {"missing": sorted({n["type"] for n in res["nodes"] if n["missing"]}),
                                     "missing_dialog": [d for d in res["dialogs"] if "Missing" in d and "Node" in d],
                                     "node_count": len(res["nodes"]), "api": res["api"]}
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
    a = ap.parse_args()
    res = asyncio.run(probe(a.url.rstrip("/"), a.chromium, a.workflows))
    print(json.dumps(res))
    return 1 if any(r["missing"] or r["missing_dialog"] for r in res.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
