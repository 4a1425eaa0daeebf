"""python -m report.publish SITE_DIR TARGET_DIR: copy a built report site (from report.build) to TARGET_DIR.

The site is self-contained (relative links only), so publishing is a plain copy; files already in TARGET_DIR
that the site does not have are left alone. Prints the path of the published index.html.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jobs import files, progress
from report.ownership import not_a_site


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
    if why := broken_link(site, found):
        raise ValueError(why)
    if theirs := not_a_site(dst, [str(rel) for rel in found]):
        raise files.InTheWay(f"the target {target} holds {', '.join(theirs[:3])}{' ...' if len(theirs) > 3 else ''}, "
                             "which publishing would replace, but no accelsweep site wrote it: they may be files of "
                             "your own; publish into a new directory, or remove them")
    files.own_directories(dst, found, "the target")
    for rel in found:
        files.copy_file(src / rel, dst / rel, follow_dir=False)
    return target / "index.html"


def broken_link(site: Path, found: list[Path]) -> str | None:
    """Why the site is not whole, or None: a page of it that links to a file it does not have (a build that was
    interrupted, or a file removed since), which would be published as a broken link. Links elsewhere (http:,
    mailto:, an absolute path) and to a place in the same page are not looked at. `found`: the site's files,
    relative to it."""
    from html.parser import HTMLParser
    from urllib.parse import unquote, urlsplit

    have = {os.path.normpath(rel) for rel in found}

    class Links(HTMLParser):
        def __init__(self):
            super().__init__()
            self.links: list[str] = []

        def handle_starttag(self, tag, attrs):
            self.links += [v for k, v in attrs if k in ("href", "src") and v]

    for page in (rel for rel in found if rel.suffix == ".html"):
        parser = Links()
        parser.feed((site / page).read_text(encoding="utf-8", errors="replace"))
        for link in parser.links:
            url = urlsplit(link)
            if url.scheme or url.netloc or not url.path or url.path.startswith("/"):
                continue
            path = unquote(url.path) + ("index.html" if url.path.endswith("/") else "")
            if os.path.normpath(page.parent / path) not in have:
                return (f"{site / page} links to {link}, which the site does not have (a build that was interrupted?); "
                        "build the site again")
    return None


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
    ap = argparse.ArgumentParser(prog=progress.prog("report.publish"), description=__doc__.splitlines()[0])
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
