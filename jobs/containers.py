"""Container runtimes: how a job's python runs inside a site's image, and which image it was.

A hardware or cluster file's `slurm.container` (or `cluster.per_hardware.<hw>.container`) is either a command
prefix (`apptainer exec --nv img.sif`: used as given) or a mapping:

    container:
      runtime: charliecloud          # charliecloud | apptainer | enroot | podman-hpc | sarus
      image: /scratch/img.sqfs       # a path (SquashFS, SIF, directory) or a registry reference (docker://..., nvcr.io#...)
      python: /opt/accelsweep/bin/python   # the python in the image (default python3)
      binds: [/scratch/data]         # SRC[:DST] besides the sweep directory, which is always bound at its own path
      options: []                    # more arguments for the runtime, as given

Each runtime is a template (RUNTIMES): the command prefix, the srun arguments (pyxis), the vendor's device flags, and
the shell lines the job runs first: the runtime is there (else the job ends at once with a message naming the node:
a failed record, never a hang) and its version, exported for the record with the image's reference and digest.
Only Charliecloud ran here (ci/container.sh, tests/test_containers_e2e.py); the others are written from their
documentation.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs import files

ENV = "ACCELSWEEP_CONTAINER"                  # JSON: runtime, image, digest (set by the job's first lines)
VERSION_ENV = "ACCELSWEEP_CONTAINER_RUNTIME"  # the runtime's own version line, read on the node
KEYS = ("runtime", "image", "python", "binds", "options")
TRANSPORT = re.compile(r"[a-z][a-z0-9+-]*://|docker-daemon:")   # a registry transport (not name:tag)


@dataclass(frozen=True)
class Runtime:
    binary: str
    version: str                    # the shell command that prints its version
    devices: dict[str, str]         # device (cuda, rocm, hpu, cpu) -> flags for it
    paths: str = ""                 # the image files or directories it runs ("": none, only image names)
    references: bool = True         # whether it takes an image name or registry reference
    transports: tuple[str, ...] = ()   # the registry transports it takes (docker://...), beside plain names
    check: str = ""                 # a shell test, on the node, that it can run (beside `command -v binary`)


# What each needs per vendor, which ran here and which published images to start from: docs/how-to/containers.md.
NO_FLAGS = {"cuda": "", "rocm": "", "hpu": "", "cpu": ""}   # the runtime's hooks (or the image) bring the devices
RUNTIMES = {
    "charliecloud": Runtime("ch-run", 'echo "charliecloud $(ch-run --version 2>&1)"', NO_FLAGS,
                            paths="a SquashFS file or an image directory", references=False),
    "apptainer": Runtime("apptainer", "apptainer --version", {
        "cuda": "--nv", "rocm": "--rocm", "hpu": "--bind /dev:/dev --env HABANA_VISIBLE_DEVICES=all", "cpu": ""},
        paths="a SIF or SquashFS file or a sandbox directory",
        transports=("docker://", "oras://", "library://", "shub://", "docker-daemon:")),
    "enroot": Runtime("srun", 'echo "enroot $(enroot version 2>&1)"', NO_FLAGS, paths="a SquashFS (.sqsh) file",
                      check="srun --help 2>&1 | grep -q -- --container-image"),
    "podman-hpc": Runtime("podman-hpc", "podman-hpc --version", {
        "cuda": "--gpu", "rocm": "--device /dev/kfd --device /dev/dri", "hpu": "--device /dev/accel", "cpu": ""},
        transports=("docker://",)),
    "sarus": Runtime("sarus", "sarus --version", NO_FLAGS),
}
# image files a runtime cannot run, by suffix (a SIF is Apptainer's; an archive must be unpacked or converted first)
ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".zip")
NOT_RUN = {"charliecloud": (".sif", *ARCHIVES), "apptainer": ARCHIVES, "enroot": (".sif", *ARCHIVES)}
IMAGE_FILES = (".sqfs", ".sqsh", ".squashfs", ".sif", *ARCHIVES)   # a name with these is a file, not a reference


@dataclass(frozen=True)
class Container:
    runtime: str
    image: str = ""
    python: str = "python3"
    binds: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    device: str = "cpu"
    digest: str | None = None

    def identity(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "image": self.image or None, "digest": self.digest}


def problems(value: Any, where: str) -> list[str]:
    """What is wrong with a `container` setting (None: no container)."""
    if value is None:
        return []
    if isinstance(value, str):
        return _prefix_problems(value, where)
    if not isinstance(value, dict):
        return [f"{where} must be a command prefix or a mapping of {', '.join(KEYS)}, got {value!r}"]
    out = [f"{where}.{k} is not a setting; allowed: {', '.join(KEYS)}" for k in value if k not in KEYS]
    runtime = value.get("runtime")
    if not isinstance(runtime, str) or runtime not in RUNTIMES:
        return [*out, f"{where}.runtime={runtime!r}; allowed: {', '.join(RUNTIMES)}"]
    out += _image_problems(value.get("image"), runtime, where)
    python = value.get("python")
    if python is not None and not (isinstance(python, str) and _PYTHON.fullmatch(python)):
        out.append(f"{where}.python={python!r} must be the image's python: a command name (python3) or an "
                   "absolute path inside the image (/opt/venv/bin/python), one word")
    for key in ("binds", "options"):
        v = value.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) and x for x in v)):
            out.append(f"{where}.{key} must be a list of strings, got {v!r}")
        elif key == "binds":
            out += [why for bind in v or () if (why := _bind_problem(bind, f"{where}.binds"))]
            out += _overlaps([_pair(b) for b in v or ()], f"{where}.binds")
        else:
            out += [f"{where}.options: {o!r} is two words in one item; give one argument per item: "
                    + ", ".join(map(repr, o.split(None, 1))) for o in v or () if _TWO_WORDS.match(o)]
            out += [f"{where}.options: {o!r}: options reach the runtime as written, not through the shell, so "
                    f"{m[0]} would not be expanded; give its value" for o in v or () if (m := _VARIABLE.search(o))]
    return out


def workdir_problems(c: str | Container | None, workdir: str, where: str) -> list[str]:
    """Once the sweep directory is known: it is bound into the image at its own path, before the setting's binds."""
    if not isinstance(c, Container):
        return []
    if "," in workdir or ":" in workdir:
        return [(f"{where}: the sweep directory {workdir} holds ',' or ':', at which the runtimes split their bind "
                 "lists; give a sweep.runs_dir and sweep.name without them")]
    return [f"{where}.binds: {src}:{dst} would be mounted over the sweep directory {workdir} and hide its records; "
            "bind it elsewhere" for src, dst in map(_pair, c.binds)
            if src != workdir and (dst == workdir or workdir.startswith(dst.rstrip("/") + "/"))]


