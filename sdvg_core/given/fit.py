"""The fit rule: a picture or a video frame fitted to the run's size as VAE input (docs/pixels.md §1).

As ComfyUI's Image Scale with crop "center": cut the centre of the picture to the run's aspect ratio (equal margins,
offsets rounded), then resize to the run's size, bicubic with antialiasing, clamped to [0, 1]; a picture of the run's
size is used as is. A picture whose aspect is so far from the run's that the crop would drop more than half of it (a
portrait photo for a landscape run) is refused instead, with one `PixelInputError`.

A video stored with non-square pixels (a sample aspect ratio other than 1:1, as anamorphic recordings and some
broadcast files are) is fitted as a player shows it (`shown_hw`): the crop is cut from the shown picture and the one
resize stretches the stored pixels to the run's size, so no second resampling is made.

Frames come out in the VAE's range [-1, 1] ((x/255 - 0.5) / 0.5, as Krea converts them) and layout (B C T H W).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .errors import PixelInputError

# More than this fraction of the picture cropped away is refused (the rule: "losing more than half").
MAX_CROPPED_FRACTION = 0.5
FIT_RULE = ("centre crop to the run's aspect ratio (as ComfyUI's Image Scale, crop=center), then bicubic resize "
            "with antialiasing to the run's size")
PERCENT_DIGITS = 3  # most decimals a share is printed with (so 99.6% never reads as 100%)


def crop_box(src_hw: tuple[int, int], run_hw: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the centred region of a src_h x src_w picture with the run's aspect ratio.

    Equal margins on the cut sides, each rounded to the nearest pixel (Python's round, as ComfyUI's
    `common_upscale` does), so the crop is symmetric up to one pixel.
    """
    (h, w), (rh, rw) = src_hw, run_hw
    src_aspect, run_aspect = w / h, rw / rh
    if src_aspect > run_aspect:  # too wide: cut left and right
        x = round((w - w * (run_aspect / src_aspect)) / 2)
        return 0, x, h, w - 2 * x
    if src_aspect < run_aspect:  # too tall: cut top and bottom
        y = round((h - h * (src_aspect / run_aspect)) / 2)
        return y, 0, h - 2 * y, w
    return 0, 0, h, w


def cropped_fraction(src_hw: tuple[int, int], run_hw: tuple[int, int]) -> float:
    """Fraction of the picture's area the centre crop drops (0 when the aspects match)."""
    _, _, h, w = crop_box(src_hw, run_hw)
    return 1.0 - (h * w) / (src_hw[0] * src_hw[1])


def share(x: float, limit: float | None = None) -> str:
    """`x` as a percentage with as few decimals as keep it honest: never 0% or 100% for a share strictly between,
    never equal to `limit` when it is above or below it (0.996 -> '99.6%', 0.51 -> '51%')."""
    for digits in range(PERCENT_DIGITS + 1):
        shown = round(x * 100, digits)
        ends = (shown == 0 and x > 0) or (shown == 100 and x < 1)
        at_limit = limit is not None and shown == round(limit * 100, digits) and x != limit
        if not (ends or at_limit):
            break
    return f"{x:.{digits}%}"


def check_aspect(src_hw: tuple[int, int], run_hw: tuple[int, int], what: str) -> None:
    """Refuse a picture the fit rule would crop by more than MAX_CROPPED_FRACTION of its area."""
    lost = cropped_fraction(src_hw, run_hw)
    if lost > MAX_CROPPED_FRACTION:
        (h, w), (rh, rw) = src_hw, run_hw
        raise PixelInputError(
            f"{what} is {w}x{h}; fitting it to the run's {rw}x{rh} would crop away {share(lost, MAX_CROPPED_FRACTION)} "
            f"of it (more than {MAX_CROPPED_FRACTION:.0%}): crop it yourself, or choose a width and height closer to "
            f"its aspect ratio")


def shown_hw(stored_hw: tuple[int, int], pixel_aspect: float = 1.0) -> tuple[int, int]:
    """(height, width) of a picture as shown when each stored pixel is `pixel_aspect` times as wide as tall (as
    players show it: the width scaled, the height kept)."""
    h, w = stored_hw
    return (h, w) if pixel_aspect == 1.0 else (h, max(1, round(w * pixel_aspect)))


def to_vae_range(frames01: torch.Tensor) -> torch.Tensor:
    """[0, 1] -> [-1, 1] as (x - 0.5) / 0.5 (Krea's conversion; float32)."""
    return (frames01.float() - 0.5) / 0.5


def fit_frames(frames: torch.Tensor, run_hw: tuple[int, int], pixel_aspect: float = 1.0) -> torch.Tensor:
    """Frames [T, H, W, 3] (uint8, or float in [0, 1] as a ComfyUI IMAGE) -> [T, 3, h, w] float32 in [0, 1] at the
    run's size by the fit rule, applied to the picture as shown (`pixel_aspect`: a stored pixel's width / height).
    The aspect check is the caller's (`check_aspect`): this crops whatever it gets."""
    x = frames.permute(0, 3, 1, 2)  # [T, 3, H, W]
    stored = tuple(x.shape[-2:])
    top, left, h, w = crop_box(shown_hw(stored, pixel_aspect), run_hw)
    if pixel_aspect != 1.0:  # the crop's columns in stored pixels
        left = min(round(left / pixel_aspect), stored[1] - 1)
        w = max(1, min(round(w / pixel_aspect), stored[1] - left))
    x = x[:, :, top:top + h, left:left + w]  # cropped before the float copy: a big picture is converted once, cut
    x = x.float() / 255 if x.dtype == torch.uint8 else x.float()
    if (h, w) != tuple(run_hw):
        x = F.interpolate(x, size=tuple(run_hw), mode="bicubic", align_corners=False, antialias=True).clamp(0, 1)
    return x


def as_vae_frames(frames: torch.Tensor, run_hw: tuple[int, int], pixel_aspect: float = 1.0) -> torch.Tensor:
    """Frames [T, H, W, 3] (uint8 or [0, 1]) -> VAE input [1, 3, T, h, w] in [-1, 1] at the run's size."""
    return to_vae_range(fit_frames(frames, run_hw, pixel_aspect)).permute(1, 0, 2, 3).unsqueeze(0)


__all__ = ["FIT_RULE", "MAX_CROPPED_FRACTION", "crop_box", "cropped_fraction", "share", "check_aspect", "shown_hw",
           "to_vae_range", "fit_frames", "as_vae_frames"]
