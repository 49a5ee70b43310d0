"""Loader nodes: drafter (kind, LoRA) / target Wan DiT (file or ComfyUI MODEL) and the ImageReward scorer."""
from __future__ import annotations

import logging

from comfy_api.latest import io, ui

import comfy.model_management as mm

from ..sdvg_core.io.checkpoint import DEFAULT_PT_ENTRY, SELF_FORCING_ENTRIES, CheckpointError, load_wan_dit
from ..sdvg_core.io.drafters import (CHUNK_FRAMES, DEFAULT_DRAFTER_KIND, DRAFTER_KINDS, DrafterError, drafter_problems,
                                     load_drafter)
from ..sdvg_core.io.reward_files import find_vocab, load_scorer
from .comfy_model import host_comfy_model
from .folders import (
    DIFFUSION_FOLDER, LORA_FOLDER, REWARD_FOLDER, SOURCES, check_file, file_list, full_path, resolve_file,
)
from .hosted import DTYPE_OPTIONS, DiTHandle, HostedScorer, dtype_name, file_key, host_file_dit, pick_dtype, reward_dtype
from .surface import CAT_LOADERS, SDVGError, SDVGModel, SDVGReward, sentence

LOG = logging.getLogger("SDVG")
NO_LORA = "none"
AUTO_ENTRY = "auto"


def _model_input(role: str) -> io.Input:
    return io.Model.Input("model", optional=True,
                          tooltip="Optional: a Wan 2.1 text-to-video MODEL from ComfyUI's loaders (Load "
                                  "Diffusion Model with fp8, GGUF loaders, LoRA loaders). When connected, the "
                                  "file options above are ignored and ComfyUI manages the weights (low VRAM "
                                  "offloading works; its LoRA patches are applied when ComfyUI loads the model). A "
                                  "TorchCompileModel node before this input makes SDVG torch.compile the whole "
                                  "transformer block with its backend, as the 'compile' option does (ComfyUI's own "
                                  "compile wrapper acts only inside apply_model, which SDVG does not call); the run's "
                                  "report says which models ran compiled.")


def _common_inputs() -> list:
    return [io.Combo.Input("weight_dtype", options=DTYPE_OPTIONS, default="auto",
                           tooltip="Weights and compute dtype. auto: bf16 on GPUs that support it, fp16 on "
                                   "other GPUs, fp32 on the CPU. For fp8 or GGUF use 'model' instead."),
            io.Boolean.Input("compile", default=False,
                             tooltip="torch.compile the whole transformer block (attention included), once for "
                                     "all layers and blocks of a run. The first blocks are slower while it compiles; "
                                     "needs a working Triton on GPUs. The run's report says 'compiled: target "
                                     "(inductor)' and so on. For a connected 'model', put a TorchCompileModel node "
                                     "before it instead.")]


def _loaded(handle: DiTHandle) -> io.NodeOutput:
    LOG.info("SDVG %s", handle.info)
    return io.NodeOutput(handle, handle.info, ui=ui.PreviewText(handle.info))


def _outputs(role: str) -> list:
    return [SDVGModel.Output(display_name=role, tooltip=f"the {role}, for SDVG Start / SDVG Generate"),
            io.String.Output(display_name="info", tooltip="what was loaded (file, kind, entry, LoRA, dtype)")]


def _checkpoint_error(what: str, e: Exception, source: str) -> SDVGError:
    return SDVGError(f"{what}: {sentence(e)} Expected a Wan 2.1 text-to-video checkpoint such as {source}. For fp8 "
                     f"or GGUF files, load them with 'Load Diffusion Model' and connect its MODEL to this node's "
                     f"'model' input.")


