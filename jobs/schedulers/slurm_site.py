"""A Slurm site as a cluster file (python -m jobs.cluster init): which partition and gres each hardware kind of the
catalogue maps to, from what sinfo, sacctmgr and scontrol said (jobs.schedulers.slurm asks them); and the parsing
of sinfo's fields. No Slurm command runs here.
"""
from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from jobs import conf


def _slurm_minutes(text: str) -> int | None:
    """sinfo's time limit ('2:00:00', '1-00:00:00', '30:00', 'infinite') in minutes."""
    text = text.strip()
    if text.lower() in ("infinite", "unlimited", "n/a", ""):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return (int(days or 0) * 24 + h) * 60 + m + (1 if s else 0)


def parse_gres(text: str) -> list[tuple[str, str | None, int]]:
    """'gpu:h100:8(S:0-1),hpu:8' -> [('gpu', 'h100', 8), ('hpu', None, 8)]; '(null)' -> []."""
    out = []
    for item in text.split(","):
        fields = item.split("(")[0].strip().split(":")
        if len(fields) in (2, 3) and fields[-1].isdigit():
            out.append((fields[0], fields[1] if len(fields) == 3 else None, int(fields[-1])))
    return out



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


def describe(name: str, rows: list[dict[str, Any]], default_account: str | None, accounts: list[str],
             max_array: int | None, max_submit: int | None) -> str:
    """The cluster file's text, from this site's nodes (sinfo rows), accounts (sacctmgr) and limits (scontrol)."""
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
    limits = [_slurm_minutes(max_time[p]) for p in used]
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
