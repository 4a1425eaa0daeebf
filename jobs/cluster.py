"""python -m jobs.cluster init NAME: describe this Slurm site in a cluster file, and make it the default.

sinfo gives partitions, nodes, CPUs, memory, gres and MaxTime; scontrol MaxArraySize and MaxSubmitJobs;
sacctmgr your accounts. The file goes to the user config directory,
${ACCELSWEEP_CONFIG_DIR:-~/.config/accelsweep}/cluster/NAME.yaml, which Hydra searches after the shipped
hydra_conf/ (hydra_plugins/accelsweep_searchpath). The site used
when a command names no cluster= is $ACCELSWEEP_CLUSTER, else the `cluster` of that directory's
defaults.yaml (which init writes), else cluster=local.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from jobs import conf, files, progress
from jobs.schedulers import base as schedulers

ENV_NAME = "ACCELSWEEP_CLUSTER"
DEFAULTS = "defaults.yaml"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def default_name() -> tuple[str | None, str]:
    """(the site to use when none is named, where that came from)."""
    if os.environ.get(ENV_NAME):
        return os.environ[ENV_NAME], f"${ENV_NAME}"
    path = conf.user_dir() / DEFAULTS
    if path.is_file():
        name = conf.load(path).get("cluster")
        if name:
            return str(name), str(path)
    return None, ""


def with_default(argv: list[str]) -> list[str]:
    """`argv` plus cluster=<default site> when it names no cluster; exits 2 if the default does not exist."""
    if any(re.match(r"^\+{0,2}cluster=", a) for a in argv[1:]):
        return argv
    try:
        name, source = default_name()
    except conf.ConfigFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if name is None:
        return argv
    if why := missing_file(name, source):
        print(f"error: {why}", file=sys.stderr)
        raise SystemExit(2)
    return [*argv, f"cluster={name}"]


def missing_file(name: str, source: str) -> str | None:
    """Why the default cluster `name` (from `source`) cannot be used, or None: it has no cluster file."""
    if conf.find("cluster", name) is not None:
        return None
    shipped, user = (d / "cluster" / f"{name}.yaml" for d in (conf.SHIPPED, conf.user_dir()))
    return (f"the default cluster {name!r} (from {source}) has no cluster file: neither {shipped} nor {user} "
            f"exists; write one with python -m jobs.cluster init {name}")


# ---- init: a cluster file from what the site's scheduler says ----------------------------------------------

def init(name: str, *, out: Path | None, make_default: bool, force: bool, kind: str = "slurm") -> Path:
    if not _NAME.match(name):
        raise ValueError(f"cluster name {name!r}: use letters, digits, '.', '_' and '-'")
    if name in conf.names("cluster"):
        raise ValueError(f"cluster name {name!r} is a shipped cluster file (hydra_conf/cluster/{name}.yaml), which "
                         "would shadow yours; choose another name")
    path = out or conf.user_dir() / "cluster" / f"{name}.yaml"
    # both files checked before the scheduler is asked, so that a bad path writes neither
    writes = [(path, "--out" if out else "the cluster file")]
    if make_default:
        writes.append((conf.user_dir() / DEFAULTS, "the defaults file"))
    for where, what in writes:
        if why := files.output_problem(where, what):
            home = conf.user_dir() in (where, *where.parents)
            raise ValueError(why + (f" (the user config directory {conf.user_dir()} is ${conf.ENV_DIR}, else "
                                    "~/.config/accelsweep)" if home else ""))
    if path.exists() and not force:
        raise ValueError(f"{path} exists; --force overwrites it")
    text = schedulers.get(kind).describe_site(name)   # jobs.schedulers.slurm: sinfo, scontrol, sacctmgr
    files.write_text(path, text)
    if make_default:
        files.write_text(conf.user_dir() / DEFAULTS,
                         f"cluster: {name}   # the site used when a command names no cluster=\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=progress.prog("jobs.cluster"), description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    ini = sub.add_parser("init", help="write a cluster file for this Slurm site")
    ini.add_argument("name", help="the site's name (cluster=NAME)")
    ini.add_argument("--out", type=Path, help=f"where to write it (default: {conf.user_dir()}/cluster/NAME.yaml)")
    ini.add_argument("--no-default", action="store_true", help=f"do not make it the default ({DEFAULTS})")
    ini.add_argument("--force", action="store_true", help="overwrite an existing file")
    ini.add_argument("--kind", default="slurm", choices=sorted(schedulers.KINDS), help="the site's scheduler")
    sub.add_parser("show", help="which cluster a command that names none uses")
    args = ap.parse_args(argv)
    if args.command == "show":
        try:
            name, source = default_name()
        except conf.ConfigFileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if name and (why := missing_file(name, source)):
            print(f"error: {why}", file=sys.stderr)
            return 2
        print(f"default cluster: {name} (from {source})" if name else "default cluster: local (none configured)")
        return 0
    home = conf.user_dir() / "cluster" / f"{args.name}.yaml"   # where cluster=NAME is looked up
    elsewhere = args.out is not None and args.out.resolve() != home.resolve()
    try:
        path = init(args.name, out=args.out, make_default=not (args.no_default or elsewhere), force=args.force,
                    kind=args.kind)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except schedulers.SchedulerError as exc:
        print(f"error: cannot read this site's scheduler ({args.kind}): {exc}", file=sys.stderr)
        return 1
    except files.WriteFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path.read_text(), end="")
    if elsewhere and not args.no_default:   # a default that names no file would refuse every plain sweep
        print(f"wrote {path}; not made the default site: cluster={args.name} is looked up as {home} (init without --out "
              f"writes it there and makes it the default; or move it there and name it in {conf.user_dir() / DEFAULTS})")
        return 0
    print(f"wrote {path}" + ("" if args.no_default else f"; it is the default site now ({conf.user_dir() / DEFAULTS}, "
                                                         f"${ENV_NAME} overrides it)"))
    return 0


if __name__ == "__main__":
    from jobs import progress

    progress.run(main)
