"""Pictures as a player shows them (docs/pixels.md §1): an ICC profile is converted to sRGB (a Display P3 photo's
colours as a colour-managed viewer shows them), an animated picture's first frame is used, and each is said once
before anything loads; a URL is refused as a URL. The pictures and the P3 profile are written here."""
from __future__ import annotations


import numpy as np
import pytest
import torch
from PIL import Image, ImageCms

from media_files import display_p3_icc, p3_to_srgb8
from sdvg_core.demo.cli import main
from sdvg_core.given.errors import PixelInputError
from sdvg_core.given.images import fitted_image, image_info


RUN_HW = (32, 48)
SMALL = ["--width", "48", "--height", "32", "--quiet"]
P3_COLOUR = (200, 120, 60)
VIEWER = (213, 115, 42)  # what a colour-managed viewer shows for P3 (200, 120, 60)


def _no_loading(monkeypatch):
    import sdvg_core.demo.cli as cli

    def boom(*_a, **_k):
        raise AssertionError("a model was loaded before the inputs were checked")

    monkeypatch.setattr(cli, "load_model_files", boom)
    monkeypatch.setattr(cli, "tiny_models", boom)


def _rgb8(vae: torch.Tensor) -> np.ndarray:
    """[1, 3, H, W] in [-1, 1] -> uint8 [H, W, 3]."""
    return ((vae[0].permute(1, 2, 0) + 1) / 2 * 255).round().to(torch.uint8).numpy()


def _notes_before_loading(capsys, monkeypatch, args: list[str], tmp_path) -> str:
    _no_loading(monkeypatch)
    with pytest.raises(AssertionError, match="a model was loaded"):
        main([*args, "--out", str(tmp_path / "o"), *SMALL])
    return capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_a_display_p3_picture_is_converted_to_srgb_and_said_once(tmp_path, capsys, monkeypatch, fmt):
    """P3 (200, 120, 60) reads as sRGB (213, 115, 42), what a colour-managed viewer shows (and what the colour
    science gives, computed here without lcms), not the stored numbers; the note names the profile once."""
    assert tuple(p3_to_srgb8(P3_COLOUR)) == VIEWER
    path = tmp_path / f"p3.{fmt.lower()}"
    Image.new("RGB", (48, 32), P3_COLOUR).save(path, fmt, icc_profile=display_p3_icc(), **(
        {"quality": 100, "subsampling": 0} if fmt == "JPEG" else {}))
    stored = np.asarray(Image.open(path).convert("RGB"))[0, 0]  # a JPEG's flat colour comes back a level or two off
    want = p3_to_srgb8(stored)
    assert fmt == "JPEG" or tuple(want) == VIEWER
    got = _rgb8(fitted_image(path, RUN_HW)).reshape(-1, 3)
    assert np.abs(got.astype(int) - want).max() <= 1, (got[0], want)
    info = image_info(path)
    assert len(info.notes) == 1 and "Display P3 (test)" in info.notes[0] and "converted to sRGB" in info.notes[0]
    err = _notes_before_loading(capsys, monkeypatch, ["--start-image", str(path)], tmp_path)
    assert err.count("converted to sRGB") == 1, err


def test_an_srgb_profile_changes_nothing_and_is_not_mentioned(tmp_path):
    """Most photos carry an sRGB profile: their pixels are used bit for bit and nothing is said."""
    rgb = np.random.default_rng(0).integers(0, 256, (32, 48, 3), dtype=np.uint8)
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    Image.fromarray(rgb).save(tmp_path / "tagged.png", icc_profile=srgb)
    Image.fromarray(rgb).save(tmp_path / "plain.png")
    assert torch.equal(fitted_image(tmp_path / "tagged.png", RUN_HW), fitted_image(tmp_path / "plain.png", RUN_HW))
    assert image_info(tmp_path / "tagged.png").notes == ()


def test_an_unreadable_profile_is_said_and_the_colours_used_as_stored(tmp_path):
    Image.new("RGB", (48, 32), P3_COLOUR).save(tmp_path / "bad.png", icc_profile=b"not a profile" * 20)
    assert np.all(_rgb8(fitted_image(tmp_path / "bad.png", RUN_HW)) == P3_COLOUR)
    notes = image_info(tmp_path / "bad.png").notes
    assert len(notes) == 1 and "cannot be read" in notes[0]


@pytest.mark.parametrize("fmt", ["WEBP", "GIF", "PNG"])
def test_an_animated_picture_uses_its_first_frame_and_says_so_once(tmp_path, capsys, monkeypatch, fmt):
    frames = [np.full((32, 48, 3), v, np.uint8) for v in (40, 120, 200)]
    path = tmp_path / f"anim.{fmt.lower()}"
    imgs = [Image.fromarray(f) for f in frames]
    imgs[0].save(path, fmt, save_all=True, append_images=imgs[1:], duration=100, loop=0,
                 **({"lossless": True} if fmt == "WEBP" else {}))
    got = _rgb8(fitted_image(path, RUN_HW))
    assert np.abs(got.astype(int) - 40).max() <= 1  # the first frame, not a later one
    err = _notes_before_loading(capsys, monkeypatch, ["--start-image", str(path)], tmp_path)
    assert err.count("is animated (3 frames): its first frame is used") == 1, err


@pytest.mark.parametrize("flag", ["--start-image", "--input-video", "--extend"])
def test_a_url_is_refused_as_a_url(tmp_path, capsys, monkeypatch, flag):
    """Not "not found" with a slash lost: the URL as given, that only local files are read, how to get the file."""
    _no_loading(monkeypatch)
    url = "https://example.com/photos/cat.png"
    assert main([flag, url, "--out", str(tmp_path / "o"), *SMALL]) == 2
    err = capsys.readouterr().err
    assert f"'{url}' is a URL" in err and "not found" not in err and "download it first" in err, err


def test_the_api_refuses_a_url_too():
    from sdvg_core import PixelInput

    with pytest.raises(PixelInputError, match=r"'http://example\.com/a\.mp4' is a URL"):
        PixelInput.video_to_video("http://example.com/a.mp4")
    with pytest.raises(PixelInputError, match="is a URL"):
        PixelInput.start_image("https://example.com/a.png")


def test_a_prompt_row_naming_a_url_is_refused_as_a_url(tmp_path):
    from sdvg_eval.prompts import PromptRowError, read_prompts

    rows = tmp_path / "p.txt"
    rows.write_text("a cat || start_image=https://example.com/cat.png\n")
    with pytest.raises(PromptRowError, match=r"line 1: start image 'https://example\.com/cat\.png' is a URL"):
        read_prompts(rows)
