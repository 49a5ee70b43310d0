"""Prompt schedules: which prompt each block of a long video is generated, committed and scored under.

Two nodes make one (SDVG_SCHEDULE), which SDVG Generate and SDVG Start take instead of a single conditioning:
- **SDVG Prompt Schedule**: one multiline text of `block: prompt` lines (or a JSON list whose entries may name a
  saved embeddings file), each distinct prompt encoded once with the connected CLIP (Load CLIP, type wan);
- **SDVG Prompt From Block**: one CONDITIONING (CLIP Text Encode, SDVG Load Prompt Embeddings) from a first block
  on, chained after the entries before it.
The schedule becomes part of the generation spec at Start: the step-by-step loop's state carries it, so the loop
changes the prompt at every block where the schedule says so (the state is immutable; nothing changes mid-run).
"""
from __future__ import annotations

import logging

import torch

from comfy_api.latest import io, ui

from ..sdvg_core.engine.prompts import PromptConditioning, PromptSchedule
from ..sdvg_core.io.checkpoint import CheckpointError
from ..sdvg_core.engine.prompt_schedule import ScheduleError, encode_schedule, parse_schedule
from ..sdvg_core.io.text import load_embeddings
from .folders import PROMPTS_FOLDER, SOURCES, check_file, resolve_file
from .session import clip_encode, conditioning_embeddings
from .surface import CAT_PROMPTS, SDVGError, SDVGSchedule, sentence

LOG = logging.getLogger("SDVG")

EXAMPLE = ("0: a red fox trots through fresh snow in a pine forest, morning light, cinematic\n"
           "10: the red fox stops at a frozen stream and looks around, snow falling\n"
           "20: the red fox leaps across the frozen stream into the deep snow, slow motion")
def _describe(schedule: PromptSchedule[PromptConditioning]) -> str:
    return "; ".join(f"block {b}: {p.text[:60]!r}" for b, p in schedule)


def _entries(text: str, what: str):
    try:
        return parse_schedule(text, what)
    except ScheduleError as e:
        raise SDVGError(sentence(e) + " Write one `block: prompt` line per prompt, the first at block 0, e.g. "
                                      "`0: a fox in the snow` and `12: the fox jumps`.") from e


