"""Pictures as they are: a start image read from a file and fitted to the run's size (docs/pixels.md §1).

- Read upright (EXIF orientation, as ComfyUI's Load Image and camera viewers show it).
- Every Pillow mode becomes 8-bit RGB by its value range, never clipped: 16-bit greyscale (`I;16*`, and `I`, which is
  how Pillow holds 16-bit greyscale) / 257, floating point (`F`) taken as 0..1, palette, bilevel, CMYK and the rest
  through Pillow's own conversion.
- Colour as a colour-managed viewer shows it: an embedded ICC profile (a phone's Display P3, Adobe RGB, a print
  shop's CMYK) is converted to sRGB with Pillow's ImageCms (lcms), at the profile's own rendering intent; a profile
  that moves no colour by more than `SRGB_LEVELS` (an sRGB profile, what most photos carry) changes nothing and is not
  mentioned. The command lines say once when a profile was converted, or could not be read (colours used as stored).
- An animated picture (GIF, WebP, APNG) starts the video with its first frame, and the command lines say so once.
- Transparency (an alpha channel, or a palette's transparent entry) is composited over white (`ALPHA_BACKGROUND`):
  what a viewer on a page shows, never the colour stored under transparent pixels (editors leave anything there).
  The command lines say so once (`ImageInfo.notes`).
- Decoded once per file and run size (`fitted_image`, cached), and reduced while decoding: a JPEG is decoded at a
  smaller DCT scale (Pillow's `draft`), any picture more than `REDUCE_AT` times the run's size per side is box-reduced
  by a whole factor (Pillow's `reduce`) before the fit rule's bicubic resize, so the memory follows the run's size and
  not the file's (docs/pixels.md §7: peak RSS for an 8000x8000 picture).
- Pillow's decompression-bomb limit (`PIL.Image.MAX_IMAGE_PIXELS`) gives one message: above twice it a
  `PixelInputError`; between once and twice the picture is read (it is the file you named) with one note, never
  Pillow's raw warnings.
"""
from __future__ import annotations

import functools
import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .errors import PixelInputError, refuse_url
from .fit import as_vae_frames, check_aspect, crop_box

ALPHA_BACKGROUND = (255, 255, 255)  # transparent pixels are composited over white (docs/pixels.md §1)
SIXTEEN_BIT_STEP = 257  # 65535 / 255: a 16-bit value to 8 bits by its range (65535 -> 255, 32896 -> 128)
REDUCE_AT = 2  # box-reduce by k when the cropped picture is at least 2 k times the run's size on both sides
EXIF_ORIENTATION = 0x0112
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
ALPHA_MODES = {"RGBA": "RGBa", "LA": "La", "PA": "RGBa", "RGBa": "RGBa", "La": "La"}  # -> premultiplied for reduce
FIXED_CACHE = 4  # fitted pictures kept (file identity x run size): preflight and run decode a picture once
KINDS = "a PNG, JPEG or WebP file"
# A profile that moves no probe colour by more than this many 8-bit levels is sRGB in effect: the pixels are used as
# stored (bit for bit) and nothing is said. One level: lcms's own rounding of an sRGB -> sRGB transform.
SRGB_LEVELS = 1
PROBE_STEPS = 6  # probe colours per channel (a 6 x 6 x 6 cube from 0 to 255) for that test
PROFILE_INPUT = {"RGB ": "RGB", "GRAY": "L", "CMYK": "CMYK"}  # an ICC colour space -> the Pillow mode it converts


@dataclass(frozen=True)
class ImageInfo:
    """What a picture file is, from its header: size as stored and as shown (upright), its mode and notes for the
    user (transparency composited, a size above Pillow's decompression-bomb warning)."""

    path: Path
    height: int  # upright (after the EXIF orientation)
    width: int
    mode: str
    orientation: int
    notes: tuple[str, ...] = ()


