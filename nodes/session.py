"""A generation's fixed parts (models, VAE, scorer, engine options) and what they need: an Engine over the shared
memo with ComfyUI's Cancel and execution id wired in, and the memory check SDVG Start runs before any work."""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable

import comfy.model_management as mm

from ..sdvg_core.engine.engine import Engine, EngineConfig, ProgressEvent
from ..sdvg_core.engine.memo import TieredMemo
from ..sdvg_core.engine.memory import MemoryEstimate, check_fits, estimate_for_spec
from .hosted_dit import DiTHandle
from .hosted_scorer import HostedScorer
from .hosted_vae import HostedVAE
from .run_state import current_run_id
from .shared_memo import MEMO

LOG = logging.getLogger("SDVG")


@dataclass(frozen=True)
class Session:
    """Everything a generation needs besides its state: models, VAE, scorer, engine options."""

    target: DiTHandle
    drafter: DiTHandle | None
    vae: HostedVAE
    scorer: HostedScorer | None
    config: EngineConfig

    def engine(self, progress: Callable[[ProgressEvent], None] | None = None, memo: TieredMemo | None = None,
               run_id: str | None = None) -> Engine:
        """A light Engine over the shared memo (or `memo`: a private one for a fresh run), with ComfyUI's Cancel as
        interrupt callback and the current execution's id as run id (or `run_id`)."""
        e = Engine(self.target.runner, self.vae, self.drafter.runner if self.drafter else None, self.scorer,
                   self.config, memo=MEMO if memo is None else memo)
        e.callbacks.interrupt = mm.throw_exception_if_processing_interrupted
        e.callbacks.progress = progress
        e.callbacks.run_id = run_id or current_run_id()
        return e

    def reserve(self, spec) -> MemoryEstimate:
        """Size each DiT's per-call reservation for its recipe's window and this size, and refuse, before any work,
        a size whose estimated peak exceeds the device's memory (MemoryRefused names the estimate and the limit).

        Weights of ComfyUI-managed MODELs are not counted (ComfyUI can stream them in low-VRAM mode).
        """
        handles = [h for h in (self.target, self.drafter) if h is not None]
        vae = self.vae.inner
        # each DiT is sized for its own recipe (e.g. a LongLive drafter's window next to a Krea target's rebuild)
        est = estimate_for_spec(spec, [self.config.recipe_for(h.role) for h in handles],
                                [(h.runner.cfg, h.runner.dtype) for h in handles], vae.config, vae.dtype,
                                vae_weight_bytes=mm.module_size(vae))
        for h, d in zip(handles, est.dits):
            h.runner.work_bytes = d.step
        counted = dataclasses.replace(est, dits=tuple(d if h.runner.full_load else dataclasses.replace(d, weights=0)
                                                      for h, d in zip(handles, est.dits)))
        device = handles[0].runner.device
        total = getattr(mm, "get_total_memory", None)
        if total is not None:
            check_fits(counted, int(total(device)), f"{device} (ComfyUI's total for it)")
        LOG.info("SDVG memory estimate: %s", counted.describe())
        return counted
