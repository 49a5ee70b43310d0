"""Stand-ins for the core ComfyUI nodes the example workflows use, with the real input names and widget specs
of the newest host tested (ComfyUI 0.33.0 /object_info; `tests/test_comfy_host.py` compares them with a real server
and names every difference; HOST_CHANGES lists what older hosts lack, each allowed only on a host older than it).

They run on the tiny test models: VAELoader builds the VAE from a file in models/vae, UNETLoader wraps a Wan
DiT file into a ComfyUI-like MODEL, the video/preview nodes only record what they were given. CLIPLoader and
CLIPTextEncode refuse to run (the umT5-XXL encoder cannot be loaded in tests); tests swap them for
SDVG Load Prompt Embeddings, as the real-host test does.
"""
from __future__ import annotations

import os

import torch
from comfy_api.latest import io, ui

import comfy.model_management as mm
import comfy.model_patcher
import folder_paths

CLIP_TYPES = ["stable_diffusion", "stable_cascade", "sd3", "stable_audio", "mochi", "ltxv", "pixart", "cosmos",
              "lumina2", "wan", "hidream", "chroma", "ace", "omnigen2", "qwen_image", "hunyuan_image"]
UNET_DTYPES = ["default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2"]
SDVG_CORE = None  # set by the test: the pack's sdvg_core package (the same module objects the nodes use)


# The fake MODEL's latent format: the model works on (raw - LATENT_SHIFT) * LATENT_SCALE (ComfyUI's process_latent_in;
# Wan 2.1's own is per-channel mean/std). Any invertible map does: a sampler must hand back the model's space.
LATENT_SHIFT, LATENT_SCALE = 0.25, 2.0


def latent_in(raw: torch.Tensor) -> torch.Tensor:
    return (raw - LATENT_SHIFT) * LATENT_SCALE


def latent_out(z: torch.Tensor) -> torch.Tensor:
    return z / LATENT_SCALE + LATENT_SHIFT


class FakeComfyVAE:
    """Like comfy.sd.VAE: the network as `first_stage_model`, plus its dtype; encode/decode in ComfyUI's raw latent
    space (images [B, H, W, 3] in 0..1), here SDVG's Wan VAE mapped through the fake latent format."""

    def __init__(self, first_stage_model: torch.nn.Module, dtype: torch.dtype = torch.float32):
        self.first_stage_model, self.vae_dtype = first_stage_model, dtype

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        pixels = images[..., :3].movedim(-1, 0).unsqueeze(0) * 2 - 1  # [1, 3, T, H, W] in [-1, 1]
        z, _ = self.first_stage_model.encode_stream(pixels.float(), None)
        return latent_out(z.float())

    def decode(self, raw: torch.Tensor) -> torch.Tensor:
        pixels, _ = self.first_stage_model.decode_stream(latent_in(raw.float()), None)
        return (pixels[0].clamp(-1, 1) * 0.5 + 0.5).permute(1, 2, 3, 0)  # [T, H, W, 3]