def _missing(path: Path, what: str) -> None:
    if path.is_dir():
        raise PixelInputError(f"{what} {path} is a directory: give the picture file itself ({KINDS})")
    if not path.is_file():
        raise PixelInputError(f"{what} {path} not found: give the path of {KINDS}")


def _open(path: Path, what: str):
    """The file opened lazily (header read, pixels not decoded) and the notes Pillow's size check left."""
    from PIL import Image, UnidentifiedImageError

    _missing(path, what)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", Image.DecompressionBombWarning)
        try:
            img = Image.open(path)
        except Image.DecompressionBombError:
            raise PixelInputError(_bomb(path, what, refused=True)) from None
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
            raise PixelInputError(f"{what} {path} is not an image Pillow can read ({e}): give {KINDS}") from None
    notes = (_bomb(path, what, refused=False, size=img.size),) if any(
        issubclass(w.category, Image.DecompressionBombWarning) for w in caught) else ()
    return img, notes


def _bomb(path: Path, what: str, refused: bool, size: tuple[int, int] | None = None) -> str:
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS or 0
    if refused:
        return (f"{what} {path} has more than {2 * limit:,} pixels, twice Pillow's decompression-bomb limit "
                f"(PIL.Image.MAX_IMAGE_PIXELS = {limit:,}): scale it down first, or raise that limit if you trust the "
                f"file")
    w, h = size
    return (f"{what} {path} is {w}x{h} ({w * h / 1e6:.0f} Mpx), above Pillow's decompression-bomb warning size "
            f"({limit / 1e6:.0f} Mpx): read anyway (it is the file you named), decoded once and reduced to the "
            f"run's size")


def image_info(path: str | os.PathLike, what: str = "start image") -> ImageInfo:
    """A picture's header: upright size, mode, orientation and notes (transparency, a colour profile converted, an
    animation whose first frame is used, a size above Pillow's bomb warning); refuses a file that is not a picture."""
    refuse_url(path, what, KINDS)
    path = Path(path).expanduser()
    img, notes = _open(path, what)
    with img:
        try:
            orientation = _orientation(img)
        except (OSError, SyntaxError, ValueError) as e:  # metadata after the pixels, in a truncated file
            raise PixelInputError(f"{what} {path} is not an image Pillow can read ({e}): give {KINDS}") from None
        w, h = img.size
        if orientation in (5, 6, 7, 8):  # a quarter turn: shown with width and height swapped
            w, h = h, w
        if _has_alpha(img):
            notes += (f"{what} {path} has transparent pixels: composited over white (docs/pixels.md §1); the colour "
                      f"stored under them is not used",)
        notes += tuple(filter(None, [_colour_profile(img, path, what)[1]]))
        if getattr(img, "is_animated", False):
            notes += (f"{what} {path} is animated ({img.n_frames} frames): its first frame is used (docs/pixels.md "
                      f"§1)",)
        return ImageInfo(path, h, w, img.mode, orientation, notes)


def _colour_profile(img, path: Path, what: str):
    """(the ImageCms transform of `img`'s embedded ICC profile to sRGB, or None; a note for the user, or None). None
    and no note for no profile or one that is sRGB in effect (SRGB_LEVELS); None and a note for a profile that cannot
    be read or does not fit the picture's colours (then used as stored)."""
    icc = img.info.get("icc_profile")
    if not icc or img.mode in SIXTEEN_BIT_MODES or img.mode == "F":
        return None, None
    from PIL import Image, ImageCms

    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        name = (ImageCms.getProfileDescription(profile) or "").strip() or "unnamed"
        mode = PROFILE_INPUT.get(profile.profile.xcolor_space)
        if mode is None or (mode == "CMYK") != (img.mode == "CMYK") or (mode == "L") != (img.mode in ("L", "LA", "La")):
            return None, (f"{what} {path} has a colour profile ({name!r}, {profile.profile.xcolor_space.strip()}) that "
                          f"does not fit its {img.mode} pixels: not applied, its colours are used as stored")
        transform = _to_srgb(profile, mode)
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError) as e:
        return None, (f"{what} {path} has a colour profile that cannot be read ({e}): not applied, its colours are "
                      f"used as stored (as sRGB)")
    if mode != "CMYK":
        levels = np.linspace(0, 255, PROBE_STEPS).round().astype(np.uint8)
        cube = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), -1).reshape(1, -1, 3)  # [1, 216, 3]
        probe = Image.fromarray(cube) if mode == "RGB" else Image.fromarray(cube[:, :, 0])
        shown = np.asarray(transform.apply(probe), np.int16)
        if np.abs(shown - np.asarray(probe.convert("RGB"), np.int16)).max() <= SRGB_LEVELS:
            return None, None  # sRGB in effect: nothing changes, nothing to say
    return transform, (f"{what} {path} carries the colour profile {name!r}: converted to sRGB, as a colour-managed "
                       f"viewer shows it (docs/pixels.md §1)")


