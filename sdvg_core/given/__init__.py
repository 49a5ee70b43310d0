"""Given pixels: a run that starts from a picture, continues a video or restyles one (docs/pixels.md).

- `request`: what a caller asks for (`PixelInput`; the modes start image / extend / video-to-video as types);
- `errors`: the one error of given pixels (`PixelInputError`);
- `fit`: the fit rule (centre crop to the run's aspect ratio, then resize);
- `images` / `videos`: pictures and videos read from files as they are (modes, alpha, frame rates, broken streams);
- `sources`: the frame sources a request reads from (a file, or ComfyUI IMAGE frames), on the run's 16 fps clock;
- `encode`: the VAE encodes of given pixels (Krea's clip and start-frame encodes);
- `latents`: a start image or a video to extend as the latents a recipe's context starts from;
- `stream`: a video to restyle, encoded block by block as the run goes;
- `run`: the given pixels as a run uses them (the engine's view: plans, given latents, input blocks, stops).
"""
