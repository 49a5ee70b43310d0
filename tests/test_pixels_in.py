"""Pixels in (sdvg_core/given/{fit,images,videos}.py): start images and input videos read from real small files written here,
fitted to the run's size by the stated rule, and bad files refused with one clear message."""
from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from sdvg_core.given import fit as pixels_in
from sdvg_core.given.errors import PixelInputError
from sdvg_core.given.fit import crop_box, cropped_fraction, fit_frames
from sdvg_core.given.images import check_image, fitted_image as read_image
from sdvg_core.given.videos import check_video, probe_video, read_video, resample_times

av = pytest.importorskip("av")
from PIL import Image  # noqa: E402  (after the PyAV skip: Pillow is a runtime dependency anyway)

RUN_HW = (32, 48)  # the fixtures' pixel size (height, width)


def _frames(n: int, h: int = 32, w: int = 48, seed: int = 0) -> np.ndarray:
    """n distinct uint8 RGB frames [n, h, w, 3]; frame i's top-left pixel holds i (to identify frames)."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)
    frames[:, 0, 0, :] = np.arange(n, dtype=np.uint8)[:, None]
    return frames


def write_video(path: Path, frames: np.ndarray, fps: int = 16, lossless: bool = True, rotation: int = 0) -> Path:
    """An MP4 through PyAV: lossless RGB H.264 (exact pixels back) or ordinary yuv420p H.264."""
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264rgb" if lossless else "libx264", rate=Fraction(fps))
        s.height, s.width = frames.shape[1:3]
        s.pix_fmt = "rgb24" if lossless else "yuv420p"
        if lossless:
            s.options = {"qp": "0"}
        if rotation:
            s.set_display_rotation(rotation)
        for f in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def _vae_range(u8: np.ndarray) -> torch.Tensor:
    """Krea's conversion of uint8 frames [T, H, W, 3] -> [1, 3, T, H, W]."""
    return ((torch.from_numpy(u8).float() / 255 - 0.5) / 0.5).permute(3, 0, 1, 2).unsqueeze(0)


# ------------------------------------------------------------------------------------------------- the fit rule
def test_crop_box_is_the_centred_region_of_the_runs_aspect():
    assert crop_box((1080, 1920), (480, 832)) == (0, 24, 1080, 1872)  # wider than the run: sides cut, 24 px each
    assert crop_box((480, 480), (480, 832)) == (102, 0, 276, 480)  # taller: top and bottom cut equally
    assert crop_box((64, 96), (32, 48)) == (0, 0, 64, 96)  # same aspect: nothing cut
    assert cropped_fraction((64, 96), (32, 48)) == 0.0


def test_more_than_half_cropped_is_refused_half_is_not():
    check_image_hw = pixels_in.check_aspect
    check_image_hw((32, 96), RUN_HW, "x")  # twice as wide as the run: exactly half cropped, allowed
    with pytest.raises(PixelInputError, match="crop away 51%"):
        check_image_hw((32, 98), RUN_HW, "x")
    with pytest.raises(PixelInputError, match=r"portrait\.png is 32x96.*run's 48x32"):
        check_image_hw((96, 32), RUN_HW, "portrait.png")


def test_fit_keeps_the_centre_and_resizes_to_the_run():
    h, w = 64, 192  # twice the run's aspect: the outer quarters on each side are cut
    img = np.zeros((h, w, 3), np.uint8)
    img[:, :48, 0] = img[:, -48:, 0] = 255  # red margins that the crop must remove
    img[:, 48:-48, 1] = 200  # green centre
    out = fit_frames(torch.from_numpy(img)[None], RUN_HW)  # [1, 3, 32, 48] in [0, 1]
    assert out.shape == (1, 3, *RUN_HW)
    assert out[:, 0].max() < 1e-6 and torch.allclose(out[:, 1], torch.full_like(out[:, 1], 200 / 255), atol=1e-6)


# ------------------------------------------------------------------------------------------------------ images
def test_png_of_the_runs_size_reads_exactly_as_krea_converts_it(tmp_path, fixtures_dir):
    u8 = load_file(fixtures_dir / "pixels_tiny" / "tensors.safetensors")["start_image_u8"].numpy()  # [32, 48, 3]
    Image.fromarray(u8).save(tmp_path / "start.png")
    got = read_image(tmp_path / "start.png", RUN_HW)  # [1, 3, H, W]
    assert torch.equal(got, _vae_range(u8[None])[:, :, 0])  # (u8/255 - 0.5) / 0.5, bit for bit
    assert torch.equal(got, (torch.from_numpy(u8).permute(2, 0, 1)[None].float() / 255 - 0.5) * 2)  # Krea's start frame


