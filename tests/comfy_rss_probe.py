#!/usr/bin/env python3
"""Server memory (RSS) around a big SDVG run in a real ComfyUI on the CPU: what stays after the run, after /free and
after a prompt without SDVG nodes. Prints one JSON line (GiB) and the server's SDVG memory log lines.

    .venv/bin/python tests/comfy_rss_probe.py --comfy $COMFYUI_DIR [--pack DIR] [--width 832 --height 480 --blocks 3]

Uses tests/test_comfy_host.py's models (tiny DiTs, a full-width random Wan 2.1 VAE, tiny ImageReward) and server
harness; `--pack` is the checkout linked into the server's custom_nodes (default: this one), e.g. an older commit
in a `git worktree` to compare. RSS is read from /proc/<pid>/status (VmRSS) after the prompt worker's idle
garbage collection (ComfyUI runs gc.collect at most every 10 s).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

TESTS = Path(__file__).resolve().parent
GC_WAIT_S = 12.0  # ComfyUI's prompt worker collects garbage at most every 10 s when idle after a prompt or /free


def rss_gib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**20  # kB -> GiB
    raise RuntimeError("no VmRSS")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--comfy", required=True, help="ComfyUI checkout (or the pip build's folder)")
    ap.add_argument("--pack", default=str(TESTS.parent), help="pack checkout to load (default: this one)")
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--blocks", type=int, default=3)
    a = ap.parse_args()
    os.environ["COMFYUI_DIR"] = a.comfy
    sys.path[:0] = [str(TESTS), str(TESTS.parent)]  # the harness, and sdvg_core for its test models
    import test_comfy_host as h

    root = Path(tempfile.mkdtemp(prefix="sdvg-rss-"))
    h.write_models(root)
    h.lay_out_host(root, Path(a.pack).resolve())
    server = h.Server(root, "rss")
    pid = server.proc.pid
    other = {"1": {"class_type": "EmptyImage", "inputs": {"width": a.width, "height": a.height, "batch_size": 1, "color": 0}},
             "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}

    def free() -> None:
        req = urllib.request.Request(server.url + "/free", data=json.dumps({"unload_models": True, "free_memory": True}).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=30).read()

    def settle() -> float:
        time.sleep(GC_WAIT_S)
        return round(rss_gib(pid), 3)

    res = {"pack": a.pack, "comfy": a.comfy, "size": f"{a.width}x{a.height}", "blocks": a.blocks}
    try:
        server.queue(other)
        free()
        res["baseline"] = settle()
        api = h.api_for(server, h.REPO / "workflows" / "sdvg_generate.json", tau=-5.0, width=a.width, height=a.height,
                        num_blocks=a.blocks)
        t0 = time.time()
        server.queue(api, timeout=3600)
        res["run_s"] = round(time.time() - t0, 1)
        res["after_run"] = settle()
        server.queue(other)
        res["after_other_prompt"] = settle()
        free()
        res["after_free"] = settle()
        server.queue(other)
        res["after_free_and_other_prompt"] = settle()
    finally:
        server.close()
    res["retained_after_free"] = round(res["after_free"] - res["baseline"], 3)
    print("\n".join(ln for ln in (root / "rss.log").read_text().splitlines() if "SDVG: released" in ln))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
