"""The networks: Wan 2.1 DiT (block-causal forward), Wan 2.1 causal 3D VAE, ImageReward router."""
