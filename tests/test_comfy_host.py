"""The pack inside a real ComfyUI (skipped unless COMFYUI_DIR is set).

    COMFYUI_DIR=/path/to/ComfyUI [COMFYUI_PYTHON=/path/to/python] .venv/bin/python -m pytest -q tests/test_comfy_host.py

Starts `main.py --cpu` as a subprocess with a temporary models folder (tiny random models written by the test
under the file names the example workflows use; the VAE is a full-width random Wan 2.1 VAE because ComfyUI's
VAELoader fixes the width) and a custom_nodes folder holding a link to this checkout. Then: every SDVG node is in
/object_info; the core nodes the workflows use still have the inputs our fakes assume; every example workflow
is queued through POST /prompt (converted to the API format; ComfyUI's `wan` text encoder is the 5.7 B umT5-XXL,
which no test can load, so CLIP Loader + CLIP Text Encode are swapped for SDVG Load Prompt Embeddings reading
an embeddings file of the right width); a re-queue with a moved tau recomputes only from the first flipped
block (forward counts in the report) and equals a fresh server's run; the MODEL path (UNETLoader, default and
fp8 weights; the target through ComfyUI's TorchCompileModel under the StrideAR policy) works; a missing model or
embeddings file is refused by POST /prompt with the pack's message (folder, files there, source) in the node error
the frontend shows; and, when chromium is installed, the real frontend loads each workflow without missing nodes
and converts it to the same API prompt as tests/workflow_tools.py.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import torch

import workflow_tools as wt
from test_nodes_pixels import PHONE_CLIP, START_IMAGE, write_inputs

COMFYUI_DIR = os.environ.get("COMFYUI_DIR")
pytestmark = [
    pytest.mark.slow,  # starts a real ComfyUI server
    pytest.mark.skipif(not COMFYUI_DIR, reason="set COMFYUI_DIR to a ComfyUI checkout to run real-host tests")]
# the pip-installable build (hiddenswitch's fork, 0.12.x) keeps ComfyUI under comfy/cmd/ and finds its workspace
# (models/, custom_nodes/, output/) from the working directory; upstream runs main.py from its checkout
PIP_BUILD = bool(COMFYUI_DIR) and (Path(COMFYUI_DIR) / "comfy" / "cmd" / "main.py").is_file()
# frontend: the one the host ships, or SDVG_FRONTEND_ROOT (e.g. the static/ folder of comfyui-frontend-package 1.58.1)
FRONTEND_ROOT = os.environ.get("SDVG_FRONTEND_ROOT")

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((REPO / "workflows").glob("*.json"))
# The checkout is linked under a name of its own into a custom_nodes folder of the test's own base directory, and
# only that folder is scanned: a copy installed as custom_nodes/ComfyUI-SDVG in COMFYUI_DIR is not loaded, so the
# tests always exercise this checkout (test_object_info_lists_every_node prints which copy it loaded).
PACK_DIR_NAME = "ComfyUI-SDVG-under-test"
PROMPT = "a corgi puppy runs through a sunny meadow, slow motion, cinematic"
EMB, EMB_4096 = "test_prompt.safetensors", "test_prompt_4096.safetensors"
# one embeddings file per prompt of the prompt-changes workflow (its own texts, distinct stand-in embeddings)
SCHEDULE_EMB = tuple(f"test_schedule_{i}.safetensors" for i in range(3))
SMALL = {"width": 64, "height": 48, "num_blocks": 3}
FRAMES = 1 + 4 * (3 * SMALL["num_blocks"] - 1)
SDVG_NODES = {"SDVGLoadDrafter", "SDVGLoadTarget", "SDVGLoadImageReward", "SDVGStart", "SDVGLoopStart",
              "SDVGDraftBlock", "SDVGDecodeBlock", "SDVGScoreBlock", "SDVGRoute", "SDVGLoopEnd", "SDVGFinish",
              "SDVGGenerate", "SDVGSavePromptEmbeddings", "SDVGLoadPromptEmbeddings", "SDVGPromptSchedule",
              "SDVGPromptFromBlock", "SDVGShowVideo", "SDVGSamplerARVideo", "SDVGARReport", "SDVGLoadRouteDecoder", "SDVGLive"}


def comfy_python() -> str:
    return os.environ.get("COMFYUI_PYTHON") or str(Path(COMFYUI_DIR) / ".venv" / "bin" / "python")


# ------------------------------------------------------------------------------------------------ files
def write_models(root: Path) -> None:
    """Tiny random models under the workflows' file names, plus a ComfyUI-loadable tiny Wan and embeddings."""
    from safetensors.torch import save_file

    from sdvg_core import WanDiTConfig
    from sdvg_core.models.wan_config import PRESETS
    from sdvg_core.io.reward_files import export_state_dict, random_scorer
    from sdvg_core.demo.vocab import synthetic_tiny_config, write_synthetic_vocab
    from sdvg_core import save_embeddings
    from sdvg_core.io.text import demo_embeddings
    from sdvg_core.demo.tiny import random_vae
    from sdvg_core.models.wan import build_random

    m = root / "models"
    for d in ("diffusion_models", "vae", "image_reward", "sdvg_prompts", "text_encoders"):
        (m / d).mkdir(parents=True, exist_ok=True)

    def prefixed(net):
        return {"model." + k: v.contiguous() for k, v in net.state_dict().items()}

    d = prefixed(build_random(PRESETS["tiny-drafter"], seed=1))
    torch.save({"generator": d, "generator_ema": d}, m / "diffusion_models" / "self_forcing_dmd.pt")
    save_file(prefixed(build_random(PRESETS["tiny-target"], seed=2)), str(m / "diffusion_models" / "krea-realtime-video-14b.safetensors"))
    # ComfyUI's model detection needs dim = 128 x heads and text_dim 4096 (UNETLoader path)
    comfy_cfg = WanDiTConfig(name="tiny-comfy", dim=128, ffn_dim=256, num_heads=1, num_layers=2, text_dim=4096)
    save_file(prefixed(build_random(comfy_cfg, seed=6)), str(m / "diffusion_models" / "tiny_wan_t2v.safetensors"))
    # core's AR workflow (sdvg_core_ar_sampler): the target and a drafter marked causal_ar (core's loader builds them as
    # CausalWanModel, model class WAN21_CausalAR)
    causal_ar = {"config": json.dumps({"transformer": {"causal_ar": True}})}
    for role, seed in (("target", 21), ("drafter", 22)):
        save_file(prefixed(build_random(comfy_cfg, seed=seed)), str(m / "diffusion_models" / wt.AR_TEST_FILES[role]),
                  metadata=causal_ar)
    # VAELoader hard-codes the Wan 2.1 VAE width (96): a full-size random VAE (127 M params, bf16)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in random_vae(3, preset="wan2.1-vae").state_dict().items()},
              str(m / "vae" / "wan_2.1_vae.safetensors"))
    vocab = write_synthetic_vocab(m / "image_reward" / "vocab.txt")
    scorer = random_scorer(synthetic_tiny_config(vocab), vocab, seed=4)
    torch.save(export_state_dict(scorer.model), m / "image_reward" / "ImageReward.pt")
    save_embeddings(m / "sdvg_prompts" / EMB, PROMPT, demo_embeddings(PROMPT, 32))
    save_embeddings(m / "sdvg_prompts" / EMB_4096, PROMPT, demo_embeddings(PROMPT, 4096))
    for name, (_, text) in zip(SCHEDULE_EMB, schedule_lines(REPO / "workflows" / "sdvg_long_video_prompt_changes.json")):
        save_embeddings(m / "sdvg_prompts" / name, text, demo_embeddings(text, 32))
    (m / "text_encoders" / "umt5_xxl_fp8_e4m3fn_scaled.safetensors").write_bytes(b"")  # listed, never loaded
    # LongLive's layout (the long-video workflows' drafter): base under `generator` + a rank-256 LoRA in models/loras
    from sdvg_core.io import lora as lora_mod
    from node_env import LONGLIVE_BASE, LONGLIVE_LORA, LONGLIVE_RANK, peft_lora

    base = build_random(PRESETS["tiny-drafter"], seed=7)
    torch.save({"generator": prefixed(base)}, m / "diffusion_models" / LONGLIVE_BASE)
    (m / "loras").mkdir(parents=True, exist_ok=True)
    torch.save({"generator_lora": peft_lora(base, lora_mod, LONGLIVE_RANK, seed=8)}, m / "loras" / LONGLIVE_LORA)


# ------------------------------------------------------------------------------------------------ server
class PromptRefused(AssertionError):
    """POST /prompt answered an error (validation): the HTTP status and the JSON body the frontend shows."""

    def __init__(self, status: int, body: str):
        super().__init__(f"/prompt refused the graph ({status}): {body[:3000]}")
        self.status, self.body = status, body