class SDVGPromptSchedule(io.ComfyNode):
    """`block: prompt` lines encoded with the connected text encoder: a schedule for SDVG Generate / SDVG Start."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGPromptSchedule", display_name="SDVG Prompt Schedule", category=CAT_PROMPTS,
            description="A prompt per stretch of blocks: one `block: prompt` line per prompt (the first at block 0). "
                        "Each prompt holds from its block until the next line's. Connect to the 'schedule' input of "
                        "SDVG Generate or SDVG Start (instead of 'positive').",
            inputs=[
                io.String.Input("schedule", multiline=True, default=EXAMPLE,
                                tooltip="One `block: prompt` line per prompt, first blocks increasing from 0 (lines "
                                        "starting with # are skipped). Or a JSON list of {\"block\": n, \"prompt\": "
                                        "...} whose entries may name an \"embeddings\" file of models/sdvg_prompts "
                                        "(saved by SDVG Save Prompt Embeddings: no text encoder needed for it)."),
                io.Clip.Input("clip", optional=True,
                              tooltip="The Wan text encoder (Load CLIP with umt5_xxl, type wan), as for CLIP Text "
                                      "Encode. Each distinct prompt is encoded once. Not needed when every entry "
                                      "names an embeddings file."),
            ],
            outputs=[SDVGSchedule.Output(display_name="schedule",
                                         tooltip="the prompts by first block, for SDVG Generate / SDVG Start")],
        )

    @classmethod
    def validate_inputs(cls, schedule: str | None = None, input_types=None) -> bool | str:
        """At /prompt, before any model loads: the lines parse, and each entry can be encoded or read."""
        what = "SDVG Prompt Schedule"
        if schedule is None:  # linked from another node: checked when it runs
            return True
        try:
            entries = _entries(schedule, what)
        except SDVGError as e:
            return str(e)
        has_clip = bool(input_types) and "clip" in input_types
        for block, src in entries:
            if src.embeddings is not None:
                found = check_file(PROMPTS_FOLDER, str(src.embeddings), what, SOURCES["prompts"])
                if found is not True:
                    return found
            elif not has_clip:
                return (f"{what}: the prompt at block {block} ({src.text[:60]!r}) needs the text encoder: connect "
                        f"Load CLIP (umt5_xxl, type wan) to 'clip', or name an embeddings file for every entry")
        return True

    @classmethod
    def execute(cls, schedule: str, clip=None) -> io.NodeOutput:
        what = "SDVG Prompt Schedule"
        entries = _entries(schedule, what)

        def encode(text: str) -> torch.Tensor:
            if clip is None:
                raise SDVGError(f"{what}: the prompt {text[:60]!r} needs the text encoder: connect Load CLIP "
                                f"(umt5_xxl, type wan) to 'clip'")
            return clip_encode(clip, text)

        def load(name) -> torch.Tensor:
            path = resolve_file(PROMPTS_FOLDER, str(name), what, SOURCES["prompts"])
            try:
                return load_embeddings(path)[1].float().cpu()
            except CheckpointError as e:
                raise SDVGError(f"{what}: {e}") from e

        try:
            out = encode_schedule(entries, encode, load)
        except ValueError as e:
            raise SDVGError(f"{what}: {sentence(e)}") from e
        text = f"{len(out)} prompt(s): {_describe(out)}"
        LOG.info("SDVG %s: %s", what, text)
        return io.NodeOutput(out, ui=ui.PreviewText(text))


class SDVGPromptFromBlock(io.ComfyNode):
    """One conditioning from a first block on, appended to the schedule before it (chain one per prompt)."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGPromptFromBlock", display_name="SDVG Prompt From Block", category=CAT_PROMPTS,
            description="Adds a prompt to a schedule: its conditioning holds from first_block until the next "
                        "entry's. Chain one node per prompt (the first at block 0, with 'schedule' unconnected) and "
                        "connect the last to SDVG Generate / SDVG Start's 'schedule'.",
            inputs=[
                io.Conditioning.Input("positive", tooltip="The prompt's umT5 embeddings: CLIP Text Encode (with a "
                                                          "'wan' CLIP loader) or SDVG Load Prompt Embeddings."),
                io.String.Input("prompt", multiline=True, default="",
                                tooltip="The text ImageReward scores this prompt's blocks against (the text you "
                                        "encoded). Empty: the text SDVG Load Prompt Embeddings carries."),
                io.Int.Input("first_block", default=0, min=0, max=4096,
                             tooltip="The first block generated under this prompt (0 for the first entry)."),
                SDVGSchedule.Input("schedule", optional=True,
                                   tooltip="The entries before this one (another SDVG Prompt From Block or SDVG "
                                           "Prompt Schedule); unconnected: this is the first entry (block 0)."),
            ],
            outputs=[SDVGSchedule.Output(display_name="schedule",
                                         tooltip="the schedule with this entry, for SDVG Generate / SDVG Start "
                                                 "or the next SDVG Prompt From Block")],
        )

    @classmethod
    def validate_inputs(cls, first_block: int = 0, input_types=None) -> bool | str:
        if first_block != 0 and not (input_types and "schedule" in input_types):
            return (f"SDVG Prompt From Block: first_block is {first_block} but no earlier entry is connected to "
                    f"'schedule': which prompt would blocks 0..{first_block - 1} have? Set it to 0 or connect the "
                    f"entries before it")
        return True

    @classmethod
    def execute(cls, positive, prompt: str, first_block: int, schedule: PromptSchedule | None = None
                ) -> io.NodeOutput:
        what = "SDVG Prompt From Block"
        emb, carried = conditioning_embeddings(positive)
        text = prompt.strip() or carried
        if not text:
            raise SDVGError(f"{what}: the prompt text is empty; type the text you encoded into 'prompt' (ImageReward "
                            f"scores each block against its own prompt, and the report names it)")
        try:
            prompt_at = PromptConditioning.make(text, emb)
        except ValueError as e:
            raise SDVGError(f"{what}: {sentence(e)}") from e
        try:  # the schedule's rules (it starts at block 0, first blocks increase) are sdvg_core's
            out = PromptSchedule.of([(first_block, prompt_at)]) if schedule is None else schedule.then(first_block,
                                                                                                       prompt_at)
        except ValueError as e:  # ... said in this node's terms
            if schedule is None:
                raise SDVGError(f"{what}: {sentence(e)} Connect the entries before it to 'schedule'.") from e
            raise SDVGError(f"{what}: first_block {first_block} must come after the previous entry's first "
                            f"block {schedule[-1].first_block} (entries: {_describe(schedule)})") from e
        text = f"{len(out)} prompt(s): {_describe(out)}"
        return io.NodeOutput(out, ui=ui.PreviewText(text))
