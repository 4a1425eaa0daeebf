"""Metrics declared by workloads: a workload the package does not know (tests/toy_workload) gets its derived
metrics and report sections from its declarations alone; old inference records and point ids are unchanged.
The tables here are made-up test input, not measurements."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from analysis.aggregate import table_from_records
from analysis.derived import add_derived

DATA = Path(__file__).with_name("data")


def _toy(hardware, cards, x, *, previous=None, status="ok", size="large", decoy=999.0):
    """A toy row; `decoy` sits in inference's throughput column, which must not be the toy's basis."""
    return {"workload": "toy", "hardware": hardware, "hardware_previous": previous, "hardware_family": "fam",
            "cards": cards, "status": status, "model": "m", "precision": "fp32", "seed": 0, "scaling": "weak",
            "widget_size": size, "widgets_per_s": x, "wobble_ppm": 3.0, "throughput_out_tok_s": decoy,
            "point_id": f"toy-{hardware}-{cards}-{size}", "sweep": "s"}


def _inference(cards, x):
    return {"workload": "inference", "hardware": "a", "hardware_previous": None, "hardware_family": "fam",
            "cards": cards, "status": "ok", "model": "m", "precision": "fp32", "seed": 0, "scaling": "weak",
            "engine": "hf", "batch_size": 1, "input_tokens": 8, "output_tokens": 8, "warmup": 1, "repeats": 3,
            "throughput_out_tok_s": x, "point_id": f"inf-{cards}", "sweep": "s"}


def _table():
    return add_derived(pd.DataFrame([
        _toy("a", 1, 10.0), _toy("a", 2, 18.0), _toy("a", 4, 30.0),
        _toy("b", 1, 25.0, previous="a"), _toy("b", 2, 40.0, previous="a"),
        _toy("b", 4, math.nan, previous="a", status="oom"),
        _toy("a", 2, 12.0, size="small"),                 # no 1-card point with widget_size=small
        _inference(1, 100.0), _inference(2, 150.0),
    ]))


def test_each_workload_derives_from_its_own_main_throughput(toy_workload):
    t = _table()
    eff = dict(zip(t.point_id, t.scaling_efficiency))
    sp = dict(zip(t.point_id, t.speedup_vs_previous))
    # toy: widgets_per_s, X(N) / (N X(1))
    assert eff["toy-a-1-large"] == 1.0
    assert eff["toy-a-2-large"] == pytest.approx(18 / (2 * 10))     # 0.9
    assert eff["toy-a-4-large"] == pytest.approx(30 / (4 * 10))     # 0.75
    assert eff["toy-b-2-large"] == pytest.approx(40 / (2 * 25))     # 0.8
    assert math.isnan(eff["toy-b-4-large"]) and math.isnan(eff["toy-a-2-small"])
    # toy: b over its previous generation a, same cards and widget size
    assert sp["toy-b-1-large"] == pytest.approx(25 / 10) and sp["toy-b-2-large"] == pytest.approx(40 / 18)
    assert math.isnan(sp["toy-a-1-large"]) and math.isnan(sp["toy-b-4-large"])
    # inference, in the same table, from throughput_out_tok_s: the toy's decoy 999 is never its 1-card point
    assert eff["inf-2"] == pytest.approx(150 / (2 * 100))


def test_unknown_workload_gets_no_derived_metrics():
    t = _table()      # the toy workload is not registered in this test
    assert t.loc[t.workload.eq("toy"), ["scaling_efficiency", "speedup_vs_previous"]].isna().all().all()
    assert t.loc[t.point_id.eq("inf-2"), "scaling_efficiency"].item() == pytest.approx(0.75)


def test_toy_workload_gets_scaling_and_speedup_sections(toy_workload, tmp_path):
    from report.build import build
    from report.charts import anchor
    from report.pages import scaling, speedup

    site = build(_table(), tmp_path / "site").parent
    text = (site / "scaling.html").read_text()
    assert f'<h2 id="workload-{anchor("toy")}">toy</h2>' in text and "(widgets/s: widgets per second)" in text
    assert f'<h2 id="workload-{anchor("inference")}">inference</h2>' in text
    spec = json.loads(text.split(f'id="{scaling.chart_id("weak", "toy", "a", "m")}-spec">')[1].split("</script>")[0])
    values = {(v["cards"], round(v["eff"], 9), v["tput"]) for part in [spec, *spec.get("layer", [])]
              for v in part.get("data", {}).get("values", []) if "cards" in v}
    assert values == {(1, 1.0, 10.0), (2, 0.9, 18.0), (4, 0.75, 30.0)}
    assert "median widget rate (widgets/s)" in text

    text = (site / "speedup.html").read_text()
    assert "Generation speedup — toy · fam" in text and f'id="{speedup.chart_id("toy", "fam")}"' in text
    assert "<th>new (widgets/s)</th>" in text
    assert '<td class="num">10</td><td class="num">25</td><td class="num">2.5</td>' in text

    data = (site / "data.html").read_text()
    assert "<code>widgets_per_s</code> (main throughput)" in data and "<code>wobble_ppm</code>" in data
    index = (site / "index.html").read_text()
    assert "Fastest toy configuration, unconfirmed: 40 widgets/s median widget rate (b · m · fp32 · 2 cards · large; " \
           "n unknown, no interval)" in index
    assert 'href="toy.html#toy-b"' in index and 'id="toy-b"' in (site / "toy.html").read_text()
    assert "<th>wobble (ppm)</th>" in index


def test_an_inference_record_from_before_metric_sets_reads_into_the_same_row():
    """Records and their table rows written by the code before this change (commit 289c206)."""
    from jobs.records import validate

    records = json.loads((DATA / "records_before_metric_sets.json").read_text())
    for rec in records:
        validate(rec)
    rows = json.loads(table_from_records(records).to_json(orient="records"))
    # Columns added since (derived intervals, issue 13): without samples in the table no interval, except a
    # 1-card point's efficiency against itself (exactly 1); the rest is unchanged.
    for row in rows:
        own = 1.0 if row["cards"] == 1 and row["scaling_efficiency"] == 1.0 else None
        assert [row.pop(f"scaling_efficiency_{e}") for e in ("lo", "hi")] == [own, own]
        assert [row.pop(f"speedup_vs_previous_{e}") for e in ("lo", "hi")] == [None, None]
    assert all(row.pop("superlinear") is False for row in rows)
    # the container's runtime and digest (jobs.containers): none recorded then
    assert all([row.pop("container_runtime"), row.pop("container_digest")] == [None, None] for row in rows)
    assert rows == json.loads((DATA / "rows_before_metric_sets.json").read_text())


# Ids computed with the code before this change (commit 289c206); a point's id must never move.
PINNED_IDS = [
    (["workload.engine=hf"], "ec78d3c93f49"),
    (["workload.engine=hf", "cards=2", "workload.batch_size=8"], "79e93162b874"),
    (["hardware=h100", "cards=4", "precision=bf16", "workload.engine=vllm", "model=llama-3-8b",
      "workload.shape=1024x1024"], "ee1f5f2a5bf6"),
    (["hardware=gaudi2", "precision=bf16", "workload.engine=habana", "model=mistral-7b", "model.init=random"],
     "8208b4c9f558"),
]


@pytest.mark.parametrize("overrides,pid", PINNED_IDS)
def test_inference_point_ids_do_not_change(make_cfg, overrides, pid):
    from jobs.plan import point_id

    assert point_id(make_cfg(*overrides)) == pid


# --------------------------------------------------------------------------- analysis/ and report/ name no workload

ROOT = Path(__file__).resolve().parents[1]
# Columns every point has whatever its workload (analysis.derived.COMMON_KEYS and the harness's) and the model
# files' hf_id (analysis.references names published models by it): not a workload's.
HARNESS = {"workload", "model", "model_init", "precision", "seed", "device_override", "hardware", "cards", "status",
           "hf_id"}
# Columns every study's rows have (where they come from), not a workload's.
STUDY_ROWS = {"source", "published"}
# (file, name): a workload's parameter name that is also an ordinary word the file uses for something else.
NOT_A_COLUMN = {
    ("report/build.py", "data"): "the site's data/ folder, not superres's data source",
    ("report/pages/data.py", "data"): "the Data page's slug",
    ("report/pages/scaling.py", "scaling"): "the Scaling page's slug, not the scaling mode parameter",
    ("report/publish.py", "target"): "the command's target directory argument, not quantize's target",
    ("report/charts.py", "shape"): "Vega-Lite's shape encoding channel, not inference's shape",
}


def declared_names(sets) -> dict[str, set[str]]:
    """Every metric and parameter name the workloads' declarations (MetricSet, their studies) give -> workloads."""
    out: dict[str, set[str]] = {}
    for ms in sets:
        names = [*ms.names, *ms.keys, *ms.labels, *ms.varied, *ms.overview, *ms.software, *ms.order,
                 *ms.title_fields, *(p for p, _ in ms.words), *([ms.scaling_mode] if ms.scaling_mode else [])]
        for s in ms.studies:
            names += [*s.keys, *s.setting, *s.columns, *s.notes, *([s.software] if s.software else [])]
        for n in set(names) - HARNESS - STUDY_ROWS:
            out.setdefault(n, set()).add(ms.workload)
    return out


