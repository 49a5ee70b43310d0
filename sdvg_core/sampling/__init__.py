"""Few-step flow-matching sampling: the denoising timesteps and sigmas of a step plan (timesteps.py) and one block's
denoising loop over a DiT (denoise.py)."""