def test_jpeg_rgba_grayscale_and_exif_rotation(tmp_path):
    rgb = _frames(1, 64, 96)[0]
    Image.fromarray(rgb).save(tmp_path / "a.jpg", quality=95)
    assert read_image(tmp_path / "a.jpg", RUN_HW).shape == (1, 3, *RUN_HW)
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    Image.fromarray(rgb).save(tmp_path / "b.png")
    assert torch.equal(read_image(tmp_path / "a.png", RUN_HW), read_image(tmp_path / "b.png", RUN_HW))  # opaque: as RGB
    Image.fromarray(rgb[:, :, 0]).save(tmp_path / "g.png")
    assert read_image(tmp_path / "g.png", RUN_HW).shape == (1, 3, *RUN_HW)
    # a portrait photo stored sideways with EXIF orientation 6 (rotate 90 degrees clockwise to view): read upright
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rgb).save(tmp_path / "r.jpg", exif=exif, quality=95)
    info = check_image(tmp_path / "r.jpg", (96, 64))
    assert (info.height, info.width) == (96, 64)
    with pytest.raises(PixelInputError, match="crop away"):
        check_image(tmp_path / "r.jpg", (32, 96))  # upright it is 96 tall x 64 wide: too narrow for a 3:1 run


def test_bad_images_are_refused_with_one_message(tmp_path):
    (tmp_path / "notes.png").write_text("not an image")
    with pytest.raises(PixelInputError, match=r"notes\.png is not an image Pillow can read"):
        check_image(tmp_path / "notes.png", RUN_HW)
    Image.fromarray(_frames(1, 64, 96)[0]).save(tmp_path / "full.png")
    data = (tmp_path / "full.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])  # truncated: the header reads, the pixels do not
    with pytest.raises(PixelInputError, match="not an image Pillow can read"):
        read_image(tmp_path / "cut.png", RUN_HW)
    with pytest.raises(PixelInputError, match="not found"):
        check_image(tmp_path / "missing.png", RUN_HW)
    with pytest.raises(PixelInputError, match="is a directory"):  # it exists: not "not found"
        check_image(tmp_path, RUN_HW)
    Image.fromarray(_frames(1, 96, 32)[0]).save(tmp_path / "portrait.png")
    with pytest.raises(PixelInputError, match="crop away 77%"):
        read_image(tmp_path / "portrait.png", RUN_HW)
    Image.fromarray(_frames(1, 10, 4000)[0]).save(tmp_path / "strip.png")
    with pytest.raises(PixelInputError, match=r"crop away 99\.6% of it"):  # 1 - 15/4000: not a rounded 100%
        check_image(tmp_path / "strip.png", (64, 96))


# ------------------------------------------------------------------------------------------ pictures as they are
def _vae(u8: np.ndarray) -> torch.Tensor:
    """uint8 [H, W, 3] -> what the reader gives for a picture of the run's size, [1, 3, H, W] in [-1, 1]."""
    return _vae_range(u8[None])[:, :, 0]


def test_transparent_pixels_are_composited_over_white_never_the_colour_under_them(tmp_path):
    """An RGBA PNG whose transparent half hides magenta: that half reads white, the opaque half as it is, and the
    checks say once that the picture has transparency. The same for a palette picture with a transparent entry and a
    grey picture with alpha."""
    from sdvg_core.given.images import image_info

    rgba = np.zeros((32, 48, 4), np.uint8)
    rgba[:, :24] = (30, 160, 60, 255)  # opaque green
    rgba[:, 24:] = (255, 0, 255, 0)  # magenta, fully transparent
    rgba[:, 23, 3] = 128  # a half-transparent column: green over white, half and half
    Image.fromarray(rgba, "RGBA").save(tmp_path / "cut_out.png")
    got = read_image(tmp_path / "cut_out.png", RUN_HW)
    want = np.concatenate([np.broadcast_to(np.uint8([30, 160, 60]), (32, 24, 3)),
                           np.full((32, 24, 3), 255, np.uint8)], axis=1).copy()
    want[:, 23] = np.round((np.float64([30, 160, 60]) * 128 + 255 * 127) / 255).astype(np.uint8)
    assert (got - _vae(want)).abs().max() <= 2 / 255 * 2  # alpha compositing rounds to within a level
    assert got[:, :, :, 24:].min() == 1.0  # white: no magenta anywhere
    info = image_info(tmp_path / "cut_out.png")
    assert len(info.notes) == 1 and "transparent pixels: composited over white" in info.notes[0]
    pal = Image.fromarray(rgba[:, :, :3]).convert("P")
    pal.info["transparency"] = pal.getpixel((30, 0))  # the magenta entry is transparent
    pal.save(tmp_path / "pal.png", transparency=pal.getpixel((30, 0)))
    assert read_image(tmp_path / "pal.png", RUN_HW)[:, :, :, 24:].min() == 1.0
    la = np.dstack([np.full((32, 48), 90, np.uint8), np.where(np.arange(48) < 24, 255, 0).astype(np.uint8)[None]
                    .repeat(32, 0)])
    Image.fromarray(la, "LA").save(tmp_path / "la.png")
    grey = read_image(tmp_path / "la.png", RUN_HW)
    assert grey[:, :, :, 24:].min() == 1.0 and torch.allclose(grey[:, :, :, :24], torch.tensor(90 / 255 * 2 - 1))


def test_sixteen_bit_and_other_modes_are_read_by_their_value_range(tmp_path):
    """A 16-bit greyscale PNG (a gradient 0..65535) is scaled by its range (v / 257), not clipped at 255; a float
    TIFF is taken as 0..1; CMYK, palette and bilevel pictures go through Pillow's conversion."""
    ramp = np.tile(np.linspace(0, 65535, 48).round().astype(np.uint16), (32, 1))  # [32, 48]
    Image.fromarray(ramp).save(tmp_path / "deep.png")
    assert Image.open(tmp_path / "deep.png").mode in ("I;16", "I")
    got = read_image(tmp_path / "deep.png", RUN_HW)
    want = np.repeat(np.round(ramp / 257).astype(np.uint8)[:, :, None], 3, axis=2)
    assert torch.equal(got, _vae(want))
    assert got[0, 0, 0, 24] < 0.1 and got[0, 0, 0, -1] == 1.0  # mid-grey in the middle, white only at the end
    flt = (np.tile(np.linspace(0, 1, 48, dtype=np.float32), (32, 1)))
    Image.fromarray(flt, "F").save(tmp_path / "f.tif")
    assert torch.allclose(read_image(tmp_path / "f.tif", RUN_HW)[0, 0], torch.from_numpy(flt) * 2 - 1, atol=1 / 255)
    rgb = _frames(1)[0]
    Image.fromarray(rgb).convert("CMYK").save(tmp_path / "c.jpg", quality=100)
    assert (read_image(tmp_path / "c.jpg", RUN_HW) - _vae(rgb)).abs().mean() < 0.1
    Image.fromarray(rgb).convert("1").save(tmp_path / "b.png")
    assert set(read_image(tmp_path / "b.png", RUN_HW).unique().tolist()) <= {-1.0, 1.0}


def test_a_big_picture_is_decoded_once_and_reduced_while_decoding(tmp_path, monkeypatch):
    """A picture many times the run's size: the preflight check decodes it once (reduced: a JPEG at a smaller DCT
    scale, any picture box-reduced before the bicubic resize) and the run takes that decode; the result is the full
    decode's fit to within a few levels."""
    from PIL import ImageFile

    y, x = np.mgrid[0:1200, 0:1800]
    big = np.stack([(x * 255 // 1800), (y * 255 // 1200), ((x + y) * 255 // 3000)], axis=2).astype(np.uint8)
    Image.fromarray(big).save(tmp_path / "big.png")
    Image.fromarray(big).save(tmp_path / "big.jpg", quality=95)
    exact = fit_frames(torch.from_numpy(big)[None], RUN_HW) * 2 - 1  # the fit rule on the full decode
    sizes, loads = [], []
    real_load = ImageFile.ImageFile.load
    def load(im):  # a decode: pixels still to read (Pillow empties `tile` once it has decoded them)
        if im.tile:
            loads.append(im.size)
        return real_load(im)

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)
    real_reduce = Image.Image.reduce
    monkeypatch.setattr(Image.Image, "reduce", lambda im, k, *a, **kw: (sizes.append(k), real_reduce(im, k, *a, **kw))[1])
    for name in ("big.png", "big.jpg"):
        loads.clear()
        check_image(tmp_path / name, RUN_HW)
        got = read_image(tmp_path / name, RUN_HW)
        assert len(loads) == 1, loads  # decoded once: the check's decode is the run's
        assert (got - exact[:, :, 0] if got.dim() == 3 else got - exact[0][None]).abs().max() < 0.08, name
    assert loads[0][0] < 1800 / 4  # the JPEG was decoded at a smaller scale (draft), not 1800 wide
    assert sizes and max(sizes) >= 2  # the PNG was box-reduced by a whole factor


def test_decompression_bomb_limits_give_one_message_not_warnings(tmp_path, monkeypatch):
    import warnings

    from PIL import Image as PILImage

    from sdvg_core.given.images import image_info

    Image.fromarray(_frames(1, 30, 45)[0]).save(tmp_path / "large.png")  # 1350 px
    Image.fromarray(_frames(1, 48, 72)[0]).save(tmp_path / "bomb.png")  # 3456 px
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 1000)  # warn above 1000 px, refuse above 2000
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = image_info(tmp_path / "large.png")
        read_image(tmp_path / "large.png", RUN_HW)
        with pytest.raises(PixelInputError, match="twice Pillow's decompression-bomb limit") as e:
            check_image(tmp_path / "bomb.png", RUN_HW)
    assert caught == [], [str(w.message) for w in caught]
    assert len(info.notes) == 1 and "decompression-bomb warning size" in info.notes[0]
    assert "bomb.png" in str(e.value) and "MAX_IMAGE_PIXELS" in str(e.value)


# ------------------------------------------------------------------------------------------------------ videos
def test_video_streams_in_pieces_with_exact_pixels(tmp_path):
    frames = _frames(10)
    path = write_video(tmp_path / "in.mp4", frames)
    info = check_video(path, RUN_HW)
    assert (info.height, info.width, info.fps, info.frames) == (32, 48, 16.0, 10)
    pieces = read_video(path, RUN_HW)
    first = next(pieces)  # available before the rest of the file is decoded
    rest = list(pieces)
    assert [p.shape[2] for p in [first, *rest]] == [4, 4, 2]
    assert torch.equal(torch.cat([first, *rest], dim=2), _vae_range(frames))  # lossless file: exact
    assert sum(p.shape[2] for p in read_video(path, RUN_HW, max_frames=5, piece_frames=3)) == 5


def test_video_of_another_size_is_fitted_and_a_lossy_file_reads(tmp_path):
    path = write_video(tmp_path / "big.mp4", _frames(6, 64, 112), lossless=False)  # wider than 3:2 by 7/6
    pieces = list(read_video(path, RUN_HW))
    assert [tuple(p.shape) for p in pieces] == [(1, 3, 4, *RUN_HW), (1, 3, 2, *RUN_HW)]
    assert all(p.min() >= -1 and p.max() <= 1 for p in pieces)


def test_rotated_video_reads_upright(tmp_path):
    frames = _frames(2)
    frames[:, :4, :4] = 255  # a white top-left corner
    path = write_video(tmp_path / "rot.mp4", frames, rotation=90)
    info = probe_video(path)
    assert (info.height, info.width) == (48, 32)  # shown upright: a portrait frame
    upright = next(read_video(path, (48, 32)))[0, :, 0]  # [3, 48, 32]
    # counter-clockwise 90 degrees (what ffmpeg's autorotate shows): the corner lands bottom-left
    assert torch.all(upright[:, -4:, :4] == 1.0) and upright[:, :4, :4].max() < 1.0


def test_resampling_to_16_fps_picks_the_nearest_frame_in_time(tmp_path):
    frames = _frames(12)
    path = write_video(tmp_path / "fast.mp4", frames, fps=32)
    got = torch.cat(list(read_video(path, RUN_HW, fps=16)), dim=2)
    assert torch.equal(got, _vae_range(frames[::2]))  # every other frame
    times = [i * 1001 / 30000 for i in range(60)]  # two seconds at 29.97 fps (no exact ties) -> 16 fps
    picked = list(resample_times([(t, i) for i, t in enumerate(times)], 16))
    end = times[-1] + 1001 / 30000
    nearest = [min(range(60), key=lambda i: abs(times[i] - n / 16)) for n in range(40) if n / 16 < end]
    # 2.002 s of video: round(16 x 2.002) = 32 frames, as ffmpeg's fps=16 makes (frames at 0, 1/16, ..., 1.9375 s)
    assert picked == nearest[:32] and len(picked) == 32
    slow = list(resample_times([(i / 8, i) for i in range(4)], 16))  # 8 fps -> each frame twice
    assert slow == [0, 0, 1, 1, 2, 2, 3, 3]


def test_bad_videos_are_refused_with_one_message(tmp_path):
    (tmp_path / "noise.mp4").write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    (tmp_path / "empty.mp4").write_bytes(b"")
    good = write_video(tmp_path / "good.mp4", _frames(8), lossless=False).read_bytes()
    (tmp_path / "head.mp4").write_bytes(good[:64])  # the container header cut off
    for name in ("noise.mp4", "empty.mp4", "head.mp4"):
        with pytest.raises(PixelInputError, match=rf"input video .*{name} (cannot be opened|has no)"):
            check_video(tmp_path / name, RUN_HW)
    with pytest.raises(PixelInputError, match="not found"):
        check_video(tmp_path / "missing.mp4", RUN_HW)
    portrait = write_video(tmp_path / "portrait.mp4", _frames(2, 96, 32))
    with pytest.raises(PixelInputError, match="crop away"):
        check_video(portrait, RUN_HW)
    with pytest.raises(PixelInputError, match="crop away"):
        next(read_video(portrait, RUN_HW))


def test_missing_pyav_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    with pytest.raises(PixelInputError, match="pip install av"):
        check_video(tmp_path / "any.mp4", RUN_HW)


# ------------------------------------------------------------------------------------------------ time kept
def write_vfr(path: Path, frames: np.ndarray, times: np.ndarray) -> Path:
    """A lossless MP4 whose frame i is shown at times[i] seconds (millisecond timestamps): variable frame rate."""
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264rgb", rate=Fraction(30))
        s.height, s.width = frames.shape[1:3]
        s.pix_fmt, s.options = "rgb24", {"qp": "0"}
        s.time_base = s.codec_context.time_base = Fraction(1, 1000)
        for f, t in zip(frames, times):
            frame = av.VideoFrame.from_ndarray(f, format="rgb24")
            frame.pts, frame.time_base = int(round(t * 1000)), Fraction(1, 1000)
            for p in s.encode(frame):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def _ids(pieces) -> list[int]:
    """Which written frame each read frame is (frame i carries i in its top-left pixel, _frames)."""
    x = torch.cat(list(pieces), dim=2)[0, 0, :, 0, 0]  # [t] in [-1, 1]
    return ((x + 1) / 2 * 255).round().int().tolist()


def test_a_30_fps_and_a_variable_rate_clip_keep_their_duration_on_the_runs_clock(tmp_path):
    """Read on the run's 16 fps clock by their timestamps: a 30 fps phone clip (60 frames, 2.0 s) gives 32 frames, a
    variable-frame-rate clip (80 frames over 6.1 s) as many as its duration holds, each the frame nearest in time;
    `keep_frames` keeps every frame (and is other frames: another digest)."""
    from sdvg_core.given.sources import video_source

    frames = _frames(60)
    phone = video_source(write_video(tmp_path / "phone.mp4", frames, fps=30))
    assert (phone.fps, phone.rate, phone.count()) == (30.0, 16, 32)  # 2.0 s at 16 fps
    ids = _ids(phone.pieces(RUN_HW))
    assert len(ids) == 32 and all(abs(i / 30 - n / 16) <= 1 / 60 + 1e-9 for n, i in enumerate(ids))
    assert phone.timing() == {"source_fps": 30.0, "frame_rate": 16}
    kept = video_source(tmp_path / "phone.mp4", keep_frames=True)
    assert kept.count() == 60 and _ids(kept.pieces(RUN_HW)) == list(range(60)) and kept.digest != phone.digest
    from media_files import ffmpeg_fps16_count

    times = np.concatenate([[0.0], np.cumsum(np.random.default_rng(0).uniform(0.03, 0.122, 79))]).round(3)
    vfr = video_source(write_vfr(tmp_path / "vfr.mp4", _frames(80), times))
    ids = _ids(vfr.pieces(RUN_HW))
    # as many as ffmpeg's fps=16 makes of it: 98 frames, 6.1 s (its last frame ends where the file says), not 80 / 16
    assert len(ids) == vfr.count() == ffmpeg_fps16_count(vfr.path) == 98
    assert ids == list(resample_times(zip(times, range(80)), 16))[:98]  # the same frames as from the times alone
    assert all(abs(times[i] - n / 16) <= max(np.diff(times)) / 2 + 1e-9  # the nearest frame in time
               for n, i in enumerate(ids) if n / 16 <= times[-1])
