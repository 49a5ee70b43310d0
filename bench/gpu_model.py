"""An explicit time and memory model of one data-centre GPU, for the GPU check's dry run (estimates, not measurements).

A call's time = max(FLOPs / (peak x efficiency), bytes moved / (bandwidth x efficiency)) + a fixed per-call
overhead. FLOPs come from the meta-device runs (bench/units.class_flops); peaks and bandwidths from NVIDIA's
datasheets; the efficiencies and overheads are this project's assumptions, chosen on the pessimistic side so a
plan that fits here should fit the real run.
"""
from __future__ import annotations

from dataclasses import dataclass

from units import DIT_KINDS, CallClass


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet figures of one GPU (dense tensor-core throughput, without 2:4 sparsity)."""

    key: str
    name: str
    memory_bytes: int
    bf16_flops: float  # dense BF16 / FP16 tensor-core FLOP/s
    hbm_bytes_per_s: float
    source: str


GPUS: dict[str, GPUSpec] = {
    "h100": GPUSpec("h100", "NVIDIA H100 SXM5 80GB", 80 * 10**9, 989.4e12, 3.35e12,
                    "NVIDIA H100 Tensor Core GPU datasheet: 80 GB HBM3, 3.35 TB/s, BF16 1,979 TFLOPS with sparsity"),
    "h200": GPUSpec("h200", "NVIDIA H200 SXM 141GB", 141 * 10**9, 989.4e12, 4.8e12,
                    "NVIDIA H200 Tensor Core GPU datasheet: 141 GB HBM3e, 4.8 TB/s, BF16 1,979 TFLOPS with sparsity"),
}

# Assumptions (not measurements):
# share of the datasheet memory a run may use: the CUDA context (~0.5 GiB) and allocator fragmentation take the rest
USABLE_MEMORY_FRACTION = 0.95
# share of peak tensor-core FLOP/s reached per kind of call. DiT calls are large bf16 GEMMs + flash attention
# (~0.5-0.7 of peak is typical on Hopper; 0.40 leaves room for CausalWan's fp32 elementwise work); the VAE's
# 3x3x3 convs and the ViT-L scorer at batch 12 reach less.
# The tiny routing decoder (TAEHV: 2D 3x3 convs at <= 256 channels) is assumed to reach what the VAE's convs reach.
EFFICIENCY = {"dit": 0.40, "dit context": 0.40, "decode": 0.20, "route decode": 0.20, "encode": 0.20, "score": 0.20}
MEMORY_EFFICIENCY = 0.70  # share of datasheet HBM bandwidth a streaming read reaches
# fixed seconds per call: Python and kernel launches (a DiT forward launches ~40 kernels per layer)
CALL_OVERHEAD_S = {"dit": 0.02, "dit context": 0.02, "decode": 0.01, "route decode": 0.01, "encode": 0.01,
                   "score": 0.005}
# host work per scored frame: the PIL-exact preprocessing on the CPU (the scorer's default path)
SCORE_HOST_S_PER_FRAME = 0.005
# host work per block outside the model calls (latent hashing, pixel copies, memo bookkeeping)
ENGINE_S_PER_BLOCK = 0.05
# process start, CUDA context, imports; weights made on the CPU (VAE and ImageReward) at this many params/s
STARTUP_S = 30.0
CPU_INIT_PARAMS_PER_S = 5e7
# first calls of every kernel shape (cuBLAS / cuDNN heuristics, allocator growth) beyond their priced time
FIRST_CALL_S = 20.0


def call_seconds(cls: CallClass, flops: float, bytes_moved: float, gpu: GPUSpec) -> float:
    """Estimated seconds of one unit of `cls` on `gpu` (text encodes are priced as DiT work)."""
    group = "dit" if cls.kind in DIT_KINDS or cls.kind == "text" else cls.group
    compute = flops / (gpu.bf16_flops * EFFICIENCY[group])
    memory = bytes_moved / (gpu.hbm_bytes_per_s * MEMORY_EFFICIENCY)
    host = SCORE_HOST_S_PER_FRAME if cls.kind == "score_frame" else 0.0
    overhead = CALL_OVERHEAD_S[group] if cls.kind != "score_frame" else CALL_OVERHEAD_S["score"] / 12
    return max(compute, memory) + overhead + host


def fits(peak_bytes: int, gpu: GPUSpec) -> bool:
    return peak_bytes <= gpu.memory_bytes * USABLE_MEMORY_FRACTION
