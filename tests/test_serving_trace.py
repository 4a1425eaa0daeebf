"""Replay of a Mooncake-format trace (jobs/workloads/serving/trace.py): reading, refusing bad lines by line,
prompts built from shared blocks, due times, and the shared-prefix summary."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.workloads.serving import trace

SHIPPED = Path(trace.__file__).parent / "traces" / "mooncake_small.jsonl"
GOOD = {"timestamp": 0, "input_length": 20, "output_length": 4, "hash_ids": [0, 1]}


def write(tmp_path: Path, lines: list) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def entry(t_ms: float, inp: int, out: int, ids: list[int]) -> trace.Entry:
    return trace.Entry(t_ms / 1000, inp, out, tuple(ids))


def test_the_shipped_trace_reads_and_replays_with_its_block_size():
    entries = trace.read(SHIPPED)
    assert len(entries) == 40 and entries[0].timestamp_s == 0 and 6 <= entries[-1].timestamp_s <= 10
    assert all(32 <= e.input_length <= 200 and 4 <= e.output_length <= 24 for e in entries)
    assert trace.problems(entries, max_positions=None, block_tokens=16) == []
    summary = trace.reuse(entries, 16)
    assert summary["requests"] == 40 and 0.2 < summary["prefix_token_share"] < 0.8
    due, prompts, outputs = trace.requests(entries, vocab_size=1000, block_tokens=16)
    assert [len(p) for p in prompts] == [e.input_length for e in entries]
    assert due == sorted(due) and outputs == [e.output_length for e in entries]
    assert len(trace.read(SHIPPED, limit=5)) == 5


@pytest.mark.parametrize(("change", "says"), [
    ({"input_length": None}, "no \"input_length\""),
    ({"timestamp": None}, "no \"timestamp\""),
    ({"hash_ids": None}, "no \"hash_ids\""),
    ({"output_length": 2.5}, "output_length=2.5 must be a whole number >= 1"),
    ({"input_length": "20"}, "input_length='20' must be a whole number >= 1"),
    ({"input_length": True}, "input_length=True must be a whole number >= 1"),
    ({"input_length": 0}, "input_length=0 must be a whole number >= 1"),
    ({"output_length": 0}, "output_length=0 must be a whole number >= 1"),
    ({"output_length": -3}, "output_length=-3 must be a whole number >= 1"),
    ({"timestamp": -1}, "timestamp=-1 must be a number of milliseconds >= 0"),
    ({"timestamp": "5"}, "timestamp='5' must be a number of milliseconds >= 0"),
    ({"timestamp": 10}, "timestamp=10 is before the line above's (50)"),
    ({"hash_ids": 3}, "hash_ids=3 must be a list of block ids"),
    ({"hash_ids": [1, -2]}, "hash_ids holds -2; block ids are whole numbers >= 0"),
    ({"hash_ids": [1, "a"]}, "hash_ids holds 'a'"),
])
def test_a_bad_line_is_refused_by_its_number(tmp_path, change, says):
    bad = {k: v for k, v in {**GOOD, "timestamp": 60, **change}.items() if v is not None}
    path = write(tmp_path, [{**GOOD, "timestamp": 50}, "", bad])
    with pytest.raises(ValueError, match="line 3: ") as info:
        trace.read(path)
    assert says in str(info.value) and f"workload.trace={path}" in str(info.value)


def test_a_trace_without_requests_and_a_line_that_is_not_json_are_refused(tmp_path):
    with pytest.raises(ValueError, match="holds no request"):
        trace.read(write(tmp_path, ["", "  "]))
    with pytest.raises(ValueError, match="line 2: not JSON"):
        trace.read(write(tmp_path, [GOOD, "{oops"]))


def test_equal_hash_ids_give_equal_blocks_and_different_ones_differ():
    entries = [entry(0, 40, 4, [7, 8, 9]), entry(0, 36, 4, [7, 8, 5]), entry(5, 20, 4, [1, 8])]
    _, (a, b, c), _ = trace.requests(entries, vocab_size=50_000, block_tokens=16, seed=3)
    assert a[:32] == b[:32] and a[32:36] != b[32:36]   # blocks 7 and 8 shared; 9 and 5 differ
    assert c[16:20] == a[16:20] and c[:16] != a[:16]     # block 8 is the same wherever it stands
    assert all(10 <= i < 50_000 for p in (a, b, c) for i in p)
    again = trace.requests(entries, vocab_size=50_000, block_tokens=16, seed=3)[1]
    other = trace.requests(entries, vocab_size=50_000, block_tokens=16, seed=4)[1]
    assert again == [a, b, c] and other[0] != a


def test_lengths_are_exact_and_tokens_past_the_blocks_are_the_request_s_own():
    entries = [entry(0, 5, 3, [1]), entry(0, 40, 7, [1]), entry(0, 40, 9, [1]), entry(0, 12, 1, [])]
    _, prompts, outputs = trace.requests(entries, vocab_size=1000, block_tokens=16)
    assert [len(p) for p in prompts] == [5, 40, 40, 12] and outputs == [3, 7, 9, 1]
    assert prompts[0] == prompts[1][:5] and prompts[1][:16] == prompts[2][:16]
    assert prompts[1][16:] != prompts[2][16:]   # the same block, then each its own tokens


def test_due_times_start_at_the_first_request_and_scale_with_speedup():
    entries = [entry(1000, 20, 4, [0]), entry(1500, 20, 4, [0]), entry(3000, 20, 4, [0])]
    assert trace.requests(entries, vocab_size=100, block_tokens=16)[0] == [0.0, 0.5, 2.0]
    assert trace.requests(entries, vocab_size=100, block_tokens=16, speedup=4)[0] == [0.0, 0.125, 0.5]
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="speedup="):
            trace.requests(entries, vocab_size=100, block_tokens=16, speedup=bad)


def test_problems_name_requests_beyond_the_positions_and_a_wrong_block_size(tmp_path):
    path = write(tmp_path, [{**GOOD, "input_length": 100 + i, "output_length": 30, "hash_ids": [0] * (7 + (i > 0))}
                            for i in range(6)])
    entries = trace.read(path)
    found = trace.problems(entries, max_positions=128)
    assert len(found) == 4 and "line 1: input_length=100 + output_length=30 = 130 exceeds" in found[0]
    assert "max_position_embeddings=128" in found[0] and found[-1] == "and 3 more lines like these"
    assert trace.problems(entries, max_positions=1000) == []
    wrong = trace.problems(entries, max_positions=1000, block_tokens=16)   # 100 tokens: 7 blocks; 101+: 7, not 8
    assert len(wrong) == 4 and "line 2: 8 hash_ids for input_length=101, but blocks of 16 tokens make 7" in wrong[0]


def test_reuse_counts_only_a_leading_run_an_earlier_request_began_with():
    entries = [entry(0, 40, 4, [1, 2, 3]),    # nothing before it
               entry(10, 48, 4, [1, 2, 4]),   # 1, 2 a prefix of the first; 4 new
               entry(20, 32, 4, [5, 2])]      # 2 was seen, but after another first block: no prefix
    assert trace.reuse(entries, 16) == {
        "requests": 3, "prompt_tokens": 120, "prompt_blocks": 8, "distinct_blocks": 5, "prefix_blocks": 2,
        "prefix_block_share": 2 / 8, "prefix_token_share": 32 / 120}
    assert trace.reuse([], 16)["prefix_block_share"] == 0.0
