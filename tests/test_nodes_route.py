"""The routing decoder in the node layer (fake host): SDVG Load Routing Decoder reads a tiny decoder from
models/vae_approx, core's Load VAE holding a TAEHV goes straight into `route_vae`; SDVG Generate routes on it, the
video stays the VAE's unless the loader says to decode it too, and the report names it."""
from __future__ import annotations

import json

import pytest
import torch

import fake_host
from node_env import EMB_FILE, PROMPT, loaded_models, write_tiny_models

TINY_FILE = "taew2_1_tiny.safetensors"  # a taew2_1 name (the DiT's normalised latents) at the tiny widths
SIZE = {"width": 64, "height": 48, "num_blocks": 3}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy")
    with fake_host.installed(base) as pack:
        write_tiny_models(base, pack.sdvg_core)
        tiny = __import__(pack.sdvg_core.__name__ + ".demo.tiny_taehv", fromlist=["x"])
        ckpt = __import__(pack.sdvg_core.__name__ + ".io.checkpoint", fromlist=["x"])
        (base / "models" / "vae_approx").mkdir(parents=True, exist_ok=True)
        ckpt.save_state_dict(tiny.tiny_taehv(seed=9).state_dict(), base / "models" / "vae_approx" / TINY_FILE)
        yield pack, tiny


def _generate(pack, route_vae=None, tau: float = -3.0):
    m = loaded_models(pack)
    out = pack.nodes.SDVGGenerate.execute(m["target"], m["vae"], m["positive"], PROMPT, seed=3, tau=tau,
                                          drafter=m["drafter"], image_reward=m["image_reward"], route_vae=route_vae,
                                          **SIZE)
    return out.args[0], json.loads(out.args[3])


@pytest.mark.slow
def test_generate_routes_on_a_tiny_decoder_from_vae_approx(env):
    pack, _ = env
    loader = pack.nodes.SDVGLoadRouteDecoder
    assert TINY_FILE in loader.GET_SCHEMA().inputs[0].widget["options"]  # the folder's files in the combo
    routed = loader.execute(TINY_FILE).args[0]
    frames, report = _generate(pack, routed)
    plain_frames, plain = _generate(pack)
    assert report["route_decoder"] == "taehv:taew2_1_tiny" and report["output_decoder"] == "wan_vae"
    assert report["route_decode_frames"] > 0 and plain["route_decoder"] == "wan_vae"
    assert plain["route_decode_frames"] == 0
    # every draft kept at the slider's lowest tau either way: the same latents, the same (VAE-decoded) video
    assert [b["decision"] for b in report["blocks"]] == [b["decision"] for b in plain["blocks"]]
    assert torch.equal(frames, plain_frames)
    assert [b["frame_scores"] for b in report["blocks"][1:]] != [b["frame_scores"] for b in plain["blocks"][1:]]
    # decode_output: the tiny decoder decodes the video too (a fast preview)
    preview = loader.execute(TINY_FILE, None, True).args[0]
    preview_frames, rep = _generate(pack, preview)
    assert rep["output_decoder"] == "taehv:taew2_1_tiny" and preview_frames.shape == frames.shape
    assert not torch.equal(preview_frames, frames)


def test_core_load_vae_with_a_taehv_is_keyed_by_its_weights(env):
    """A ComfyUI VAE holding a TAEHV (as core's Load VAE makes one, no latent format: raw latents) is taken into
    the core's TAEHV once per object and keyed by its weights: a reload of the same weights keeps its cached results;
    the full Wan VAE, or a TAEHV ComfyUI read with another latent format, is refused with what to connect instead."""
    pack, tiny = env
    core = pack.core_nodes
    rd = pack.nodes.routing

    def comfy_vae(seed):
        net = tiny.tiny_taehv(seed=seed)
        net.latent_format = None  # ComfyUI's TAEHV attribute: None for lighttaew2_1 (raw latents)
        return core.FakeComfyVAE(net)

    a, b, c = comfy_vae(9), comfy_vae(9), comfy_vae(10)
    ha, hb, hc = rd.from_comfy_vae(a), rd.from_comfy_vae(b), rd.from_comfy_vae(c)
    assert rd.from_comfy_vae(a) is ha and ha.key == hb.key != hc.key
    assert ha.config.latent_space == "raw"
    _, report = _generate(pack, a)
    assert report["route_decoder"].startswith("taehv:") and report["route_decode_frames"] > 0
    wan = loaded_models(pack)["vae"]
    with pytest.raises(pack.nodes.surface.SDVGError, match="not a tiny decoder"):
        rd.from_comfy_vae(wan)
    hunyuan = comfy_vae(11)
    hunyuan.first_stage_model.latent_format = type("HunyuanVideo", (), {})
    with pytest.raises(pack.nodes.surface.SDVGError, match="HunyuanVideo"):
        rd.from_comfy_vae(hunyuan)


def test_the_loader_asks_for_a_file_or_a_vae(env):
    pack, _ = env
    with pytest.raises(pack.nodes.surface.SDVGError, match="models/vae_approx"):
        pack.nodes.SDVGLoadRouteDecoder.execute("none")
    with pytest.raises(pack.nodes.surface.SDVGError, match="not found in models/vae_approx"):
        pack.nodes.SDVGLoadRouteDecoder.execute("missing.safetensors")


def test_start_says_which_decoder_routes(env):
    pack, _ = env
    m = loaded_models(pack)
    routed = pack.nodes.SDVGLoadRouteDecoder.execute(TINY_FILE).args[0]
    out = pack.nodes.SDVGStart.execute(m["target"], m["vae"], m["positive"], PROMPT, drafter=m["drafter"],
                                       image_reward=m["image_reward"], route_vae=routed, **SIZE)
    run = out.args[0]
    assert "routing decoder: taew2_1_tiny.safetensors" in pack.nodes.session.describe_start(run)
    assert run.session.route_vae is routed.decoder
    engine = run.session.engine()
    assert engine.route_decoder == "taehv:taew2_1_tiny" and engine.output_decoder == "wan_vae"
