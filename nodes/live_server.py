"""SDVG Live's side of ComfyUI's server: the live runs in progress by id, the routes the page's controls and camera
use, and the events the page draws from (docs/live.md, "Protocol").

Routes (on ComfyUI's own server, also under /api): GET /sdvg/live/runs, POST /sdvg/live/{run_id}/control (JSON),
POST /sdvg/live/{run_id}/frame (one JPEG/PNG camera frame). A request reaches only the run it names (404 otherwise);
its checks are the core's (sdvg_core/live: 400 malformed, 409 not possible in this run, 413 too large); a flood of
frames is dropped and counted, never queued without bound. Nothing a request carries names a path or a file.
Events (ComfyUI's websocket, JSON, to every open page): sdvg.live.start, sdvg.live.block, sdvg.live.settings,
sdvg.live.end.
"""
from __future__ import annotations

import asyncio
import base64
import io as bytes_io
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..sdvg_core.live.controls import LiveControls, LiveRequestError, parse_request
from ..sdvg_core.live.frames import MAX_FRAME_BYTES, FrameBuffer, decode_frame

LOG = logging.getLogger("SDVG")

ROUTE = "/sdvg/live"
EVENT_START, EVENT_BLOCK, EVENT_SETTINGS, EVENT_END = ("sdvg.live.start", "sdvg.live.block", "sdvg.live.settings",
                                                       "sdvg.live.end")
JPEG_QUALITY = 85  # the frames sent to the page (encoded once per committed block)
# A camera sends at the run's 16 fps; frames closer together than this are dropped unread (counted), so a page that
# floods the route costs the server no decoding: twice the run's rate.
MIN_FRAME_GAP_S = 1.0 / 32
clock = time.monotonic  # the gap's clock (a test steps its own)
KEPT_BLOCK_EVENTS = 8  # the newest block events a page that opens mid-run gets (GET /sdvg/live/runs)


@dataclass
class LiveHandle:
    """A live run the server's routes can reach while it runs."""

    run_id: str
    node_id: str | None
    controls: LiveControls
    size: tuple[int, int]  # (height, width)
    frames: FrameBuffer | None = None  # the camera's buffer (None: the run takes no camera)
    start_event: dict = field(default_factory=dict)
    recent: list[dict] = field(default_factory=list)  # the newest block events, without their frames
    flood_dropped: int = 0
    last_frame_at: float = 0.0


_RUNS: dict[str, LiveHandle] = {}
_LOCK = threading.Lock()


def register(handle: LiveHandle) -> None:
    with _LOCK:
        _RUNS[handle.run_id] = handle


def unregister(run_id: str) -> None:
    with _LOCK:
        _RUNS.pop(run_id, None)


def handle_of(run_id: str) -> LiveHandle:
    with _LOCK:
        handle = _RUNS.get(run_id)
    if handle is None:
        raise LiveRequestError(404, f"no live run {run_id!r} is in progress (it ended, or never started)")
    return handle


def runs() -> list[dict]:
    """What a page that opens mid-run needs: each run's start event and its newest blocks (without frames)."""
    with _LOCK:
        handles = list(_RUNS.values())
    return [{**h.start_event, "settings": h.controls.take().to_dict(), "recent": list(h.recent)} for h in handles]


def send(event: str, data: dict) -> None:
    """One event to every open page (a second tab sees the same stream); display only, never fails the run."""
    try:
        from server import PromptServer
    except ImportError:
        return
    server = getattr(PromptServer, "instance", None)
    if server is None:
        return
    try:
        server.send_sync(event, data)
    except Exception as e:  # display only
        LOG.debug("SDVG: live event not sent: %s", e)


def jpeg_frames(frames) -> list[str]:
    """Frames [T, H, W, 3] in 0..1 -> base64 JPEGs (what the page decodes and draws)."""
    from PIL import Image

    out = []
    pixels = (frames.detach().float().clamp(0, 1) * 255).round().to("cpu").byte().numpy()
    for f in pixels:
        buf = bytes_io.BytesIO()
        Image.fromarray(f).save(buf, format="JPEG", quality=JPEG_QUALITY)
        out.append(base64.b64encode(buf.getvalue()).decode("ascii"))
    return out


# ------------------------------------------------------------------------------------------------ the routes
def _error(e: LiveRequestError):
    from aiohttp import web

    return web.json_response({"error": str(e)}, status=e.status)


async def control(request) -> Any:
    """POST /sdvg/live/{run_id}/control: a JSON object {tau, prompt | prompt_index, drafter, strength, stop}."""
    from aiohttp import web

    try:
        handle = handle_of(request.match_info["run_id"])
        if request.content_length is not None and request.content_length > 64 * 1024:
            raise LiveRequestError(413, f"the request is {request.content_length:,} bytes; a control request takes "
                                        f"at most {64 * 1024:,}")
        body = await request.content.read(64 * 1024 + 1)
        settings = handle.controls.apply(parse_request(body))
    except LiveRequestError as e:
        return _error(e)
    send(EVENT_SETTINGS, {"run_id": handle.run_id, "node": handle.node_id, "settings": settings.to_dict()})
    return web.json_response({"settings": settings.to_dict()})


async def frame(request) -> Any:
    """POST /sdvg/live/{run_id}/frame: one camera frame (JPEG or PNG body) into the run's bounded buffer."""
    from aiohttp import web

    try:
        handle = handle_of(request.match_info["run_id"])
        if handle.frames is None:
            raise LiveRequestError(409, "this live run takes no camera: queue it with input 'camera'")
        if request.content_length is not None and request.content_length > MAX_FRAME_BYTES:
            raise LiveRequestError(413, f"the frame is {request.content_length:,} bytes; a frame takes at most "
                                        f"{MAX_FRAME_BYTES:,}")
        now = clock()
        if now - handle.last_frame_at < MIN_FRAME_GAP_S:  # a flood: dropped unread, counted
            handle.flood_dropped += 1
            await request.content.read(MAX_FRAME_BYTES + 1)
            return web.json_response(_frame_counts(handle, accepted=False))
        handle.last_frame_at = now
        body = await request.content.read(MAX_FRAME_BYTES + 1)
        image = await asyncio.get_running_loop().run_in_executor(None, decode_frame, body, handle.size)
        handle.frames.push(image)
    except LiveRequestError as e:
        return _error(e)
    return web.json_response(_frame_counts(handle, accepted=True))


def _frame_counts(handle: LiveHandle, accepted: bool) -> dict:
    buf = handle.frames
    return {"accepted": accepted, "received": buf.received, "dropped": buf.dropped + handle.flood_dropped}


async def list_runs(request) -> Any:
    """GET /sdvg/live/runs: the runs in progress (their start events and newest blocks)."""
    from aiohttp import web

    return web.json_response({"runs": runs()})


def add_routes(routes) -> None:
    """The live routes on a server's route table (ComfyUI's PromptServer.instance.routes)."""
    routes.get(f"{ROUTE}/runs")(list_runs)
    routes.post(f"{ROUTE}/{{run_id}}/control")(control)
    routes.post(f"{ROUTE}/{{run_id}}/frame")(frame)


def install() -> bool:
    """Add the routes to ComfyUI's server when one runs (not in tests' fake host without a server)."""
    try:
        from server import PromptServer
    except ImportError:
        return False
    server = getattr(PromptServer, "instance", None)
    if server is None or not hasattr(server, "routes"):
        return False
    add_routes(server.routes)
    return True
