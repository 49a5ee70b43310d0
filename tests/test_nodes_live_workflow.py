"""SDVG Live's node against the fake host (no ComfyUI): the sdvg_live workflow run by `mini_executor` on tiny models,
its events as a page receives them, its controls sent through the server's own route handler (nodes/live_server.py)
by a stand-in page that answers each block event, and the replay of the run's report (docs/live.md).

The stand-in page answers on the run's own thread, between a block's commit and the next boundary, so which block
takes each change is fixed: a change sent after block b's event is taken by block b + 1.
"""
from __future__ import annotations

import asyncio
import base64
import io
import json
import sys

import pytest

import workflow_tools as wt
from mini_executor import MiniExecutor
from node_env import EMB_FILE, REPO, env  # noqa: F401 (the tiny models' fake host)

WORKFLOW = REPO / "workflows" / "sdvg_live.json"
W, H, MAX_BLOCKS = 48, 32, 8
TAU, NEW_TAU = -5.0, -4.5
# what the stand-in page sends after block b's event
CHANGES = {1: {"tau": NEW_TAU}, 2: {"prompt_index": 1}, 3: {"stop": True}}


class Request:
    """What the route handlers read of an aiohttp request."""

    def __init__(self, run_id: str, body: bytes):
        self.match_info, self.content_length = {"run_id": run_id}, len(body)
        self.content = self

    async def read(self, n: int = -1) -> bytes:
        return self.body[:n] if n >= 0 else self.body

    def __call__(self, body: bytes) -> "Request":
        self.body = body
        return self


def post(live_server, run_id: str, request: dict) -> tuple[int, dict]:
    """POST /sdvg/live/{run_id}/control through the route's own handler."""
    body = json.dumps(request).encode()
    resp = asyncio.run(live_server.control(Request(run_id, body)(body)))
    return resp.status, json.loads(resp.body)


def live_api(classes: dict, **inputs) -> dict:
    specs = wt.object_info_from_classes(classes.values())
    api = wt.to_api(wt.load(WORKFLOW), specs)
    for node in api.values():
        if node["class_type"] == "SDVGLive":
            node["inputs"].pop("clip", None)  # no text encoder here: the schedule's saved embeddings are the prompts
    api = wt.swap_schedule_encoder(api, EMB_FILE)
    return wt.set_inputs(api, "SDVGLive", width=W, height=H, max_blocks=MAX_BLOCKS, tau=TAU, **inputs)


@pytest.fixture(scope="module")
def live_run(env):  # noqa: F811
    """The live run with the stand-in page's changes, and its replay: (events, answers, report, replay report)."""
    pack, classes = env
    server = sys.modules["server"]
    live_server = pack.nodes.live_server
    answers = []

    def page(event: str, data: dict) -> None:
        if event == "sdvg.live.block" and data["block"] in CHANGES:
            answers.append((data["block"], *post(live_server, data["run_id"], CHANGES[data["block"]])))

    progress = sys.modules["comfy.utils"].PROGRESS
    server.EVENTS.clear()
    progress.clear()
    server.HOOKS.append(page)
    try:
        api = live_api(classes)
        nid = next(k for k, v in api.items() if v["class_type"] == "SDVGLive")
        ex = MiniExecutor(classes)
        ex.run(api)
        report = json.loads(ex.values[nid][3])
    finally:
        server.HOOKS.remove(page)
    events = list(server.EVENTS)
    events.append(("progress", list(progress)))  # the node's progress bar: (value, total, has_preview, node)
    end = next(d for e, d in events if e == "sdvg.live.end")
    server.EVENTS.clear()
    again = MiniExecutor(classes)
    again.run(wt.set_inputs(api, "SDVGLive", replay=end["report"]))
    replay_events = list(server.EVENTS)
    return events, answers, report, json.loads(again.values[nid][3]), replay_events


