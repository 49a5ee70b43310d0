"""Prompt embedding files: save umT5 conditioning once, reuse it without loading the 11 GB text encoder."""
from __future__ import annotations

import os
import re

from comfy_api.latest import io, ui

import comfy.model_management as mm

from ..sdvg_core.io.checkpoint import CheckpointError
from ..sdvg_core.io.text import load_embeddings, save_embeddings
from .folders import PROMPTS_FOLDER, SOURCES, check_file, file_list, full_path, prompts_folder, resolve_file
from .hosted import file_key
from .session import conditioning_embeddings
from .surface import CAT_PROMPTS, SDVGError


class SDVGSavePromptEmbeddings(io.ComfyNode):
    """Writes CONDITIONING + prompt text to models/sdvg_prompts/<name>.safetensors."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGSavePromptEmbeddings", display_name="SDVG Save Prompt Embeddings", category=CAT_PROMPTS,
            description="Saves the umT5 embeddings of a prompt (and its text) so later runs can skip the text encoder.",
            inputs=[
                io.Conditioning.Input("positive", tooltip="CLIP Text Encode output (with a 'wan' CLIP loader)."),
                io.String.Input("prompt", multiline=True, default="",
                                tooltip="The encoded text; stored with the embeddings for ImageReward."),
                io.String.Input("name", default="my_prompt",
                                tooltip="File name in models/sdvg_prompts (.safetensors is added); an existing file is replaced."),
            ],
            outputs=[io.String.Output(display_name="path", tooltip="the file written")],
            is_output_node=True,
        )

    @classmethod
    def execute(cls, positive, prompt: str, name: str) -> io.NodeOutput:
        emb, _ = conditioning_embeddings(positive)
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name.strip()).strip("._") or "prompt"
        folder = prompts_folder()
        path = save_embeddings(os.path.join(folder, stem + ".safetensors"), prompt, emb)
        text = f"saved {list(emb.shape)} embeddings of {prompt[:60]!r} to {path}"
        return io.NodeOutput(str(path), ui=ui.PreviewText(text))


class SDVGLoadPromptEmbeddings(io.ComfyNode):
    """Reads a saved embeddings file as CONDITIONING (plus its prompt text)."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGLoadPromptEmbeddings", display_name="SDVG Load Prompt Embeddings", category=CAT_PROMPTS,
            description="Loads prompt embeddings saved by SDVG Save Prompt Embeddings, instead of CLIPLoader + "
                        "CLIP Text Encode (no 11 GB umT5 in memory).",
            inputs=[io.Combo.Input("embeddings", options=file_list(PROMPTS_FOLDER),
                                   tooltip=f"A file in models/sdvg_prompts ({SOURCES['prompts']}).")],
            outputs=[io.Conditioning.Output(display_name="positive", tooltip="the embeddings as CONDITIONING"),
                     io.String.Output(display_name="prompt", tooltip="the prompt text stored with them")],
        )

    @classmethod
    def validate_inputs(cls, embeddings: str) -> bool | str:
        # checked here (not as a combo value) so a missing file names the folders and the source on every ComfyUI
        return check_file(PROMPTS_FOLDER, embeddings, "SDVG Load Prompt Embeddings", SOURCES["prompts"])

    @classmethod
    def fingerprint_inputs(cls, embeddings: str):
        path = full_path(PROMPTS_FOLDER, embeddings)
        return file_key(path) if path else embeddings

    @classmethod
    def execute(cls, embeddings: str) -> io.NodeOutput:
        path = resolve_file(PROMPTS_FOLDER, embeddings, "SDVG Load Prompt Embeddings", SOURCES["prompts"])
        try:
            prompt, emb = load_embeddings(path)
        except CheckpointError as e:
            raise SDVGError(f"SDVG Load Prompt Embeddings: {e}") from e
        cond = [[emb.to(mm.intermediate_device()), {"pooled_output": None, "sdvg_prompt": prompt}]]
        return io.NodeOutput(cond, prompt, ui=ui.PreviewText(prompt))
