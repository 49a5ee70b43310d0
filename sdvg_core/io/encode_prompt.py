"""Make a prompt-embeddings file without ComfyUI: encode a prompt with umT5 from a local folder.

    python -m sdvg_core.io.encode_prompt --umt5 /models/umt5-xxl --prompt "a red fox in the snow" \
        --out prompts/fox.safetensors

The file holds the [1, 512, 4096] umT5 hidden states (rows after the prompt's tokens are zero, as in Wan) and
the prompt text; `python -m sdvg_core.demo --embeddings` and ComfyUI's SDVG Load Prompt Embeddings read it.
`--umt5` is a Hugging Face umT5 folder (google/umt5-xxl) or a Diffusers Wan 2.1 folder (text_encoder/ and
tokenizer/). Nothing is downloaded. Usage and input errors exit with status 2 before anything is loaded.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from .checkpoint import CheckpointError
from .text import WAN_TEXT_LEN, encode_umt5, save_embeddings, umt5_folders

USAGE_ERROR = 2  # exit status of every usage or input error (argparse's own convention)
from ..models.dtypes import DTYPES
EMBEDDINGS_SUFFIX = ".safetensors"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m sdvg_core.io.encode_prompt", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--umt5", required=True, help="local umT5 folder (Hugging Face or Diffusers Wan layout)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text")
    src.add_argument("--prompt-file", help="a UTF-8 text file holding the prompt (surrounding whitespace is dropped)")
    p.add_argument("--out", required=True, help=f"embeddings file to write ({EMBEDDINGS_SUFFIX})")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default="fp32",
                   help="encoder dtype (fp32 is exact; bf16 halves the 5.7 B encoder's memory); the file is fp32")
    p.add_argument("--text-len", type=int, default=WAN_TEXT_LEN, help="rows of the output (Wan uses 512)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    return p.parse_args(argv)


def preflight(a: argparse.Namespace) -> tuple[str, list[str]]:
    """(prompt text, every problem with the arguments), found without loading the encoder."""
    problems: list[str] = []
    text = a.prompt
    if a.prompt_file is not None:
        f = Path(a.prompt_file).expanduser()
        try:
            text = f.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            problems.append(f"--prompt-file {f}: cannot be read as UTF-8 text ({e})")
            text = None
    if text is not None and not text.strip():
        problems.append("the prompt is empty; give --prompt TEXT or a --prompt-file that holds text")
    try:
        umt5_folders(a.umt5)
    except CheckpointError as e:
        problems.append(f"--umt5: {e}")
    out = Path(a.out).expanduser()
    if out.suffix != EMBEDDINGS_SUFFIX:
        problems.append(f"--out {out}: embeddings are written as {EMBEDDINGS_SUFFIX}; try {out.with_suffix(EMBEDDINGS_SUFFIX)}")
    elif out.is_dir():
        problems.append(f"--out {out}: is a folder; give a file name ending in {EMBEDDINGS_SUFFIX}")
    elif out.exists() and not a.force:
        problems.append(f"--out {out}: exists; add --force to overwrite it")
    if a.text_len < 1:
        problems.append(f"--text-len {a.text_len} must be >= 1 (Wan uses {WAN_TEXT_LEN})")
    return text or "", problems


def main(argv: list[str] | None = None) -> int:
    """Encode, save, print what was written; 2 on a usage or input error."""
    try:
        a = parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage error (status 2) or --help (0)
        return e.code if isinstance(e.code, int) else USAGE_ERROR
    text, problems = preflight(a)
    if problems:
        print(f"error: {len(problems)} problem(s); nothing was loaded:\n  - " + "\n  - ".join(problems), file=sys.stderr)
        return USAGE_ERROR
    try:
        emb = encode_umt5(a.umt5, text, device=a.device, dtype=DTYPES[a.dtype], text_len=a.text_len)
    except (OSError, ValueError, CheckpointError) as e:  # transformers reports unusable folders as OSError/ValueError
        print(f"error: could not load the umT5 encoder or tokenizer from {a.umt5}: {e}", file=sys.stderr)
        return USAGE_ERROR
    path = save_embeddings(Path(a.out).expanduser(), text, emb)
    rows = int((emb[0].abs().sum(-1) > 0).sum())
    print(f"wrote {path}: embeddings {list(emb.shape)} ({rows} prompt token rows, the rest zero) for {text!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