_PYTHON = re.compile(r"[\w.+-]+|/\S+")
_TWO_WORDS = re.compile(r"-[^\s=]*\s")   # `--bind /x` as one item: the runtime gets one argument
_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\}?)")   # $HOME, ${SCRATCH}: the job's shell never sees it
_RUNTIME_WORDS = {*RUNTIMES, "singularity", *(rt.binary for name, rt in RUNTIMES.items() if name != "enroot")}
_SETTING = re.compile(rf"({'|'.join(KEYS)}):")
_OPERATORS = set("();<>|&`")   # the shell would end, redirect or background the command there


def _overlaps(pairs: list[tuple[str, str]], where: str) -> list[str]:
    sources: dict[str, set[str]] = {}
    for src, dst in pairs:
        sources.setdefault(dst, set()).add(src)
    return [f"{where}: {' and '.join(sorted(srcs))} both bound onto {dst}; one source per destination"
            for dst, srcs in sources.items() if len(srcs) > 1]


def _prefix_problems(prefix: str, where: str) -> list[str]:
    """A command prefix goes into the job script as written: one line the shell can split."""
    try:
        words = shlex.split(prefix)
    except ValueError as exc:
        return [f"{where}={prefix!r} is not a command line the shell can read ({exc})"]
    if "\n" in prefix or "\r" in prefix:
        return [f"{where}={prefix!r} spans lines; a command prefix is one line"]
    lexer = shlex.shlex(prefix, posix=False, punctuation_chars="();<>|&")   # not posix: quoted words keep quotes
    lexer.commenters, lexer.wordchars = "", lexer.wordchars + "`#$"
    if any(w[:1] not in "'\"" and (set(w) & _OPERATORS or w.startswith("#")) for w in lexer):
        return [(f"{where}={prefix!r} holds a shell operator or comment outside quotes (; & | ( ) < > ` #): the "
                "job's python would run outside it, or not at all; quote it, or use the mapping form")]
    if words and _SETTING.match(words[0]):   # {runtime:x,image:y} unquoted: the shell split it, Hydra kept a part
        return [(f"{where}={prefix!r} starts with {words[0]!r}, a setting, not a command: quote the mapping as a "
                 f"whole ('++{where}={{runtime:...,image:...}}') or give a command prefix")]
    if len(words) == 1 and words[0] in _RUNTIME_WORDS:
        return [(f"{where}={prefix!r} is a runtime alone, not a command prefix: give the whole prefix (e.g. "
                "'apptainer exec --nv IMAGE') or the mapping {runtime: ..., image: ...}")]
    return []