class FakeWanModel(torch.nn.Module):
    """ComfyUI's WanModel as the node layer sees it: the Wan submodules and size attributes, no `.config`."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        cfg = net.config
        for name in ("patch_embedding", "text_embedding", "time_embedding", "time_projection", "blocks", "head"):
            setattr(self, name, getattr(net, name))
        self.model_type = "t2v"
        for a in ("dim", "ffn_dim", "num_heads", "num_layers", "text_dim", "text_len", "in_dim", "out_dim",
                  "freq_dim", "eps", "qk_norm", "cross_attn_norm", "patch_size"):
            setattr(self, a, getattr(cfg, a))


class FakeFlowSampling:
    """A flow model's sampling (ComfyUI's CONST): noise scaled to sigma, the result divided by 1 - the last sigma."""

    def noise_scaling(self, sigma, noise, latent_image, max_denoise=False):
        sigma = torch.as_tensor(sigma).reshape(-1, *([1] * (noise.ndim - 1)))
        return sigma * noise + (1.0 - sigma) * latent_image

    def inverse_noise_scaling(self, sigma, latent):
        return latent / (1.0 - torch.as_tensor(sigma).reshape(-1, *([1] * (latent.ndim - 1))))


class FakeBaseModel(torch.nn.Module):
    def __init__(self, diffusion_model: torch.nn.Module, dtype: torch.dtype):
        super().__init__()
        self.diffusion_model, self._dtype, self.manual_cast_dtype = diffusion_model, dtype, None
        self.model_sampling = FakeFlowSampling()

    def get_dtype(self) -> torch.dtype:
        return self._dtype

    def process_latent_in(self, latent: torch.Tensor) -> torch.Tensor:
        return latent_in(latent)

    def process_latent_out(self, latent: torch.Tensor) -> torch.Tensor:
        return latent_out(latent)


class CLIPLoader(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="CLIPLoader", category="advanced/loaders", inputs=[
            io.Combo.Input("clip_name", options=folder_paths.get_filename_list("text_encoders")),
            io.Combo.Input("type", options=CLIP_TYPES),
            io.Combo.Input("device", options=["default", "cpu"], optional=True)],
            outputs=[io.Clip.Output()])

    @classmethod
    def execute(cls, **kw):
        raise RuntimeError("the umT5-XXL text encoder cannot be loaded in tests: swap in SDVG Load Prompt Embeddings")


class CLIPTextEncode(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="CLIPTextEncode", category="conditioning", inputs=[
            io.String.Input("text", multiline=True, dynamic_prompts=True), io.Clip.Input("clip")],
            outputs=[io.Conditioning.Output()])

    @classmethod
    def execute(cls, **kw):
        raise RuntimeError("the umT5-XXL text encoder cannot be loaded in tests: swap in SDVG Load Prompt Embeddings")


class ConditioningConcat(io.ComfyNode):
    """One entry per entry of conditioning_to, its rows followed by the first entry of conditioning_from's (dim 1)."""

    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="ConditioningConcat", category="model/conditioning/transform", inputs=[
            io.Conditioning.Input("conditioning_to"), io.Conditioning.Input("conditioning_from")],
            outputs=[io.Conditioning.Output()])

    @classmethod
    def execute(cls, conditioning_to, conditioning_from):
        rows = conditioning_from[0][0]
        return io.NodeOutput([[torch.cat((t, rows), 1), dict(extra)] for t, extra in conditioning_to])


class ConditioningCombine(io.ComfyNode):
    """Both lists of entries, one after the other (core's sampling runs the model per entry and averages)."""

    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="ConditioningCombine", category="model/conditioning/transform", inputs=[
            io.Conditioning.Input("conditioning_1"), io.Conditioning.Input("conditioning_2")],
            outputs=[io.Conditioning.Output()])

    @classmethod
    def execute(cls, conditioning_1, conditioning_2):
        return io.NodeOutput(conditioning_1 + conditioning_2)


class VAELoader(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="VAELoader", category="loaders", inputs=[
            io.Combo.Input("vae_name", options=folder_paths.get_filename_list("vae") + ["pixel_space"])],
            outputs=[io.Vae.Output()])

    @classmethod
    def execute(cls, vae_name):
        from safetensors.torch import load_file
        sd = load_file(folder_paths.get_full_path_or_raise("vae", vae_name))
        return io.NodeOutput(FakeComfyVAE(SDVG_CORE.models.vae.WanVAE.from_state_dict(sd)))


class UNETLoader(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="UNETLoader", category="advanced/loaders", inputs=[
            io.Combo.Input("unet_name", options=folder_paths.get_filename_list("diffusion_models")),
            io.Combo.Input("weight_dtype", options=UNET_DTYPES)],
            outputs=[io.Model.Output()])

    @classmethod
    def execute(cls, unet_name, weight_dtype):
        net, cfg, _ = SDVG_CORE.io.checkpoint.load_wan_dit(folder_paths.get_full_path_or_raise("diffusion_models", unet_name))
        base = FakeBaseModel(FakeWanModel(net), torch.float32)
        return io.NodeOutput(comfy.model_patcher.ModelPatcher(base, mm.get_torch_device(), mm.unet_offload_device()))


