"""Files as cameras, recorders and browsers write them, made here with ffmpeg (imageio-ffmpeg's static binary) and
Pillow: WebM / MKV at film and screen-recorder rates, an MPEG-TS whose timestamps start late with one keyframe, a raw
H.264 stream, a WebM without a duration, an MP4 with non-square pixels, animated pictures and a Display P3 ICC profile.
Also ffmpeg's own frame count through its fps filter, which the reader's 16 fps clock is held to."""
from __future__ import annotations

import struct
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

ffmpeg_exe = pytest.importorskip("imageio_ffmpeg").get_ffmpeg_exe

RUN_FPS = 16  # the run's clock
CODECS = {".webm": "libvpx-vp9", ".mkv": "libx264", ".mp4": "libx264", ".ts": "libx264", ".h264": "libx264"}


def ffmpeg(*args: str, stdout=None) -> None:
    """Run ffmpeg quietly; a failure shows its message."""
    r = subprocess.run([ffmpeg_exe(), "-hide_banner", "-nostdin", "-loglevel", "error", "-y", *args], stdout=stdout,
                       stderr=subprocess.PIPE, text=stdout is None)
    assert r.returncode == 0, r.stderr


def pattern_clip(path: Path, rate: str | int = 16, frames: int = 48, size: str = "96x64", extra: tuple[str, ...] = (),
            vf: str | None = None) -> Path:
    """A clip of ffmpeg's test pattern: `frames` frames at `rate` (a number or a ratio such as 30000/1001), encoded
    with the container's usual codec; `extra`: more output options."""
    ffmpeg("-f", "lavfi", "-i", f"testsrc=size={size}:rate={rate}", "-frames:v", str(frames),
           *(("-vf", vf) if vf else ()), "-pix_fmt", "yuv420p", "-c:v", CODECS[path.suffix], *extra, str(path))
    return path


def seconds_of(rate: str | int, frames: int) -> float:
    return frames / float(Fraction(str(rate)))