def _to_srgb(profile, mode: str):
    """An ImageCms transform from `profile` (pictures in `mode`) to sRGB RGB, at the profile's own rendering intent
    (relative colorimetric where lcms cannot build that one)."""
    from PIL import ImageCms

    srgb = ImageCms.createProfile("sRGB")
    try:
        return ImageCms.buildTransform(profile, srgb, mode, "RGB", ImageCms.getDefaultIntent(profile))
    except ImageCms.PyCMSError:
        return ImageCms.buildTransform(profile, srgb, mode, "RGB", ImageCms.Intent.RELATIVE_COLORIMETRIC)


def _orientation(img) -> int:
    """The EXIF orientation from the header, never decoding the pixels (Pillow's PNG `getexif` decodes the whole
    picture to look for an eXIf chunk after the pixel data; one before it is in `info`, as cameras and editors write
    it)."""
    from PIL import Image

    if img.format == "PNG":
        raw = img.info.get("exif")
        if not raw:
            return 1
        exif = Image.Exif()
        exif.load(raw)
        return int(exif.get(EXIF_ORIENTATION, 1))
    return int(img.getexif().get(EXIF_ORIENTATION, 1))


def _has_alpha(img) -> bool:
    return img.mode in ALPHA_MODES or (img.mode == "P" and "transparency" in img.info)