class LoraLoaderModelOnly(io.ComfyNode):
    """A clone of the MODEL with the LoRA's weight deltas as patches (ComfyUI applies them when it loads the model).
    Reads LoRA files in the generic format ComfyUI maps onto a model's state-dict keys: `<key>.lora_A.weight` /
    `<key>.lora_B.weight` (+ optional `<key>.alpha`), delta = strength * alpha / rank * B @ A."""

    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="LoraLoaderModelOnly", category="loaders", inputs=[
            io.Model.Input("model"), io.Combo.Input("lora_name", options=folder_paths.get_filename_list("loras")),
            io.Float.Input("strength_model", default=1.0, min=-100.0, max=100.0, step=0.01)],
            outputs=[io.Model.Output()])

    @classmethod
    def execute(cls, model, lora_name, strength_model):
        from safetensors.torch import load_file

        if strength_model == 0:
            return io.NodeOutput(model)
        sd = load_file(folder_paths.get_full_path_or_raise("loras", lora_name))
        patches = {}
        for k, a in sd.items():
            if k.endswith(".lora_A.weight"):
                x = k[:-len(".lora_A.weight")]
                b = sd[x + ".lora_B.weight"]
                alpha = float(sd[x + ".alpha"]) if x + ".alpha" in sd else a.shape[0]
                patches[x + ".weight"] = (b.float() @ a.float()) * (alpha / a.shape[0])
        clone = model.clone()
        clone.add_patches(patches, strength_model)
        return io.NodeOutput(clone)


class CreateVideo(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="CreateVideo", category="image/video", inputs=[
            io.Image.Input("images"), io.Float.Input("fps", default=30.0, min=1.0, max=120.0, step=1.0),
            io.Custom("AUDIO").Input("audio", optional=True),
            io.Int.Input("bit_depth", default=8, min=8, max=10, step=2, optional=True,
                         display_mode=io.NumberDisplay.number)], outputs=[io.Video.Output()])

    @classmethod
    def execute(cls, images, fps, audio=None, bit_depth=8):
        return io.NodeOutput({"images": images, "fps": fps, "bit_depth": bit_depth})


def _encoding(crf_default: float, crf_max: float):
    return io.DynamicCombo.Input("encoding", optional=True, options=[
        io.DynamicCombo.Option("auto", []),
        io.DynamicCombo.Option("re-encode", [
            io.Float.Input("crf", default=crf_default, min=0.0, max=crf_max, step=1.0),
            io.Combo.Input("color_space", options=["auto", "sRGB", "HDR", "HDR PQ"], default="auto")])])


def _codec(codecs: list[str], optional: bool = False, hidden: bool = False):
    """Save Video's codec choice (0.33: nested under `format`, and kept as a hidden optional input for old prompts);
    the encoding defaults are H.264's and AV1's CRF ranges (0-51 / 0-63)."""
    encodings = {"h264": (23.0, 51.0), "av1": (30.0, 63.0)}
    return io.DynamicCombo.Input("codec", optional=optional, extra_dict={"hidden": True} if hidden else None, options=[
        io.DynamicCombo.Option(c, [_encoding(*encodings[c])] if c in encodings else []) for c in codecs])


SAVE_VIDEO_FORMATS = {"auto": ["auto", "h264", "av1"], "mp4": ["auto", "h264", "av1"], "mkv": ["auto", "h264", "av1"],
                      "webm": ["auto", "av1"]}


class SaveVideo(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="SaveVideo", category="image/video", is_output_node=True, inputs=[
            io.Video.Input("video"), io.String.Input("filename_prefix", default="video/ComfyUI"),
            io.DynamicCombo.Input("format", options=[io.DynamicCombo.Option(f, [_codec(c)])
                                                     for f, c in SAVE_VIDEO_FORMATS.items()]),
            _codec(SAVE_VIDEO_FORMATS["auto"], optional=True, hidden=True)], outputs=[io.Video.Output()])

    @classmethod
    def execute(cls, video, filename_prefix, format, codec=None):
        if not isinstance(format, dict) or not isinstance(format.get("codec"), dict):  # as 0.33: nested dicts
            raise TypeError(f"SaveVideo got format={format!r}: the prompt must name format.codec (0.33 dynamic combo)")
        return io.NodeOutput(video, ui={"images": [{"filename": f"{filename_prefix}_00001.mp4",
                                                    "frames": int(video["images"].shape[0]), "fps": video["fps"]}],
                                        "animated": (True,)})


class PreviewImage(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="PreviewImage", category="image", is_output_node=True,
                         inputs=[io.Image.Input("images")], outputs=[io.Image.Output()])

    @classmethod
    def execute(cls, images):
        return io.NodeOutput(images, ui=ui.PreviewImage(images))


