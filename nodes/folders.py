"""Model folders in ComfyUI's registry (folder_paths): the pack's own folders, file lists, and the messages that
say which file is missing, where it was looked for and where to get it."""
from __future__ import annotations

import inspect
import os

import folder_paths

from .surface import SDVGError

DIFFUSION_FOLDER = "diffusion_models"
REWARD_FOLDER = "image_reward"
PROMPTS_FOLDER = "sdvg_prompts"
LORA_FOLDER = "loras"  # ComfyUI's own LoRA folder (models/loras), where its LoRA loaders look too
REWARD_EXTENSIONS = {".pt", ".pth", ".safetensors"}
PROMPT_EXTENSIONS = {".safetensors"}

# Where each file comes from (named in every "not found" error and in the README).
SOURCES = {
    "drafter": "Self-Forcing (Wan 2.1 1.3B, block-causal): https://huggingface.co/gdhe17/Self-Forcing, file "
               "checkpoints/self_forcing_dmd.pt",
    "target": "Krea Realtime Video 14B (Wan 2.1 14B, block-causal): https://huggingface.co/krea/krea-realtime-video, "
              "file krea-realtime-video-14b.safetensors",
    "image_reward": "ImageReward v1.0: https://huggingface.co/THUDM/ImageReward, file ImageReward.pt, plus the BERT "
                    "vocabulary vocab.txt from https://huggingface.co/google-bert/bert-base-uncased next to it",
    "prompts": "the 'SDVG Save Prompt Embeddings' node, which writes it from a CLIP Text Encode output",
    "lora": "LongLive-1.3B's lora.pt (https://huggingface.co/Efficient-Large-Model/LongLive-1.3B, file "
            "models/lora.pt) for kind longlive, or a peft LoRA made for your drafter",
}


def register_folders() -> None:
    """Add models/image_reward and models/sdvg_prompts through ComfyUI's public folder API (keeping yaml paths).

    Upstream ComfyUI (0.3.x) takes `add_model_folder_path(name, full_path)` and keeps the extensions in a mutable
    set; the pip-installable builds (0.12.x) take `extensions=` and place `models/<name>` under every base path
    themselves (their registry refuses `.get(name, default)` and item assignment puts folders outside models/).
    """
    add = folder_paths.add_model_folder_path
    try:
        takes_extensions = "extensions" in inspect.signature(add).parameters
    except (TypeError, ValueError):
        takes_extensions = False
    for name, exts in ((REWARD_FOLDER, REWARD_EXTENSIONS), (PROMPTS_FOLDER, PROMPT_EXTENSIONS)):
        if takes_extensions:
            add(name, extensions=set(exts))
        else:
            add(name, os.path.join(folder_paths.models_dir, name))
        # always (the 0.12 build too): when an extra_model_paths.yaml registered the folder first, that build keeps
        # the yaml entry's empty extension set (matching no file: empty combos), ignoring add(..., extensions=)
        folder_paths.folder_names_and_paths[name][1].update(exts)


def file_list(folder: str) -> list[str]:
    try:
        return folder_paths.get_filename_list(folder)
    except KeyError:
        return []


def missing_file_message(folder: str, name: str, what: str, source: str) -> str:
    """What to tell the user when a picked file is not in the folder: the folders searched, the files there, the source."""
    try:
        searched = [str(p) for p in folder_paths.get_folder_paths(folder)]
    except KeyError:
        searched = []
    present = file_list(folder)
    return (f"{what}: file {name!r} not found in models/{folder} (searched: {', '.join(searched) or 'no folder registered'}; "
            f"files there: {', '.join(present[:8]) or 'none'}). Get it from {source}, put it in one of those folders, "
            f"then press R in ComfyUI to refresh the file lists.")


def resolve_file(folder: str, name: str, what: str, source: str) -> str:
    """Full path of a file picked in a combo, or an error naming the folders searched and the file's source."""
    path = folder_paths.get_full_path(folder, name) if name else None
    if path is not None:
        return str(path)
    raise SDVGError(missing_file_message(folder, name, what, source))


def check_file(folder: str, name: str, what: str, source: str) -> bool | str:
    """For a loader's `validate_inputs`: True, or the pack's message. Newer ComfyUI checks combo values at /prompt
    ("Value not in list") unless the node validates the input itself, which would hide the folders and source."""
    if name and folder_paths.get_full_path(folder, name) is not None:
        return True
    return missing_file_message(folder, name, what, source)


def prompts_folder() -> str:
    """The first models/sdvg_prompts folder (where SDVG Save Prompt Embeddings writes)."""
    return folder_paths.get_folder_paths(PROMPTS_FOLDER)[0]


def full_path(folder: str, name: str) -> str | None:
    path = folder_paths.get_full_path(folder, name)
    return None if path is None else str(path)