def _image_problems(image: Any, runtime: str, where: str) -> list[str]:
    rt = RUNTIMES[runtime]
    if not isinstance(image, str) or not image.strip():
        return [f"{where}.image must name the image ({rt.paths or 'an image name'}), got {image!r}"]
    reference = _is_reference(image, runtime)
    if reference and any(c.isspace() or not c.isprintable() for c in image):
        return [f"{where}.image={image!r}: an image name holds no spaces or control characters"]
    if reference:
        transport = TRANSPORT.match(image)
        if not rt.references:
            return [(f"{where}.image={image!r}: {runtime} runs {rt.paths}, not a registry reference; pull and "
                     "convert it first (ch-image pull, ch-convert) onto a file system the compute nodes share")]
        if transport and transport[0] not in rt.transports:
            takes = ", ".join(rt.transports) or "none: give the image's name (host#image:tag, name:tag)"
            return [f"{where}.image={image!r}: {runtime} takes no {transport[0]} reference (transports: {takes})"]
        return []
    if not rt.paths:
        return [(f"{where}.image={image!r}: {runtime} runs images by name (e.g. ubuntu:22.04, pulled or loaded "
                 "into it first), not a file path")]
    try:
        mode = os.stat(os.path.expanduser(image)).st_mode
    except (OSError, ValueError):   # ValueError: a NUL in the path
        return [(f"{where}.image={image!r}: no such file or directory (on this node: the image must be on a file "
                 f"system the compute nodes share); build or pull it first"
                 + (", or name a registry reference" if rt.references else ""))]
    if not (stat.S_ISREG(mode) or (stat.S_ISDIR(mode) and runtime != "enroot")):
        return [f"{where}.image={image!r}: {runtime} runs {rt.paths}"]
    if why := _content_problem(os.path.expanduser(image), stat.S_ISDIR(mode)):
        return [f"{where}.image={image!r}: {why}; build it again (ci/container.sh is a recipe)"]
    if image.lower().endswith(NOT_RUN.get(runtime, ())):
        return [(f"{where}.image={image!r}: {runtime} runs {rt.paths}, not this kind of file: convert it first "
                 "(ch-convert, enroot import, apptainer build), or give the runtime that runs it")]
    return []


SQUASHFS_MAGIC = b"hsqs"   # a SquashFS file's first bytes (little-endian superblock)