class PreviewAny(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="PreviewAny", category="utils", is_output_node=True,
                         inputs=[io.AnyType.Input("source")], outputs=[io.String.Output()])

    @classmethod
    def execute(cls, source):
        return io.NodeOutput(str(source), ui=ui.PreviewText(str(source)))


class PrimitiveStringMultiline(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="PrimitiveStringMultiline", category="utils/primitive",
                         inputs=[io.String.Input("value", multiline=True)], outputs=[io.String.Output()])

    @classmethod
    def execute(cls, value):
        return io.NodeOutput(value)


def _input_files(kind: str) -> list[str]:
    folder = folder_paths.get_input_directory()
    files = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return folder_paths.filter_files_content_types([f for f in files if os.path.isfile(os.path.join(folder, f))], [kind])


def _rgb_frames(frames) -> torch.Tensor:
    """uint8 RGB frames (a list of [H, W, 3] arrays) as ComfyUI's IMAGE: float32 [T, H, W, 3] in 0..1."""
    import numpy as np

    return torch.from_numpy(np.stack(frames).astype(np.float32) / 255.0)


class LoadImage(io.ComfyNode):
    """Core Load Image: a picture of the input folder as IMAGE [1, H, W, 3] and its MASK."""

    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="LoadImage", category="image", inputs=[
            io.Combo.Input("image", options=_input_files("image"), upload="image")],
            outputs=[io.Image.Output(display_name="IMAGE"), io.Mask.Output(display_name="MASK")])

    @classmethod
    def execute(cls, image):
        import numpy as np
        from PIL import Image

        with Image.open(folder_paths.get_annotated_filepath(image)) as im:
            frames = _rgb_frames([np.asarray(im.convert("RGB"))])
        return io.NodeOutput(frames, torch.zeros(1, frames.shape[1], frames.shape[2]))


class FakeVideo:
    """What Load Video outputs (ComfyUI's VideoFromFile): a file decoded when its components are asked for."""

    def __init__(self, path: str):
        self.path = path

    def get_components(self):
        import av

        with av.open(self.path) as c:
            stream = c.streams.video[0]
            frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
            rate = float(stream.average_rate or 0)
        return type("VideoComponents", (), {"images": _rgb_frames(frames), "audio": None, "frame_rate": rate})()


class LoadVideo(io.ComfyNode):
    """Core Load Video: a video of the input folder as VIDEO."""

    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="LoadVideo", category="video", inputs=[
            io.Combo.Input("file", options=_input_files("video"), upload="video")], outputs=[io.Video.Output()])

    @classmethod
    def execute(cls, file):
        return io.NodeOutput(FakeVideo(folder_paths.get_annotated_filepath(file)))


class GetVideoComponents(io.ComfyNode):
    """Core Get Video Components: a VIDEO's frames as IMAGE, its audio, frame rate, bit depth and colour space."""

    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="GetVideoComponents", category="video", inputs=[io.Video.Input("video")],
                         outputs=[io.Image.Output(display_name="images"), io.Custom("AUDIO").Output(display_name="audio"),
                                  io.Float.Output(display_name="fps"), io.Int.Output(display_name="bit_depth"),
                                  io.Combo.Output(display_name="color_space")])

    @classmethod
    def execute(cls, video):
        c = video.get_components()
        return io.NodeOutput(c.images, c.audio, float(c.frame_rate), 8, "sRGB")


