"""python -m report.publish SITE_DIR TARGET_DIR: copy a built report site (from report.build) to TARGET_DIR.

The site is self-contained (relative links only), so publishing is a plain copy; files already in TARGET_DIR
that the site does not have are left alone. Prints the path of the published index.html.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jobs import files


def publish(site: Path | str, target: Path | str) -> Path:
    """Copy ``site`` (which must hold index.html) into ``target``, file by file atomically; return target/index.html.

    The copies get the publishing user's umask (a served site must be readable), not the site's private modes."""
    site, target = Path(site), Path(target)
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"not a built report site (no index.html): {site}")
    if target.exists() and not target.is_dir():
        raise ValueError(f"the target {target} is a file; give a directory")
    src, dst = site.resolve(), target.resolve()
    if dst == src or src in dst.parents:
        raise ValueError(f"the target {target} is the site {site} itself or inside it; publish somewhere else")
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        files.copy_file(path, dst / path.relative_to(src))
    return target / "index.html"


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
    sys.exit(main())
