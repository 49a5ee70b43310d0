"""What ComfyUI 0.33's RAM-pressure output cache (`--cache-ram`) counts for SDVG_STATE outputs, run through the host's
own RAMPressureCache.ram_release (run with ComfyUI's python: `comfy_ram_cache_probe.py COMFYUI_DIR REPO`).

Three entries go into the cache as a finished prompt's outputs: a state holding a decoded draft of DRAFT_BYTES
(SDVG Decode Block's output), a state without a draft (SDVG Route's), and an IMAGE tensor of the same bytes. The host
reads memory as exhausted (psutil stubbed), and the cache's first pass, which only takes entries of at least its
large-intermediate size, reports what it freed: the bytes it counted for each entry it took. Prints one JSON line."""
from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import torch

import comfy_probe_env

# larger than 0.33's RAM_CACHE_LARGE_INTERMEDIATE (512 MiB): the draft of a 30-block-long 832x480 loop
# (12 frames x 480 x 832 x 3 x float32 = 57.5 MB per block) held by the cache's Decode Block entries
DRAFT_BYTES = 600 * 2**20


def main(comfy_dir: str, repo: str) -> dict:
    comfy_probe_env.start(comfy_dir)
    try:
        from comfy_execution import caching
    except ImportError:
        return {"skipped": "this host has no comfy_execution.caching"}
    if not hasattr(caching, "RAMPressureCache"):
        return {"skipped": "this host has no RAM-pressure output cache"}
    missing = [n for n, there in (("RAMPressureCache.ram_release", hasattr(caching.RAMPressureCache, "ram_release")),
                                  ("RAM_CACHE_LARGE_INTERMEDIATE", hasattr(caching, "RAM_CACHE_LARGE_INTERMEDIATE")))
               if not there]
    if missing:  # the pip-installable 0.12.1 build: its RAM-pressure cache evicts by polling, without these
        return {"skipped": f"this host's RAM-pressure output cache has no {' / '.join(missing)} (the release pass "
                           f"this probe measures; it frees by poll(ram_headroom) instead)"}
    import execution

    comfy_probe_env.import_pack(repo)
    from sdvg_pack.nodes.session import Run
    from sdvg_pack.sdvg_core.engine.prompts import PromptConditioning
    from sdvg_pack.sdvg_core.engine.state import GenerationSpec, GenerationState, PendingBlock

    prompt = PromptConditioning.make("a corgi", torch.zeros(1, 4, 8))
    spec = GenerationSpec(prompt, 64, 48, 3, seed=0)
    frames = torch.zeros(DRAFT_BYTES // 4, dtype=torch.float32)  # the draft's decoded frames (their shape aside)
    entries = {"decode_state": Run(None, GenerationState(spec).with_pending(PendingBlock(1, frames=frames))),
               "route_state": Run(None, GenerationState(spec)),
               "image": torch.zeros(DRAFT_BYTES // 4, dtype=torch.float32)}

    cache = caching.RAMPressureCache(None)
    cache.generation = 2  # the entries come from the prompt before (generation 1): evictable
    for key, value in entries.items():
        cache.cache[key] = execution.CacheEntry(ui=None, outputs=[[value]])
        cache.used_generation[key] = 1
        cache.timestamps[key] = 0.0
    real = caching.psutil
    caching.psutil = SimpleNamespace(virtual_memory=lambda: SimpleNamespace(available=0))
    try:
        before = set(cache.cache)
        freed_large = cache.ram_release(1, free_active=True, min_entry_size=caching.RAM_CACHE_LARGE_INTERMEDIATE)
        taken_large = sorted(before - set(cache.cache))
        freed_rest = cache.ram_release(1, free_active=True)
    finally:
        caching.psutil = real
    return {"draft_bytes": DRAFT_BYTES, "large_pass_took": taken_large, "large_pass_freed": freed_large,
            "rest_freed": freed_rest, "left": sorted(cache.cache),
            "decode_state_is": [type(x).__name__ for x in entries["decode_state"]],
            "large_intermediate": caching.RAM_CACHE_LARGE_INTERMEDIATE}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
