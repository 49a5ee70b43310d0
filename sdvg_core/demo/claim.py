"""One run per output folder, and no half-written files in it (docs/cli.md "Where the demo writes").

A run claims its folder before any model loads: a claim file (`CLAIM_FILE`, who and when, as JSON) put in place with
one atomic step (a hard link of a file already locked, so no other run can see it unlocked) and locked for the whole
run (`flock`; on Windows `msvcrt.locking`). The operating system drops the lock when the process ends, however it
ends, so a claim that is there but not locked is a run that did not finish (SIGKILL, a crash, a power cut); it left
an unfinished folder when it had begun its files (`partial_files`), else nothing is lost and the claim is taken
over.
- A second run into a folder whose claim is locked is refused (exit 2), `--overwrite` or not: it would replace files
  the first is still writing.
- A folder holding an unfinished run's files is refused unless `--overwrite` (which discards them).
- The run writes into `STAGING`, a folder inside its output folder (the same file system), and moves each finished
  file into place with one rename at the end (`publish`); the claim is removed last. An input that is one of the
  outputs (`--extend X/sdvg.mp4 --out X --overwrite`) is read whole before its name is taken over; a folder never
  holds a half-written video or report under the final names.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

CLAIM_FILE = ".sdvg-run"  # who is writing here: {"pid", "host", "started"}; locked while that run lives
STAGING = ".sdvg-partial"  # the run's files until each is complete (moved into the folder by `publish`)
MAX_DATED_TRIES = 100  # -2, -3, ... suffixes tried for a dated folder another run took in the same second


class FolderTaken(ValueError):
    """The output folder is being written by another run, or holds an unfinished one (the message says which and
    what to do)."""


def _lock(fd: int) -> bool:
    """Lock the open file `fd` for this process without waiting; False when another process holds it."""
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _who(path: Path) -> str:
    """'pid N on HOST, started at T' from a claim file (what it says; '' when it cannot be read)."""
    try:
        d = json.loads(path.read_text())
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d["started"]))
        return f"pid {d['pid']} on {d['host']}, started {started}"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def partial_files(folder: Path) -> list[Path]:
    """The files an earlier run left in the folder's staging area (empty: it wrote nothing there)."""
    staging = folder / STAGING
    return [p for p in staging.iterdir() if p.is_file()] if staging.is_dir() else []


def folder_state(folder: Path) -> tuple[str, str] | None:
    """What an output folder holds of other runs: ("busy", who) while a run writes there, ("unfinished", who) for a
    run that ended without finishing and left partial files, None otherwise (a claim left by a run that wrote nothing,
    killed while its models loaded, is taken over without a word)."""
    claim = folder / CLAIM_FILE
    if claim.is_file():
        try:
            fd = os.open(claim, os.O_RDWR)
        except OSError:
            return "busy", _who(claim)
        try:
            if not _lock(fd):
                return "busy", _who(claim)
        finally:
            os.close(fd)  # closing drops a lock taken here
    return ("unfinished", _who(claim) if claim.is_file() else "") if partial_files(folder) else None


def taken_message(folder: Path, state: tuple[str, str], flag: str = "--out") -> str:
    kind, who = state
    who = f" ({who})" if who else ""
    if kind == "busy":
        return (f"{flag} {folder}: another run is writing there{who}: wait for it to finish, or give another folder "
                f"(--overwrite does not take a folder from a running run)")
    return (f"{flag} {folder} holds an unfinished run{who}: it ended before its files were complete (killed or "
            f"crashed); its partial files are in {folder / STAGING}. Add --overwrite to discard them and write there, "
            f"or give another folder")


