"""Counting what starting a run does (a test helper, not a test module): Engine objects made, Engine.start calls,
and VAE encodes made while a run starts (a start image's encode; Krea's anchors are encoded later, during blocks)."""
from __future__ import annotations


def count_starts(monkeypatch, engine_cls, vae_cls) -> dict:
    """Patch `engine_cls` (the Engine of the package under test) and `vae_cls` (its WanVAE) to count into the
    returned dict: `engines`, `starts`, `encodes_at_start`."""
    counts = {"engines": 0, "starts": 0, "encodes_at_start": 0}
    starting: list[bool] = []
    real_init, real_start, real_encode = engine_cls.__init__, engine_cls.start, vae_cls.encode_stream

    def init(self, *a, **kw):
        counts["engines"] += 1
        real_init(self, *a, **kw)

    def start(self, spec):
        counts["starts"] += 1
        starting.append(True)
        try:
            return real_start(self, spec)
        finally:
            starting.pop()

    def encode(self, *a, **kw):
        counts["encodes_at_start"] += bool(starting)
        return real_encode(self, *a, **kw)

    monkeypatch.setattr(engine_cls, "__init__", init)
    monkeypatch.setattr(engine_cls, "start", start)
    monkeypatch.setattr(vae_cls, "encode_stream", encode)
    return counts
