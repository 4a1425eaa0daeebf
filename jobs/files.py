"""Every output file is written whole or not at all: a temp file beside it, fsynced, then renamed over it.

A reader (or a crash, or a full disk) sees the old file or the new one, never
half of one. A failed write raises WriteFailed, which names the file.
Input files are read here too: JSON lines, and a file's content digest.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class WriteFailed(OSError):
    """An output file could not be written (disk full, not writable, a file where a directory should be)."""

    def __str__(self) -> str:
        return f"could not write {self.filename}: {self.strerror}"


def _failed(path: Path, exc: OSError) -> WriteFailed:
    return WriteFailed(exc.errno, exc.strerror or str(exc), str(path))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def output_problem(path: Path | str, name: str, *, directory: bool = False) -> str | None:
    """Why the output `path` given as `name` (e.g. '--out') cannot be written, or None: checked before any work,
    so that a bad output path is refused as bad input (nothing computed, nothing written) rather than failing
    once the work is done. `directory`: a directory to write files in. Missing parents are fine (atomic() makes
    them); the nearest existing one must be a directory this user can create a file in."""
    path = Path(path)
    if path.is_dir() and not directory:
        return f"{name} {path} is a directory; give a file"
    if os.path.lexists(path) and not path.is_dir() and directory:
        return f"{name} {path} is a file; give a directory"
    where = path if directory else path.parent
    near = next((d for d in (where, *where.parents) if os.path.lexists(d)), Path("."))
    if not near.is_dir():
        return f"{name} {path} cannot be written: {near} is {'a broken link' if near.is_symlink() else 'a file'}, " \
               "not a directory"
    try:   # access(2) says yes to root where no file can be made (/proc, a read-only mount for some)
        with tempfile.TemporaryFile(dir=near):
            pass
    except OSError as exc:
        return f"{name} {path} cannot be written: no file can be created in {near} ({exc.strerror or exc})"
    return None


def mkdirs(path: Path | str, follow_dir: bool = True) -> None:
    """Create `path` and its missing parents; with `follow_dir` each new one no more open than its parent."""
    path = Path(path)
    if follow_dir:
        missing = []
        for d in (path, *path.parents):
            if d.is_dir():
                break
            missing.append(d)
        for d in reversed(missing):
            d.mkdir(exist_ok=True)
            # the set-group-ID bit a shared project directory passes on is kept
            os.chmod(d, (os.stat(d).st_mode & 0o7000) | (0o777 & ~_umask() & os.stat(d.parent).st_mode))
    path.mkdir(parents=True, exist_ok=True)


def mode_in(directory: Path | str, follow_dir: bool = True) -> int:
    """The mode of a new file in `directory`: what a plain open() gives under the umask, and (`follow_dir`) no
    more open than the directory itself, so a file any command writes in a private sweep directory (0700; 0750
    with sweep.group_readable) is 0600 (0640) whatever the shell's umask (report.publish does not follow: a
    served site must be readable)."""
    mode = 0o666 & ~_umask()
    return mode & os.stat(directory).st_mode if follow_dir else mode


@contextmanager
def atomic(path: Path | str, *, follow_dir: bool = True) -> Iterator[Path]:
    """Yield a temp path beside `path` to write; once the block succeeds it replaces `path` (its mode: mode_in)."""
    path = Path(path)
    try:
        mkdirs(path.parent, follow_dir)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise _failed(path, exc) from None
    try:
        yield Path(tmp)
        os.chmod(tmp, mode_in(path.parent, follow_dir))   # mkstemp makes 0600
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except WriteFailed:
        Path(tmp).unlink(missing_ok=True)
        raise
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _failed(path, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class InTheWay(ValueError):
    """A file where a site has a directory, or a directory where it has a file (own_directories)."""


def links_in_the_way(dst: Path, found: list[Path]) -> list[Path]:
    """The symbolic links inside `dst` where the site puts a directory (dst/assets -> elsewhere), to be replaced
    by real directories: writing through one would write outside `dst`, and a linked file (index.html) is
    replaced by the site's file anyway (the rename replaces the link). Anything else in the way (a file where the
    site has a directory, a directory where it has a file) refuses the whole site before anything is changed
    (InTheWay). `found`: the site's files, relative to `dst`."""
    links: list[Path] = []

    def below_a_link(rel: Path) -> bool:   # what lies beneath a link is elsewhere and will not be looked at
        return any(dst / p in links for p in rel.parents)

    for rel in sorted({p for f in found for p in f.parents if p != Path(".")}):   # parents before children
        path = dst / rel
        if below_a_link(rel):
            continue
        if path.is_symlink():
            links.append(path)
        elif os.path.lexists(path) and not path.is_dir():
            raise InTheWay(f"{path} is a file where the site has a directory; remove it or write the site elsewhere")
    for rel in found:
        path = dst / rel
        if not below_a_link(rel) and path.is_dir() and not path.is_symlink():
            raise InTheWay(f"{path} is a directory where the site has a file; remove it or write the site elsewhere")
    return links