def named_in(root: Path, names: dict[str, set[str]], under: tuple[str, ...] = (".",)) -> list[tuple[str, int, str]]:
    """(file relative to root, line, name) for every string constant in a .py file under `under` (docstrings left
    out) that is one of `names`, and every name in a template's {{ }} or {% %}."""
    import ast
    import re

    hits = []
    files = sorted(p for d in under for p in (root / d).rglob("*"))
    for path in [p for p in files if p.suffix == ".py"]:
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        hits += [(path, n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) and n.value in names and id(n) not in docs]
    for path in [p for p in files if p.suffix == ".html"]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for expr in re.findall(r"\{\{.*?\}\}|\{%.*?%\}", line):
                hits += [(path, i, w) for w in re.findall(r"[A-Za-z_]\w*", expr) if w in names]
    return sorted((p.relative_to(root).as_posix(), i, n) for p, i, n in hits)


def test_analysis_and_report_name_no_workload_metric_or_key(toy_workload):
    """Everything analysis/ and report/ know of a workload comes from its declarations (as the toy's sections do):
    no metric or parameter name of any workload is written there."""
    from jobs import workloads

    names = declared_names(workloads.metric_sets())
    assert {"throughput_out_tok_s", "batch_size", "images_per_s", "widgets_per_s", "tok_per_j_out"} <= set(names)
    hits = named_in(ROOT, names, ("analysis", "report"))
    assert [h for h in hits if (h[0], h[2]) not in NOT_A_COLUMN] == []
    assert {(f, n) for f, _, n in hits} == set(NOT_A_COLUMN)   # every exception is still needed


