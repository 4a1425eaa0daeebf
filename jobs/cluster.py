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
import math
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jobs import conf

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
    name, source = default_name()
    if name is None:
        return argv
    if conf.find("cluster", name) is None:
        shipped, user = (d / "cluster" / f"{name}.yaml" for d in (conf.SHIPPED, conf.user_dir()))
        print(f"error: the default cluster {name!r} (from {source}) has no cluster file: neither "
              f"{shipped} nor {user} exists; write one with python -m jobs.cluster init {name}", file=sys.stderr)
        raise SystemExit(2)
    return [*argv, f"cluster={name}"]


# ---- init: from sinfo / scontrol / sacctmgr to a cluster file --------------------------------------------

def _fits(hw: dict[str, Any], gres: tuple[str, str | None, int]) -> int:
    """How well a node's gres matches a hardware kind: 0 not at all, 1 the kind of device, 2 the exact type."""
    name, typ, _ = gres
    if typ and typ.lower().startswith(hw["name"]):
        return 2
    if typ:                                    # typed as something else: gpu:a100 is no h100
        return 0
    device = hw["device"]
    if device == "hpu":
        return 1 if name in ("hpu", "gaudi") else 0
    return 1 if device in ("cuda", "rocm") and name == "gpu" else 0


def match(hw: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[str]]:
    """The partition (and gres) for a hardware kind, or None; plus the candidates considered.

    A candidate offers a fitting gres; its score adds 2 for the exact gres type (gpu:h100), 2 for a
    partition named like the hardware and 1 for a partition name in the hardware name (gaudi in gaudi3).
    A kind is mapped only to a single best candidate with some evidence beyond the device kind."""
    scored: dict[str, tuple[int, dict[str, Any]]] = {}
    for row in rows:
        for g in row["gres"]:
            fit = _fits(hw, g)
            if not fit:
                continue
            part = row["partition"].lower()
            score = 2 * (fit == 2) + (2 if part == hw["name"] else 1 if part and part in hw["name"] else 0)
            best = scored.get(row["partition"])
            if best is None or score > best[0]:
                scored[row["partition"]] = (score, {"partition": row["partition"], "gres": g, "row": row})
    ranked = sorted(scored.values(), key=lambda x: -x[0])
    candidates = [c["partition"] for _, c in ranked]
    if not ranked or ranked[0][0] == 0 or (len(ranked) > 1 and ranked[1][0] == ranked[0][0]):
        return None, candidates
    return ranked[0][1], candidates


def per_card(rows: list[dict[str, Any]], partition: str, count: int) -> tuple[int, int]:
    """(CPUs, GB of memory) per card on the smallest node of `partition` with `count` cards."""
    mine = [r for r in rows if r["partition"] == partition]
    cpus = min(r["cpus"] for r in mine) // max(1, count)
    mem = math.floor(min(r["mem_mb"] for r in mine) / 1024 / max(1, count))
    return max(1, cpus), max(1, mem)


