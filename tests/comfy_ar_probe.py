#!/usr/bin/env python3
"""SDVG Sampler (AR video) against core's own Sampler AR Video, in a real ComfyUI (0.33+; in-process, its python).

    $COMFYUI_PYTHON tests/comfy_ar_probe.py $COMFYUI_DIR <repo> WORKDIR [--rounds N]

A tiny random Wan 2.1 T2V network written as a safetensors file whose metadata `config` holds
{"transformer": {"causal_ar": true}} is loaded by core's own loader (comfy.sd.load_diffusion_model: model class
WAN21_CausalAR, network CausalWanModel); a full-width random Wan 2.1 VAE by comfy.sd.VAE. Then, with core's nodes
(Empty AR Video Latent / AR Video I2V, RandomNoise, BasicGuider, ManualSigmas, SamplerCustomAdvanced):

- target-only: core's SamplerARVideo and SDVG's sampler on the same MODEL, noise, sigmas -> max |difference| of the
  LATENTs, text-to-video and from a start image (AR Video I2V);
- with a drafter (a second causal_ar network, SDVG's policies draft_only and sdvg with a tiny ImageReward): SDVG's
  sampler LATENT vs the SDVG engine run directly on the same hosted models with core's noise rule (`ComfyARNoise`);
- `parity`: target-only against core's sampler over other conditionings (a ConditioningConcat's 1024 rows, a
  40-row one, a 600-row prompt past Wan's 512) and block sizes 1 / 2 / 3 / 4 with a shorter last block, text-to-video
  and from a start image: max |difference| and the blocks core makes, per case.

`--rounds N` (a benchmark, not a test): then N interleaved rounds of the text-to-video sampling, core's sampler then
SDVG's target-only with SDVG's cache emptied first (every block computed), as `t2v_rounds` (seconds) and
`t2v_time_ratio` (SDVG / core per round); the first calls (`t2v_seconds`) include one-off set-up on both sides.

Prints one JSON line; on a host without core's AR nodes: {"skipped": why}.
"""
from __future__ import annotations

import json
import os
import sys
import time

import comfy_probe_env

COMFY, REPO, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
ROUNDS = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 0
comfy_probe_env.start(COMFY)
import torch  # noqa: E402

W, H, SEED = 64, 48, 20260822
SIGMAS = "1.0, 0.9375, 0.8333333, 0.625, 0.0"  # Self-Forcing's four steps (ManualSigmas)
T2V_LENGTH, I2V_LENGTH = 33, 25  # 9 latent frames = 3 blocks of 3; 7 = the start frame + 2 blocks
# ComfyUI's Wan detection reads num_heads = dim / 128 and a 4096-wide text embedding (umT5-XXL)
SIZES = {"dim": 128, "ffn_dim": 256, "num_heads": 1, "num_layers": 2, "text_dim": 4096}


def write_causal_ar(path: str, seed: int) -> None:
    """A random Wan 2.1 T2V network (Wan parameter names) whose safetensors metadata marks it causal_ar."""
    from safetensors.torch import save_file

    from sdvg_pack.sdvg_core.models.wan import build_random
    from sdvg_pack.sdvg_core.models.wan_config import WanDiTConfig

    net = build_random(WanDiTConfig(name=f"tiny-causal-{seed}", **SIZES), seed=seed)
    metadata = {"config": json.dumps({"transformer": {"causal_ar": True}})}
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, path, metadata=metadata)


