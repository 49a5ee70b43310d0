"""Hosted models keep their memo identity across reloads: ComfyUI 0.33's RAM-pressure output cache may drop a
loader's output between queue presses, and the reloaded object must find the results of the same weights."""
from __future__ import annotations

import torch


def test_a_reloaded_vae_keeps_its_key_other_weights_do_not(tmp_path):
    import fake_host

    from importlib import import_module

    with fake_host.installed(tmp_path) as pack:
        random_vae = import_module(pack.__name__ + ".sdvg_core.demo.tiny").random_vae
        vae_cls = pack.core_nodes.FakeComfyVAE
        host_vae = pack.nodes.hosted.host_vae
        first = host_vae(vae_cls(random_vae(1)))
        again = host_vae(vae_cls(random_vae(1)))  # the same weights in a new object (a reload)
        other = host_vae(vae_cls(random_vae(2)))
        assert first is not again and first.key == again.key
        assert other.key != first.key
        assert host_vae(vae_cls(random_vae(1), torch.bfloat16)).key != first.key  # the compute dtype is part of it
