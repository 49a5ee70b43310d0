"""SDVG Live in a real ComfyUI (skipped unless COMFYUI_DIR is set; the page's tests also need chromium).

    COMFYUI_DIR=/path/to/ComfyUI .venv/bin/python -m pytest -q -s tests/test_comfy_live.py

The server is tests/test_comfy_host.py's (tiny random models, this checkout linked into custom_nodes, `main.py
--cpu`). What a broken or hostile page can send is sent over HTTP: it is refused with the protocol's status
(docs/live.md: 404, 400, 413; a flood of frames dropped and counted) and the server and the run stand; a second
websocket page sees the same blocks, and closing one does not stop the run. Then the real frontend in headless Chromium
(tests/live_probe.py) uses the panel as a person does: blocks drawn, tau moved and the prompt switched from the panel,
a second tab watching while the first is closed, Stop, the replay queued from the panel's Replay (equal lineage); and
a camera run from Chromium's fake camera with its strength moved. The report's timeline must show each change at the
blocks after it was made. The figures the page measured (commit-to-screen latency, stalls, blocks/s, camera frames
dropped) are printed.
"""
from __future__ import annotations

import io
import json
import math
import os
import shutil
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import workflow_tools as wt
from test_comfy_host import COMFYUI_DIR, REPO, SCHEDULE_EMB, Events, Server, comfy_python, root  # noqa: F401

pytestmark = [pytest.mark.slow,  # a real ComfyUI and headless Chromium
              pytest.mark.skipif(not COMFYUI_DIR, reason="set COMFYUI_DIR to a ComfyUI checkout to run real-host tests")]
needs_chromium = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")

WORKFLOW = REPO / "workflows" / "sdvg_live.json"
# The tiny models' blocks at a size where the full-width Wan VAE (ComfyUI's VAELoader) decodes in seconds on a CPU
SIZE = (32, 16)
MAX_BLOCKS = 40  # more than any scenario gets to: every run here ends by Stop
TAU, NEW_TAU = -5.0, -4.5  # the tiny scorer's scores lie near -1..1: tau -5 keeps every draft (one decode a block)
BLOCK_WAIT_S = 900  # a block takes seconds to tens of seconds on a busy 2-core CPU: a hang guard, not a timing


@pytest.fixture(scope="module")
def server(root):  # noqa: F811 (the root fixture of test_comfy_host)
    s = Server(root, "live")
    yield s
    s.close()


# ------------------------------------------------------------------------------------------------ helpers
def live_api(server: Server, **inputs) -> dict:
    """The workflow's API prompt for the tiny models (saved embeddings for the schedule, no CLIP on SDVG Live)."""
    api = wt.to_api(wt.load(WORKFLOW), server.object_info)
    for node in api.values():
        if node["class_type"] == "SDVGLive":
            node["inputs"].pop("clip", None)
    api = wt.swap_schedule_encoder(api, list(SCHEDULE_EMB))
    return wt.set_inputs(api, "SDVGLive", width=SIZE[0], height=SIZE[1], max_blocks=MAX_BLOCKS, tau=TAU, **inputs)