def ffmpeg_fps16_count(path: Path) -> int:
    """How many frames ffmpeg's `fps=16` filter makes of the file (one framecrc line per output frame)."""
    r = subprocess.run([ffmpeg_exe(), "-hide_banner", "-nostdin", "-loglevel", "error", "-i", str(path), "-map", "0:v:0",
                        "-vf", f"fps={RUN_FPS}", "-f", "framecrc", "-"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return sum(1 for line in r.stdout.splitlines() if line and not line.startswith("#"))


def late_start_ts(path: Path, seconds: int = 3) -> Path:
    """A 25 fps MPEG-TS whose timestamps start at 1.4 s (the muxer's default offset) with a single keyframe."""
    return pattern_clip(path, 25, 25 * seconds, extra=("-g", "100000", "-bf", "0", "-x264-params", "scenecut=0"))


def late_start_clip(path: Path, rate: int = 60, seconds: int = 3, offset: str = "1.4") -> Path:
    """A clip whose timestamps start at `offset` s (a cut or remuxed recording); a keyframe every half second. A
    WebM / MKV header then says the stream ends at offset + seconds (Matroska counts from time 0); an MP4 keeps its
    length."""
    extra = ("-g", str(rate // 2), "-output_ts_offset", offset)
    return pattern_clip(path, rate, rate * seconds, extra=extra + (("-movflags", "+faststart") if path.suffix == ".mp4"
                                                                   else ()))


def raw_h264(path: Path, frames: int = 75) -> Path:
    """An H.264 elementary stream: frames without timestamps (as a camera module or `-f h264` writes)."""
    return pattern_clip(path, 25, frames, extra=("-f", "h264"))


def duration_less_webm(path: Path, frames: int = 5, rate: int = 30) -> Path:
    """A WebM written as a stream (as a browser's MediaRecorder writes it): no duration in its header, no index."""
    with open(path, "wb") as f:
        ffmpeg("-f", "lavfi", "-i", f"testsrc=size=96x64:rate={rate}", "-frames:v", str(frames), "-pix_fmt", "yuv420p",
               "-c:v", "libvpx-vp9", "-f", "webm", "-live", "1", "pipe:1", stdout=f)
    return path


def non_square_mp4(path: Path, frames: np.ndarray, sar: str = "2/1") -> Path:
    """A lossless MP4 of uint8 frames [T, H, W, 3] stored with a sample aspect ratio (players stretch it)."""
    t, h, w, _ = frames.shape
    raw = path.with_suffix(".rgb")
    raw.write_bytes(np.ascontiguousarray(frames).tobytes())
    ffmpeg("-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", "16", "-i", str(raw), "-vf", f"setsar={sar}",
           "-c:v", "libx264rgb", "-qp", "0", str(path))
    raw.unlink()
    return path


# ----------------------------------------------------------------------------------------- a Display P3 profile
P3_PRIMARIES = ((0.680, 0.320), (0.265, 0.690), (0.150, 0.060))  # Display P3 = DCI-P3 primaries, D65 white
SRGB_PRIMARIES = ((0.640, 0.330), (0.300, 0.600), (0.150, 0.060))
D65 = (0.3127, 0.3290)
D50_XYZ = (0.9642, 1.0, 0.8249)  # the ICC profile connection space's white
BRADFORD = np.array([[0.8951, 0.2664, -0.1614], [-0.7502, 1.7135, 0.0367], [0.0389, -0.0685, 1.0296]])


def rgb_to_xyz(primaries, white=D65) -> np.ndarray:
    """The 3x3 matrix from linear RGB to XYZ for chromaticities `primaries` and `white` (Y of white = 1)."""
    xyz = np.array([[x / y, 1.0, (1 - x - y) / y] for x, y in primaries]).T  # columns: each primary's XYZ (Y = 1)
    wx, wy = white
    scale = np.linalg.solve(xyz, np.array([wx / wy, 1.0, (1 - wx - wy) / wy]))
    return xyz * scale


def srgb_decode(v: np.ndarray) -> np.ndarray:
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)


def srgb_encode(v: np.ndarray) -> np.ndarray:
    v = np.clip(v, 0, 1)
    return np.where(v <= 0.0031308, v * 12.92, 1.055 * v ** (1 / 2.4) - 0.055)


def p3_to_srgb8(rgb8) -> np.ndarray:
    """Display P3 8-bit colours -> sRGB 8-bit, computed here (both D65: no adaptation), as a colour-managed viewer."""
    lin = srgb_decode(np.asarray(rgb8, np.float64) / 255)  # Display P3 uses the sRGB transfer curve
    out = lin @ (np.linalg.inv(rgb_to_xyz(SRGB_PRIMARIES)) @ rgb_to_xyz(P3_PRIMARIES)).T
    return np.rint(srgb_encode(out) * 255).astype(int)


def _s15(v: float) -> bytes:
    return struct.pack(">i", int(round(v * 65536)))


def _tag_xyz(xyz) -> bytes:
    return b"XYZ " + bytes(4) + b"".join(_s15(v) for v in xyz)


def _tag_desc(text: str) -> bytes:
    ascii_ = text.encode("ascii") + b"\0"
    return b"desc" + bytes(4) + struct.pack(">I", len(ascii_)) + ascii_ + bytes(4) + bytes(4) + bytes(2) + bytes(1) + \
        bytes(67)


def _tag_curve(n: int = 1024) -> bytes:
    table = np.rint(srgb_decode(np.linspace(0, 1, n)) * 65535).astype(">u2").tobytes()
    return b"curv" + bytes(4) + struct.pack(">I", n) + table


def display_p3_icc(description: str = "Display P3 (test)") -> bytes:
    """An ICC v2 display profile of Display P3 (the P3 primaries, D65 white, the sRGB curve), written byte by byte:
    colorants adapted to the D50 connection space with the Bradford transform, as ICC asks."""
    d65 = np.array([D65[0] / D65[1], 1.0, (1 - D65[0] - D65[1]) / D65[1]])
    lms_from, lms_to = BRADFORD @ d65, BRADFORD @ np.array(D50_XYZ)
    adapt = np.linalg.inv(BRADFORD) @ np.diag(lms_to / lms_from) @ BRADFORD
    m = adapt @ rgb_to_xyz(P3_PRIMARIES)  # columns: red, green, blue colorants in D50
    curve = _tag_curve()
    tags = [(b"desc", _tag_desc(description)), (b"wtpt", _tag_xyz(D50_XYZ)), (b"rXYZ", _tag_xyz(m[:, 0])),
            (b"gXYZ", _tag_xyz(m[:, 1])), (b"bXYZ", _tag_xyz(m[:, 2])), (b"rTRC", curve), (b"gTRC", curve),
            (b"bTRC", curve), (b"cprt", b"text" + bytes(4) + b"none\0")]
    offset = 128 + 4 + 12 * len(tags)
    table, data = [], b""
    for sig, body in tags:
        body += bytes(-len(body) % 4)
        table.append(sig + struct.pack(">II", offset + len(data), len(body)))
        data += body
    size = offset + len(data)
    header = (struct.pack(">I", size) + b"lcms" + bytes([2, 0x10, 0, 0]) + b"mntrRGB XYZ " + bytes(12) + b"acsp" +
              bytes(4) + bytes(4) + bytes(4) + bytes(4) + bytes(8) + struct.pack(">I", 0) +
              b"".join(_s15(v) for v in D50_XYZ) + bytes(4) + bytes(44))
    assert len(header) == 128
    return header + struct.pack(">I", len(tags)) + b"".join(table) + data
