"""SDVG Live through the node and its routes, against the fake host, the routes served over real HTTP (aiohttp, as
ComfyUI serves them): a page moves tau, switches the prompt and stops while the run plays; the report's timeline
says which block took which setting; a replay of the report makes the same video bit for bit; what a hostile or
broken page sends is answered with a status and the run goes on."""
from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from pathlib import Path

import pytest
import torch

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402
from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

import fake_host  # noqa: E402
import node_env as ne  # noqa: E402

W, H = 64, 48
SECOND_PROMPT = "a lighthouse on a cliff at dusk"
HANG_S = 600  # a hang guard for waiting on the run's events, not a speed check


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy_live")
    with fake_host.installed(base) as pack:
        ne.write_tiny_models(base, pack.sdvg_core)
        yield pack, ne.loaded_models(pack), base


def prompts_of(pack, models):
    """Two prepared prompts (an SDVG_SCHEDULE, as SDVG Prompt Schedule gives): the test prompt, then another."""
    core = pack.sdvg_core
    prompts = __import__(core.__name__ + ".engine.prompts", fromlist=["x"])
    text = __import__(core.__name__ + ".io.text", fromlist=["x"])
    first = pack.nodes.session.conditioning_embeddings(models["positive"])[0]
    return prompts.PromptSchedule.of([(0, prompts.PromptConditioning.make(ne.PROMPT, first)),
                                      (1, prompts.PromptConditioning.make(SECOND_PROMPT,
                                                                          text.demo_embeddings(SECOND_PROMPT, 32)))])


def live_args(pack, models, **kw) -> dict:
    m = {k: v for k, v in models.items() if k != "positive"}
    return {**m, "prompts": prompts_of(pack, models), "width": W, "height": H, "max_blocks": 30, "seed": 3,
            "tau": -0.8, "recipe": "krea", "cache_gb": 1.0, **kw}


class Page:
    """What the page does, over HTTP against the pack's routes, reading the events the server sent."""

    def __init__(self, client: TestClient, events: list):
        self.client, self.events = client, events

    def of(self, kind: str) -> list[dict]:
        return [d for e, d in list(self.events) if e == kind]

    async def wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + HANG_S
        while not ready():
            assert time.monotonic() < deadline, f"hung waiting for {what}"
            await asyncio.sleep(0.05)

    async def run_id(self) -> str:
        await self.wait(lambda: self.of("sdvg.live.start"), "the start event")
        return self.of("sdvg.live.start")[-1]["run_id"]

    async def blocks(self, n: int) -> None:
        await self.wait(lambda: len(self.of("sdvg.live.block")) >= n or self.of("sdvg.live.end"), f"{n} blocks")

    async def control(self, run_id: str, body) -> tuple[int, dict]:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        r = await self.client.post(f"/sdvg/live/{run_id}/control", data=data)
        return r.status, await r.json()


def run_with_page(pack, args: dict, page_script) -> tuple[object, Page, dict]:
    """SDVG Live's execute in a worker thread (ComfyUI's execution thread), the page's script on this thread's loop
    against the pack's routes served by aiohttp."""
    events = __import__("server").EVENTS
    events.clear()
    result: dict = {}

    def execute():
        try:
            result["out"] = pack.nodes.SDVGLive.execute(**args)
        except BaseException as e:  # noqa: BLE001 (reported by the test)
            result["error"] = e

    async def main():
        from server import PromptServer

        app = web.Application()
        app.add_routes(PromptServer.instance.routes)
        async with TestClient(TestServer(app)) as client:
            page = Page(client, events)
            worker = threading.Thread(target=execute, daemon=True)
            worker.start()
            answers = await page_script(page)
            await page.wait(lambda: not worker.is_alive(), "the run to end")
            return page, answers

    page, answers = asyncio.run(main())
    if "error" in result:
        raise result["error"]
    return result["out"], page, answers


@pytest.mark.slow
def test_a_page_moves_tau_switches_the_prompt_and_stops_and_the_replay_is_bit_for_bit(env):
    pack, models, base = env

    async def script(page: Page):
        run = await page.run_id()
        start = page.of("sdvg.live.start")[-1]
        assert start["prepared"] == [ne.PROMPT, SECOND_PROMPT] and start["fps"] == 16 and not start["camera"]
        await page.blocks(2)
        sent = {"tau": len(page.of("sdvg.live.block"))}
        status, body = await page.control(run, {"tau": -5.0})
        assert status == 200 and body["settings"]["tau"] == -5.0
        await page.blocks(sent["tau"] + 2)
        sent["prompt"] = len(page.of("sdvg.live.block"))
        assert (await page.control(run, {"prompt_index": 1}))[0] == 200
        await page.blocks(sent["prompt"] + 2)
        sent["stop"] = len(page.of("sdvg.live.block"))
        assert (await page.control(run, {"stop": True}))[0] == 200
        return sent

    out, page, sent = run_with_page(pack, live_args(pack, models), script)
    report = json.loads(out.args[3])
    tl = report["live"]
    blocks = [b["block"] for b in page.of("sdvg.live.block")]
    assert blocks == list(range(len(blocks))) and report["num_blocks"] == len(blocks)
    assert report["stopped"] == "stopped by the user" and tl["stopped_by_user"]
    assert len(blocks) <= sent["stop"] + 1  # Stop ends the run after the block in progress
    taus = [b["tau"] for b in tl["blocks"]]
    first_low = taus.index(-5.0)
    assert set(taus[:first_low]) == {-0.8} and set(taus[first_low:]) == {-5.0} and first_low >= sent["tau"]
    prompts = [tl["prompts"][b["prompt"]] for b in tl["blocks"]]
    first_second = prompts.index(SECOND_PROMPT)
    assert first_second >= sent["prompt"] and set(prompts[first_second:]) == {SECOND_PROMPT}
    # what the page drew for each block is what the report says of it
    assert [e["tau"] for e in page.of("sdvg.live.block")] == taus
    assert all(len(e["frames"]) == (9 if e["block"] == 0 else 12) for e in page.of("sdvg.live.block"))
    end = page.of("sdvg.live.end")[-1]
    assert end["reason"] == "stopped" and end["blocks"] == len(blocks)
    folder = Path(base) / "output" / report["meta"]["folder"]
    assert (folder / "report.json").is_file() and (Path(base) / "output" / end["video"]).stat().st_size > 0

    replay = pack.nodes.SDVGLive.execute(**live_args(pack, models, replay=end["report"], tau=3.0, seed=99))
    again = json.loads(replay.args[3])
    assert again["meta"]["lineage"] == report["meta"]["lineage"]  # every block's latent bytes, hash-chained
    assert [b["tau"] for b in again["live"]["blocks"]] == taus and again["num_blocks"] == report["num_blocks"]


