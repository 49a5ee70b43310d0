"""The node tests' shared setup (not a test module): the fake host (tests/fake_comfy) with tiny random models under
the file names the example workflows use, and helpers to run those workflows at a test size.

No ComfyUI here: `fake_host.installed` puts minimal fakes of the host modules into sys.modules for one test module
and imports the repo root as the package `sdvg_pack` (never as `nodes`, ComfyUI's own module name). A test module
takes the fake host through the `env` fixture (`from node_env import env`: one host per module) or builds its own
with `fake_host_env`. The example workflows are converted to the API format and run through the nodes by
`mini_executor`, with the text encoder swapped for SDVG Load Prompt Embeddings (as in tests/test_comfy_host.py).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import torch

import fake_host
import workflow_tools as wt
from mini_executor import MiniExecutor

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((REPO / "workflows").glob("*.json"))
PROMPT = "a corgi puppy runs through a sunny meadow, slow motion, cinematic"
EMB_FILE = "test_prompt.safetensors"
SMALL = {"width": 64, "height": 48, "num_blocks": 4}


def write_tiny_models(base: Path, core) -> None:
    """Tiny random models under the file names the workflows use (the real files are GBs)."""
    from safetensors.torch import save_file

    from_tiny = __import__(core.__name__ + ".demo.tiny", fromlist=["x"])
    wan = __import__(core.__name__ + ".models.wan", fromlist=["x"])
    cfgm = __import__(core.__name__ + ".models.wan_config", fromlist=["x"])
    reward = __import__(core.__name__ + ".io.reward_files", fromlist=["x"])
    reward_io = __import__(core.__name__ + ".demo.vocab", fromlist=["x"])
    text = __import__(core.__name__ + ".io.text", fromlist=["x"])
    m = base / "models"
    for d in ("diffusion_models", "vae", "image_reward", "sdvg_prompts", "text_encoders"):
        (m / d).mkdir(parents=True, exist_ok=True)
    drafter = {"model." + k: v for k, v in wan.build_random(cfgm.PRESETS["tiny-drafter"], seed=1).state_dict().items()}
    ema = {"model." + k: v for k, v in wan.build_random(cfgm.PRESETS["tiny-drafter"], seed=5).state_dict().items()}
    torch.save({"generator": drafter, "generator_ema": ema}, m / "diffusion_models" / "self_forcing_dmd.pt")
    target = wan.build_random(cfgm.PRESETS["tiny-target"], seed=2).state_dict()
    save_file({"model." + k: v.contiguous() for k, v in target.items()},
              str(m / "diffusion_models" / "krea-realtime-video-14b.safetensors"))
    save_file({k: v.contiguous() for k, v in from_tiny.random_vae(3).state_dict().items()},
              str(m / "vae" / "wan_2.1_vae.safetensors"))
    vocab = reward_io.write_synthetic_vocab(m / "image_reward" / "vocab.txt")
    scorer = reward.random_scorer(reward_io.synthetic_tiny_config(vocab), vocab, seed=4)
    torch.save(reward.export_state_dict(scorer.model), m / "image_reward" / "ImageReward.pt")
    text.save_embeddings(m / "sdvg_prompts" / EMB_FILE, PROMPT, text.demo_embeddings(PROMPT, 32))
    # LongLive-1.3B's layout: base weights under `generator`, a rank-256 peft LoRA on every Linear of the blocks
    lora_mod = __import__(core.__name__ + ".io.lora", fromlist=["x"])
    base = wan.build_random(cfgm.PRESETS["tiny-drafter"], seed=7)
    torch.save({"generator": {"model." + k: v for k, v in base.state_dict().items()}},
               m / "diffusion_models" / LONGLIVE_BASE)
    (m / "loras").mkdir(parents=True, exist_ok=True)
    torch.save({"generator_lora": peft_lora(base, lora_mod, LONGLIVE_RANK, seed=8)}, m / "loras" / LONGLIVE_LORA)


LONGLIVE_BASE, LONGLIVE_LORA, LONGLIVE_RANK = "longlive_base.pt", "lora.pt", 256


def peft_lora(net, lora_mod, rank: int, seed: int, scale: float = 0.05) -> dict:
    """A LoRA in peft's saved format (base_model.model.<module>.lora_A/B.weight) on every Linear of the blocks,
    small enough that the merged model stays a model (random tensors; no peft needed)."""
    gen = torch.Generator().manual_seed(seed)
    modules = dict(net.named_modules())
    out = {}
    for name in lora_mod.block_linear_names(net):
        lin = modules[name]
        out[f"{lora_mod.PEFT_PREFIX}{name}.lora_A.weight"] = torch.randn(rank, lin.in_features, generator=gen) * scale
        out[f"{lora_mod.PEFT_PREFIX}{name}.lora_B.weight"] = torch.randn(lin.out_features, rank, generator=gen) * scale
    return out


def loaded_models(pack) -> dict:
    """The loaded tiny models by SDVG Start's input names: target, Self-Forcing drafter, ImageReward, VAE, the test
    prompt's conditioning."""
    n = pack.nodes
    return {"target": n.SDVGLoadTarget.execute("krea-realtime-video-14b.safetensors", "generator_ema", "auto").args[0],
            "drafter": n.SDVGLoadDrafter.execute("self_forcing_dmd.pt").args[0],
            "image_reward": n.SDVGLoadImageReward.execute("ImageReward.pt", "auto", 16).args[0],
            "vae": pack.core_nodes.VAELoader.execute("wan_2.1_vae.safetensors").args[0],
            "positive": n.SDVGLoadPromptEmbeddings.execute(EMB_FILE).args[0]}


@contextmanager
def fake_host_env(base: Path) -> Iterator[tuple]:
    """The fake host rooted at `base` with the tiny models written: (pack, {node id: node class}) of the pack's nodes
    and the core nodes the workflows use."""
    with fake_host.installed(base) as pack:
        write_tiny_models(base, pack.sdvg_core)
        classes = {c.GET_SCHEMA().node_id: c for c in list(pack.nodes.NODES) + list(pack.core_nodes.CORE_NODES)}
        yield pack, classes


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """One fake host per test module that imports this fixture."""
    with fake_host_env(tmp_path_factory.mktemp("comfy")) as pack_and_classes:
        yield pack_and_classes


def api_for(wf_path: Path, classes: dict, tau: float | None = None, **widgets) -> dict:
    """API prompt of a workflow at the test size; tau goes to SDVG Route / SDVG Generate."""
    specs = wt.object_info_from_classes(classes.values())
    blocks = widgets.get("num_blocks", SMALL["num_blocks"])
    api = wt.swap_schedule_encoder(wt.swap_text_encoder(wt.to_api(wt.load(wf_path), specs), EMB_FILE), EMB_FILE, blocks)
    start = {k: v for k, v in {**SMALL, **widgets}.items() if k not in ("policy", "force_reject_first")}
    api = wt.set_inputs(api, "SDVGStart", **start)
    api = wt.set_inputs(api, "SDVGGenerate", **{**SMALL, **widgets, **({} if tau is None else {"tau": tau})})
    return api if tau is None else wt.set_inputs(api, "SDVGRoute", tau=tau)


def node_of(api: dict, class_type: str) -> str:
    return next(k for k, v in api.items() if v["class_type"] == class_type)


def report_of(pack, ex: MiniExecutor, api: dict, class_type: str = "SDVGFinish", nid: str | None = None) -> dict:
    import json

    nid = nid or node_of(api, class_type)
    return json.loads(ex.values[nid][3])
