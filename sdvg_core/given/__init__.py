"""Given pixels: a run that starts from a picture, continues a video or restyles one (docs/pixels.md).

- `request`: what a caller asks for (`PixelInput`; the modes start image / extend / video-to-video as types);
- `read`: pictures and videos read from files and fitted to the run's size;
- `sources`: the frame sources a request reads from (a file, or ComfyUI IMAGE frames);
- `encode`: the VAE encodes of given pixels (Krea's clip and start-frame encodes);
- `run`: the given pixels as a run uses them (the engine's view: plans, given latents, input blocks, stops).
"""