def describe(name: str) -> str:
    """The cluster file's text, from this site's Slurm."""
    from jobs.schedulers import slurm

    rows = slurm.nodes()
    if not rows:
        raise slurm.SlurmError("sinfo lists no partitions")
    default_account, accounts = slurm.user_accounts()
    try:
        max_array = slurm.max_array_size()
    except slurm.SlurmError:
        max_array = None
    try:
        max_submit, _ = slurm.submit_limit(default_account)
    except slurm.SlurmError:
        max_submit = None
    parts = sorted({r["partition"] for r in rows})
    node_count = {p: len({r["node"] for r in rows if r["partition"] == p}) for p in parts}
    max_time = {p: next(r["max_time"] for r in rows if r["partition"] == p) for p in parts}
    gres_seen = sorted({":".join(x for x in (g[0], g[1]) if x) for r in rows for g in r["gres"]})
    default_part = next((r["partition"] for r in rows if r["default"]), parts[0])

    mapped: dict[str, dict[str, Any]] = {}
    unmapped: list[str] = []
    cards = conf.group("hardware")
    for hw_name, hw in cards.items():
        if hw["device"] == "cpu":
            part = hw_name if hw_name in parts else default_part
            cpus, mem = per_card(rows, part, max(1, min(r["cpus"] for r in rows if r["partition"] == part)))
            mapped[hw_name] = {"partition": part, "gres": None, "cpus_per_card": 1, "mem_per_card_gb": mem,
                               "why": f"partition {part}: " + ("named cpu" if part == hw_name else "the default")}
            continue
        found, candidates = match(hw, rows)
        if found is None:
            why = (f"partitions {', '.join(candidates)} offer a fitting gres but none is clearly {hw_name}"
                   if candidates else f"no partition offers a gres for it (gres here: {', '.join(gres_seen) or '-'})")
            unmapped.append(f"  # {hw_name}: {why}; to use it:\n"
                            f"  # {hw_name}: {{partition: <partition>, gres: {hw['slurm']['gres_name'] or 'gpu'}"
                            f"{':' + hw_name if hw['device'] != 'hpu' else ''}, cpus_per_card: <n>, "
                            f"mem_per_card_gb: <n>}}")
            continue
        gname, gtype, count = found["gres"]
        cpus, mem = per_card(rows, found["partition"], count)
        r = found["row"]
        mapped[hw_name] = {"partition": found["partition"], "gres": f"{gname}:{gtype}" if gtype else gname,
                           "cpus_per_card": cpus, "mem_per_card_gb": mem,
                           "why": f"partition {found['partition']}: {node_count[found['partition']]} node(s), "
                                  f"gres {gname}{':' + gtype if gtype else ''}:{count}, {r['cpus']} CPUs, "
                                  f"{r['mem_mb']} MB, MaxTime {max_time[found['partition']]}"}
    used = sorted({m["partition"] for m in mapped.values()})
    limits = [slurm._slurm_minutes(max_time[p]) for p in used]
    minutes = min([60] + [m for m in limits if m])
    accel = [m for m in mapped.values() if m["gres"]] or list(mapped.values())
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# Written by `python -m jobs.cluster init {name}` on {stamp} from sinfo, scontrol and sacctmgr.",
        "# Check the per_hardware mapping, then run: python -m jobs.sweep -m hardware=... dry_run=true",
        f"name: {name}",
        "kind: slurm",
        f"max_nodes: {max(node_count[p] for p in used)}              # nodes of the largest partition used below",
        "max_parallel: 8           # array parallelism: tasks of ONE job array running at once (per array)",
        f'time_limit: "{minutes // 60:02d}:{minutes % 60:02d}:00"    # per point; MaxTime: '
        + ", ".join(f"{p} {max_time[p]}" for p in used),
        f"account: {default_account or 'null'}       # your default account; yours: {', '.join(accounts) or '-'}",
        "qos: null",
        f"hardware: [{', '.join(mapped)}]   # kinds mapped below; points on others are listed with their command",
        "partitions:               # hardware -> partition (the same as per_hardware, for older planners)",
        *(f"  {hw}: {m['partition']}" for hw, m in mapped.items()),
        "slurm:                    # site-wide per-card fallback: the smallest of the accelerators below",
        f"  cpus_per_card: {min(m['cpus_per_card'] for m in accel)}",
        f"  mem_per_card_gb: {min(m['mem_per_card_gb'] for m in accel)}",
        "per_hardware:             # per hardware kind; wins over partitions:, slurm: and the hardware file",
    ]
    for hw, m in mapped.items():
        lines += [f"  {hw}:".ljust(26) + f"# {m['why']}", f"    partition: {m['partition']}"]
        if m["gres"]:
            lines += [f"    gres: {m['gres']}", "    gpu_request: gres"]
        else:
            lines += ["    gpu_request: none"]
        lines += [f"    cpus_per_card: {m['cpus_per_card']}", f"    mem_per_card_gb: {m['mem_per_card_gb']}"]
    lines += unmapped
    lines += [
        "limits:                   # read now; the sweep also asks Slurm at submission and uses the lower",
        f"  max_array_size: {max_array if max_array is not None else 'null'}      # scontrol: MaxArraySize",
        f"  max_submit_jobs: {max_submit if max_submit is not None else 'null'}    # MaxSubmitJobs, account "
        + f"{default_account} (scontrol show assoc_mgr)",
        "setup: []                 # shell lines before every job (module load ..., source .venv/bin/activate)",
        "python: null              # python on the compute nodes (null: the one running the sweep)",
        "report:                   # the aggregation + report job",
        f"  partition: {default_part}         # the default partition",
        '  time_limit: "00:30:00"',
    ]
    return "\n".join(lines) + "\n"


def init(name: str, *, out: Path | None, make_default: bool, force: bool) -> Path:
    if not _NAME.match(name):
        raise ValueError(f"cluster name {name!r}: use letters, digits, '.', '_' and '-'")
    if name in conf.names("cluster"):
        raise ValueError(f"cluster name {name!r} is a shipped cluster file (hydra_conf/cluster/{name}.yaml), which "
                         "would shadow yours; choose another name")
    path = out or conf.user_dir() / "cluster" / f"{name}.yaml"
    if path.exists() and not force:
        raise ValueError(f"{path} exists; --force overwrites it")
    text = describe(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if make_default:
        (conf.user_dir() / DEFAULTS).parent.mkdir(parents=True, exist_ok=True)
        (conf.user_dir() / DEFAULTS).write_text(f"cluster: {name}   # the site used when a command names no cluster=\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.cluster", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    ini = sub.add_parser("init", help="write a cluster file for this Slurm site")
    ini.add_argument("name", help="the site's name (cluster=NAME)")
    ini.add_argument("--out", type=Path, help=f"where to write it (default: {conf.user_dir()}/cluster/NAME.yaml)")
    ini.add_argument("--no-default", action="store_true", help=f"do not make it the default ({DEFAULTS})")
    ini.add_argument("--force", action="store_true", help="overwrite an existing file")
    sub.add_parser("show", help="which cluster a command that names none uses")
    args = ap.parse_args(argv)
    if args.command == "show":
        name, source = default_name()
        print(f"default cluster: {name} (from {source})" if name else "default cluster: local (none configured)")
        return 0
    from jobs.schedulers import slurm

    try:
        path = init(args.name, out=args.out, make_default=not args.no_default, force=args.force)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except slurm.SlurmError as exc:
        print(f"error: cannot read this site's Slurm: {exc}", file=sys.stderr)
        return 1
    print(path.read_text(), end="")
    print(f"wrote {path}" + ("" if args.no_default else f"; it is the default site now ({conf.user_dir() / DEFAULTS}, "
                                                         f"${ENV_NAME} overrides it)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
