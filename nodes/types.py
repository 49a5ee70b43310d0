"""Socket types of the pack (created once: sockets connect only to the same io_type string) and categories."""
from __future__ import annotations

from comfy_api.latest import io

SDVGModel = io.Custom("SDVG_MODEL")  # a hosted Wan DiT (drafter or target)
SDVGReward = io.Custom("SDVG_REWARD")  # a hosted ImageReward scorer
SDVGState = io.Custom("SDVG_STATE")  # run_state.Run: session + immutable GenerationState
SDVGLoop = io.Custom("SDVG_LOOP")  # the loop-start -> loop-end link
SDVGSchedule = io.Custom("SDVG_SCHEDULE")  # schedule.PromptSchedule: prompts by first block

CATEGORY = "SDVG"
CAT_LOADERS = "SDVG/loaders"
CAT_STEPS = "SDVG/steps"
CAT_LOOP = "SDVG/loop"
CAT_PROMPTS = "SDVG/prompts"