def test_what_a_hostile_page_sends_gets_a_status_and_the_run_goes_on(env):
    pack, models, _ = env

    async def script(page: Page):
        run = await page.run_id()
        answers = {}
        answers["unknown run"] = (await page.control("nope", {"tau": 0.0}))[0]
        answers["not json"] = (await page.control(run, b"{tau: -1"))[0]
        answers["nan"] = (await page.control(run, b'{"tau": NaN}'))[0]
        answers["a text tau"] = (await page.control(run, {"tau": "high"}))[0]
        answers["unknown control"] = (await page.control(run, {"path": "/etc/passwd"}))[0]
        answers["long prompt"] = (await page.control(run, {"prompt": "x" * 3000}))[0]
        answers["huge body"] = (await page.control(run, b"{" + b" " * 200_000 + b"}"))[0]
        answers["strength without input"] = (await page.control(run, {"strength": 0.5}))[0]
        r = await page.client.post(f"/sdvg/live/{run}/frame", data=b"\xff\xd8 not a frame")
        answers["frame to a run without a camera"] = r.status
        r = await page.client.get("/sdvg/live/runs")
        answers["runs"] = [x["run_id"] for x in (await r.json())["runs"]]
        await page.blocks(3)
        assert (await page.control(run, {"stop": True}))[0] == 200  # the routes still answer
        return answers

    out, page, answers = run_with_page(pack, live_args(pack, models), script)
    run = page.of("sdvg.live.start")[-1]["run_id"]
    assert answers == {"unknown run": 404, "not json": 400, "nan": 400, "a text tau": 400, "unknown control": 400,
                       "long prompt": 413, "huge body": 413, "strength without input": 409,
                       "frame to a run without a camera": 409, "runs": [run]}
    report = json.loads(out.args[3])
    assert report["stopped"] == "stopped by the user" and report["num_blocks"] >= 3
    assert all(b["tau"] == -0.8 for b in report["live"]["blocks"])  # no bad request changed a setting


def _jpeg(i: int) -> bytes:
    from PIL import Image

    img = Image.new("RGB", (W, H), (40 * (i % 6), 120, 200 - 10 * (i % 9)))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


@pytest.mark.slow
@pytest.mark.slow  # a camera flood over real HTTP for several blocks
def test_a_camera_run_takes_frames_drops_a_flood_and_replays_from_its_recording(env):
    pack, models, base = env

    async def script(page: Page):
        run = await page.run_id()
        assert page.of("sdvg.live.start")[-1]["camera"]
        statuses, counts = [], {}

        async def camera():  # as fast as it can: a flood, until the run ends
            i = 0
            while not page.of("sdvg.live.end"):
                r = await page.client.post(f"/sdvg/live/{run}/frame", data=_jpeg(i))
                statuses.append(r.status)
                if r.status == 200:
                    counts.update(await r.json())
                i += 1
                await asyncio.sleep(0)

        feeding = asyncio.ensure_future(camera())
        await page.blocks(3)
        big = await page.client.post(f"/sdvg/live/{run}/frame", data=b"x" * (9 << 20))
        n = len(page.of("sdvg.live.block"))
        assert (await page.control(run, {"strength": 0.5}))[0] == 200
        await page.blocks(n + 2)  # the block in progress, then one that took the new strength
        assert (await page.control(run, {"stop": True}))[0] == 200
        await page.wait(lambda: page.of("sdvg.live.end"), "the end event")
        await feeding
        return {"statuses": set(statuses) - {404}, "counts": counts, "big": big.status}

    out, page, answers = run_with_page(pack, live_args(pack, models, input="camera", strength=0.7), script)
    assert answers["statuses"] == {200} and answers["big"] == 413  # (404 only after the run ended)
    assert answers["counts"]["dropped"] > 0 and answers["counts"]["received"] >= 9  # the flood was counted, not queued
    report = json.loads(out.args[3])
    tl = report["live"]
    assert tl["input_file"] == "live_input.rgb" and tl["blocks"][0]["input"] == [0, 9]
    assert report["pixels"]["mode"] == "video_to_video" and tl["blocks"][-1]["strength"] == 0.5
    end = page.of("sdvg.live.end")[-1]
    replay = pack.nodes.SDVGLive.execute(**live_args(pack, models, replay=end["report"]))
    assert json.loads(replay.args[3])["meta"]["lineage"] == report["meta"]["lineage"]