# ------------------------------------------------------------------------------------------------ AR video (0.33)
def _video_latent(width: int, height: int, length: int, batch_size: int) -> torch.Tensor:
    return torch.zeros([batch_size, 16, (length - 1) // 4 + 1, height // 8, width // 8])


class EmptyARVideoLatent(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="EmptyARVideoLatent", category="model/latent/autoregressive", inputs=[
            io.Int.Input("width", default=832, min=16, max=8192, step=16),
            io.Int.Input("height", default=480, min=16, max=8192, step=16),
            io.Int.Input("length", default=81, min=1, max=1024, step=4),
            io.Int.Input("batch_size", default=1, min=1, max=64)], outputs=[io.Latent.Output(display_name="LATENT")])

    @classmethod
    def execute(cls, width, height, length, batch_size):
        return io.NodeOutput({"samples": _video_latent(width, height, length, batch_size)})


class ARVideoI2V(io.ComfyNode):
    """The start image VAE-encoded into the MODEL clone's transformer_options ar_config initial_latent (raw latents)."""

    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="ARVideoI2V", category="model/conditioning/autoregressive", inputs=[
            io.Model.Input("model"), io.Vae.Input("vae"), io.Image.Input("start_image"),
            io.Int.Input("width", default=832, min=16, max=8192, step=16),
            io.Int.Input("height", default=480, min=16, max=8192, step=16),
            io.Int.Input("length", default=81, min=1, max=1024, step=4),
            io.Int.Input("batch_size", default=1, min=1, max=64)],
            outputs=[io.Model.Output(display_name="MODEL"), io.Latent.Output(display_name="LATENT")])

    @classmethod
    def execute(cls, model, vae, start_image, width, height, length, batch_size):
        image = torch.nn.functional.interpolate(start_image[:1].movedim(-1, 1), size=(height, width), mode="bilinear")
        m = model.clone()
        options = dict(m.model_options.get("transformer_options", {}))
        options["ar_config"] = {"initial_latent": vae.encode(image.movedim(1, -1)[:, :, :, :3])}
        m.model_options = {**m.model_options, "transformer_options": options}
        return io.NodeOutput(m, {"samples": _video_latent(width, height, length, batch_size)})


class RandomNoise(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="RandomNoise", category="model/sampling/noise", inputs=[
            io.Int.Input("noise_seed", default=0, min=0, max=0xffffffffffffffff, control_after_generate=True)],
            outputs=[io.Noise.Output()])

    @classmethod
    def execute(cls, noise_seed):
        class Noise:  # comfy.sample.prepare_noise: one CPU draw over the latent from torch.manual_seed(seed)
            seed = noise_seed

            def generate_noise(self, latent):
                gen = torch.Generator(device="cpu").manual_seed(noise_seed)
                return torch.randn(latent["samples"].size(), generator=gen, dtype=torch.float32)
        return io.NodeOutput(Noise())


class BasicGuider(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="BasicGuider", category="model/sampling/guiders", inputs=[
            io.Model.Input("model"), io.Conditioning.Input("conditioning")], outputs=[io.Guider.Output()])

    @classmethod
    def execute(cls, model, conditioning):
        import comfy.samplers

        guider = comfy.samplers.CFGGuider(model)
        guider.inner_set_conds({"positive": conditioning})
        return io.NodeOutput(guider)


class ManualSigmas(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="ManualSigmas", category="model/sampling/sigmas", inputs=[
            io.String.Input("sigmas", default="1, 0.5", multiline=False)], outputs=[io.Sigmas.Output()])

    @classmethod
    def execute(cls, sigmas):
        import re

        return io.NodeOutput(torch.FloatTensor([float(v) for v in re.findall(r"[-+]?(?:\d*\.*\d+)", sigmas)]))


class SamplerCustomAdvanced(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="SamplerCustomAdvanced", category="model/sampling/custom", inputs=[
            io.Noise.Input("noise"), io.Guider.Input("guider"), io.Sampler.Input("sampler"), io.Sigmas.Input("sigmas"),
            io.Latent.Input("latent_image")],
            outputs=[io.Latent.Output(display_name="output"), io.Latent.Output(display_name="denoised_output")])

    @classmethod
    def execute(cls, noise, guider, sampler, sigmas, latent_image):
        import comfy.utils

        latent = latent_image["samples"]
        bar, x0 = comfy.utils.ProgressBar(sigmas.shape[-1] - 1), {}

        def callback(step, denoised, x, total_steps):
            x0["x0"] = denoised
            bar.update_absolute(step + 1, total_steps)

        samples = guider.sample(noise.generate_noise(latent_image), latent, sampler, sigmas, callback=callback,
                                seed=noise.seed)
        out = {**latent_image, "samples": samples}
        denoised = {**latent_image, "samples": guider.model_patcher.model.process_latent_out(x0["x0"])} if x0 else out
        return io.NodeOutput(out, denoised)


class VAEDecode(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="VAEDecode", category="latent", inputs=[
            io.Latent.Input("samples"), io.Vae.Input("vae")], outputs=[io.Image.Output()])

    @classmethod
    def execute(cls, samples, vae):
        return io.NodeOutput(vae.decode(samples["samples"]))


CORE_NODES = [CLIPLoader, CLIPTextEncode, ConditioningConcat, ConditioningCombine, VAELoader, UNETLoader,
              LoraLoaderModelOnly, CreateVideo, SaveVideo, PreviewImage, PreviewAny, PrimitiveStringMultiline,
              LoadImage, LoadVideo, GetVideoComponents, EmptyARVideoLatent, ARVideoI2V, RandomNoise, BasicGuider,
              ManualSigmas, SamplerCustomAdvanced, VAEDecode]
FRONTEND_ONLY = {"Note", "MarkdownNote", "PrimitiveNode", "Reroute"}

# The core nodes as an older host declares them. The example workflows are saved in that shape (what ComfyUI 0.3.64's
# frontend saves, the oldest host supported; newer frontends and tests/workflow_tools.py convert them on load), and
# the real-host test compares the fakes of the host's own version with it.
V0_3_64, V0_33_0 = (0, 3, 64), (0, 33, 0)
NEWEST = V0_33_0


class CreateVideo_before_0_33(CreateVideo):
    """Before 0.33: no bit_depth."""

    @classmethod
    def define_schema(cls):
        s = super().define_schema()
        s.inputs = [i for i in s.inputs if i.id != "bit_depth"]
        return s


class SaveVideo_before_0_33(SaveVideo):
    """Before 0.33: format and codec plain combos, no output."""

    @classmethod
    def define_schema(cls):
        s = super().define_schema()
        s.inputs = s.inputs[:2] + [io.Combo.Input("format", options=["auto", "mp4"], default="auto"),
                                   io.Combo.Input("codec", options=["auto", "h264"], default="auto")]
        s.outputs = []
        return s

    @classmethod
    def execute(cls, video, filename_prefix, format, codec):
        return io.NodeOutput(ui={"images": [{"filename": f"{filename_prefix}_00001.mp4", "frames": int(video["images"].shape[0]),
                                             "fps": video["fps"]}], "animated": (True,)})


def _without_outputs(node: type) -> type:
    """A node as hosts before 0.33 declare it: no outputs (0.33 added PreviewImage's IMAGE, PreviewAny's STRING)."""

    def define_schema(cls):
        s = node.define_schema.__func__(cls)
        s.outputs = []
        return s

    return type(f"{node.__name__}_before_0_33", (node,), {"define_schema": classmethod(define_schema)})


PreviewImage_before_0_33 = _without_outputs(PreviewImage)
PreviewAny_before_0_33 = _without_outputs(PreviewAny)


class GetVideoComponents_before_0_33(GetVideoComponents):
    """Before 0.33: images, audio and fps only."""

    @classmethod
    def define_schema(cls):
        s = super().define_schema()
        s.outputs = s.outputs[:3]
        return s

    @classmethod
    def execute(cls, video):
        return io.NodeOutput(*super().execute(video).args[:3])


# {first version without them: the shapes every host before it declares}
OLDER = {V0_33_0: {"CreateVideo": CreateVideo_before_0_33, "SaveVideo": SaveVideo_before_0_33, "PreviewImage": PreviewImage_before_0_33,
                   "PreviewAny": PreviewAny_before_0_33, "GetVideoComponents": GetVideoComponents_before_0_33}}


# {version: the core nodes it added (hosts before it have none of them)}
ADDED = {V0_33_0: {"EmptyARVideoLatent", "ARVideoI2V", "ManualSigmas"}}


def core_nodes(host: tuple[int, ...] = NEWEST) -> list[type]:
    """The fake core nodes as ComfyUI `host` (a version tuple) declares them."""
    later = [v for v in sorted(OLDER) if host < v]
    older = OLDER[later[0]] if later else {}
    absent = {name for v, names in ADDED.items() if host < v for name in names}
    return [older.get(c.__name__, c) for c in CORE_NODES if c.__name__ not in absent]


WORKFLOW_HOST = V0_3_64  # the shape the example workflows are saved in


def saved_shape() -> list[type]:
    """The core nodes as the example workflows are saved: WORKFLOW_HOST's shape, plus the newest host's nodes that host
    lacks (core's AR video nodes; a workflow using them names the version it needs in extra.sdvg_needs)."""
    old = core_nodes(WORKFLOW_HOST)
    have = {c.GET_SCHEMA().node_id for c in old}
    return old + [c for c in core_nodes(NEWEST) if c.GET_SCHEMA().node_id not in have]
