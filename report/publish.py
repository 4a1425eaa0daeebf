"""python -m report.publish SITE_DIR TARGET_DIR: copy a built report site (from report.build) to TARGET_DIR.

The site is self-contained (relative links only), so publishing is a plain copy; files already in TARGET_DIR
that the site does not have are left alone. Prints the path of the published index.html.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jobs import files


def publish(site: Path | str, target: Path | str) -> Path:
    """Copy ``site`` (which must hold index.html) into ``target``, file by file atomically; return target/index.html.

    The copies get the publishing user's umask (a served site must be readable), not the site's private modes."""
    site, target = Path(site), Path(target)
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"not a built report site (no index.html): {site}")
    if why := files.output_problem(target, "the target", directory=True):
        raise ValueError(why)
    src, dst = site.resolve(), target.resolve()
    if dst == src or src in dst.parents:
        raise ValueError(f"the target {target} is the site {site} itself or inside it; publish somewhere else")
    found = [path.relative_to(src) for path in site_files(src)]
    for link in links_in_the_way(dst, found):
        print(f"note: {link} was a symbolic link (to {os.readlink(link)}); replaced by a directory of the site's "
              "files, so that nothing is written outside the target", file=sys.stderr)
        link.unlink()
    for rel in found:
        files.copy_file(src / rel, dst / rel, follow_dir=False)
    return target / "index.html"


def links_in_the_way(dst: Path, found: list[Path]) -> list[Path]:
    """The symbolic links inside the target where the site puts a directory (target/assets -> elsewhere), to be
    replaced by real directories: writing through one would write outside the target, and a linked file
    (index.html) is replaced by the site's file too (the rename replaces the link). Anything else in the way (a
    file where the site has a directory, a directory where it has a file) refuses the whole site before anything
    is changed (ValueError). `found`: the site's files, relative to it."""
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
            raise ValueError(f"{path} is a file where the site has a directory; remove it or publish elsewhere")
    for rel in found:
        path = dst / rel
        if not below_a_link(rel) and path.is_dir() and not path.is_symlink():
            raise ValueError(f"{path} is a directory where the site has a file; remove it or publish elsewhere")
    return links


def site_files(src: Path) -> list[Path]:
    """Every file of the site, which must all be regular files: a symbolic link (site/data/x -> /etc/shadow)
    would publish what it points to, and a link copied as a link would point outside the published copy; so
    either refuses the whole site before anything is copied (ValueError)."""
    import stat

    found = []
    for root, dirs, names in os.walk(src):   # does not follow links to directories: they are among `dirs`
        for name in sorted(dirs + names):
            path = Path(root) / name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise ValueError(f"{path} is a symbolic link (to {os.readlink(path)}); a site holds regular files "
                                 "only, and publishing copies nothing else: remove the link")
            if stat.S_ISREG(mode):
                found.append(path)
            elif not stat.S_ISDIR(mode):
                raise ValueError(f"{path} is not a regular file; a site holds regular files only")
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.publish", description=__doc__.splitlines()[0])
    ap.add_argument("site", type=Path, help="a site directory written by python -m report.build")
    ap.add_argument("target", type=Path, help="directory to copy it to (created if needed)")
    args = ap.parse_args(argv)
    try:
        index = publish(args.site, args.target)
    except (FileNotFoundError, ValueError) as exc:
        ap.error(str(exc))
    except files.WriteFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(index.resolve())
    return 0


if __name__ == "__main__":
    from jobs import progress

    progress.run(main)
