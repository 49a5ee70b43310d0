#!/usr/bin/env python3
"""The real host's side of the fake-host drift check (in-process, ComfyUI's python); prints one JSON line.

    $COMFYUI_PYTHON tests/comfy_surface_probe.py $COMFYUI_DIR <repo> NAMES.json

NAMES.json: the host names the pack uses (tests/host_surface.py). For each: the real object's kind and signature
(`host_surface.describe`), or null when the host has no such name. tests/test_comfy_host.py compares them with the
fakes' (`host_surface.drift`).
"""
import json
import sys

import comfy_probe_env

COMFY, REPO, NAMES = sys.argv[1], sys.argv[2], sys.argv[3]
comfy_probe_env.start(COMFY)
import host_surface  # noqa: E402  (after the host's modules are importable)

comfy_probe_env.import_pack(REPO)
out = {}
for name in json.loads(open(NAMES).read()):
    try:
        out[name] = host_surface.describe(host_surface.resolve(name))
    except (ImportError, AttributeError):
        out[name] = None
print(json.dumps({"host": out}))