def main() -> dict:
    try:
        import comfy_extras.nodes_ar_video as ar
    except ImportError:
        return {"skipped": "this host has no core AR video nodes (comfy_extras/nodes_ar_video.py: ComfyUI 0.33+)"}
    import comfy.sd
    import comfy.utils
    import comfy_extras.nodes_custom_sampler as cs

    pack = comfy_probe_env.import_pack(REPO)
    from sdvg_pack.sdvg_core.demo.tiny import random_vae
    from sdvg_pack.sdvg_core.demo.vocab import synthetic_tiny_config, write_synthetic_vocab
    from sdvg_pack.sdvg_core.engine import comfy_ar
    from sdvg_pack.sdvg_core.engine.config import EngineConfig
    from sdvg_pack.sdvg_core.engine.engine import Engine
    from sdvg_pack.sdvg_core.engine.noise import ComfyARNoise
    from sdvg_pack.sdvg_core.engine.policy import DraftOnly, ThresholdPolicy
    from sdvg_pack.sdvg_core.engine.recipes import SelfForcingRecipe
    from sdvg_pack.sdvg_core.engine.state import PromptConditioning
    from sdvg_pack.sdvg_core.io.reward_files import random_scorer

    nodes = pack.nodes
    os.makedirs(WORK, exist_ok=True)
    target_file, drafter_file = os.path.join(WORK, "tiny_causal_target.safetensors"), os.path.join(WORK, "tiny_causal_drafter.safetensors")
    write_causal_ar(target_file, seed=11)
    write_causal_ar(drafter_file, seed=12)
    target = comfy.sd.load_diffusion_model(target_file)
    drafter = comfy.sd.load_diffusion_model(drafter_file)
    vae = comfy.sd.VAE(sd={k: v.to(torch.bfloat16) for k, v in random_vae(3, preset="wan2.1-vae").state_dict().items()})
    torch.manual_seed(3)
    emb = torch.randn(1, 512, SIZES["text_dim"]) * 0.3
    emb[:, 40:] = 0  # umT5's padding rows (ComfyUI's wan encoder zeroes them)
    conditioning = [[emb, {}]]
    prompt = "a corgi puppy runs through a sunny meadow"
    out: dict = {"model_class": type(target.model).__name__,
                 "network": type(target.model.diffusion_model).__name__}

    sigmas = cs.ManualSigmas.execute(SIGMAS).args[0]
    noise = cs.RandomNoise.execute(SEED).args[0]

    def sample(model, sampler, latent, cond=None):
        guider = cs.BasicGuider.execute(model, conditioning if cond is None else cond).args[0]
        return cs.SamplerCustomAdvanced.execute(noise, guider, sampler, sigmas, latent).args[0]["samples"].float()

    def sdvg(**kw):
        opts = {"num_frame_per_block": 3, "vae": vae, "prompt": prompt, "policy": "target_only", "tau": -5.0,
                "cache_gb": 0.0, "filename_prefix": "sdvg_ar_probe/SDVG_AR", **kw}
        return nodes.ar_sampler.SDVGSamplerARVideo.execute(**opts).args[0]

    core = ar.SamplerARVideo.execute(3).args[0]
    with torch.inference_mode():
        # text-to-video, target only
        latent = ar.EmptyARVideoLatent.execute(W, H, T2V_LENGTH, 1).args[0]
        t0 = time.perf_counter()
        theirs = sample(target, core, latent)
        t1 = time.perf_counter()
        ours = sample(target, sdvg(), latent)
        t2 = time.perf_counter()
        out["t2v_shape"] = list(ours.shape)
        out["t2v_max_abs_diff"] = float((ours - theirs).abs().max())
        out["t2v_scale"] = float(theirs.abs().max())
        out["t2v_seconds"] = {"core": round(t1 - t0, 2), "sdvg": round(t2 - t1, 2)}
        rounds = []
        for _ in range(ROUNDS):
            nodes.shared_memo.MEMO.clear()
            a = time.perf_counter()
            sample(target, core, latent)
            b = time.perf_counter()
            sample(target, sdvg(), latent)
            rounds.append({"core": round(b - a, 4), "sdvg": round(time.perf_counter() - b, 4)})
        if rounds:
            out["t2v_rounds"] = rounds
            out["t2v_time_ratio"] = [round(r["sdvg"] / r["core"], 3) for r in rounds]
        # from a start image (AR Video I2V: the start latent on a clone of the MODEL)
        image = torch.rand(1, H + 16, W + 16, 3, generator=torch.Generator().manual_seed(5))
        i2v_model, i2v_latent = ar.ARVideoI2V.execute(target, vae, image, W, H, I2V_LENGTH, 1).args
        theirs = sample(i2v_model, core, i2v_latent)
        ours = sample(i2v_model, sdvg(), i2v_latent)
        out["i2v_shape"] = list(ours.shape)
        out["i2v_max_abs_diff"] = float((ours - theirs).abs().max())
        out["i2v_start_frame_diff"] = float((ours[:, :, :1] - theirs[:, :, :1]).abs().max())

        # with a drafter: the sampler's blocks are the engine's on core's noise rule
        vocab = write_synthetic_vocab(os.path.join(WORK, "vocab.txt"))
        scorer = nodes.hosted.HostedScorer(random_scorer(synthetic_tiny_config(vocab), vocab, seed=4), "probe-scorer",
                                           "tiny random ImageReward")
        for name, policy, kw in (("draft_only", DraftOnly(force_reject_first=True), {"policy": "draft_only"}),
                                 ("sdvg", ThresholdPolicy(tau=-5.0), {"policy": "sdvg", "image_reward": scorer})):
            ours = sample(target, sdvg(drafter=drafter, **kw), latent)
            plan = comfy_ar.sigma_plan(sigmas)
            recipe = comfy_ar.with_plan(SelfForcingRecipe(), plan)
            t, d = nodes.comfy_model.host_comfy_model(target, "target"), nodes.comfy_model.host_comfy_model(drafter, "drafter")
            spec = comfy_ar.StartLatentSpec(PromptConditioning.make(prompt, emb), W, H, 3, SEED)
            video = noise.generate_noise(latent).float()
            engine = Engine(t.dit, nodes.hosted.host_vae(vae), d.dit, scorer, EngineConfig(recipe=recipe),
                            noise_fn=ComfyARNoise(num_renoise=plan.num_renoise, video=video))
            state = comfy_ar.generate(engine, spec, policy)
            want = target.model.process_latent_out(comfy_ar.video_latents(state)).float()
            out[f"{name}_producers"] = [b.producer for b in state.blocks]
            out[f"{name}_max_abs_diff_vs_engine"] = float((ours - want).abs().max())

        # target-only parity with core's sampler over other conditionings, block sizes and a shorter last block
        torch.manual_seed(4)
        other = torch.randn(1, 512, SIZES["text_dim"]) * 0.3
        other[:, 30:] = 0
        long = torch.randn(1, 600, SIZES["text_dim"]) * 0.3  # a prompt of 599 tokens + </s>: no padding row
        conds = {"concat_1024_rows": [[torch.cat([emb, other], 1), {}]], "short_40_rows": [[emb[:, :40], {}]],
                 "prompt_600_rows": [[long, {}]]}
        parity = {}

        def case(name, model, latent, F, cond=None, first=0):
            theirs = sample(model, ar.SamplerARVideo.execute(F).args[0], latent, cond)
            ours = sample(model, sdvg(num_frame_per_block=F), latent, cond)
            T = latent["samples"].shape[2]
            parity[name] = {"max_abs_diff": float((ours - theirs).abs().max()), "scale": float(theirs.abs().max()),
                            "blocks": [min(F, T - s) for s in range(first, T, F)], "shape": list(ours.shape)}

        for name, cond in conds.items():
            case(f"t2v_{name}", target, latent, 3, cond)
        short = ar.EmptyARVideoLatent.execute(W, H, 25, 1).args[0]  # 7 latent frames
        i2v_model, i2v_short = ar.ARVideoI2V.execute(target, vae, image, W, H, 21, 1).args  # the start + 5
        for F in (1, 2, 3, 4):
            case(f"t2v_F{F}_7_frames", target, short, F)
            case(f"i2v_F{F}_1+5_frames", i2v_model, i2v_short, F, first=1)
        out["parity"] = parity
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