def _content_problem(path: str, directory: bool) -> str | None:
    """An image that cannot be one: an empty directory, or a SquashFS name on a file that is not SquashFS."""
    try:
        if directory:
            with os.scandir(path) as entries:
                return None if any(entries) else "an empty directory, not an image's root file system"
        if path.lower().endswith((".sqfs", ".sqsh", ".squashfs")):
            with open(path, "rb") as f:
                if f.read(4) != SQUASHFS_MAGIC:
                    return "not a SquashFS file (its first bytes are not SquashFS')"
    except OSError as exc:
        return f"cannot be read here ({exc.strerror})"
    return None


def _bind_problem(bind: str, where: str) -> str | None:
    """A bind is SRC or SRC:DST, both absolute: the runtimes spell options (:ro) differently and split their mount
    lists at commas."""
    parts = bind.split(":")
    if len(parts) > 2 or "," in bind:
        return (f"{where}: {bind!r}: a bind is SRC or SRC:DST, absolute paths without ',' or options such as :ro "
                "(a colon separates source and destination)")
    src, dst = _pair(bind)
    if not (src.startswith("/") and dst.startswith("/")):
        return f"{where}: {bind!r}: source and destination must be absolute paths"
    if not Path(src).exists():
        return f"{where}: {bind!r}: its source {src!r} does not exist here"
    return None


def parse(value: Any, device: str) -> str | Container | None:
    """The container of a site setting: a prefix string as given, a mapping as a Container with its image digest."""
    if value is None or isinstance(value, str):
        return value
    runtime, image = value["runtime"], value["image"]
    reference = _is_reference(image, runtime)
    image = image if reference else os.path.abspath(os.path.expanduser(image))   # the job runs elsewhere
    return Container(runtime=runtime, image=image, python=value.get("python") or "python3",
                     binds=tuple(value.get("binds") or ()), options=tuple(value.get("options") or ()),
                     device=device, digest=None if reference else digest(image))


def _is_reference(image: str, runtime: str) -> bool:
    """An image name or registry reference, not a path: a transport (docker://...), any image of a runtime that
    takes no paths, or anything that is neither a path that exists nor a name an image file has."""
    if TRANSPORT.match(image) and not os.path.exists(image):
        return True
    if image.startswith(("/", ".", "~")) or image.lower().endswith(IMAGE_FILES):
        return False
    with contextlib.suppress(ValueError):
        if os.path.exists(image):
            return False
    return True


def digest(image: str) -> str:
    """sha256 of an image file's content (cached while its size and mtime hold), or of a directory image's manifest
    (manifest_digest, once per process: a directory's mtime does not change with the files below it)."""
    path = os.path.realpath(image)
    if os.path.isdir(path):
        return _manifest_once(path)
    return files.digest(path)


def manifest_digest(path: str) -> str:
    """sha256 of a directory's file list: each file's path, size and mode, and each link's target (not their
    content, which would take minutes to hash at every plan)."""
    h = hashlib.sha256()
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            p = os.path.join(root, name)
            st = os.lstat(p)
            target = os.readlink(p) if os.path.islink(p) else ""
            h.update(f"{os.path.relpath(p, path)}\0{st.st_size}\0{st.st_mode}\0{target}\n".encode())
    return f"manifest-sha256:{h.hexdigest()}"


_manifest_once = functools.lru_cache(maxsize=8)(manifest_digest)


def _pair(bind: str) -> tuple[str, str]:
    """SRC[:DST] -> (SRC, DST), DST defaulting to SRC, both normalised (/tmp/ is /tmp)."""
    src, _, dst = bind.partition(":")
    return os.path.normpath(src) if src else src, os.path.normpath(dst or src) if dst or src else ""


def _binds(c: Container, workdir: str) -> list[tuple[str, str]]:
    """The sweep directory, then the setting's binds, one per destination (runtimes refuse a destination twice)."""
    out = {os.path.normpath(workdir): os.path.normpath(workdir)}
    for src, dst in map(_pair, c.binds):
        out.setdefault(dst, src)
    return [(src, dst) for dst, src in out.items()]


