"""`./dev.sh bench --size tiny`: the scale benchmark runs end to end and writes the JSON keys and table it promises."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ["target-only", "reference algorithm (lazy=False), 6/8", "this engine, 6/8", "all-accept", "all-reject"]
ROW_KEYS = {"name", "lazy", "wall_s", "s_per_block", "phase_s_per_block", "model_s", "overhead_s", "overhead_share",
            "peak_mem_bytes", "speedup_measured", "speedup_predicted", "predicted_s", "counts", "decisions"}
META_KEYS = {"size", "device", "dtype", "machine", "command", "blocks", "width", "height", "recipe", "compile", "models",
             "params", "build_s", "warmup_s", "weights_resident_bytes", "unit_s", "forward_ratio", "memory_estimate",
             "rows"}


def _bench():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "bench_scale.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_tiny_bench_writes_json_and_table(tmp_path):
    bench = _bench()
    out = tmp_path / "tiny.json"
    assert bench.main(["--size", "tiny", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data) == META_KEYS
    assert [r["name"] for r in data["rows"]] == CONFIGS
    for r in data["rows"]:
        assert set(r) == ROW_KEYS
        assert set(r["phase_s_per_block"]) == set(bench.PHASES)
        assert set(r["counts"]) == set(bench.WORK)
        assert r["wall_s"] > 0 and 0 <= r["overhead_share"] < 1
        assert len(r["decisions"]) == bench.BLOCKS
    rows = {r["name"]: r for r in data["rows"]}
    assert rows["target-only"]["counts"]["drafter_forwards"] == 0
    assert rows["target-only"]["speedup_measured"] == 1.0
    # the reference algorithm drafts and scores every block; this engine skips the forced ones
    assert rows["reference algorithm (lazy=False), 6/8"]["counts"]["drafter_forwards"] > \
        rows["this engine, 6/8"]["counts"]["drafter_forwards"]
    assert rows["all-accept"]["counts"]["target_forwards"] < rows["all-reject"]["counts"]["target_forwards"]
    table = out.with_suffix(".md").read_text()
    assert table.count("\n| ") == len(CONFIGS) + 1 and "speedup measured" in table and "engine overhead" in table
