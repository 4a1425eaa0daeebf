"""accelsweep <command> [args]: one command for everything a user runs; each subcommand is the module it names.

`accelsweep sweep ...` is `python -m jobs.sweep ...` (the mission's command, which keeps working), `accelsweep
status RUNS` is `python -m jobs.status RUNS`, and so on: the same arguments, the same output, the same exit status.
"""
from __future__ import annotations

import importlib
import sys

from jobs import progress

# subcommand -> (module, what it does); the order is the order of a user's day.
COMMANDS: dict[str, tuple[str, str]] = {
    "sweep": ("jobs.sweep", "expand a Hydra grid, plan, submit or run its points, aggregate, report"),
    "status": ("jobs.status", "where each point of a sweep stands, from its manifest, records and scheduler"),
    "cancel": ("jobs.cancel", "cancel a sweep's jobs, local or Slurm"),
    "cluster": ("jobs.cluster", "describe this Slurm site in a cluster file and make it the default (init), or show one"),
    "catalogue": ("jobs.catalogue", "the models, hardware, precisions, workloads and presets a sweep can name"),
    "aggregate": ("analysis.aggregate", "one table of the records of one or more sweep directories"),
    "history": ("analysis.history", "the same points measured in several sweeps, over time, side by side"),
    "rescore": ("jobs.workloads.serving.rescore", "serving points' goodput again under another SLO, from their requests"),
    "report": ("report.build", "the static HTML report (and --figures: SVG, PNG, CSV, LaTeX) of sweep directories"),
    "publish": ("report.publish", "copy a built report site to the directory it is served from"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return ("usage: accelsweep <command> [args]   (accelsweep <command> --help: its own arguments)\n\n"
            + __doc__.splitlines()[0].split(": ", 1)[1] + "\n\ncommands:\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), end="")
        sys.exit(0 if args else 2)
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"error: accelsweep has no command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        sys.exit(2)
    module = COMMANDS[name][0]
    progress.COMMAND = f"accelsweep {name}"
    sys.argv = [progress.COMMAND, *rest]   # the sweep reads its overrides from sys.argv, as Hydra does
    if name == "sweep":
        progress.early_interrupts()
        importlib.import_module(module).command_line()
        return
    progress.run(lambda: importlib.import_module(module).main(rest))


if __name__ == "__main__":
    main()