def command(c: str | Container | None, python: str, workdir: str) -> str:
    """The command that runs `python` (the host's, for no container or a prefix; the image's otherwise)."""
    if c is None:
        return python
    if isinstance(c, str):
        return f"{c} {python}"
    q, flags = shlex.quote, RUNTIMES[c.runtime].devices.get(c.device, "")
    extra = " ".join(q(o) for o in c.options)
    binds = _binds(c, workdir)
    if c.runtime == "charliecloud":
        b = " ".join(f"-b {q(s)}:{q(d)}" for s, d in binds)
        # the host's PYTHONPATH would import the host's checkout instead of the image's (ch-run passes the rest)
        parts = ["ch-run --home --unset-env=PYTHONPATH", b, f"--cd={q(workdir)}", extra, q(c.image), "--",
                 q(c.python)]
    elif c.runtime == "apptainer":
        b = ",".join(f"{s}:{d}" for s, d in binds)
        parts = ["apptainer exec", flags, f"--bind {q(b)}", f"--pwd {q(workdir)}", extra, q(c.image), q(c.python)]
    elif c.runtime == "podman-hpc":
        b = " ".join(f"-v {q(s)}:{q(d)}" for s, d in binds)
        parts = ["podman-hpc run --rm", flags, b, f"-w {q(workdir)}", extra, q(c.image), q(c.python)]
    elif c.runtime == "sarus":
        b = " ".join(f"--mount=type=bind,source={q(s)},destination={q(d)}" for s, d in binds)
        parts = ["sarus run", b, f"--workdir={q(workdir)}", extra, q(c.image), q(c.python)]
    else:   # enroot: pyxis puts srun itself in the image (srun_args); python is the image's
        parts = [q(c.python)]
    return " ".join(p for p in parts if p)


def srun_args(c: str | Container | None, workdir: str) -> list[str]:
    """pyxis' srun options (enroot); nothing for the runtimes that wrap python."""
    if not isinstance(c, Container) or c.runtime != "enroot":
        return []
    mounts = ",".join(f"{s}:{d}" for s, d in _binds(c, workdir))
    return [f"--container-image={c.image}", f"--container-mounts={mounts}", f"--container-workdir={workdir}",
            *c.options]


def setup(c: str | Container | None) -> tuple[str, ...]:
    """Shell lines the job runs before its python: the runtime is installed on this node, what it and its image are
    (exported for the record), and USER, which ch-run wants."""
    if not isinstance(c, Container):
        return ()
    rt = RUNTIMES[c.runtime]
    missing = (f"accelsweep: the container runtime {c.runtime} ({rt.binary}) is not installed on $(hostname); "
               "install it there or run without a container")
    # double quotes: $(hostname) is the node's (the message itself holds no quote, $ or backquote)
    check = f"command -v {rt.binary} >/dev/null" + (f" && {rt.check}" if rt.check else "")
    if rt.check:   # enroot: srun is everywhere; pyxis, which gives it --container-image, may not be
        missing = missing.replace(f"({rt.binary}) is not installed", f"({rt.binary} with pyxis) is not installed")
    return (f'{check} || {{ echo "{missing}" >&2; exit 127; }}',
            f"export {ENV}={shlex.quote(json.dumps(c.identity(), sort_keys=True))}",
            f'export {VERSION_ENV}="$({rt.version})"',
            'export USER="${USER:-$(id -un)}"')


def provenance(environ: dict[str, str] | os._Environ = os.environ) -> dict[str, Any]:
    """The record's container fields, read inside the job: ours (ENV), else Apptainer's or Charliecloud's own."""
    ours = json.loads(environ[ENV]) if environ.get(ENV) else {}
    image = ours.get("image") or environ.get("APPTAINER_CONTAINER") or environ.get("SINGULARITY_CONTAINER")
    runtime = environ.get(VERSION_ENV) or ours.get("runtime")
    if not runtime and environ.get("CH_RUNNING"):
        runtime = "charliecloud"
    return {"container": image, "container_runtime": runtime, "container_digest": ours.get("digest")}

