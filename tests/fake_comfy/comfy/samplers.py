"""Fake comfy.samplers: the sampling path a SAMPLER sees, with ComfyUI's public shapes (0.33).

`KSAMPLER(sampler_function, extra_options)` scales the noise to the first sigma with the model's sampling, calls the
function as k_diffusion samplers are called (model, x, sigmas, extra_args=, callback=, disable=, **extra_options) and
un-scales the result; `CFGGuider` / the guider nodes keep the MODEL, its converted conds and cfg, load the MODEL
(`load_models_gpu`, ComfyUI's prepare_sampling), take the latent into and out of the model's latent space and pass the
sampler {"model_options": a copy of the MODEL's, "seed": the Noise node's seed}. Calling the guider as a model (a
sampler's `model(...)`) is not faked: SDVG's sampler never makes that call (tests assert it).
"""
from __future__ import annotations

import copy

import torch

import comfy.model_management

CALLS: list[str] = []  # guider model calls (must stay empty: SDVG runs the layers itself)


class Sampler:
    def sample(self, *args, **kwargs):
        raise NotImplementedError

    def max_denoise(self, model_wrap, sigmas) -> bool:
        return True


class KSamplerX0Inpaint:
    def __init__(self, model, sigmas):
        self.inner_model, self.sigmas = model, sigmas

    def __call__(self, x, sigma, denoise_mask=None, model_options={}, seed=None):
        return self.inner_model(x, sigma, model_options=model_options, seed=seed)


class KSAMPLER(Sampler):
    def __init__(self, sampler_function, extra_options={}, inpaint_options={}):
        self.sampler_function, self.extra_options, self.inpaint_options = sampler_function, extra_options, inpaint_options

    def sample(self, model_wrap, sigmas, extra_args, callback, noise, latent_image=None, denoise_mask=None,
               disable_pbar=False):
        extra_args["denoise_mask"] = denoise_mask
        model_k = KSamplerX0Inpaint(model_wrap, sigmas)
        sampling = model_wrap.inner_model.model_sampling
        noise = sampling.noise_scaling(sigmas[0], noise, latent_image, self.max_denoise(model_wrap, sigmas))
        total_steps = len(sigmas) - 1

        def k_callback(x):
            if callback is not None:
                callback(x["i"], x["denoised"], x["x"], total_steps)

        samples = self.sampler_function(model_k, noise, sigmas, extra_args=extra_args, callback=k_callback,
                                        disable=disable_pbar, **self.extra_options)
        return sampling.inverse_noise_scaling(sigmas[-1], samples)


def ksampler(sampler_name, extra_options={}, inpaint_options={}):
    raise NotImplementedError("the fake host has no k_diffusion samplers; SDVG's sampler is a KSAMPLER of its own")


def convert_cond(cond) -> list[dict]:
    """CONDITIONING [[tensor, {...}], ...] -> the guider's cond dicts (comfy.sampler_helpers.convert_cond)."""
    out = []
    for c in cond:
        temp = dict(c[1])
        temp["cross_attn"] = c[0]
        temp["model_conds"] = temp.get("model_conds", {})
        out.append(temp)
    return out


class CFGGuider:
    def __init__(self, model_patcher):
        self.model_patcher = model_patcher
        self.model_options = model_patcher.model_options
        self.original_conds: dict = {}
        self.cfg = 1.0

    def set_conds(self, positive, negative):
        self.inner_set_conds({"positive": positive, "negative": negative})

    def set_cfg(self, cfg):
        self.cfg = cfg

    def inner_set_conds(self, conds):
        for k, c in conds.items():
            self.original_conds[k] = convert_cond(c)

    def __call__(self, x, timestep, model_options={}, seed=None):
        CALLS.append("guider")
        raise NotImplementedError("the fake guider does not run its model")

    def sample(self, noise, latent_image, sampler, sigmas, denoise_mask=None, callback=None, disable_pbar=False,
               seed=None):
        self.conds = {k: [dict(c) for c in v] for k, v in self.original_conds.items()}
        comfy.model_management.load_models_gpu([self.model_patcher])  # prepare_sampling
        self.inner_model = self.model_patcher.model
        noise = noise.to(torch.float32)
        latent_image = latent_image.to(torch.float32)
        if torch.count_nonzero(latent_image) > 0:  # ComfyUI leaves an empty latent as it is
            latent_image = self.inner_model.process_latent_in(latent_image)
        options = copy.copy(self.model_options)
        options["transformer_options"] = dict(options.get("transformer_options", {}), sample_sigmas=sigmas)
        extra_args = {"model_options": options, "seed": seed}
        samples = sampler.sample(self, sigmas, extra_args, callback, noise, latent_image, denoise_mask, disable_pbar)
        out = self.inner_model.process_latent_out(samples.to(torch.float32))
        del self.inner_model, self.conds
        return out
