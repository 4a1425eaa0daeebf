"""Whether a directory holds a report site accelsweep wrote (report.build, report.publish): only then may its files
be replaced; a light module, so that publishing imports no chart library."""
from __future__ import annotations

import os
from pathlib import Path

STAMP = ".accelsweep-site"
_TITLE = " · accelsweep report</title>"   # base.html's: a site built before the stamp existed has it in index.html


def not_a_site(out: Path, names: list[str]) -> list[str]:
    """The files among `names` (the site's, relative to `out`) that `out` already holds, unless it is a site
    report.build wrote: it has the STAMP, or (built before the stamp) an index.html with the report's title."""
    if (out / STAMP).is_file():
        return []
    try:
        with open(out / "index.html", encoding="utf-8", errors="replace") as fh:
            if _TITLE in fh.read(4096):
                return []
    except OSError:   # none (or not a file: files.own_directories says so)
        pass

    def replaced(name: str) -> bool:   # not a link, nor what lies below one: the link is replaced, its target kept
        path = out / name
        return (os.path.lexists(path) and not path.is_symlink() and not path.is_dir()
                and not any((out / p).is_symlink() for p in Path(name).parents if p != Path(".")))

    return [n for n in names if replaced(n)]


FIGURES_STAMP = ".accelsweep-figures"


def foreign_figures(folder: Path) -> str | None:
    """Why report.build --figures may not write into `folder`: it holds files accelsweep did not write there (no
    FIGURES_STAMP), whose names a figure could take. None for a new or empty folder, or one it wrote."""
    if not folder.is_dir() or (folder / FIGURES_STAMP).is_file() or not any(folder.iterdir()):
        return None
    return (f"--figures {folder} holds files that report.build did not write there (it has no {FIGURES_STAMP}): a "
            "figure could replace one of yours; give a new or empty directory")