def _reduce_factor(upright_hw: tuple[int, int], run_hw: tuple[int, int]) -> int:
    """The whole factor a picture can be box-reduced by and still be at least REDUCE_AT times the run's size inside
    its crop (1: use it as decoded)."""
    _, _, h, w = crop_box(upright_hw, run_hw)
    return max(1, min(h // (REDUCE_AT * run_hw[0]), w // (REDUCE_AT * run_hw[1])))


def _decode(img, k: int):
    """Decode `img` reduced by about k (JPEG: a smaller DCT scale while decoding; then a box reduce), in a mode that
    keeps its values: 16-bit as a uint16 array, transparency premultiplied (a hidden colour weighs nothing)."""
    stored_width = img.width
    if k > 1 and img.format == "JPEG":
        img.draft(img.mode, (img.width // k, img.height // k))  # at least that size: the scale is a power of 2
    img.load()
    k = max(1, k // max(1, round(stored_width / img.width)))  # what the DCT scale left to reduce
    if img.mode in SIXTEEN_BIT_MODES:
        a = np.asarray(img)  # [H, W] uint16 / int32
        return _block_mean(np.clip(a, 0, 65535), k) / SIXTEEN_BIT_STEP, "L16"
    if img.mode == "F":
        return _block_mean(np.nan_to_num(np.asarray(img, np.float32)), k).clip(0, 1) * 255, "LF"
    if img.mode in ("P", "PA", "1"):
        img = img.convert("RGBA" if _has_alpha(img) else "RGB")
    if img.mode in ALPHA_MODES:
        img = img.convert(ALPHA_MODES[img.mode])
    return (img.reduce(k) if k > 1 else img), "pil"


def _block_mean(a: np.ndarray, k: int) -> np.ndarray:
    """A 2-D array averaged over k x k blocks (the edge rows and columns that do not fill a block are dropped)."""
    if k == 1:
        return a.astype(np.float32)
    h, w = a.shape[0] // k * k, a.shape[1] // k * k
    return a[:h, :w].reshape(h // k, k, w // k, k).mean(axis=(1, 3), dtype=np.float64).astype(np.float32)


def _to_rgb8(img, kind: str, transform=None) -> np.ndarray:
    """The decoded picture as uint8 sRGB [H, W, 3]: values by their range, transparency composited over white, then
    its colour profile converted (`transform`, from `_colour_profile`)."""
    from PIL import Image

    if kind != "pil":
        grey = np.rint(img).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if img.mode in ("RGBa", "La"):
        rgba = img.convert("RGBA" if img.mode == "RGBa" else "LA").convert("RGBA")
        back = Image.new("RGBA", rgba.size, (*ALPHA_BACKGROUND, 255))
        img = Image.alpha_composite(back, rgba)
        if transform is not None and transform.input_mode == "L":
            img = img.convert("L")
    if transform is not None:
        img = transform.apply(img if img.mode == transform.input_mode else img.convert(transform.input_mode))
    return np.asarray(img.convert("RGB"), dtype=np.uint8)


def _upright(img, kind: str, orientation: int):
    """Apply the EXIF orientation to a (small) decoded picture."""
    from PIL import Image

    ops = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
           5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
           8: Image.Transpose.ROTATE_90}
    if orientation not in ops:
        return img
    if kind == "pil":
        return img.transpose(ops[orientation])
    return np.asarray(Image.fromarray(img).transpose(ops[orientation]))


@functools.lru_cache(maxsize=FIXED_CACHE)
def _fitted(identity: tuple, path: str, run_hw: tuple[int, int], what: str) -> torch.Tensor:
    info = image_info(path, what)
    check_aspect((info.height, info.width), run_hw, f"{what} {path}")
    img, _ = _open(Path(path), what)
    with img:
        transform, _ = _colour_profile(img, Path(path), what)  # read before decoding: the header holds it
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the size note is the header's (image_info): no raw warning here
                decoded, kind = _decode(img, _reduce_factor((info.height, info.width), run_hw))
        except (OSError, SyntaxError, ValueError) as e:  # a truncated or corrupt file fails here
            raise PixelInputError(f"{what} {path} is not an image Pillow can read ({e}): give {KINDS}") from None
    rgb = _to_rgb8(_upright(decoded, kind, info.orientation), kind, transform)  # [h, w, 3] uint8 sRGB, reduced
    return as_vae_frames(torch.from_numpy(rgb.copy())[None], run_hw)[:, :, 0]


def fitted_image(path: str | os.PathLike, run_hw: tuple[int, int], what: str = "start image") -> torch.Tensor:
    """A start image as VAE input [1, 3, H, W] in [-1, 1] at the run's size (the fit rule; decoded once per file and
    size: a later call for the same unchanged file is a cache hit)."""
    refuse_url(path, what, KINDS)
    p = Path(path).expanduser()
    _missing(p, what)
    st = p.stat()
    return _fitted((str(p.resolve()), st.st_mtime_ns, st.st_size), str(p), tuple(run_hw), what)


def check_image(path: str | os.PathLike, run_hw: tuple[int, int], what: str = "start image") -> ImageInfo:
    """Preflight a start image: a picture, croppable to the run's size, and decodable (decoded now, reduced, and kept
    for the run). Returns its header's information (notes included)."""
    info = image_info(path, what)
    fitted_image(path, run_hw, what)
    return info


__all__ = ["ALPHA_BACKGROUND", "ImageInfo", "image_info", "fitted_image", "check_image"]
