"""The routing decoder inside a real ComfyUI (skipped unless COMFYUI_DIR is set): core's Load VAE of a tiny decoder
(lighttaew2_1 in models/vae_approx, on hosts whose Load VAE knows TAEHV: 0.33 and later) goes into SDVG Generate's
`route_vae`; SDVG Load Routing Decoder reads a taew2_1 file of models/vae_approx on every host; the core's decoder
gives ComfyUI's own TAEHV frames.

    COMFYUI_DIR=/path/to/ComfyUI .venv/bin/python -m pytest -q tests/test_comfy_host_route.py
"""
from __future__ import annotations

import pytest

from test_comfy_host import (COMFYUI_DIR, MODEL_FOLDERS, REPO, Server, api_for, combo_options, lay_out_host, probe,
                             reports, with_report_probe, write_models)

pytestmark = [
    pytest.mark.slow,  # starts a real ComfyUI server
    pytest.mark.skipif(not COMFYUI_DIR, reason="set COMFYUI_DIR to a ComfyUI checkout to run real-host tests")]
LIGHT, TAEW = "lighttaew2_1.safetensors", "taew2_1.safetensors"  # names ComfyUI / the core read the latents from
MAX_DIFF = 1e-4  # fp32 convolutions in two implementations of one network (measured: below 1e-6)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from sdvg_core.demo.tiny_taehv import random_taehv
    from sdvg_core.io.checkpoint import save_state_dict

    root = tmp_path_factory.mktemp("comfy_route")
    write_models(root)
    approx = root / "models" / "vae_approx"
    approx.mkdir(parents=True)
    # ComfyUI builds its TAEHV at taew2_1's widths: the file has them (random weights, fp32: no latent format)
    for name, seed in ((LIGHT, 1), (TAEW, 2)):
        save_state_dict(random_taehv("taew2_1", seed=seed).state_dict(), approx / name)
    return lay_out_host(root, folders=(*MODEL_FOLDERS, "vae_approx"))


@pytest.fixture(scope="module")
def server(root):
    s = Server(root, "route")
    yield s
    s.close()


def _generate_with(server: Server, loader: dict) -> dict:
    """SDVG Generate (the example workflow at the test size, every draft kept) routing on `loader`'s output 0."""
    api = api_for(server, REPO / "workflows" / "sdvg_generate.json", tau=-3.0)
    gen = next(k for k, v in api.items() if v["class_type"] == "SDVGGenerate")
    api["990"] = loader
    api[gen]["inputs"]["route_vae"] = ["990", 0]
    api, probes = with_report_probe(api)
    return next(iter(reports(server.queue(api), probes).values()))


def test_core_load_vae_of_a_tiny_decoder_feeds_route_vae(server):
    options = combo_options(server.object_info["VAELoader"]["input"]["required"]["vae_name"])
    if LIGHT not in options:
        pytest.skip(f"this host's Load VAE does not list {LIGHT} (no TAEHV before ComfyUI 0.33): SDVG Load Routing "
                    f"Decoder reads it instead (next test)")
    assert "VAE" in server.object_info["SDVGGenerate"]["input"]["optional"]["route_vae"][0].split(",")
    report = _generate_with(server, {"class_type": "VAELoader", "inputs": {"vae_name": LIGHT}})
    assert report["route_decoder"] == "taehv:comfy-taehv" and report["route_decode_frames"] > 0
    assert report["output_decoder"] == "wan_vae"


def test_sdvg_load_routing_decoder_reads_vae_approx_on_every_host(server):
    info = server.object_info["SDVGLoadRouteDecoder"]["input"]["required"]["file"]
    assert {LIGHT, TAEW} <= set(combo_options(info))
    report = _generate_with(server, {"class_type": "SDVGLoadRouteDecoder",
                                     "inputs": {"file": TAEW, "decode_output": False}})
    assert report["route_decoder"] == "taehv:taew2_1" and report["route_decode_frames"] > 0


def test_the_cores_decoder_gives_comfyuis_taehv_frames(root):
    got = probe("comfy_taehv_probe.py", str(root / "models" / "vae_approx" / LIGHT))
    if "skipped" in got:
        pytest.skip(got["skipped"])
    assert got["comfy_class"] == "TAEHV" and got["latent_format"] == "None"
    assert got["shape"] == got["comfy_shape"] == [1, 3, 9, 48, 64]
    assert got["max_abs_diff"] <= MAX_DIFF, got