@dataclass
class OutputClaim:
    """A run's hold on its output folder: write into `staging`, then `publish`, then `release`."""

    folder: Path
    created: bool  # the folder did not exist before this run (removed again if the run leaves nothing)
    _fds: list[int] = field(default_factory=list, repr=False)  # locked: the claim, and a stale claim taken over

    @property
    def staging(self) -> Path:
        return self.folder / STAGING

    def staged(self, name: str) -> Path:
        """Where the run writes output `name` until it is complete."""
        return self.staging / name

    def final(self, path: Path) -> Path:
        """The name a staged file has once published."""
        return self.folder / Path(path).name

    def publish(self) -> list[Path]:
        """Move every staged file into the folder, each with one rename (an earlier file of that name replaced at
        once); their final paths."""
        moved = []
        if self.staging.is_dir():
            for p in sorted(self.staging.iterdir()):
                if p.is_file():
                    os.replace(p, self.final(p))
                    moved.append(self.final(p))
        return moved

    def release(self) -> None:
        """The run is over: whatever was not published is discarded, the claim removed and unlocked, and a folder
        this run created and left empty removed."""
        shutil.rmtree(self.staging, ignore_errors=True)
        try:
            (self.folder / CLAIM_FILE).unlink()  # while still locked (POSIX): no moment where it reads as unfinished
        except FileNotFoundError:
            pass
        except PermissionError:  # Windows deletes no open file: unlock first
            self.abandon()
            (self.folder / CLAIM_FILE).unlink(missing_ok=True)
        self.abandon()
        if self.created:
            try:
                self.folder.rmdir()  # only if empty
            except OSError:
                pass

    def abandon(self) -> None:
        """Let go of the lock and keep the claim and the staged files: the folder reads as an unfinished run (what an
        unexpected error leaves, as SIGKILL would)."""
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    @contextmanager
    def held(self) -> Iterator["OutputClaim"]:
        """Release when the block ends normally (a signal or an input error is handled inside it); on an unexpected
        exception, abandon when files were begun (the folder keeps what tells it was not finished), else release (a
        load that failed wrote nothing)."""
        try:
            yield self
        except BaseException:
            if partial_files(self.folder):
                self.abandon()
            else:
                self.release()
            raise
        self.release()


def _new_claim_file(folder: Path) -> tuple[Path, int]:
    """A fresh, locked, filled claim file under a name of its own."""
    tmp = folder / f"{CLAIM_FILE}.{os.getpid()}.{uuid.uuid4().hex}"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    _lock(fd)  # a file nobody else has opened: always granted
    os.write(fd, _claim_text())
    return tmp, fd


def _claim_text() -> bytes:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}).encode()


def claim_output(folder: Path, overwrite: bool = False, fresh: bool = False) -> OutputClaim:
    """Claim `folder` for this run (created if missing; `fresh`: it must not exist yet, as a new dated folder);
    FolderTaken when another run is writing there, or an unfinished run is there and not `overwrite`."""
    folder = Path(folder).expanduser()
    existed = folder.exists()
    if fresh:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir()  # FileExistsError: another run took this name first
    else:
        folder.mkdir(parents=True, exist_ok=True)
    claim = folder / CLAIM_FILE
    if not overwrite and partial_files(folder) and not claim.exists():  # partial files without their claim
        raise FolderTaken(taken_message(folder, ("unfinished", "")))
    tmp, fd = _new_claim_file(folder)
    fds = [fd]
    try:
        try:
            os.link(tmp, claim)  # atomic: fails if a claim is there; the linked file is already locked
        except FileExistsError:
            old = os.open(claim, os.O_RDWR)
            if not _lock(old):
                os.close(old)
                raise FolderTaken(taken_message(folder, ("busy", _who(claim)))) from None
            fds.append(old)  # held for the whole run: a third run cannot take the stale claim over as well
            if not overwrite and partial_files(folder):
                raise FolderTaken(taken_message(folder, ("unfinished", _who(claim)))) from None
            os.replace(tmp, claim)  # ours now (the old one, unlinked, stays locked by us)
        except OSError:  # a file system without hard links: an exclusive create, locked at once
            os.close(fds.pop())
            os.unlink(tmp)
            try:
                fds.append(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644))
            except FileExistsError:
                raise FolderTaken(taken_message(folder, folder_state(folder) or ("busy", _who(claim)))) from None
            _lock(fds[0])
            os.write(fds[0], _claim_text())
        else:
            if tmp.exists():
                os.unlink(tmp)
    except BaseException:
        for f in fds:
            os.close(f)
        if tmp.exists():
            os.unlink(tmp)
        if not existed:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    staging = folder / STAGING
    shutil.rmtree(staging, ignore_errors=True)  # an unfinished run's files, discarded (--overwrite)
    staging.mkdir()
    return OutputClaim(folder, not existed, fds)


def claim_dated(make_folder, tries: int = MAX_DATED_TRIES) -> OutputClaim:
    """Claim a new dated folder (`make_folder()` names the next free one), taking the next name when another run
    created it first."""
    for _ in range(tries):
        try:
            return claim_output(make_folder(), fresh=True)
        except FileExistsError:
            continue
    raise FolderTaken(f"no free dated output folder after {tries} tries: give one with --out")


__all__ = ["CLAIM_FILE", "STAGING", "FolderTaken", "OutputClaim", "partial_files", "folder_state", "taken_message",
           "claim_output", "claim_dated"]