def test_the_page_gets_every_block_with_its_frames_and_who_made_it(live_run):
    events, answers, report, _, _ = live_run
    bar = next(d for e, d in events if e == "progress")
    assert bar and not any(has_preview for _, _, has_preview, _ in bar)  # the panel plays the blocks: no preview images
    kinds = [e for e, _ in events if e.startswith("sdvg.live.")]
    assert kinds == ["sdvg.live." + k for k in ("start", "block", "block", "settings", "block", "settings", "block",
                                                  "settings", "end")], kinds
    start = next(d for e, d in events if e == "sdvg.live.start")
    assert (start["width"], start["height"], start["fps"], start["block_seconds"]) == (W, H, 16, 0.75)
    assert len(start["prepared"]) == 3 and not start["encodes_prompts"] and not start["camera"]
    blocks = [d for e, d in events if e == "sdvg.live.block"]
    assert [b["block"] for b in blocks] == [0, 1, 2, 3] and [len(b["frames"]) for b in blocks] == [9, 12, 12, 12]
    from PIL import Image

    assert Image.open(io.BytesIO(base64.b64decode(blocks[1]["frames"][0]))).size == (W, H)
    assert blocks[0]["producer"] == "target" and all(b["producer"] == "drafter" for b in blocks[1:])
    assert [b["tau"] for b in blocks] == [TAU, TAU, NEW_TAU, NEW_TAU]  # each block says the tau it was decided with
    assert [b["settings_version"] for b in blocks] == [0, 0, 1, 2]
    assert [r["producer"] for r in report["blocks"]] == [b["producer"] for b in blocks]


def test_changes_from_the_page_reach_the_next_block_and_the_timeline(live_run):
    events, answers, report, _, _ = live_run
    assert [(b, s) for b, s, _ in answers] == [(1, 200), (2, 200), (3, 200)], answers
    assert [a["settings"]["version"] for _, _, a in answers] == [1, 2, 3]
    confirmed = [d["settings"] for e, d in events if e == "sdvg.live.settings"]
    assert confirmed == [a["settings"] for _, _, a in answers]  # every page hears what the server now holds
    live = report["live"]
    assert [(b["block"], b["tau"], live["prompts"][b["prompt"]]) for b in live["blocks"]] == [
        (0, TAU, live["prompts"][0]), (1, TAU, live["prompts"][0]), (2, NEW_TAU, live["prompts"][0]),
        (3, NEW_TAU, live["prompts"][1])]
    start = next(d for e, d in events if e == "sdvg.live.start")
    assert live["prompts"] == start["prepared"][:2]
    end = next(d for e, d in events if e == "sdvg.live.end")
    assert end["reason"] == "stopped" and end["blocks"] == 4 and live["stopped_by_user"]
    assert live["run"]["max_blocks"] == MAX_BLOCKS


def test_a_replay_of_the_report_is_the_same_video_bit_for_bit(live_run):
    events, _, report, replay, replay_events = live_run
    start = next(d for e, d in replay_events if e == "sdvg.live.start")
    assert start["replay"] and not start["camera"]
    assert replay["num_blocks"] == report["num_blocks"] == 4
    assert replay["meta"]["lineage"] == report["meta"]["lineage"]  # the root names the run's max_blocks too
    assert [b["decision"] for b in replay["blocks"]] == [b["decision"] for b in report["blocks"]]
    assert [(b["tau"], b["prompt"]) for b in replay["live"]["blocks"]] == \
        [(b["tau"], b["prompt"]) for b in report["live"]["blocks"]]


def test_camera_frames_closer_than_the_gap_are_dropped_unread_on_the_servers_clock(env, monkeypatch):  # noqa: F811
    """The flood rule on a stepped clock, not the machine's: a frame less than MIN_FRAME_GAP_S after the last one
    taken is dropped unread and counted; one at the gap or later is decoded into the run's buffer."""
    from PIL import Image

    from sdvg_core.live.controls import LiveControls, LiveSettings
    from sdvg_core.live.frames import FrameBuffer

    live_server = env[0].nodes.live_server
    gap = live_server.MIN_FRAME_GAP_S
    buf = io.BytesIO()
    Image.new("RGB", (W, H), (200, 40, 10)).save(buf, "JPEG")
    body = buf.getvalue()
    handle = live_server.LiveHandle("flood", None, LiveControls(LiveSettings(tau=TAU, prompt="a")), (H, W),
                                    FrameBuffer(capacity=16))
    live_server.register(handle)
    try:
        taken = []
        for t in (100.0, 100.0 + gap / 2, 100.0 + gap * 0.99, 100.0 + gap, 100.0 + gap * 1.5, 100.0 + gap * 3):
            monkeypatch.setattr(live_server, "clock", lambda t=t: t)
            resp = asyncio.run(live_server.frame(Request("flood", body)(body)))
            assert resp.status == 200
            taken.append(json.loads(resp.body)["accepted"])
        assert taken == [True, False, False, True, False, True]
        assert handle.frames.received == 3 and handle.flood_dropped == 3
    finally:
        live_server.unregister("flood")