class Events:
    """The websocket events the frontend receives (GET /ws, a minimal stdlib client): the pip build's history keeps
    only event names, so which nodes came from ComfyUI's cache (execution_cached) is read here on every build."""

    def __init__(self, port: int):
        self.client_id = str(uuid.uuid4())
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /ws?clientId={self.client_id} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                           f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):  # byte by byte: no frame bytes are read with the headers
            head += self._recv(1)
        assert b" 101 " in head.split(b"\r\n")[0], head[:200]
        self.sock.settimeout(None)
        self.events: list[tuple[str, dict]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _recv(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("websocket closed")
            buf += chunk
        return buf

    def _read(self) -> None:
        text, parts = False, []
        try:
            while True:
                b0, b1 = self._recv(2)
                n = b1 & 0x7F
                n = struct.unpack(">H", self._recv(2))[0] if n == 126 else struct.unpack(">Q", self._recv(8))[0] \
                    if n == 127 else n
                mask = self._recv(4) if b1 & 0x80 else None
                data = self._recv(n)
                if mask:
                    data = bytes(c ^ mask[i % 4] for i, c in enumerate(data))
                op = b0 & 0x0F
                if op == 8:
                    return
                if op == 9:  # ping: a masked pong with the same payload (len < 126)
                    m = os.urandom(4)
                    self.sock.sendall(bytes([0x8A, 0x80 | len(data)]) + m + bytes(c ^ m[i % 4] for i, c in enumerate(data)))
                    continue
                if op in (1, 2):
                    text, parts = op == 1, []
                if op in (0, 1, 2):
                    parts.append(data)
                    if b0 & 0x80 and text:  # a whole text message: JSON {"type", "data"}
                        msg = json.loads(b"".join(parts))
                        self.events.append((msg.get("type", ""), msg.get("data") or {}))
        except (ConnectionError, OSError, ValueError):
            return

    def of(self, prompt_id: str) -> list[tuple[str, dict]]:
        return [(e, d) for e, d in list(self.events) if isinstance(d, dict) and d.get("prompt_id") == prompt_id]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Server:
    def __init__(self, root: Path, name: str, extra: tuple[str, ...] = ()):
        self.root, self.port = root, _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(root / f"{name}.log", "w")
        common = ["--cpu", "--listen", "127.0.0.1", "--port", str(self.port), "--base-directory", str(root),
                  "--extra-model-paths-config", str(root / "extra_model_paths.yaml"),
                  "--output-directory", str(root / "output"), "--temp-directory", str(root / "temp"),
                  "--user-directory", str(root / "user"), *extra] + (["--front-end-root", FRONTEND_ROOT] if FRONTEND_ROOT else [])
        if PIP_BUILD:  # its console script, run in the test's workspace (custom_nodes/ and models/ there)
            launcher = Path(comfy_python()).parent / "comfyui"
            args, cwd = [str(launcher), *common], root
        else:  # upstream: main.py; --whitelist-custom-nodes also skips other custom_nodes folders a yaml may add
            args = [comfy_python(), str(Path(COMFYUI_DIR) / "main.py"), *common,
                    "--disable-all-custom-nodes", "--whitelist-custom-nodes", PACK_DIR_NAME]
            cwd = COMFYUI_DIR
        self.proc = subprocess.Popen(args, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < 180:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ComfyUI exited ({self.proc.returncode}): {self.tail()}")
            try:
                self.object_info = self.get("/object_info")
                self.start_seconds = time.time() - t0
                self.events = Events(self.port)
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
        raise RuntimeError("ComfyUI did not start: " + self.tail())

    def tail(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()[-4000:]

    def get(self, path: str):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.loads(r.read())

    def queue(self, prompt: dict, timeout: float = 600) -> dict:
        body = json.dumps({"prompt": prompt, "client_id": self.events.client_id}).encode()
        req = urllib.request.Request(self.url + "/prompt", data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                pid = json.loads(r.read())["prompt_id"]
        except urllib.error.HTTPError as e:
            raise PromptRefused(e.code, e.read().decode()) from e
        t0 = time.time()
        while time.time() - t0 < timeout:
            h = self.get(f"/history/{pid}")
            if pid in h and (h[pid]["status"]["completed"] or h[pid]["status"]["status_str"] == "error"):
                entry = h[pid]
                entry["seconds"] = time.time() - t0
                time.sleep(0.3)  # the last websocket events of the prompt
                entry["events"] = self.events.of(pid)
                if entry["status"]["status_str"] != "success":
                    errors = [d for e, d in messages(entry) if e == "execution_error"]
                    raise AssertionError(f"prompt failed: {json.dumps(errors or entry['status'])[:3000]}")
                return entry
            time.sleep(0.3)
        raise AssertionError("prompt timed out: " + self.tail())

    def close(self) -> None:
        if hasattr(self, "events"):
            self.events.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MODEL_FOLDERS = ("diffusion_models", "vae", "text_encoders", "image_reward", "sdvg_prompts", "loras")


def lay_out_host(root: Path, pack: Path = REPO, folders: tuple[str, ...] = MODEL_FOLDERS) -> Path:
    """A ComfyUI base folder around models already written under root/models: the pack linked into custom_nodes,
    the output / temp / user folders, and an extra_model_paths.yaml naming each model folder."""
    for d in ("custom_nodes", "output", "temp", "user"):
        (root / d).mkdir()
    (root / "custom_nodes" / PACK_DIR_NAME).symlink_to(pack, target_is_directory=True)
    lines = "".join(f"    {f}: {f}\n" for f in folders)
    (root / "extra_model_paths.yaml").write_text(
        f"sdvg_test:\n    base_path: {root / 'models'}\n    is_default: true\n{lines}")
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("comfy_host")
    write_models(root)
    write_inputs(root / "input")  # the start image and input video the pixels-in workflows load
    return lay_out_host(root)


@pytest.fixture(scope="module")
def server(root):
    s = Server(root, "server1")
    yield s
    s.close()


# ------------------------------------------------------------------------------------------------ helpers
def api_for(server: Server, path: Path, tau: float | None = None, **widgets) -> dict:
    """API prompt of a workflow at the test size; tau goes to SDVG Route / SDVG Generate. A prompt schedule reads the
    embeddings file for each of its prompts, spread over the test's blocks (no umT5 here)."""
    api = wt.swap_text_encoder(wt.to_api(wt.load(path), server.object_info), EMB)
    api = wt.swap_schedule_encoder(api, EMB, SMALL["num_blocks"])
    start = {k: v for k, v in {**SMALL, **widgets}.items() if k not in ("policy", "force_reject_first")}
    api = wt.set_inputs(api, "SDVGStart", **start)
    api = wt.set_inputs(api, "SDVGGenerate", **{**SMALL, **widgets, **({} if tau is None else {"tau": tau})})
    # SDVG Live: the test size, ended by max_blocks; no CLIP (its prompts are the schedule's saved embeddings)
    for node in api.values():
        if node["class_type"] == "SDVGLive":
            node["inputs"].pop("clip", None)
    api = wt.set_inputs(api, "SDVGLive", width=SMALL["width"], height=SMALL["height"],
                        max_blocks=widgets.get("num_blocks", SMALL["num_blocks"]), **({} if tau is None else {"tau": tau}))
    return api if tau is None else wt.set_inputs(api, "SDVGRoute", tau=tau)


def schedule_lines(path: Path) -> list[tuple[int, str]]:
    """The (first block, prompt) lines of the SDVG Prompt Schedule node of a workflow file."""
    import re

    (node,) = [n for n in wt.load(path)["nodes"] if n["type"] == "SDVGPromptSchedule"]
    return [(int(m[1]), m[2]) for m in (re.match(r"^\s*(\d+)\s*:\s*(.+?)\s*$", ln)
                                         for ln in node["widgets_values"][0].splitlines()) if m]


def with_report_probe(api: dict) -> tuple[dict, dict[str, str]]:
    """Add a PreviewAny on every Finish/Generate/Live node's report_json output; returns {source id: probe id}."""
    api = json.loads(json.dumps(api))
    probes = {}
    for nid, node in list(api.items()):
        if node["class_type"] in ("SDVGFinish", "SDVGGenerate", "SDVGLive"):  # report_json is their output 3
            pid = f"9{len(probes)}9"
            api[pid] = {"class_type": "PreviewAny", "inputs": {"source": [nid, 3]}}
            probes[nid] = pid
    return api, probes


def reports(entry: dict, probes: dict[str, str]) -> dict[str, dict]:
    return {nid: json.loads(entry["outputs"][pid]["text"][0]) for nid, pid in probes.items()}


def messages(entry: dict) -> list[tuple[str, dict]]:
    """(event, data) pairs of a prompt: the websocket events the frontend got (upstream's history stores the same as
    [event, data] lists; the pip build's history only the event names)."""
    return entry["events"]


def cached_nodes(entry: dict) -> set[str]:
    return {n for e, d in messages(entry) if e == "execution_cached" for n in d.get("nodes", [])}


def combo_options(spec: list) -> list:
    """The choices of a combo input in /object_info: [[...], {...}] (V1 style) or ["COMBO", {"options": [...]}]."""
    return spec[0] if isinstance(spec[0], list) else spec[1].get("options", [])


def video_frames(root: Path, entry: dict) -> list[int]:
    """Frame counts of the videos SaveVideo wrote (read with PyAV in ComfyUI's python)."""
    files = [root / "output" / i["subfolder"] / i["filename"] for out in entry["outputs"].values()
             for i in out.get("images", []) if str(i.get("filename", "")).endswith(".mp4")]
    code = ("import av, sys\nfor p in sys.argv[1:]:\n    c = av.open(p)\n"
            "    print(sum(1 for _ in c.decode(video=0)))")
    out = subprocess.run([comfy_python(), "-c", code, *map(str, files)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [int(x) for x in out.stdout.split()]


def probe(script: str, *args: str, timeout: float = 300) -> dict:
    """Run tests/<script> with ComfyUI's python (COMFYUI_DIR, this checkout, then `args`); its last stdout line (JSON)."""
    out = subprocess.run([comfy_python(), str(REPO / "tests" / script), COMFYUI_DIR, str(REPO), *args],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------ tests
def test_object_info_lists_every_node(server):
    info = server.object_info
    assert SDVG_NODES <= set(info), SDVG_NODES - set(info)
    assert {k for k in info if k.startswith("SDVG")} == SDVG_NODES
    modules = {info[k]["python_module"] for k in SDVG_NODES}
    if PIP_BUILD:  # the fork names the module of every V3 (comfy_entrypoint) pack "."; the templates below name it
        assert modules == {"."}, modules
    else:
        assert len(modules) == 1 and next(iter(modules)).endswith(PACK_DIR_NAME), modules  # one copy: this checkout
    assert all(info[k]["category"].startswith("SDVG") for k in SDVG_NODES)
    # the file combos list the files (a folder registered first by extra_model_paths.yaml kept no extensions on the
    # pip build: empty lists, which /prompt no longer catches since the loaders validate their files themselves)
    req = lambda node, key: combo_options(info[node]["input"]["required"][key])  # noqa: E731
    assert {"self_forcing_dmd.pt", "krea-realtime-video-14b.safetensors"} <= set(req("SDVGLoadTarget", "model_name"))
    assert req("SDVGLoadImageReward", "reward_name") == ["ImageReward.pt"]
    assert sorted(req("SDVGLoadPromptEmbeddings", "embeddings")) == sorted([EMB, EMB_4096, *SCHEDULE_EMB])
    templates = server.get("/workflow_templates")
    ours = [k for k, v in templates.items() if set(v) & {p.stem for p in WORKFLOWS}]
    assert ours == [PACK_DIR_NAME], templates  # listed once, by this copy
    assert sorted(templates[PACK_DIR_NAME]) == sorted(p.stem for p in WORKFLOWS)
    server.log.flush()
    startup = [ln for ln in Path(server.log.name).read_text().splitlines() if PACK_DIR_NAME in ln]
    # no error line about the pack at start-up (the pip build used to log "... lack of NODE_CLASS_MAPPINGS")
    assert not [ln for ln in startup if "NODE_CLASS_MAPPINGS" in ln or "Cannot import" in ln], startup
    installed = [d.name for d in (Path(COMFYUI_DIR) / "custom_nodes").glob("*") if (d / "sdvg_core").is_dir()]
    print(f"\n/object_info: {len(info)} nodes, {len(SDVG_NODES)} SDVG from {next(iter(modules))} = {REPO} "
          f"({'pip build ' if PIP_BUILD else ''}{COMFYUI_DIR}); copies installed in its custom_nodes, not loaded: "
          f"{installed or 'none'}; server up in {server.start_seconds:.1f} s")


def test_core_nodes_match_the_ci_fakes(server):
    """The fakes in tests/fake_comfy/core_nodes.py, in the shape of this host's version, declare the real core nodes'
    inputs (names, order, widget kinds, dynamic combos and their nested inputs), outputs and output_node exactly;
    every difference is named."""
    import fake_host

    version = wt.host_version(server.get("/system_stats")["system"]["comfyui_version"])
    with fake_host.installed(server.root / "fake") as pack:
        fakes = wt.object_info_from_classes(pack.core_nodes.core_nodes(version))
    diff = wt.schema_differences(server.object_info, fakes)
    assert diff == [], f"the fake core nodes drifted from ComfyUI {version}:\n" + "\n".join(diff)
    print(f"\nfake core nodes == ComfyUI {'.'.join(map(str, version))}'s ({len(fakes)} nodes, nested inputs included)")


def test_fake_host_matches_the_real_host_surface(server):
    """Every ComfyUI name the pack's code uses and the CI fakes provide (tests/fake_comfy, mini_executor's
    DynamicPrompt) exists on this host with the same kind, the fake accepts no argument the host refuses, and the
    host accepts every call the pack makes (tests/host_surface.py); names the fakes do not provide must exist here."""
    import fake_host
    import host_surface

    with fake_host.installed(server.root / "fake_surface"):
        surface = host_surface.fake_surface()
    used = host_surface.pack_uses()
    names = server.root / "surface_names.json"
    names.write_text(json.dumps(sorted(set(used) | set(surface) | set(host_surface.optional_names()))))
    out = subprocess.run([comfy_python(), str(REPO / "tests" / "comfy_surface_probe.py"), COMFYUI_DIR, str(REPO),
                          str(names)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    host = json.loads(out.stdout.strip().splitlines()[-1])["host"]
    optional = set(host_surface.optional_names())  # the newest hosts' names: compared where this host has them
    lacking = sorted(n for n in optional if host.get(n) is None)
    drifted = {name: d for name, entry in surface.items()
               if (d := host_surface.drift(entry, host.get(name))) and name not in lacking}
    unfaked = sorted(set(used) - set(surface))
    absent = [n for n in unfaked if host.get(n) is None and not n.startswith("comfy.ldm.")]  # attention: see nodes/attention.py
    assert not drifted and not absent, (f"fake host drifted from ComfyUI at {COMFYUI_DIR}:\n"
                                        + "\n".join(f"{n}: {d}" for n, d in drifted.items()) + f"\nabsent: {absent}")
    print(f"\nhost surface: {len(surface)} names the pack uses and the fakes provide match the host's kind and "
          f"signature; {len(unfaked)} more the pack uses exist on the host ({', '.join(unfaked)}); optional names "
          f"this host lacks: {', '.join(lacking) or 'none'}")


def lacking_core_nodes(server: Server, path: Path) -> list[str]:
    """The core nodes a workflow needs (its extra.sdvg_needs) that this host does not have."""
    return [n for n in wt.workflow_needs(wt.load(path))[1] if n not in server.object_info]


def loadable(server: Server) -> list[Path]:
    """The workflows whose core nodes this host has (sdvg_core_ar_sampler needs 0.33's AR video nodes): the others
    are left out with the reason printed."""
    out = []
    for path in WORKFLOWS:
        lacking = lacking_core_nodes(server, path)
        if lacking:
            print(f"\n{path.name}: skipped on this host, which has no {', '.join(lacking)} (the workflow needs "
                  f"ComfyUI {wt.load(path)['extra']['sdvg_needs']['comfyui']}+)")
        else:
            out.append(path)
    return out


def test_workflows_valid_against_the_real_server(server):
    for path in loadable(server):
        assert wt.validate(wt.load(path), server.object_info, host_newer=True) == [], path.name


def test_a_30_fps_clip_through_the_video_to_video_workflow_keeps_its_duration(server):
    """Core Load Video + Get Video Components hand a 30 fps clip's frames and its fps; the workflow connects the fps,
    so SDVG Generate reads the clip (60 frames, 2.0 s) on the 16 fps clock: 32 frames, blocks of 9 + 12."""
    api = wt.set_inputs(api_for(server, REPO / "workflows" / "sdvg_video_to_video.json", tau=-5.0), "LoadVideo",
                        file=PHONE_CLIP)
    api, probes = with_report_probe(api)
    (rep,) = reports(server.queue(api), probes).values()
    px = rep["pixels"]
    print(f"\nsdvg_video_to_video with {PHONE_CLIP}: source {px['source_fps']} fps, read at {px['frame_rate']} fps, "
          f"{px['given_frames']} frames used, {rep['num_blocks']} blocks, stopped: {rep['stopped']}")
    assert (px["source_fps"], px["frame_rate"], px["given_frames"], rep["num_blocks"]) == (30.0, 16, 21, 2)


@pytest.mark.parametrize("path", [p for p in WORKFLOWS if not wt.workflow_needs(wt.load(p))[1]], ids=lambda p: p.stem)
def test_every_workflow_runs(server, path):
    api, probes = with_report_probe(api_for(server, path, tau=-5.0))
    entry = server.queue(api)
    reps = reports(entry, probes)
    assert reps, "no report"
    expected = []
    for nid, rep in reps.items():
        pixels = rep.get("pixels") or {}
        # a start image or an extended video begins the output (Krea: the given frames as read, then block 0 from its
        # 4th frame, as Krea's server sends it: docs/pixels.md §5)
        given = pixels and pixels["mode"] != "video_to_video"
        frames = FRAMES + (pixels["given_frames"] - (3 if rep["recipe"] == "krea" else 0) if given else 0)
        expected.append(frames)
        assert rep["num_blocks"] == SMALL["num_blocks"]
        if api[nid]["class_type"] != "SDVGLive":  # SDVG Live's report names its video; its frames are counted below
            assert int(rep["meta"]["frames"]) == frames
        assert rep["blocks"][0]["producer"] == "target"
        policy = api[nid]["inputs"].get("policy", "sdvg")
        decisions = [b["decision"] for b in rep["blocks"]]
        given = f" ({pixels['mode']}, strength {pixels['strength']:g})" if pixels else ""
        print(f"\n{path.name} [{nid} {policy}]: {frames} frames{given}, decisions {decisions}, "
              f"scores {[None if b['score'] is None else round(b['score'], 3) for b in rep['blocks']]}, forwards "
              f"D{rep['drafter_forwards']}/T{rep['target_forwards']}, counted speedup {rep['counted_speedup']:.2f}x, "
              f"{entry['seconds']:.1f} s")
        if policy in ("target-only", "target_only"):
            assert set(decisions) == {"forced"} and rep["drafter_forwards"] == 0
        else:
            assert decisions[0] == "forced" and all(d == "accepted" for d in decisions[1:])
    assert video_frames(server.root, entry) == expected
    if "loop" in path.name:
        # lazy routing: block 0's draft is never decoded; blocks 1.. each show their decoded draft (expanded copies)
        dec = next(k for k, v in api.items() if v["class_type"] == "SDVGDecodeBlock")
        shown = [k for k, o in entry["outputs"].items() if k.split(".")[-1] == dec and o.get("images")]
        assert dec not in shown and len(shown) == SMALL["num_blocks"] - 1, shown


AR_WORKFLOW = REPO / "workflows" / "sdvg_core_ar_sampler.json"


@pytest.mark.parametrize("start_image", [False, True], ids=["as_saved", "start_image"])
def test_core_ar_workflow_runs(server, start_image):
    """sdvg_core_ar_sampler through POST /prompt, as saved and with its start-image group switched on and wired as its
    note says (on tiny causal_ar models core's loader reads): the video decodes, SDVG AR Report shows the run's table
    with the report files' path, the drafter made the blocks after the first. Skipped, with the reason, on hosts
    without core's AR video nodes (before 0.33)."""
    lacking = lacking_core_nodes(server, AR_WORKFLOW)
    if lacking:
        pytest.skip(f"sdvg_core_ar_sampler needs core's AR video nodes (ComfyUI 0.33+); this host has no "
                    f"{', '.join(lacking)}")
    wf = wt.load(AR_WORKFLOW)
    api = wt.to_api(wt.unmuted(wf) if start_image else wf, server.object_info)
    api = wt.ar_test_models(wt.ar_start_image(api) if start_image else api, SMALL["num_blocks"])
    api = wt.set_inputs(api, "SDVGSamplerARVideo", tau=-5.0)
    report = next(k for k, v in api.items() if v["class_type"] == "SDVGARReport")
    api["9ar9"] = {"class_type": "PreviewAny", "inputs": {"source": [report, 2]}}
    entry = server.queue(api)
    rep = json.loads(entry["outputs"]["9ar9"]["text"][0])
    assert [b["decision"] for b in rep["blocks"]] == ["forced"] + ["accepted"] * (SMALL["num_blocks"] - 1), rep
    shown = next(entry["outputs"][k]["text"][0] for k, v in api.items() if v["class_type"] == "PreviewAny"
                 and v["inputs"]["source"] == [report, 0])
    rel = shown.split("report: output/")[1].split(".json")[0]
    assert (server.root / "output" / f"{rel}.json").is_file() and (server.root / "output" / f"{rel}.png").is_file()
    frames = 1 + 4 * (3 * SMALL["num_blocks"] + (1 if start_image else 0) - 1)
    assert video_frames(server.root, entry) == [frames]
    print(f"\nsdvg_core_ar_sampler ({'start image' if start_image else 'as saved'}): {frames} frames, decisions "
          f"{[b['decision'] for b in rep['blocks']]}, forwards D{rep['drafter_forwards']}/T{rep['target_forwards']}, "
          f"report output/{rel}.json, {entry['seconds']:.1f} s")


# ------------------------------------------------------------------------------------------------ core's AR templates
TEMPLATE_PACKAGES = "comfyui_workflow_templates"  # the packages the host ships its templates in (name prefix)
TEMPLATE_TAU = -5.0  # the tiny ImageReward scores around -1..1: every draft accepted, so every block after 0 is routed


def host_ar_templates() -> list[Path]:
    """Every workflow template of the host's comfyui-workflow-templates packages that uses core's Sampler AR Video
    (found in the host's own python environment: the templates the host offers its users)."""
    code = ("import importlib.util, pkgutil\n"
            f"for m in pkgutil.iter_modules():\n    if m.name.startswith({TEMPLATE_PACKAGES!r}):\n"
            "        spec = importlib.util.find_spec(m.name)\n        print(*(spec.submodule_search_locations or []), sep='\\n')")
    out = subprocess.run([comfy_python(), "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    folders = [Path(line) for line in out.stdout.split("\n") if line.strip()]
    return sorted({p for f in folders for p in f.rglob("*.json") if '"SamplerARVideo"' in p.read_text(errors="ignore")})


def template_api(server: Server, wf: dict, tag: str) -> tuple[dict, str, str]:
    """A template's API prompt as the frontend queues it (subgraphs flattened), on the test's tiny causal_ar target at
    AR_SMALL's size, the test's start image, the text encoders swapped for embeddings; everything else (length,
    steps, block size, guider, noise) as the template has it. A Save Latent node keeps SamplerCustomAdvanced's output
    (under `tag`). Returns (prompt, Save Latent's id, the positive prompt's text)."""
    flat = wt.flatten_subgraphs(wf, server.object_info)
    api = wt.to_api(flat, server.object_info)
    (sample,) = [k for k, v in api.items() if v["class_type"] == "SamplerCustomAdvanced"]
    guider = api[api[sample]["inputs"]["guider"][0]]
    positive = api[(guider["inputs"].get("positive") or guider["inputs"]["conditioning"])[0]]["inputs"]["text"]
    api = wt.swap_text_encoder(api, wt.AR_TEST_FILES["embeddings"])
    api = wt.set_inputs(api, "UNETLoader", unet_name=wt.AR_TEST_FILES["target"])
    api = wt.set_inputs(api, "LoadImage", image=START_IMAGE)
    for latent_node in ("ARVideoI2V", "EmptyARVideoLatent"):
        api = wt.set_inputs(api, latent_node, **wt.AR_SMALL)
    api["9lat9"] = {"class_type": "SaveLatent", "inputs": {"samples": [sample, 0], "filename_prefix": f"latents/{tag}"}}
    return api, "9lat9", positive


def latent_only(api: dict) -> dict:
    """The prompt without the nodes after the sampling that Save Latent does not need (VAE Decode, Create Video, Save
    Video): the LATENT comparison reads the saved latent, and decoding 81 frames on the CPU twice more adds minutes."""
    out = json.loads(json.dumps(api))
    for k in [k for k, v in out.items() if v["class_type"] in ("VAEDecode", "CreateVideo", "SaveVideo")]:
        del out[k]
    return out


def saved_latent(root: Path, entry: dict, node: str) -> torch.Tensor:
    from safetensors.torch import load_file

    (f,) = entry["outputs"][node]["latents"]
    return load_file(str(root / "output" / f["subfolder"] / f["filename"]))["latent_tensor"].float()


def test_cores_ar_templates_run_with_sdvgs_sampler_swapped_in(server, root):
    """Every AR template the host ships (ComfyUI 0.33.0: video_causal_forcing_i2v, a subgraph with Load Image, AR Video
    I2V at length 81, BasicScheduler 4 steps, CFGGuider 1.0 and Sampler AR Video at 1 frame per block), with Sampler AR
    Video replaced by SDVG Sampler (AR video) by program and nothing else changed but the models (tiny causal_ar
    ones), the size and the start image: target-only gives core's LATENT within 1e-4 (core's own sampler run on the
    same template); with a tiny drafter, ImageReward and the template's VAE connected, every block after the first is
    routed (drafted, decoded, scored, accepted at tau -5) and the video has the template's length."""
    templates = host_ar_templates()
    if "SamplerARVideo" not in server.object_info:
        pytest.skip("this host has no core AR video nodes (Sampler AR Video: ComfyUI 0.33+)")
    if not templates:
        pytest.skip("this host's comfyui-workflow-templates packages ship no template using Sampler AR Video")
    for path in templates:
        wf = wt.load(path)
        (core_sampler,) = wt.nodes_of_type(wf, "SamplerARVideo")
        block = core_sampler["widgets_values"][0]
        core_api, save, _ = template_api(server, wf, f"{path.stem}_core")
        swapped = wt.swap_node_type(wf, "SamplerARVideo", "SDVGSamplerARVideo")
        sdvg_api, _, positive = template_api(server, swapped, f"{path.stem}_sdvg")
        core = saved_latent(root, server.queue(latent_only(core_api)), save)
        ours = saved_latent(root, server.queue(latent_only(wt.set_inputs(sdvg_api, "SDVGSamplerARVideo",
                                                                         policy="target_only"))), save)
        diff = float((ours - core).abs().max())
        assert ours.shape == core.shape and diff < 1e-4, (path.name, diff)
        # with a drafter: the template's own VAE decodes each draft, ImageReward scores it
        (sampler_id,) = [k for k, v in sdvg_api.items() if v["class_type"] == "SDVGSamplerARVideo"]
        (vae_id,) = [k for k, v in sdvg_api.items() if v["class_type"] == "VAELoader"]
        routed = json.loads(json.dumps(sdvg_api))
        routed["9dr9"] = {"class_type": "UNETLoader", "inputs": {"unet_name": wt.AR_TEST_FILES["drafter"],
                                                                  "weight_dtype": "default"}}
        routed["9ir9"] = {"class_type": "SDVGLoadImageReward", "inputs": {"reward_name": "ImageReward.pt",
                                                                          "dtype": "auto", "micro_batch": 16}}
        routed[sampler_id]["inputs"].update(drafter=["9dr9", 0], image_reward=["9ir9", 0], vae=[vae_id, 0],
                                            prompt=positive, policy="sdvg", tau=TEMPLATE_TAU)
        routed["9rep9"] = {"class_type": "SDVGARReport", "inputs": {"samples": [routed[save]["inputs"]["samples"][0], 0]}}
        routed["9show9"] = {"class_type": "PreviewAny", "inputs": {"source": ["9rep9", 2]}}
        entry = server.queue(routed)
        rep = json.loads(entry["outputs"]["9show9"]["text"][0])
        n = len(rep["blocks"])
        assert [b["decision"] for b in rep["blocks"]] == ["forced"] + ["accepted"] * (n - 1), rep["blocks"]
        assert rep["frames_per_block"] == block and all(len(b["frame_scores"]) == 4 * b["latent_frames"]
                                                        for b in rep["blocks"][1:])
        frames = video_frames(root, entry)
        assert frames == [1 + 4 * (core.shape[2] - 1)], frames
        print(f"\n{path.name} ({path.parent.parent.name}) with SDVG's sampler swapped in: {n} blocks of {block} latent "
              f"frame(s) after the start image, target-only vs core's max |diff| {diff:.1e} (values up to "
              f"{float(core.abs().max()):.1f}); with a drafter {rep['blocks'][1]['decision']} x {n - 1}, forwards "
              f"D{rep['drafter_forwards']}/T{rep['target_forwards']}, {frames[0]} frames, {entry['seconds']:.1f} s")


def test_policy_sdvg_without_its_inputs_is_refused_when_queued(server):
    """POST /prompt (ComfyUI's validation, before any node runs) refuses SDVG Sampler (AR video) with policy sdvg and
    no ImageReward, naming the input; the same graph at target_only queues without a VAE."""
    lacking = lacking_core_nodes(server, AR_WORKFLOW)
    if lacking:
        pytest.skip(f"sdvg_core_ar_sampler needs core's AR video nodes (ComfyUI 0.33+); this host has no "
                    f"{', '.join(lacking)}")
    api = wt.ar_test_models(wt.to_api(wt.load(AR_WORKFLOW), server.object_info), 1)
    (sampler,) = [k for k, v in api.items() if v["class_type"] == "SDVGSamplerARVideo"]
    refused = json.loads(json.dumps(api))
    del refused[sampler]["inputs"]["image_reward"]
    with pytest.raises(PromptRefused) as e:
        server.queue(refused)
    assert e.value.status == 400 and "image_reward" in e.value.body and sampler in json.loads(e.value.body)["node_errors"]
    plain = wt.set_inputs(api, "SDVGSamplerARVideo", policy="target_only")
    del plain[sampler]["inputs"]["vae"]
    server.queue(plain)
    print(f"\npolicy sdvg without ImageReward refused at /prompt: {json.loads(e.value.body)['node_errors'][sampler]}")


def test_prompt_changes_workflow_at_its_own_length(server):
    """sdvg_long_video_prompt_changes as saved (three prompts over 30 blocks, at the test's small frame size; each
    prompt its own embeddings file): every block carries its own prompt in the report, the segments are the
    schedule's and each drafted block was scored (against its block's prompt: the core's rule, tested in
    tests/test_prompt_schedule.py)."""
    path = REPO / "workflows" / "sdvg_long_video_prompt_changes.json"
    lines = schedule_lines(path)
    api = wt.swap_text_encoder(wt.to_api(wt.load(path), server.object_info), EMB)
    api = wt.swap_schedule_encoder(api, SCHEDULE_EMB)  # no spreading: the workflow's own first blocks
    (gen_id,) = [k for k, v in api.items() if v["class_type"] == "SDVGGenerate"]
    blocks = api[gen_id]["inputs"]["num_blocks"]
    assert blocks >= 30 and len(lines) == 3 and lines[-1][0] < blocks
    api = wt.set_inputs(api, "SDVGGenerate", width=SMALL["width"], height=SMALL["height"])
    api, probes = with_report_probe(api)
    entry = server.queue(api, timeout=1800)
    (rep,) = reports(entry, probes).values()
    assert rep["num_blocks"] == blocks
    assert [(p["first_block"], p["text"]) for p in rep["prompts"]] == lines
    firsts = [b for b, _ in lines]
    expect = [max(i for i, f in enumerate(firsts) if f <= b) for b in range(blocks)]
    assert [blk["prompt"] for blk in rep["blocks"]] == expect
    drafted = [blk for blk in rep["blocks"] if blk["decision"] != "forced"]
    assert drafted and all(blk["score"] is not None for blk in drafted)
    decisions = [blk["decision"] for blk in rep["blocks"]]
    print(f"\n{path.name} at {blocks} blocks: prompts {firsts}, decisions "
          f"{ {d: decisions.count(d) for d in set(decisions)} }, forwards D{rep['drafter_forwards']}/"
          f"T{rep['target_forwards']}, {entry['seconds']:.1f} s")


def requeue_with_moved_tau(server: Server) -> tuple[dict, dict, dict, dict, int, float]:
    """Queue the step-by-step loop at tau -5, then again at a tau between the two lowest later scores: the second
    press recomputes no forward before the first flipped block k and the target's forwards at k. Returns (api,
    probes, first entry, second entry, k, tau2)."""
    path = REPO / "workflows" / "sdvg_loop_step_by_step.json"
    api, probes = with_report_probe(api_for(server, path, seed=123))
    first = server.queue(wt.set_inputs(api, "SDVGRoute", tau=-5.0))
    rep1 = next(iter(reports(first, probes).values()))
    scores = [b["score"] for b in rep1["blocks"]]
    later = sorted(scores[1:])
    k = scores.index(later[0])
    tau2 = round((later[0] + later[1]) / 2, 4) if later[1] - later[0] > 2e-4 else round(later[0] + 1e-4, 4)
    api2 = wt.set_inputs(api, "SDVGRoute", tau=tau2)
    second = server.queue(api2)
    rep2 = next(iter(reports(second, probes).values()))
    assert rep2["blocks"][k]["decision"] == "rejected"
    work = [(b["work"]["drafter_forwards"], b["work"]["target_forwards"]) for b in rep2["blocks"]]
    assert all(w == (0, 0) for w in work[:k]), work
    assert work[k][0] == 0 and work[k][1] > 0, work
    return api, probes, first, second, k, tau2


def test_requeue_with_moved_tau_recomputes_from_first_flip(server, root):
    api, probes, first, second, k, tau2 = requeue_with_moved_tau(server)
    rep1, rep2 = (next(iter(reports(e, probes).values())) for e in (first, second))
    work = [(b["work"]["drafter_forwards"], b["work"]["target_forwards"]) for b in rep2["blocks"]]
    loaders = {nid for nid, n in api.items() if n["class_type"] in ("SDVGLoadTarget", "SDVGLoadDrafter",
                                                                     "SDVGLoadImageReward", "VAELoader", "SDVGStart")}
    assert loaders <= cached_nodes(second)
    print(f"\nre-queue: tau -5 -> {tau2}: block {k} flipped; forwards per block (drafter, target) first run "
          f"{[(b['work']['drafter_forwards'], b['work']['target_forwards']) for b in rep1['blocks']]}, re-queue {work}; "
          f"{first['seconds']:.1f} s then {second['seconds']:.1f} s")
    api2 = wt.set_inputs(api, "SDVGRoute", tau=tau2)
    fresh_server = Server(root, "server2")
    try:
        fresh = fresh_server.queue(api2)
        rep3 = next(iter(reports(fresh, probes).values()))
    finally:
        fresh_server.close()
    assert [b["decision"] for b in rep3["blocks"]] == [b["decision"] for b in rep2["blocks"]]
    assert [b["score"] for b in rep3["blocks"]] == [b["score"] for b in rep2["blocks"]]
    assert rep3["meta"]["lineage"] == rep2["meta"]["lineage"]  # hash chain over every committed latent
    fw3 = [(b["work"]["drafter_forwards"], b["work"]["target_forwards"]) for b in rep3["blocks"]]
    print(f"fresh server at tau {tau2}: same decisions and lineage; forwards {fw3} ({fresh['seconds']:.1f} s)")


# ComfyUI 0.33 caches node outputs under RAM pressure (--cache-ram HEADROOM_GB, its default mode): after every node
# it evicts cached outputs while less than HEADROOM is free. A headroom no machine has (1 PB) makes every eviction
# happen: nothing of the first press is left in ComfyUI's output cache.
RAM_PRESSURE_HEADROOM_GB = "1000000"


def test_requeue_under_ram_pressure_recomputes_only_from_the_first_flip(root):
    """Under the RAM-pressure output cache at full pressure (every node output evicted as soon as ComfyUI can), a
    re-queue after moving tau still computes no forward before the first flipped block: the SDVG state is a handle
    on the shared memo, which ComfyUI's model management (not its output cache) governs."""
    if "--cache-ram" not in (Path(COMFYUI_DIR) / "comfy" / "cli_args.py").read_text():
        pytest.skip("this host has no RAM-pressure output cache (--cache-ram)")
    s = Server(root, "server_ram_pressure", ("--cache-ram", RAM_PRESSURE_HEADROOM_GB))
    try:
        api, probes, first, second, k, tau2 = requeue_with_moved_tau(s)
    finally:
        s.close()
    cached = cached_nodes(second)
    work = [(b["work"]["drafter_forwards"], b["work"]["target_forwards"])
            for b in next(iter(reports(second, probes).values()))["blocks"]]
    print(f"\nRAM pressure (--cache-ram {RAM_PRESSURE_HEADROOM_GB}): re-queue at tau {tau2} flipped block {k}; "
          f"ComfyUI's cache kept {sorted(cached)} of the first press; forwards per block {work}; "
          f"{first['seconds']:.1f} s then {second['seconds']:.1f} s")


def test_state_outputs_report_their_draft_to_the_ram_pressure_cache():
    """0.33's RAM-pressure output cache, through its own ram_release (tests/comfy_ram_cache_probe.py): a state holding
    a decoded draft is counted for the draft's bytes like an IMAGE of that size (both taken by the pass for large
    intermediates); a state without a draft counts as the cache's small default and is evictable too."""
    r = probe("comfy_ram_cache_probe.py")
    if "skipped" in r:
        pytest.skip(r["skipped"])
    assert r["large_pass_took"] == ["decode_state", "image"], r
    assert r["large_pass_freed"] >= 2 * r["draft_bytes"], r  # the state's draft counted in full, as the IMAGE is
    assert r["left"] == [] and r["rest_freed"] < 1, r  # the draft-less state: evicted at the default size
    print(f"\nRAM-pressure cache: a state with a {r['draft_bytes'] / 2**20:.0f} MiB draft counted "
          f"{(r['large_pass_freed'] - r['draft_bytes']) / 2**20:.0f} MiB (an IMAGE of the same bytes "
          f"{r['draft_bytes'] / 2**20:.0f} MiB); a state without a draft {r['rest_freed']} bytes, evicted")


def report_texts(api: dict, entry: dict) -> dict[str, str]:
    """{Generate/Finish id: the report table its workflow's own viewer shows} (PreviewAny on the `report` output)."""
    return {src[0]: entry["outputs"][nid]["text"][0] for nid, n in api.items() if n["class_type"] == "PreviewAny"
            and isinstance(src := n["inputs"].get("source"), list) and api[src[0]]["class_type"] in
            ("SDVGGenerate", "SDVGFinish") and src[1] == 1}


NOT_FRESH = "NOT a fresh run's time"


def test_first_runs_on_a_fresh_server_are_fresh(root):
    """Reuse within one execution (a rejected block 2 taking the anchor the run made before it) is part of a
    fresh run. On a freshly started server the first SDVG prompt and both fresh_run nodes of sdvg_vs_target_only
    report a fresh run (tau 5: every draft rejected, so that reuse happens); a re-queue at another tau takes blocks
    from the earlier execution and says its time is not a fresh run's."""
    s = Server(root, "server_fresh")
    try:
        gen_api, probes = with_report_probe(api_for(s, REPO / "workflows" / "sdvg_generate.json", tau=5.0))
        first = s.queue(gen_api)
        rep, text = next(iter(reports(first, probes).values())), next(iter(report_texts(gen_api, first).values()))
        assert rep["fresh_run"] is True and NOT_FRESH not in text, text
        assert any(b["reused"] for b in rep["blocks"]), rep["blocks"]  # reuse within this execution
        vs_api, vs_probes = with_report_probe(api_for(s, REPO / "workflows" / "sdvg_vs_target_only.json", tau=5.0))
        gens = {k for k, v in vs_api.items() if v["class_type"] == "SDVGGenerate"}
        assert len(gens) == 2 and all(vs_api[k]["inputs"]["fresh_run"] is True for k in gens)
        vs = s.queue(vs_api)
        vs_reps, vs_texts = reports(vs, vs_probes), report_texts(vs_api, vs)
        assert set(vs_reps) == set(vs_texts) == gens
        for k in gens:
            assert vs_reps[k]["fresh_run"] is True and NOT_FRESH not in vs_texts[k], (vs_api[k]["inputs"]["policy"], vs_texts[k])
        sdvg = next(k for k in gens if vs_api[k]["inputs"]["policy"] == "sdvg")
        assert any(b["reused"] for b in vs_reps[sdvg]["blocks"]), vs_reps[sdvg]["blocks"]
        again = s.queue(wt.set_inputs(gen_api, "SDVGGenerate", tau=-5.0))  # every draft accepted now; block 0 reused
        rep2, text2 = next(iter(reports(again, probes).values())), next(iter(report_texts(gen_api, again).values()))
        assert rep2["fresh_run"] is False and NOT_FRESH in text2, text2
        assert rep2["blocks"][0]["carried"], rep2["blocks"][0]  # taken from the first execution
    finally:
        s.close()
    print(f"\nfresh server: first SDVG prompt fresh with reuse within it "
          f"{[b['reused'] for b in rep['blocks']]} ({first['seconds']:.1f} s), sdvg_vs_target_only both fresh "
          f"({vs['seconds']:.1f} s); re-queue at tau -5: not fresh, block 0 carried {rep2['blocks'][0]['carried']}")


def test_comfyui_model_path_default_and_fp8(server):
    """UNETLoader -> the SDVG loaders' MODEL input (ComfyUI's WanModel, incl. fp8 weights cast per layer)."""
    path = REPO / "workflows" / "sdvg_generate.json"
    api = wt.swap_text_encoder(wt.to_api(wt.load(path), server.object_info), EMB_4096)
    api = wt.set_inputs(api, "SDVGGenerate", **SMALL, tau=-5.0)
    api["801"] = {"class_type": "UNETLoader", "inputs": {"unet_name": "tiny_wan_t2v.safetensors", "weight_dtype": "default"}}
    api["802"] = {"class_type": "UNETLoader", "inputs": {"unet_name": "tiny_wan_t2v.safetensors", "weight_dtype": "fp8_e4m3fn"}}
    target = next(k for k, v in api.items() if v["class_type"] == "SDVGLoadTarget")
    drafter = next(k for k, v in api.items() if v["class_type"] == "SDVGLoadDrafter")
    api[drafter]["inputs"]["model"] = ["801", 0]
    api[target]["inputs"]["model"] = ["802", 0]
    api, probes = with_report_probe(api)
    entry = server.queue(api)
    rep = next(iter(reports(entry, probes).values()))
    assert "ComfyUI MODEL (WanModel" in rep["meta"]["target"] and "float8_e4m3fn" in rep["meta"]["target"]
    assert "ComfyUI MODEL (WanModel" in rep["meta"]["drafter"]
    assert rep["blocks"][0]["decision"] == "forced" and rep["drafter_forwards"] > 0 and rep["target_forwards"] > 0
    assert video_frames(server.root, entry) == [FRAMES]
    print(f"\nMODEL path: target {rep['meta']['target']}; drafter {rep['meta']['drafter']}; "
          f"decisions {[b['decision'] for b in rep['blocks']]} ({entry['seconds']:.1f} s)")


@pytest.mark.parametrize("class_type,key,name,folder,source", [
    ("SDVGLoadTarget", "model_name", "missing-14b.safetensors", "diffusion_models", "krea/krea-realtime-video"),
    ("SDVGLoadImageReward", "reward_name", "nope.pt", "image_reward", "THUDM/ImageReward"),
    ("SDVGLoadPromptEmbeddings", "embeddings", "gone.safetensors", "sdvg_prompts", "SDVG Save Prompt Embeddings"),
], ids=["target", "image_reward", "prompt_embeddings"])
def test_missing_file_refused_at_prompt_with_the_packs_message(server, class_type, key, name, folder, source):
    """A missing model is refused by POST /prompt itself (before anything runs) and the node error the frontend shows
    carries the pack's message (file, folder searched, files there, source), not just 'Value not in list'."""
    api = api_for(server, REPO / "workflows" / "sdvg_generate.json")
    nid = next(k for k, v in api.items() if v["class_type"] == class_type)
    api[nid]["inputs"][key] = name
    with pytest.raises(PromptRefused) as e:
        server.queue(api)
    assert e.value.status == 400, e.value
    body = json.loads(e.value.body)
    assert set(body["node_errors"]) == {nid}, body["node_errors"]
    shown = " ".join(f"{err.get('message', '')} {err.get('details', '')}" for err in body["node_errors"][nid]["errors"])
    assert name in shown and f"models/{folder}" in shown and source in shown, shown
    assert str(server.root / "models" / folder) in shown  # the folder searched
    print(f"\n/prompt refused {class_type}.{key}={name!r} ({e.value.status}): {shown[:300]}")


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_frontend_loads_every_workflow(server):
    workflows = loadable(server)
    out = subprocess.run([comfy_python(), str(REPO / "tests" / "frontend_probe.py"), "--url", server.url,
                          *map(str, workflows)], capture_output=True, text=True, timeout=600)
    assert out.stdout.strip(), out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    # The pip build 0.12.1 lists two nodes of its own with python_module null (SplitImageWithAlpha, JoinImageWithAlpha):
    # frontend 1.5x throws in registerNodeDef on them and never registers its frontend-only nodes (Note, MarkdownNote),
    # with or without this pack. Only that exact case is excused (after every other check), as an expected failure.
    host_broken = sorted(k for k, v in server.object_info.items() if v.get("python_module") is None)
    excused = []
    for path in workflows:
        r = res[str(path)]
        missing = r["missing"]
        if host_broken and set(missing) <= {"Note", "MarkdownNote"} and \
                any("registerNodeDef" in e or "ComfyNodeDefImpl" in e for e in r["page_errors"]):
            excused.append(f"{path.name}: {missing}")
            missing = []
        assert missing == [] and r["missing_dialog"] == [], (path.name, r["missing"], r["missing_dialog"], r["page_errors"])
        ours = wt.to_api(wt.load(path), server.object_info)
        theirs = r["api"]
        if excused and excused[-1].startswith(path.name + ":"):  # the unregistered notes are queued as unknown nodes
            theirs = {k: v for k, v in theirs.items() if k in ours or v.get("class_type") not in (None, "Note", "MarkdownNote")}
        assert set(theirs) == set(ours), path.name
        for nid in ours:
            ct = ours[nid]["class_type"]
            assert theirs[nid]["class_type"] == ct
            spec = server.object_info[ct]["input"]
            known = set(spec.get("required", {})) | set(spec.get("optional", {}))
            # a dynamic combo's nested widgets come as <combo>.<input>; others not in the spec (e.g. PreviewAny's
            # display widget) are the frontend's own
            got = {k: v for k, v in theirs[nid]["inputs"].items() if k.split(wt.SUB_KEY)[0] in known}
            assert got == ours[nid]["inputs"], (path.name, nid, got, ours[nid]["inputs"])
        # it opened at its saved view, where every report viewer lies inside the visible canvas area (reference
        # window: tests/workflow_tools.py VIEW_PAGE; the probe's headless page is that window)
        ds, view = wt.load(path)["extra"]["ds"], r["view"]
        assert abs(view["scale"] - ds["scale"]) < 1e-6 and view["page"] == list(wt.VIEW_PAGE), (path.name, view, ds)
        left, top, w, h = wt.visible_area(view["canvas"])
        for rep in r["reports"]:
            x0, y0, x1, y1 = rep["rect"]
            assert left <= x0 and x1 <= left + w and top <= y0 and y1 <= top + h, (path.name, rep)
        # nothing the frontend draws over the canvas (1.5x: its minimap, on by default) hides a report or a player
        for o in r["overlays"]:
            hidden = [x["title"] for x in r["reports"] + r["videos"] if wt.overlaps(x["rect"], o["rect"])]
            assert hidden == [], (path.name, o, hidden)
        print(f"\nfrontend {r['frontend'] or '?'}: {path.name}: {r['node_count']} nodes, "
              f"{'missing ' + str(r['missing']) if r['missing'] else 'no missing node types'}, graphToPrompt == our "
              f"conversion; opened at scale {view['scale']:.3f} with {len(r['reports'])} report(s) on screen; reports and "
              f"{len(r['videos'])} video player(s) {'clear of the ' + r['overlays'][0]['name'] if r['overlays'] else '(no overlay)'}")
    if excused:
        pytest.xfail(f"host bug: nodes {host_broken} have python_module null, the frontend stops registering its own "
                     f"nodes ({'; '.join(excused)})")
    assert out.returncode == 0


def test_causal_forward_on_comfy_wanmodel():
    """CausalWan calls ComfyUI's WanModel submodules: equal to WanModel.forward in fp32; bf16 needs the adapter."""
    r = probe("comfy_wan_probe.py")
    assert r["fp32_vs_comfy_forward"] < 1e-4 * max(r["scale"], 1.0), r
    assert r["bf16_plain_view_vs_fp32"] < 0.05 * r["scale"] and r["bf16_manual_cast_view_vs_fp32"] < 0.05 * r["scale"], r
    assert r["bf16_plain_raw"].startswith("fails"), r  # why comfy_wan_view exists
    print(f"\nComfyUI WanModel: CausalWan vs WanModel.forward fp32 max|diff| {r['fp32_vs_comfy_forward']:.1e} "
          f"(scale {r['scale']:.2f}); bf16 via adapter {r['bf16_plain_view_vs_fp32']:.4f} / manual-cast "
          f"{r['bf16_manual_cast_view_vs_fp32']:.4f}; bf16 without adapter: {r['bf16_plain_raw']}")


def test_sdvg_ar_sampler_is_cores_loop(root):
    """A tiny random CausalWanModel built by core's own loader from a causal_ar safetensors file; with every
    block from the target, SDVG Sampler (AR video)'s LATENT equals core's Sampler AR Video output on the same MODEL,
    noise, sigmas (and start image, through AR Video I2V) within 1e-4, also with a 1024-row ConditioningConcat, a
    40-row and a 600-row conditioning, and at 1 / 2 / 3 / 4 latent frames per block with a shorter last block; with a drafter (draft_only, and sdvg with a tiny
    ImageReward) its blocks are the SDVG engine's on core's noise rule (tests/comfy_ar_probe.py). Skipped on hosts
    without core's AR nodes (before 0.33)."""
    r = probe("comfy_ar_probe.py", str(root / "ar_probe"), timeout=1200)
    if "skipped" in r:
        pytest.skip(r["skipped"])
    assert r["model_class"] == "WAN21_CausalAR" and r["network"] == "CausalWanModel", r
    assert r["t2v_shape"] == [1, 16, 9, 6, 8] and r["i2v_shape"] == [1, 16, 7, 6, 8], r
    assert r["t2v_max_abs_diff"] < 1e-4 and r["i2v_max_abs_diff"] < 1e-4, r
    assert r["i2v_start_frame_diff"] < 1e-6, r
    for policy in ("draft_only", "sdvg"):
        assert r[f"{policy}_producers"] == ["target", "drafter", "drafter"], r
        assert r[f"{policy}_max_abs_diff_vs_engine"] == 0.0, r
    parity = r["parity"]
    assert len(parity) == 11 and all(c["max_abs_diff"] < 1e-4 for c in parity.values()), parity
    assert parity["t2v_F3_7_frames"]["blocks"] == [3, 3, 1] and parity["i2v_F2_1+5_frames"]["blocks"] == [2, 2, 1]
    assert parity["t2v_concat_1024_rows"]["shape"] == [1, 16, 9, 6, 8]
    print(f"\nSDVG AR sampler vs core's SamplerARVideo (target only, {r['model_class']}/{r['network']}): max |diff| "
          f"{r['t2v_max_abs_diff']:.1e} (values up to {r['t2v_scale']:.1f}) text-to-video, {r['i2v_max_abs_diff']:.1e} "
          f"from a start image; with a drafter equal to the engine on core's noise rule; seconds {r['t2v_seconds']}")
    for name, c in parity.items():
        print(f"  {name}: blocks {c['blocks']}, max |diff| {c['max_abs_diff']:.1e} (values up to {c['scale']:.1f})")


def test_memo_lives_in_comfyuis_memory_manager():
    """Importing the pack replaces nothing of ComfyUI; its memo is one of ComfyUI's loaded models, freed by ComfyUI's
    own free_memory (partly: the oldest entries) and unload_all_models (all), kept through SDVG's own model swaps."""
    r = probe("comfy_memory_probe.py")
    assert r["changed_by_import"] == [] and r["changed_after_use"] == [], r
    assert not r["registered_before_use"] and r["registered_after_load"], r
    assert r["after_partial"] == {"entries": [1, 2], "registered": True}, r
    assert r["after_own_load"] == r["after_partial"], r
    assert r["after_unload_all"] == {"bytes": 0, "registered": False}, r
    print(f"\nmemory manager: import changed nothing; memo {r['loaded_size_gib']:.2f} GiB registered at the first load, "
          f"partial free -> entries {r['after_partial']['entries']}, unload_all -> 0 bytes, unregistered")


def test_memo_next_to_dynamic_vram_in_comfys_own_model_management():
    """0.33's Dynamic VRAM rules, run through the host's real load_models_gpu / free_memory / ensure_pin_budget on a
    stand-in device (tests/comfy_dynamic_probe.py): SDVG loading a dynamic MODEL keeps ComfyUI's dynamic free path;
    the memo is never counted as host RAM demand (0.33's pins_required, the pip build's ram_required: a 1 PiB memo
    changes nothing); another load still reclaims the memo. Skipped on hosts without Dynamic VRAM."""
    r = probe("comfy_dynamic_probe.py")
    if "skipped" in r:
        pytest.skip(r["skipped"])
    own = r["own_dynamic_load"]
    assert own["calls"][0]["for_dynamic"] is True, own  # the dynamic model's own call keeps the dynamic free path
    registration = [c for c in own["calls"] if c["loading"] == ["MemoPatcher"]]
    assert registration and all(c["ram_demand"] == 0 for c in registration), own  # registering the memo asks no RAM
    assert own["memo_registered"] and own["memo_held"] > 0 and own["other_pins_evicted"] == 0, own
    full = r["own_full_load"]
    assert full["ram_demand"] == full["ram_demand_with_1PiB_memo"] and full["ram_demand"], full  # the memo adds none
    assert full["other_pins_evicted"] == 0, full
    assert r["other_load"]["memo_bytes"] == 0 and not r["other_load"]["memo_registered"], r["other_load"]
    print(f"\nDynamic VRAM (host model management, stand-in device): SDVG's dynamic load frees for_dynamic; "
          f"the memo's registration call (non-dynamic, once) asked the other dynamic model for "
          f"{sum(own['other_vram_asked']) / 2**30:.2f} GiB (ComfyUI's minimum inference memory on a full device); "
          f"host RAM demand of SDVG's own load {full['ram_demand']} with the memo as it is and claiming 1 PiB; another "
          f"load emptied and unregistered the memo")


def test_dynamic_vram_gpu_phase_runs_here_on_the_cpu():
    """The gpu-check Dynamic VRAM phase's script (tests/comfy_dynamic_vram_run.py), on this host's CPU (no Dynamic
    VRAM here): a generation through MODELs from ComfyUI's own loader, each SDVG load recorded with the memo."""
    out = subprocess.run([comfy_python(), str(REPO / "tests" / "comfy_dynamic_vram_run.py"), COMFYUI_DIR, str(REPO),
                          "--device", "cpu"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["decisions"][0] == "forced" and len(r["decisions"]) == 3 and r["memo_registered"], r
    loads = [e["load"] for e in r["events"] if "load" in e]
    assert loads and all(any(m["patcher"] == "MemoPatcher" for m in call) for call in loads), loads  # never dynamic here
    print(f"\nDynamic VRAM run script on the CPU: patcher {r['dynamic_vram']}, {len(loads)} SDVG loads with the memo, "
          f"decisions {r['decisions']}")


def test_ar_sampler_gpu_phase_runs_here_on_the_cpu():
    """The gpu-check AR sampler phase's script (tests/comfy_ar_gpu_run.py), on this host's CPU: SDVG's sampler next to
    core's on a causal_ar MODEL at the 1.3B widths, the switches of this host's model compiler / CUDA graphs set while
    SDVG's calls ran and restored after (none on hosts without them), core's noise rule on the CPU exact. Skipped on
    hosts without core's AR nodes."""
    out = subprocess.run([comfy_python(), str(REPO / "tests" / "comfy_ar_gpu_run.py"), COMFYUI_DIR, str(REPO),
                          "--device", "cpu"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if "skipped" in r:
        pytest.skip(r["skipped"])
    assert r["switches_after"] == r["switches_before"], r
    have = [k for k, v in r["switches_before"].items() if v is not None]
    want = str(tuple(True if v is not None else None for v in r["switches_before"].values()))
    assert r["switches_seen_by_sdvg_calls"] == [want], r  # each switch the host has: on during SDVG's calls
    assert r["noise_rule_max_abs_diff"] == 0.0 and r["target_only_max_abs_diff"] < 1e-2 * max(r["scale"], 1.0), r
    print(f"\nAR sampler GPU phase script on the CPU: switches {have or 'none'} on during SDVG's calls, restored; "
          f"target-only vs core max |diff| {r['target_only_max_abs_diff']:.2e} (bf16 weights, values up to "
          f"{r['scale']:.1f}); seconds core {r['core_seconds']:.1f}, SDVG {r['sdvg_target_only_seconds']:.1f} / "
          f"{r['sdvg_seconds']:.1f}")


# the real TorchCompileModel's backend here: one of its two options; on a CPU-only server dynamo traces the block and
# this backend leaves CPU graphs eager, so no inductor code generation runs (the request's path is what is tested)
TORCH_COMPILE_MODEL_BACKEND = "cudagraphs"
# what the pip build 0.12.1's TorchCompileModel logs when its own torch.compile call fails (every mode, torch 2.14)
HOST_COMPILE_FAILED = "gracefully skipping compilation"


def test_stride_policy_and_torch_compile_model_on_the_real_host(server):
    """SDVG Generate's StrideAR policy (`stride_k2`: the target makes the even blocks, the drafter the odd ones, nothing
    scored) with ComfyUI's own TorchCompileModel before the target loader's MODEL input: the report says the target
    ran compiled with that node's backend (or, where the host's own TorchCompileModel fails, that it ran eager)."""
    options = server.object_info["SDVGGenerate"]["input"]["required"]["policy"]
    assert {"stride:k=2", "stride:k=3", "stride:k=4"} <= set(options[0] if isinstance(options[0], list)
                                                              else options[1]["options"])
    # both DiTs from ComfyUI's UNETLoader (its WanModel takes 4096-wide text), the target through TorchCompileModel
    api = wt.swap_text_encoder(wt.to_api(wt.load(REPO / "workflows" / "sdvg_generate.json"), server.object_info),
                               EMB_4096)
    # the value a workflow saved before the policy grammar: the host validates it through the node's own check
    api = wt.set_inputs(api, "SDVGGenerate", **SMALL, policy="stride_k2")
    api["801"] = {"class_type": "UNETLoader", "inputs": {"unet_name": "tiny_wan_t2v.safetensors",
                                                         "weight_dtype": "default"}}
    api["802"] = {"class_type": "TorchCompileModel", "inputs": {"model": ["801", 0],
                                                                "backend": TORCH_COMPILE_MODEL_BACKEND}}
    for loader, source in (("SDVGLoadDrafter", ["801", 0]), ("SDVGLoadTarget", ["802", 0])):
        api[next(k for k, v in api.items() if v["class_type"] == loader)]["inputs"]["model"] = source
    api, probes = with_report_probe(api)
    entry = server.queue(api)
    rep = next(iter(reports(entry, probes).values()))
    n = SMALL["num_blocks"]
    assert rep["policy"].startswith("stride k=2")
    assert [b["producer"] for b in rep["blocks"]] == ["target" if b % 2 == 0 else "drafter" for b in range(n)]
    assert all(b["work"]["scored_frames"] == 0 for b in rep["blocks"])
    if HOST_COMPILE_FAILED in Path(server.log.name).read_text():
        # the host's own TorchCompileModel failed and handed the MODEL on without its compile request: SDVG must
        # then say the target ran eager, not claim a compile that was never asked of it
        assert rep["compiled"] is False and rep["compiled_models"] == {}
        pytest.xfail("host bug: this build's TorchCompileModel passes torch.compile both `mode` and `options` "
                     "(\"Either mode or options can be specified\"), logs that it skips compilation and returns the "
                     "MODEL unchanged; SDVG's report says not compiled")
    assert rep["compiled"] is True and rep["compiled_models"] == {"target": TORCH_COMPILE_MODEL_BACKEND}
    assert rep["meta"]["target"].endswith(", compiled")
    print(f"\nstride_k2 + TorchCompileModel({TORCH_COMPILE_MODEL_BACKEND}): decisions "
          f"{[b['decision'] for b in rep['blocks']]}, compiled {rep['compiled_models']}, counted speedup "
          f"{rep['counted_speedup']:.2f}x ({entry['seconds']:.1f} s)")