def submit(server: Server, api: dict) -> str:
    body = json.dumps({"prompt": api, "client_id": server.events.client_id}).encode()
    req = urllib.request.Request(server.url + "/prompt", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["prompt_id"]


def request(server: Server, method: str, path: str, body: bytes | None = None,
            content_type: str = "application/json") -> tuple[int, dict]:
    """(status, JSON body) of one request; an error status is an answer, not an exception."""
    req = urllib.request.Request(server.url + path, data=body, method=method,
                                 headers={"Content-Type": content_type} if body is not None else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, {"raw": text[:300].decode(errors="replace")}


def wait_event(events: Events, kind: str, pred=lambda d: True, timeout: float = BLOCK_WAIT_S) -> dict:
    """The first `kind` event matching `pred` (a hang guard: fails after `timeout`)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        for e, d in list(events.events):
            if e == kind and pred(d):
                return d
        time.sleep(0.2)
    raise AssertionError(f"no {kind} event within {timeout:.0f} s")


def blocks_of(events: Events, run_id: str) -> list[dict]:
    return [d for e, d in list(events.events) if e == "sdvg.live.block" and d.get("run_id") == run_id]


def wait_history(server: Server, pid: str, timeout: float = BLOCK_WAIT_S) -> dict:
    t0 = time.time()
    while time.time() - t0 < timeout:
        h = server.get(f"/history/{pid}")
        if pid in h and (h[pid]["status"]["completed"] or h[pid]["status"]["status_str"] == "error"):
            return h[pid]
        time.sleep(0.5)
    raise AssertionError(f"prompt {pid} did not finish: {server.tail()}")


def report_of(server: Server, end: dict) -> dict:
    return json.loads((server.root / "output" / end["report"]).read_text(encoding="utf-8"))


def jpeg(i: int, size: tuple[int, int] = SIZE) -> bytes:
    """A camera-like frame: a gradient that moves with i."""
    from PIL import Image

    w, h = size
    im = Image.new("RGB", (w, h))
    im.putdata([((x * 8 + i * 5) % 256, (y * 12 + i * 3) % 256, (x * y + i * 7) % 256) for y in range(h) for x in range(w)])
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=85)
    return buf.getvalue()


class Camera(threading.Thread):
    """Frames to POST /frame at 16 fps, one request at a time (what the panel's camera does); `paused` holds it."""

    def __init__(self, server: Server, run_id: str):
        super().__init__(daemon=True)
        self.server, self.run_id = server, run_id
        self.stop, self.paused = threading.Event(), threading.Event()
        self.sent = self.accepted = 0

    def run(self) -> None:
        i = 0
        while not self.stop.wait(1 / 16):
            if self.paused.is_set():
                continue
            status, body = request(self.server, "POST", f"/sdvg/live/{self.run_id}/frame", jpeg(i), "image/jpeg")
            if status == 404:  # the run ended
                return
            self.sent += 1
            self.accepted += bool(body.get("accepted"))
            i += 1


def timeline_change(report: dict, version: int) -> int:
    """The first block that took settings change `version` (or a later one)."""
    return next(b["block"] for b in report["live"]["blocks"] if b["settings_version"] >= version)


# ------------------------------------------------------------------------------------------------ the routes
def test_what_a_hostile_page_sends_is_refused_and_the_run_goes_on(server):
    second_page = Events(server.port)  # another open page: it gets the same events
    pid = submit(server, live_api(server, input="camera"))
    start = wait_event(server.events, "sdvg.live.start", lambda d: d.get("camera"))
    run = start["run_id"]
    assert start["camera"] and start["fps"] == 16 and start["block_seconds"] == 0.75 and not start["replay"]
    assert len(start["prepared"]) == 3 and start["encodes_prompts"] is False and start["can_switch_prompts"]
    camera = Camera(server, run)
    camera.start()
    try:
        wait_event(server.events, "sdvg.live.block", lambda d: d["run_id"] == run)
        listed = server.get("/sdvg/live/runs")["runs"]
        assert [r["run_id"] for r in listed] == [run] and listed[0]["recent"] and "frames" not in listed[0]["recent"][0]
        camera.paused.set()  # the hostile frames below must not be taken for a flood of the camera's own
        time.sleep(0.2)
        control, frame = f"/sdvg/live/{run}/control", f"/sdvg/live/{run}/frame"
        refused = {
            "unknown run (control)": (404, "POST", "/sdvg/live/no-such-run/control", b'{"tau": 0}', "application/json"),
            "unknown run (frame)": (404, "POST", "/sdvg/live/no-such-run/frame", jpeg(0), "image/jpeg"),
            "unknown run (/api)": (404, "POST", "/api/sdvg/live/no-such-run/control", b'{"tau": 0}', "application/json"),
            "malformed JSON": (400, "POST", control, b'{"tau": ', "application/json"),
            "not an object": (400, "POST", control, b"[1, 2]", "application/json"),
            "NaN tau": (400, "POST", control, b'{"tau": NaN}', "application/json"),
            "infinite tau": (400, "POST", control, b'{"tau": 1e999}', "application/json"),
            "tau as text": (400, "POST", control, b'{"tau": "0.5"}', "application/json"),
            "unknown control": (400, "POST", control, b'{"volume": 11}', "application/json"),
            "prompt index out of range": (400, "POST", control, b'{"prompt_index": 99}', "application/json"),
            "strength above 1": (400, "POST", control, b'{"strength": 2}', "application/json"),
            "typed prompt without a CLIP": (409, "POST", control, b'{"prompt": "a cat"}', "application/json"),
            "prompt too long": (413, "POST", control, json.dumps({"prompt": "x" * 5000}).encode(), "application/json"),
            "control body too large": (413, "POST", control, b'{"tau": 0' + b" " * 70000 + b"}", "application/json"),
            "frame too large": (413, "POST", frame, b"\xff" * (9 << 20), "image/jpeg"),
            "frame not a picture": (400, "POST", frame, b"not a picture", "image/jpeg"),
            "frame a decompression bomb": (413, "POST", frame, png(4000, 4000), "image/png"),
        }
        before = server.get("/sdvg/live/runs")["runs"][0]["settings"]
        answers = {}
        for what, (status, method, path, body, ctype) in refused.items():
            time.sleep(0.1)  # frames further apart than the flood gap: each one is read and checked
            answers[what] = request(server, method, path, body, ctype)
            got, data = answers[what]
            if status is not None:
                assert got == status and data.get("error"), (what, got, data)
        print("\nrefused: " + "; ".join(f"{w}: {s} {d.get('error', '')[:70]!r}" for w, (s, d) in answers.items()))
        # a flood: 160 frames at once from 8 threads, every one answered, the ones closer than the rule's gap
        # dropped unread and counted (the gap itself is tested on a stepped clock: test_nodes_live_workflow.py)
        flood, body = [], jpeg(1)
        threads = [threading.Thread(target=lambda: [flood.append(request(server, "POST", frame, body, "image/jpeg"))
                                                    for _ in range(20)]) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(s == 200 for s, _ in flood), {s for s, _ in flood}
        dropped_here = sum(not d["accepted"] for _, d in flood)
        assert dropped_here > 0 and max(d["dropped"] for _, d in flood) >= dropped_here, dropped_here
        camera.paused.clear()
        assert server.get("/sdvg/live/runs")["runs"][0]["settings"]["version"] >= before["version"]
        # the run goes on: more blocks, on both pages; then the second page closes and the first still sees blocks
        seen = len(blocks_of(server.events, run))
        wait_event(server.events, "sdvg.live.block", lambda d: d["run_id"] == run and d["block"] >= seen + 1)
        both = [d["block"] for d in blocks_of(second_page, run)]
        assert both and both == [d["block"] for d in blocks_of(server.events, run)][:len(both)]
        second_page.close()
        last = blocks_of(server.events, run)[-1]["block"]
        wait_event(server.events, "sdvg.live.block", lambda d: d["run_id"] == run and d["block"] > last)
        status, data = request(server, "POST", control, json.dumps({"stop": True}).encode())
        assert status == 200 and data["settings"]["stop"], data
    finally:
        camera.stop.set()
        camera.join(10)
    entry = wait_history(server, pid)
    end = wait_event(server.events, "sdvg.live.end", lambda d: d["run_id"] == run)
    assert request(server, "POST", f"/sdvg/live/{run}/control", b'{"tau": 0}')[0] == 404  # the run is over
    assert server.get("/sdvg/live/runs")["runs"] == []
    rep = report_of(server, end)
    blocks = blocks_of(server.events, run)
    print(f"hostile page: run {run[:8]} {end['reason']} after {end['blocks']} blocks ({entry['status']['status_str']}); "
          f"camera sent {camera.sent} ({camera.accepted} accepted); flood: {len(flood)} frames, {dropped_here} dropped "
          f"unread; the run's counts: received {rep['live']['received_frames']}, dropped "
          f"{rep['live']['dropped_frames']}, block events' dropped {blocks[-1]['dropped_frames']}")
    assert entry["status"]["status_str"] == "success" and end["reason"] == "stopped", (end, entry["status"])
    assert rep["live"]["stopped_by_user"] and rep["num_blocks"] == end["blocks"] >= 3
    assert blocks[-1]["dropped_frames"] >= dropped_here  # the flood is counted where the page reads it
    assert rep["live"]["input_file"] and (server.root / "output" / Path(end["report"]).parent / rep["live"]["input_file"]
                                          ).stat().st_size == rep["live"]["input_hw"][0] * rep["live"]["input_hw"][1] * 3 \
        * sum(b["input"][1] for b in rep["live"]["blocks"])
    assert server.get("/object_info/SDVGLive")  # the server still answers


def png(w: int, h: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (w, h), (10, 20, 30)).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------ the page
HOST_CANVAS_ERROR = "getCanvas: canvas is null"  # frontend 1.58.1 on the pip build 0.12.1, after its setup threw
HOST_JOBS_ERROR = "Failed to fetch jobs: 500"  # the pip build's /api/jobs while a prompt is queued or running:
HOST_JOBS_CAUSE = "in normalize_queue_item"  # its server log then shows its own unpack of a 6-field QueueTuple fail
def nodes_without_module(server: Server) -> list[str]:
    """The host's nodes whose python_module is null (the pip build 0.12.1: two of its own), on which frontend 1.5x
    throws while registering node types and stops its setup: no Note / MarkdownNote, no canvas store, no DOM widget
    on screen, with or without this pack."""
    return sorted(k for k, v in server.object_info.items() if v.get("python_module") is None)


def panel_on_screen(server: Server, panel: dict) -> None:
    """The panel was on screen as a person sees it; where the host's own frontend mounts no DOM widget at all, an
    expected failure naming that bug (after every other check of the test passed)."""
    if not panel["visible"] and nodes_without_module(server):
        pytest.xfail(f"host bug: nodes {nodes_without_module(server)} have python_module null, so its frontend's setup "
                     f"stops and it mounts no DOM widget (core's text boxes neither): the panel plays, off screen")
    assert panel["visible"], panel


def live_probe(server: Server, scenario: str, shots: Path, timeout: float = 3000) -> dict:
    """Run tests/live_probe.py's scenario against the server; the screenshots go to `shots` (or to the folder named by
    SDVG_LIVE_SHOTS, to keep them)."""
    shots = Path(os.environ.get("SDVG_LIVE_SHOTS") or shots)
    out = subprocess.run([comfy_python(), str(REPO / "tests" / "live_probe.py"), "--url", server.url,
                          "--scenario", scenario, "--shots", str(shots), "--size", f"{SIZE[0]}x{SIZE[1]}",
                          "--max-blocks", str(MAX_BLOCKS), f"--tau={TAU},{NEW_TAU}",
                          "--schedule-files", ",".join(SCHEDULE_EMB)],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-4000:] + server.tail()
    res = json.loads(out.stdout.strip().splitlines()[-1])
    # only the pip build's frontend leaves the workflow's note unregistered (two of its nodes have python_module null,
    # and frontend 1.5x stops registering there); anywhere else an unregistered node is a fault of the workflow
    host_broken = nodes_without_module(server)
    assert not res.get("unregistered") or host_broken, f"the page registered no node type for {res['unregistered']}"
    if res.get("unregistered"):
        print(f"\nhost bug ({host_broken} have python_module null): the page registered no Note / MarkdownNote, so "
              f"nodes {sorted(set(res['unregistered']))} were left out of the queued prompt, as a person deletes them")
    # the pip build's own faults, each excused only where it shows: the same throw leaves its frontend without a
    # canvas store (its own previews then fail), and its /api/jobs fails on its own 6-field queue items
    server.log.flush()
    log = Path(server.log.name).read_text(errors="replace")
    host_errors = [text for text, shown in ((HOST_CANVAS_ERROR, bool(host_broken)),
                                            (HOST_JOBS_ERROR, HOST_JOBS_CAUSE in log)) if shown]
    excused = []

    def keep(errors: list[str]) -> list[str]:
        excused.extend(e for e in errors if any(h in e for h in host_errors))
        return [e for e in errors if not any(h in e for h in host_errors)]

    errs = res.get("errors")
    res["errors"] = {k: keep(v) for k, v in errs.items()} if isinstance(errs, dict) else keep(errs or [])
    if excused:
        print(f"host bugs: {len(excused)} page error(s) of the host's own excused "
              f"({sorted({h for h in host_errors if any(h in e for e in excused)})})")
    return {**res, "shots": str(shots)}


def figures(state: dict) -> str:
    """What the page measured: commit-to-screen latency, stalls per minute of playback, blocks/s, camera frames."""
    s = state["stats"]
    lat = s["latencies"]
    minutes = s["playSeconds"] / 60
    text = (f"{s['blocksDrawn']} blocks drawn ({s['framesDrawn']} frames, {s['playSeconds']:.1f} s of video); "
            f"commit to first frame drawn: median {statistics.median(lat):.2f} s, max {max(lat):.2f} s; "
            f"stalls {s['stalls']} ({s['stalls'] / minutes:.0f} per minute of playback, {s['stallSeconds']:.0f} s "
            f"stalled); blocks/s {s['blocksPerSecond']} (real time {s['realtimeBlocksPerSecond']})")
    if state["start"]["camera"]:
        text += (f"; camera: {s['cameraSent']} frames sent, {s['cameraDroppedPage']} dropped in the page (one "
                 f"request in flight), {s['cameraDroppedServer']} dropped by the run")
    return text


@needs_chromium
def test_the_panel_plays_the_run_and_its_controls_reach_the_next_blocks(server, tmp_path):
    out = live_probe(server, "controls", tmp_path)
    a, b, end = out["tab_a"], out["tab_b"], out["tab_b"]["end"]
    run = out["run_id"]
    print(f"\nfrontend: panel of run {run[:8]}, tab A: {figures(a)}\ntab B (to the end): {figures(b)}")
    assert not out["errors"]["b"], out["errors"]
    # before a run: the panel invites a queue, its controls are off
    assert "Queue the workflow" in out["before_run"]["idle"] and out["before_run"]["disabled"]["tau"]
    # the panel drew the blocks, said who made each and its score against tau, and that typed prompts need a CLIP
    drawn = a["stats"]["blocksDrawn"]  # the newest block's frames may be playing still
    assert drawn >= 8 and a["stats"]["framesDrawn"] >= 9 + 12 * (drawn - 2) + 1, a["stats"]
    assert all(math.isfinite(x) and x >= 0 for x in a["stats"]["latencies"])
    panel = out["panel_a"]
    assert ("drafter" in panel["caption"] or "target" in panel["caption"]) and "tau" in panel["caption"], panel
    assert "need a CLIP" in panel["note"] and panel["disabled"]["prompt-text"] and not panel["disabled"]["prompt"]
    assert "tau -4.50" in panel["stats"] and "blocks/s" in panel["stats"], panel["stats"]
    # the controls went through the routes; the server confirmed them
    tau, prompt = out["tau_change"], out["prompt_change"]
    assert tau["status"] == 200 and tau["body"] == {"tau": NEW_TAU}, tau
    assert prompt["status"] == 200 and prompt["body"] == {"prompt_index": 1}, prompt
    # the report's timeline: each change appears at the blocks after it was made (read at the next boundary)
    rep = report_of(server, end)
    live = rep["live"]
    first_tau, first_prompt = timeline_change(rep, tau["version"]), timeline_change(rep, prompt["version"])
    assert tau["after_block"] < first_tau <= tau["after_block"] + 3, (tau, first_tau)
    assert prompt["after_block"] < first_prompt <= prompt["after_block"] + 3, (prompt, first_prompt)
    for blk in live["blocks"]:
        assert blk["tau"] == (NEW_TAU if blk["block"] >= first_tau else TAU), blk
        want = b["start"]["prepared"][1 if blk["block"] >= first_prompt else 0]
        assert live["prompts"][blk["prompt"]] == want, blk
    # the page showed which settings each block took: its blocks' events carry the timeline's versions
    assert [(m["block"], m["settings_version"], m["tau"]) for m in b["blocks"]] == \
        [(s["block"], s["settings_version"], s["tau"]) for s in live["blocks"]][:len(b["blocks"])]
    # tab B saw the same stream; closing tab A did not stop the run; Stop from tab B ended it after its block
    a_blocks = {m["block"]: m for m in a["blocks"]}
    assert all(a_blocks[m["block"]]["producer"] == m["producer"] for m in b["blocks"] if m["block"] in a_blocks)
    assert max(m["block"] for m in b["blocks"]) >= out["closed_a_at_block"] + 2
    assert end["reason"] == "stopped" and rep["num_blocks"] == end["blocks"] == len(b["blocks"]), end
    assert b["stats"]["blocksDrawn"] == end["blocks"]  # every block drawn, none skipped (played to the end)
    assert b["stats"]["framesDrawn"] == 9 + 12 * (end["blocks"] - 1)
    assert (server.root / "output" / end["video"]).stat().st_size > 0
    # the replay, queued from the panel's Replay: the same lineage, bit for bit
    assert out["replay_widget"] == end["report"]
    replay = out["replay"]
    assert replay["start"]["replay"] and out["panel_replay"]["disabled"]["tau"]
    again = report_of(server, replay["end"])
    assert again["num_blocks"] == rep["num_blocks"] and again["meta"]["lineage"] == rep["meta"]["lineage"]
    print(f"replay of {end['report']}: {again['num_blocks']} blocks, lineage {again['meta']['lineage'][:16]} == the "
          f"live run's; screenshots in {out['shots']}")
    panel_on_screen(server, panel)


@needs_chromium
def test_the_panel_sends_the_camera_and_its_strength(server, tmp_path):
    out = live_probe(server, "camera", tmp_path)
    state, end = out["state"], out["state"]["end"]
    print(f"\nfrontend camera run {out['run_id'][:8]}: {figures(state)}")
    assert not out["errors"], out["errors"]
    assert out["input"] == "camera" and state["start"]["camera"]
    s = state["stats"]
    assert s["blocksDrawn"] >= 6 and s["cameraSent"] > 16 and s["cameraAccepted"] > 0
    assert "camera" in out["panel"]["stats"] and "dropped" in out["panel"]["stats"]
    strength = out["strength_change"]
    assert strength["status"] == 200 and strength["body"] == {"strength": 0.5}
    rep = report_of(server, end)
    live = rep["live"]
    first = timeline_change(rep, strength["version"])
    assert strength["after_block"] < first <= strength["after_block"] + 3, (strength, first)
    assert [blk["strength"] for blk in live["blocks"]] == [0.7 if blk["block"] < first else 0.5 for blk in live["blocks"]]
    assert end["reason"] == "stopped" and live["received_frames"] >= sum(b["input"][1] for b in live["blocks"])
    recorded = server.root / "output" / Path(end["report"]).parent / live["input_file"]
    assert recorded.stat().st_size == SIZE[0] * SIZE[1] * 3 * sum(b["input"][1] for b in live["blocks"])
    panel_on_screen(server, out["panel"])
