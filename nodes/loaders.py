"""Loader nodes: drafter / target Wan DiT (file or ComfyUI MODEL) and the ImageReward scorer."""
from __future__ import annotations

import logging

from comfy_api.latest import io, ui

import comfy.model_management as mm

from ..sdvg_core.io.checkpoint import DEFAULT_PT_ENTRY, SELF_FORCING_ENTRIES, CheckpointError, load_wan_dit
from ..sdvg_core.io.reward_files import find_vocab, load_scorer
from .comfy_model import host_comfy_model
from .dtypes import dtype_name, pick_dtype, reward_dtype
from .errors import SDVGError, sentence
from .folders import DIFFUSION_FOLDER, REWARD_FOLDER, SOURCES, check_file, file_list, resolve_file
from .hosted_dit import DiTHandle, host_file_dit
from .hosted_scorer import HostedScorer
from .identity import file_key
from .types import CAT_LOADERS, SDVGModel, SDVGReward

LOG = logging.getLogger("SDVG")
DIT_DTYPES = ["auto", "bf16", "fp16", "fp32"]


class _LoadDiT(io.ComfyNode):
    """Shared body of the drafter and target loaders (they differ in role, defaults and texts)."""

    ROLE = "drafter"

    @classmethod
    def _schema(cls, node_id: str, display_name: str, description: str) -> io.Schema:
        role = cls.ROLE
        return io.Schema(
            node_id=node_id, display_name=display_name, category=CAT_LOADERS, description=description,
            inputs=[
                io.Combo.Input("model_name", options=file_list(DIFFUSION_FOLDER),
                               tooltip=f"The {role} checkpoint in models/diffusion_models (.safetensors, or a "
                                       f"Self-Forcing .pt). Source: {SOURCES[role]}. Ignored when 'model' is connected."),
                io.Combo.Input("pt_entry", options=list(SELF_FORCING_ENTRIES), default=DEFAULT_PT_ENTRY,
                               tooltip="Which network of a Self-Forcing .pt to use: generator_ema (recommended by "
                                       "Self-Forcing) or generator (what the published SDVG code loaded). "
                                       "Ignored for .safetensors files."),
                io.Combo.Input("weight_dtype", options=DIT_DTYPES, default="auto",
                               tooltip="Weights and compute dtype. auto: bf16 on GPUs that support it, fp16 on "
                                       "other GPUs, fp32 on the CPU. For fp8 or GGUF use 'model' instead."),
                io.Boolean.Input("compile", default=False,
                                 tooltip="torch.compile the transformer blocks' fixed-shape parts (q/k/v + RoPE, "
                                         "output + cross-attention query, FFN) once for all layers. The first "
                                         "block is slower while it compiles; needs a working Triton on GPUs. "
                                         "For a connected 'model', put a TorchCompileModel node before it instead."),
                io.Model.Input("model", optional=True,
                               tooltip="Optional: a Wan 2.1 text-to-video MODEL from ComfyUI's loaders (Load "
                                       "Diffusion Model with fp8, GGUF loaders, LoRA loaders). When connected, the "
                                       "file options above are ignored and ComfyUI manages the weights (low VRAM "
                                       "offloading works). A TorchCompileModel node before this input turns on "
                                       "SDVG's regional torch.compile of the transformer blocks with its backend "
                                       "(ComfyUI's own compile wrapper acts only inside apply_model, which SDVG "
                                       "does not call)."),
            ],
            outputs=[SDVGModel.Output(display_name=role, tooltip=f"the {role}, for SDVG Start / SDVG Generate"),
                     io.String.Output(display_name="info", tooltip="what was loaded (file, preset, entry, dtype)")],
        )

    @classmethod
    def validate_inputs(cls, model_name: str, input_types=None) -> bool | str:
        # checked here (not as a combo value) so a missing file names the folders and the source on every ComfyUI
        if input_types and "model" in input_types:  # a connected MODEL replaces the file
            return True
        return check_file(DIFFUSION_FOLDER, model_name, f"SDVG Load {cls.ROLE.title()}", SOURCES[cls.ROLE])

    @classmethod
    def execute(cls, model_name: str, pt_entry: str, weight_dtype: str, compile: bool = False,
                model=None) -> io.NodeOutput:
        role = cls.ROLE
        if model is not None:
            handle = host_comfy_model(model, role)
        else:
            what = f"SDVG Load {role.title()}"
            path = resolve_file(DIFFUSION_FOLDER, model_name, what, SOURCES[role])
            dtype = pick_dtype(weight_dtype, mm.get_torch_device())
            try:
                net, cfg, rep = load_wan_dit(path, dtype=dtype, device=mm.unet_offload_device(), pt_entry=pt_entry)
            except CheckpointError as e:
                raise SDVGError(f"{what}: {sentence(e)} Expected a Wan 2.1 text-to-video checkpoint such as "
                                f"{SOURCES[role]}. For fp8 or GGUF files, load them with 'Load Diffusion "
                                f"Model' and connect its MODEL to this node's 'model' input.") from e
            # a compiled model may round differently: its derived data is kept apart
            key = file_key(path, dtype_name(dtype), rep.entry or "", "compiled" if compile else "")
            handle = DiTHandle(role, host_file_dit(net, cfg, dtype, key, compile=compile),
                               f"{role}: {rep.describe()}" + (", compiled" if compile else ""))
        LOG.info("SDVG %s", handle.info)
        return io.NodeOutput(handle, handle.info, ui=ui.PreviewText(handle.info))