def test_the_name_check_finds_a_column_named_in_code_or_template(tmp_path):
    (tmp_path / "page.py").write_text('"""Reads throughput_out_tok_s."""\nx = table["throughput_out_tok_s"]\n'
                                      'def f():\n    """batch_size"""\n    return "batch_size" + "throughput"\n')
    (tmp_path / "page.html").write_text("<p>engine</p><td>{{ r.engine }}</td>{% if r.shape %}{% endif %}\n")
    names = {"throughput_out_tok_s": {"inference"}, "batch_size": {"inference"}, "engine": {"inference"},
             "shape": {"inference"}}
    assert named_in(tmp_path, names) == [("page.html", 1, "engine"), ("page.html", 1, "shape"),
                                         ("page.py", 2, "throughput_out_tok_s"), ("page.py", 5, "batch_size")]


def test_a_study_the_toy_declares_is_loaded_and_compared_like_the_shipped_ones(toy_workload, monkeypatch):
    """analysis.references knows a study only from its workload's declaration: the toy's published rows (made-up
    test input) get their efficiency from the toy's throughput and match the toy's points on the toy's keys."""
    import dataclasses

    import tests.toy_workload as toy
    from analysis import references
    from jobs.study import Study

    rows = pd.DataFrame({"workload": "toy", "hardware": "a", "model": "m", "precision": "published", "seed": 0,
                         "status": "ok", "widget_size": "large", "cards": [1, 2], "widgets_per_s": [8.0, 12.0],
                         "maker": "the paper's code", "source": "toy paper", "published": True})
    study = Study(name="toy-paper", title="Toy paper", attribution="made up", load=lambda directory: rows.copy(),
                  columns=("hardware", "model", "widget_size", "cards", "maker", "widgets_per_s", "scaling_efficiency",
                           "source", "published"),
                  keys=("hardware", "model", "widget_size", "cards"), setting={"precision": ("fp32",)},
                  software="maker", derive=True)
    monkeypatch.setattr(toy.Toy, "metrics", dataclasses.replace(toy.METRICS, studies=(study,)))
    assert references.studies()["toy-paper"] is study
    assert references.load(study)["scaling_efficiency"].tolist() == [1.0, pytest.approx(12 / (2 * 8))]
    got = references.compare_study(_table(), study, ["widgets_per_s"])
    assert list(got.columns) == ["hardware", "model", "widget_size", "cards", "maker", "measured_maker", "metric",
                                 "published", "measured", "ratio"]
    assert got["ratio"].tolist() == [pytest.approx(10 / 8), pytest.approx(18 / 12)]   # toy a on 1 and 2 cards
    assert references.compare_study(_table().assign(precision="bf16"), study, ["widgets_per_s"]).empty


def test_the_toy_workload_goes_through_the_contract(toy_workload):
    """The registry returns the Workload instance; the optional hooks have their defaults; a subclass that leaves
    out a required hook cannot be made."""
    from jobs import workloads
    from jobs.workloads import Ranks, Workload

    toy = workloads.get("toy")
    cfg = {"workload": {"name": "toy", "widget_size": 2, "scaling": "weak"}}
    assert isinstance(toy, Workload) and toy.metrics is toy_workload
    assert toy.identity(cfg) == cfg["workload"] and toy.resolve(cfg) is cfg and toy.requeue(cfg) is False
    assert toy.params(cfg) == {"workload": "toy", "widget_size": 2, "scaling": "weak"}
    assert [p.slug for p in toy.pages()] == ["toy"] and (toy.templates() / "toy.html").is_file()
    assert toy.tasks(cfg) is Ranks.PER_CARD
    assert json.dumps([Ranks.PER_CARD, Ranks.PER_NODE]) == '["per_card", "per_node"]'   # as plans said before

    class NoRun(Workload):
        name, metrics, options = "norun", None, {}

        def check(self, cfg):
            return []

        def params(self, cfg):
            return {}

        def tasks(self, cfg):
            return Ranks.PER_CARD

    with pytest.raises(TypeError, match="run"):
        NoRun()
    assert type("Bare", (NoRun,), {"run": lambda self, cfg, ctx: None})().pages() == []
