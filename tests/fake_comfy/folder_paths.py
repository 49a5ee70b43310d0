"""Fake folder registry rooted at a temporary models dir (set `models_dir` and call `reset()`)."""
from __future__ import annotations

import os

supported_pt_extensions = {".ckpt", ".pt", ".pt2", ".bin", ".pth", ".safetensors", ".pkl", ".sft"}
models_dir = os.path.join(os.getcwd(), "models")
output_directory = os.path.join(os.getcwd(), "output")
temp_directory = os.path.join(os.getcwd(), "temp")
input_directory = os.path.join(os.getcwd(), "input")
folder_names_and_paths: dict[str, tuple[list[str], set[str]]] = {}


def reset(base: str) -> None:
    global models_dir, output_directory, temp_directory, input_directory
    models_dir = os.path.join(base, "models")
    output_directory = os.path.join(base, "output")
    temp_directory = os.path.join(base, "temp")
    input_directory = os.path.join(base, "input")
    folder_names_and_paths.clear()
    for name in ("diffusion_models", "vae", "vae_approx", "text_encoders", "unet", "checkpoints", "loras"):
        folder_names_and_paths[name] = ([os.path.join(models_dir, name)], set(supported_pt_extensions))


def add_model_folder_path(folder_name: str, full_folder_path: str, is_default: bool = False) -> None:
    paths, exts = folder_names_and_paths.get(folder_name, ([], set()))
    if full_folder_path not in paths:
        paths = [full_folder_path] + paths if is_default else paths + [full_folder_path]
    folder_names_and_paths[folder_name] = (paths, exts)


def get_folder_paths(folder_name: str) -> list[str]:
    return list(folder_names_and_paths[folder_name][0])


def get_filename_list(folder_name: str) -> list[str]:
    paths, exts = folder_names_and_paths[folder_name]
    out = set()
    for p in paths:
        if not os.path.isdir(p):
            continue
        for root, _, files in os.walk(p, followlinks=True):
            for f in files:
                if not exts or os.path.splitext(f)[1].lower() in exts:
                    out.add(os.path.relpath(os.path.join(root, f), p).replace(os.sep, "/"))
    return sorted(out)


def get_full_path(folder_name: str, filename: str) -> str | None:
    if folder_name not in folder_names_and_paths:
        return None
    for p in folder_names_and_paths[folder_name][0]:
        full = os.path.join(p, os.path.normpath(filename))
        if os.path.isfile(full):
            return full
    return None


def get_full_path_or_raise(folder_name: str, filename: str) -> str:
    full = get_full_path(folder_name, filename)
    if full is None:
        raise FileNotFoundError(f"Model in folder '{folder_name}' with filename '{filename}' not found.")
    return full


def get_output_directory() -> str:
    return output_directory


def get_temp_directory() -> str:
    return temp_directory


def get_input_directory() -> str:
    return input_directory


def get_annotated_filepath(name: str, default_dir: str | None = None) -> str:
    """A file of the input folder (Load Image / Load Video's widget value; no "[output]" annotations here)."""
    return os.path.join(default_dir or input_directory, name)


def filter_files_content_types(files: list[str], content_types: list[str]) -> list[str]:
    """The files whose extension is of one of the content types ("image", "video"), as ComfyUI's mimetype filter."""
    kinds = {"image": {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp"}, "video": {".mp4", ".webm", ".mov", ".mkv"}}
    return [f for f in files if any(os.path.splitext(f)[1].lower() in kinds.get(c, ()) for c in content_types)]


def get_save_image_path(filename_prefix: str, output_dir: str, image_width=0, image_height=0):
    """(folder, file name, next counter, subfolder, prefix) as ComfyUI's: <prefix>_<counter 00001>_ files, counted
    per prefix in the prefix's subfolder of the output folder; a prefix leaving the output folder is refused."""
    subfolder = os.path.dirname(os.path.normpath(filename_prefix))
    filename = os.path.basename(os.path.normpath(filename_prefix))
    folder = os.path.join(output_dir, subfolder)
    if os.path.commonpath((output_dir, os.path.abspath(folder))) != output_dir:
        raise Exception("Saving image outside the output folder is not allowed.")
    counters = [0]
    if os.path.isdir(folder):
        for f in os.listdir(folder):
            head, _, rest = f[len(filename) + 1:].partition("_")
            if f.startswith(filename + "_") and head.isdigit() and rest is not None:
                counters.append(int(head))
    else:
        os.makedirs(folder, exist_ok=True)
    return folder, filename, max(counters) + 1, subfolder, filename_prefix
