"""python -m report.publish SITE_DIR TARGET_DIR: copy a built report site (from report.build) to TARGET_DIR.

The site is self-contained (relative links only), so publishing is a plain copy; files already in TARGET_DIR
that the site does not have are left alone. Prints the path of the published index.html.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def publish(site: Path | str, target: Path | str) -> Path:
    """Copy ``site`` (which must hold index.html) into ``target``; return target/index.html."""
    site, target = Path(site), Path(target)
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"not a built report site (no index.html): {site}")
    shutil.copytree(site, target, dirs_exist_ok=True)
    return target / "index.html"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.publish", description=__doc__.splitlines()[0])
    ap.add_argument("site", type=Path, help="a site directory written by python -m report.build")
    ap.add_argument("target", type=Path, help="directory to copy it to (created if needed)")
    args = ap.parse_args(argv)
    try:
        index = publish(args.site, args.target)
    except FileNotFoundError as exc:
        ap.error(str(exc))
    print(index.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