class SDVGLoadDrafter(_LoadDiT):
    """The drafter: Self-Forcing's Wan 2.1 1.3B (.pt entry generator_ema by default) or a ComfyUI MODEL."""

    ROLE = "drafter"

    @classmethod
    def define_schema(cls) -> io.Schema:
        return cls._schema("SDVGLoadDrafter", "SDVG Load Drafter (1.3B)",
                           "Loads the block-causal drafter that proposes every block (Self-Forcing, Wan 2.1 1.3B).")


class SDVGLoadTarget(_LoadDiT):
    """The target: Krea Realtime Video's Wan 2.1 14B (.safetensors) or a ComfyUI MODEL (fp8, GGUF, LoRA)."""

    ROLE = "target"

    @classmethod
    def define_schema(cls) -> io.Schema:
        return cls._schema("SDVGLoadTarget", "SDVG Load Target (14B)",
                           "Loads the block-causal target that makes block 0 and redoes rejected blocks "
                           "(Krea Realtime Video, Wan 2.1 14B).")


class SDVGLoadImageReward(io.ComfyNode):
    """ImageReward v1.0 from models/image_reward, with the BERT vocab.txt next to it."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGLoadImageReward", display_name="SDVG Load ImageReward", category=CAT_LOADERS,
            description="Loads the ImageReward scorer that judges every drafted block (min over its frames).",
            inputs=[
                io.Combo.Input("reward_name", options=file_list(REWARD_FOLDER),
                               tooltip=f"ImageReward weights in models/image_reward (.pt or .safetensors). "
                                       f"Source: {SOURCES['image_reward']}."),
                io.Combo.Input("dtype", options=["auto", "fp32", "fp16", "bf16"], default="auto",
                               tooltip="Backbone dtype (the reward head stays fp32). auto: fp16 on GPUs (0.9 GB), "
                                       "fp32 on the CPU (1.8 GB)."),
                io.Int.Input("micro_batch", default=16, min=1, max=256,
                             tooltip="Frames scored per forward pass; lower it if scoring runs out of memory."),
            ],
            outputs=[SDVGReward.Output(display_name="image_reward", tooltip="the scorer, for SDVG Start / Generate")],
        )

    @classmethod
    def validate_inputs(cls, reward_name: str) -> bool | str:
        return check_file(REWARD_FOLDER, reward_name, "SDVG Load ImageReward", SOURCES["image_reward"])

    @classmethod
    def execute(cls, reward_name: str, dtype: str, micro_batch: int) -> io.NodeOutput:
        path = resolve_file(REWARD_FOLDER, reward_name, "SDVG Load ImageReward", SOURCES["image_reward"])
        torch_dtype = reward_dtype(dtype, mm.get_torch_device())
        try:
            vocab = find_vocab(path)
            scorer = load_scorer(path, vocab, device=mm.unet_offload_device(), dtype=torch_dtype, micro_batch=micro_batch)
        except ValueError as e:  # CheckpointError (weights, vocab, architecture) is a ValueError
            raise SDVGError(f"SDVG Load ImageReward: {e}") from e
        key = file_key(path, dtype_name(torch_dtype), f"mb{micro_batch}") + "|" + file_key(str(vocab))
        info = f"ImageReward: {path} ({dtype_name(torch_dtype)}, vocab {vocab})"
        LOG.info("SDVG %s", info)
        return io.NodeOutput(HostedScorer(scorer, key, info), ui=ui.PreviewText(info))