def own_directories(dst: Path | str, found: list[Path], where: str) -> None:
    """Remove the symbolic links inside `dst` that the files `found` (relative to it) would be written through
    (links_in_the_way; a `note:` names each), so that their directories are made real ones and nothing is written
    outside `where` (e.g. 'the target'). InTheWay, before anything is changed, for a file or directory in the
    way."""
    import sys

    for link in links_in_the_way(Path(dst), found):
        print(f"note: {link} was a symbolic link (to {os.readlink(link)}); replaced by a directory of the site's "
              f"files, so that nothing is written outside {where}", file=sys.stderr)
        link.unlink()


def atomic_job_files() -> None:
    """Make submitit write its job pickles atomically (temp file beside it, fsync, rename), as every file here is:
    its own dump opens the pickle in place, so a disk that fills mid-write leaves a truncated pickle under
    submitit/ that it would unpickle later. Called before any executor submits; idempotent."""
    from submitit.core import utils

    if getattr(utils.cloudpickle_dump, "atomic", False):
        return

    def cloudpickle_dump(obj: object, filename: str | os.PathLike) -> None:
        import pickle

        import cloudpickle

        with atomic(filename) as tmp, open(tmp, "wb") as fh:
            cloudpickle.dump(obj, fh, pickle.HIGHEST_PROTOCOL)

    cloudpickle_dump.atomic = True   # type: ignore[attr-defined]
    utils.cloudpickle_dump = cloudpickle_dump


def write_text(path: Path | str, text: str) -> Path:
    with atomic(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def copy_file(src: Path | str, dst: Path | str, *, follow_dir: bool = True) -> Path:
    """Copy the bytes of `src` to `dst` atomically (permissions from the umask and the directory, not from
    `src`)."""
    with atomic(dst, follow_dir=follow_dir) as tmp:
        shutil.copyfile(src, tmp)
    return Path(dst)


def json_lines(path: str | Path, key: str) -> Iterator[tuple[str, dict]]:
    """(where, object) for each line of a JSON-lines data set that is not blank, read line by line so that a bad
    line is named: ValueError `KEY=PATH, line N: ...` for a line that is not UTF-8, not JSON, or not an object."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            where = f"{key}={path}, line {n}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                                 "a dataset is JSON lines in UTF-8") from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
            except RecursionError:
                raise ValueError(f"{where}: not JSON this reader takes (nested too deeply)") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{where}: a line must be a JSON object")  # noqa: TRY004  bad input, not a bug
            yield where, obj


def digest(path: str | Path) -> str:
    """`sha256:` of a file's content, cached while its size and mtime hold (an image, a dataset or trace file:
    what identifies the input, wherever it lies)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    return _digest(real, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _digest(path: str, _size: int, _mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"sha256:{h.hexdigest()}"
