"""The video file a generation writes block by block into ComfyUI's output folder, so minutes of frames never sit in
memory as an IMAGE batch (ComfyUI's IMAGE is float32: a 40-block 832x480 video is 477 frames = 2.3 GB).

H.264 MP4 through PyAV, as ComfyUI's own Save Video writes it (ComfyUI depends on `av`; the pack adds nothing):
the same file naming with a counter (`<prefix>_00001_.mp4`), the same 8-bit conversion and pixel format, and the
workflow in the file's metadata (drop the file on ComfyUI to get the workflow back) unless ComfyUI runs with
--disable-metadata. What stays in memory is one block's frames and a small preview of the whole video.
"""
from __future__ import annotations

import json
import logging
import math
import os
from fractions import Fraction
from typing import Any

import torch

import folder_paths
from comfy_api.latest import io

from .surface import SDVGError

LOG = logging.getLogger("SDVG")

WAN_FPS = 16  # Wan 2.1's frame rate
# The IMAGE a saving node returns: evenly spaced frames of the whole video, at most this many (32 frames at 832x480
# are 153 MB as float32; the whole video is in the file). Enough to look at, small enough for any length.
PREVIEW_FRAMES = 32
DEFAULT_PREFIX = "video/SDVG"


def save_inputs() -> list:
    """The inputs of a node that can write its video as it goes (SDVG Generate, SDVG Finish)."""
    return [
        io.Boolean.Input("save_video", default=False,
                         tooltip="On: write the video to ComfyUI's output folder block by block as the blocks are "
                                 "committed (H.264 .mp4, 16 fps; the 'video' output names the file, for SDVG Show "
                                 "Video), and output as 'frames' only a "
                                 f"preview of at most {PREVIEW_FRAMES} evenly spaced frames, so a long video never "
                                 "sits in memory. Off: 'frames' holds every frame (for Create Video / Save Video)."),
        io.String.Input("filename_prefix", default=DEFAULT_PREFIX,
                        tooltip="Where the video goes under ComfyUI's output folder, as in Save Video (a counter "
                                "is added: video/SDVG_00001_.mp4). Used when save_video is on."),
    ]


def metadata_of(hidden: Any) -> dict | None:
    """The workflow and prompt to embed (as Save Video does), unless ComfyUI runs with --disable-metadata."""
    try:
        from comfy.cli_args import args

        if getattr(args, "disable_metadata", False):
            return None
    except ImportError:
        pass
    meta = {}
    if hidden is not None and getattr(hidden, "extra_pnginfo", None):
        meta.update(hidden.extra_pnginfo)
    if hidden is not None and getattr(hidden, "prompt", None) is not None:
        meta["prompt"] = hidden.prompt
    return meta or None


class StreamingVideo:
    """An .mp4 in ComfyUI's output folder, appended to block by block; `close()` finishes it (a cancelled run leaves
    a playable file of the blocks written so far). Keeps a preview of every `stride`-th frame."""

    def __init__(self, filename_prefix: str, width: int, height: int, total_frames: int, fps: int = WAN_FPS,
                 metadata: dict | None = None, preview_frames: int | None = None):
        try:
            import av
        except ImportError as e:  # ComfyUI requires av (its own video nodes use it)
            raise SDVGError("saving the video needs PyAV (`av`, a ComfyUI requirement): install ComfyUI's "
                            "requirements.txt into its python") from e
        out_dir = folder_paths.get_output_directory()
        folder, name, counter, subfolder, _ = folder_paths.get_save_image_path(filename_prefix, out_dir, width, height)
        os.makedirs(folder, exist_ok=True)
        self.file, self.subfolder = f"{name}_{counter:05}_.mp4", subfolder
        self.path = os.path.join(folder, self.file)
        self.width, self.height = width, height
        self.frames_written = 0
        keep = PREVIEW_FRAMES if preview_frames is None else preview_frames
        self.stride = max(1, math.ceil(total_frames / max(keep, 1)))
        self._preview: list[torch.Tensor] = []
        self._av = av
        self._out = av.open(self.path, mode="w", options={"movflags": "use_metadata_tags"})
        for k, v in (metadata or {}).items():
            self._out.metadata[k] = json.dumps(v)
        self._stream = self._out.add_stream("h264", rate=Fraction(round(fps * 1000), 1000))
        self._stream.width, self._stream.height, self._stream.pix_fmt = width, height, "yuv420p"

    def write(self, frames: torch.Tensor) -> None:
        """Append frames [T, H, W, 3] in 0..1 (one committed block) to the file."""
        if self._out is None:
            raise RuntimeError("the video file is closed")
        pixels = (frames.detach().float() * 255).clamp(0, 255).to(torch.uint8).cpu()  # as Save Video converts
        for f in range(pixels.shape[0]):
            if self.frames_written % self.stride == 0:
                self._preview.append(frames[f].detach().float().cpu().clone())
            frame = self._av.VideoFrame.from_ndarray(pixels[f].numpy(), format="rgb24")
            for packet in self._stream.encode(frame):
                self._out.mux(packet)
            self.frames_written += 1

    def close(self) -> str:
        """Flush the encoder and finish the file; returns its path (idempotent)."""
        if self._out is not None:
            try:
                for packet in self._stream.encode():
                    self._out.mux(packet)
            finally:
                self._out.close()
                self._out = None
        return self.path

    def preview(self) -> torch.Tensor:
        """The kept frames [N, H, W, 3] (every stride-th frame of the video), N <= the preview size."""
        if not self._preview:
            return torch.zeros(1, self.height, self.width, 3)
        return torch.stack(self._preview)

    @property
    def relative_path(self) -> str:
        """The file under ComfyUI's output folder, '/'-separated (what SDVG Show Video takes)."""
        return "/".join(p for p in (self.subfolder.replace(os.sep, "/"), self.file) if p)


def saved_video_ui(relative_path: str) -> dict:
    """What Save Video shows for a file of the output folder: the frontend plays it on the node. (It plays it only on
    a node without progress previews: frontend 1.5x shows a node's latest preview image instead of its saved video,
    which is why SDVG Generate's video is shown by SDVG Show Video.)"""
    out_dir = os.path.abspath(folder_paths.get_output_directory())
    full = os.path.abspath(os.path.join(out_dir, relative_path))
    if os.path.commonpath((out_dir, full)) != out_dir:
        raise SDVGError(f"SDVG Show Video: {relative_path!r} is not inside ComfyUI's output folder")
    if not os.path.isfile(full):
        raise SDVGError(f"SDVG Show Video: {relative_path!r} is not in the output folder ({out_dir}); connect the "
                        f"'video' output of SDVG Generate / SDVG Finish with save_video on")
    subfolder, name = os.path.split(os.path.relpath(full, out_dir))
    return {"images": [{"filename": name, "subfolder": subfolder.replace(os.sep, "/"), "type": "output"}],
            "animated": (True,)}