class SDVGLoadTarget(io.ComfyNode):
    """The target: Krea Realtime Video's Wan 2.1 14B (.safetensors) or a ComfyUI MODEL (fp8, GGUF, LoRA)."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGLoadTarget", display_name="SDVG Load Target (14B)", category=CAT_LOADERS,
            description="Loads the block-causal target that makes block 0 and redoes rejected blocks "
                        "(Krea Realtime Video, Wan 2.1 14B).",
            inputs=[
                io.Combo.Input("model_name", options=file_list(DIFFUSION_FOLDER),
                               tooltip=f"The target checkpoint in models/diffusion_models (.safetensors, or a "
                                       f"Self-Forcing-style .pt). Source: {SOURCES['target']}. Ignored when 'model' "
                                       f"is connected."),
                io.Combo.Input("pt_entry", options=list(SELF_FORCING_ENTRIES), default=DEFAULT_PT_ENTRY,
                               tooltip="Which network of a Self-Forcing-style .pt to use (generator_ema or "
                                       "generator). Ignored for .safetensors files."),
                *_common_inputs(), _model_input("target"),
            ],
            outputs=_outputs("target"),
        )

    @classmethod
    def validate_inputs(cls, model_name: str, input_types=None) -> bool | str:
        # checked here (not as a combo value) so a missing file names the folders and the source on every ComfyUI
        if input_types and "model" in input_types:  # a connected MODEL replaces the file
            return True
        return check_file(DIFFUSION_FOLDER, model_name, "SDVG Load Target", SOURCES["target"])

    @classmethod
    def execute(cls, model_name: str, pt_entry: str, weight_dtype: str, compile: bool = False,
                model=None) -> io.NodeOutput:
        if model is not None:
            return _loaded(host_comfy_model(model, "target"))
        what = "SDVG Load Target"
        path = resolve_file(DIFFUSION_FOLDER, model_name, what, SOURCES["target"])
        dtype = pick_dtype(weight_dtype, mm.get_torch_device())
        try:
            net, cfg, rep = load_wan_dit(path, dtype=dtype, device=mm.unet_offload_device(), pt_entry=pt_entry)
        except CheckpointError as e:
            raise _checkpoint_error(what, e, SOURCES["target"]) from e
        return _loaded(_file_handle("target", net, cfg, dtype, rep, compile))


def _file_handle(role: str, net, cfg, dtype, rep, compile: bool, kind: str | None = None,
                 block_frames: int | None = None) -> DiTHandle:
    # the loader's key (file identity, entry, dtype, LoRA file and alpha); a compiled model may round differently:
    # its derived data is kept apart
    key = rep.key + ("|compiled" if compile else "")
    return DiTHandle(role, host_file_dit(net, cfg, dtype, key, compile=compile),
                     f"{role}: {rep.describe()}" + (", compiled" if compile else ""), kind=kind,
                     block_frames=block_frames)


def _kind_source(kind: str) -> str:
    k = DRAFTER_KINDS.get(kind)
    return SOURCES["drafter"] if k is None else f"{k.title}: {k.source}, file {k.files}"


class SDVGLoadDrafter(io.ComfyNode):
    """The drafter: Self-Forcing, Causal Forcing (chunk-wise) or LongLive 1.3B (+ its LoRA), or a ComfyUI MODEL."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        kinds = "; ".join(f"{k.name}: {k.title}, entry {k.default_entry}" for k in DRAFTER_KINDS.values())
        return io.Schema(
            node_id="SDVGLoadDrafter", display_name="SDVG Load Drafter (1.3B)", category=CAT_LOADERS,
            description="Loads the block-causal drafter that proposes every block: Self-Forcing, Causal Forcing "
                        "(chunk-wise) or LongLive (Wan 2.1 1.3B), with an optional LoRA merged at load.",
            inputs=[
                io.Combo.Input("model_name", options=file_list(DIFFUSION_FOLDER),
                               tooltip=f"The drafter checkpoint in models/diffusion_models (.pt or .safetensors). "
                                       f"Default source: {SOURCES['drafter']}. Ignored when 'model' is connected."),
                io.Combo.Input("kind", options=list(DRAFTER_KINDS), default=DEFAULT_DRAFTER_KIND,
                               tooltip=f"What the file is (the files do not say): {kinds}. A longlive drafter "
                                       f"needs its LoRA and runs LongLive's recipe (frame sink + sliding window) "
                                       f"unless SDVG Start / Generate's drafter_recipe says otherwise. Causal "
                                       f"Forcing's frame-wise files are refused (1 frame per block)."),
                io.Combo.Input("pt_entry", options=[AUTO_ENTRY, *SELF_FORCING_ENTRIES], default=AUTO_ENTRY,
                               tooltip="Which network of the .pt to use. auto: the kind's own (self_forcing: "
                                       "generator_ema, as Self-Forcing recommends; causal_forcing and longlive: "
                                       "generator). generator is what the published SDVG code loaded. Ignored for "
                                       ".safetensors files."),
                io.Combo.Input("lora_name", options=[NO_LORA, *file_list(LORA_FOLDER)], default=NO_LORA,
                               tooltip=f"A peft LoRA in models/loras merged into the drafter's weights at load "
                                       f"(W += alpha/r * B A; peft is not needed). Source: {SOURCES['lora']}. "
                                       f"Required for kind longlive. For a connected 'model', apply LoRAs with "
                                       f"ComfyUI's LoRA loaders before it instead."),
                io.Float.Input("lora_alpha", default=0.0, min=0.0, max=65536.0, step=1.0,
                               tooltip="The LoRA's alpha (its files do not hold it). 0: the kind's own (LongLive: "
                                       "256 at rank 256, scale 1), else alpha = the file's rank (scale 1)."),
                *_common_inputs(), _model_input("drafter"),
            ],
            outputs=_outputs("drafter"),
        )

    @classmethod
    def validate_inputs(cls, model_name: str, kind: str = DEFAULT_DRAFTER_KIND, lora_name: str = NO_LORA,
                        input_types=None) -> bool | str:
        """Before any work (at /prompt): the file is there, and the file / kind / LoRA combination can run."""
        what = "SDVG Load Drafter"
        lora = None if lora_name in (NO_LORA, "", None) else lora_name
        if input_types and "model" in input_types:  # a connected MODEL replaces the file (its kind still counts)
            if lora is not None:
                return (f"{what}: lora_name {lora!r} is set but a MODEL is connected, whose weights ComfyUI manages; "
                        f"apply the LoRA with ComfyUI's 'LoraLoaderModelOnly' before the 'model' input, or set "
                        f"lora_name to none")
            return True  # the kind combo holds runnable kinds only; a MODEL's LoRA patches are ComfyUI's
        found = check_file(DIFFUSION_FOLDER, model_name, what, _kind_source(kind))
        if found is not True:
            return found
        if lora is not None:
            found = check_file(LORA_FOLDER, lora, what, SOURCES["lora"])
            if found is not True:
                return found
        problems = drafter_problems(full_path(DIFFUSION_FOLDER, model_name), kind,
                                    None if lora is None else full_path(LORA_FOLDER, lora))
        return f"{what}: " + "; ".join(problems) if problems else True

    @classmethod
    def execute(cls, model_name: str, kind: str = DEFAULT_DRAFTER_KIND, pt_entry: str = AUTO_ENTRY,
                lora_name: str = NO_LORA, lora_alpha: float = 0.0, weight_dtype: str = "auto", compile: bool = False,
                model=None) -> io.NodeOutput:
        what = "SDVG Load Drafter"
        if kind not in DRAFTER_KINDS:
            raise SDVGError(f"{what}: kind must be one of {list(DRAFTER_KINDS)}, got {kind!r}")
        lora = None if lora_name in (NO_LORA, "", None) else lora_name
        if model is not None:
            if lora is not None:
                raise SDVGError(f"{what}: lora_name {lora!r} is set but a MODEL is connected; apply the LoRA with "
                                f"ComfyUI's 'LoraLoaderModelOnly' before the 'model' input, or set lora_name to none")
            handle = host_comfy_model(model, "drafter")
            return _loaded(DiTHandle(handle.role, handle.dit, f"{handle.info}, kind {kind}", kind,
                                     block_frames=CHUNK_FRAMES))  # every kind it loads is chunk-wise
        path = resolve_file(DIFFUSION_FOLDER, model_name, what, _kind_source(kind))
        lora_path = None if lora is None else resolve_file(LORA_FOLDER, lora, what, SOURCES["lora"])
        dtype = pick_dtype(weight_dtype, mm.get_torch_device())
        try:
            net, cfg, rep = load_drafter(path, kind, lora_path, pt_entry=None if pt_entry == AUTO_ENTRY else pt_entry,
                                         lora_alpha=float(lora_alpha) if lora_alpha else None, dtype=dtype,
                                         device=mm.unet_offload_device())
        except DrafterError as e:  # the file / kind / LoRA combination (its message says what to do)
            raise SDVGError(f"{what}: {sentence(e)}") from e
        except CheckpointError as e:
            raise _checkpoint_error(what, e, _kind_source(kind)) from e
        return _loaded(_file_handle("drafter", net, cfg, dtype, rep, compile, kind, block_frames=CHUNK_FRAMES))


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
                io.Combo.Input("dtype", options=DTYPE_OPTIONS, default="auto",
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
