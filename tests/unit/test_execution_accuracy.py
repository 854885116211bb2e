"""The pure parts of benchmarks.execution_accuracy: when order matters, comparing rows, reading
the chosen candidate, the stage timings and the LLM's tokens from a trace (or nl.query_log's
record), attributing a miss to a stage, the modes' environments, drawing a sample, finding the
LLM server's process and its memory, and a checkpointed run resumed."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from benchmarks.execution_accuracy import (
    AGREE,
    ANSWERED_EMPTY,
    ANSWERED_NESTED,
    ANSWERED_SET_OPERATION,
    ANSWERED_WRONG,
    DISAGREE,
    LLM_OWN_QUERY,
    NO_CANDIDATE_RAN,
    TIMEOUT,
    Asked,
    BenchError,
    Checkpoint,
    Item,
    LLMUsage,
    Memory,
    Mode,
    Reply,
    Resumed,
    Run,
    SketchView,
    ambiguity_outcomes,
    ask_all,
    blank_result,
    candidate_of_sql,
    child_process,
    choose,
    chosen_candidate,
    compare,
    gold_orders,
    llm_usage,
    logged_answer,
    loss,
    mode_environment,
    mode_specs,
    model_environment,
    parse_args,
    process_memory,
    read_checkpoint,
    readings_of,
    record_of,
    report,
    rules_fired,
    sketch_differences,
    slot_differences,
    stage_of,
    stage_times,
    trace_rows,
)
from proxy import config
from proxy.nl2sql.answer import TRACE_COLUMNS, TraceRow
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Sketch, Slots


@pytest.mark.parametrize(
    ("query", "ordered"),
    [
        ("SELECT name FROM singer", False),
        ("SELECT name FROM singer ORDER BY age DESC", True),
        ("SELECT name FROM singer ORDER BY age LIMIT 1", True),
        # an ORDER BY inside a subquery does not order the result
        (
            "SELECT name FROM singer WHERE age > (SELECT age FROM singer ORDER BY age LIMIT 1)",
            False,
        ),
        ("SELECT name FROM a UNION SELECT name FROM b", False),
        ("SELECT count(*) FROM singer GROUP BY country", False),
    ],
)
def test_gold_orders(query: str, ordered: bool) -> None:
    assert gold_orders(query) is ordered


def test_compare_numeric_and_float() -> None:
    gold = [(Decimal("29.3333333333333333"), 3)]
    assert compare(gold, [(29.333333333333332, 3)], ordered=False) == (True, True)
    assert compare(gold, [(29.3334, 3)], ordered=False) == (False, False)


def test_compare_order_only_when_the_gold_orders() -> None:
    gold = [("a",), ("b",), ("b",)]
    assert compare(gold, [("b",), ("a",), ("b",)], ordered=False) == (True, True)
    assert compare(gold, [("b",), ("a",), ("b",)], ordered=True) == (False, False)
    assert compare(gold, [("a",), ("b",)], ordered=False) == (False, False)  # a multiset


def test_compare_columns_in_another_order() -> None:
    gold = [("France", 3), ("Spain", 1)]
    assert compare(gold, [(1, "Spain"), (3, "France")], ordered=False) == (True, False)
    assert compare([], [], ordered=False) == (True, True)
    assert compare([], [(None,)], ordered=False) == (False, False)


def _trace(*rows: tuple[str, int | None, str]) -> list[TraceRow]:
    return [
        TraceRow(stage, candidate, None, "", outcome, 1.0) for stage, candidate, outcome in rows
    ]


@pytest.mark.parametrize(
    ("trace", "chosen"),
    [
        (_trace(("schema", None, "2 tables"), ("sketch", None, "16 sketches")), None),
        (
            _trace(
                ("schema", None, "2 tables"),
                ("complete", 1, "PLM"),
                ("check", 1, "3 rows"),
                ("calibrate", 1, "literals as found"),
            ),
            1,
        ),
        # candidate 1 fails, 2 returns nothing, 3 answers
        (
            _trace(
                ("complete", 1, "PLM"),
                ("check", 1, "error 42883 (operator does not exist)"),
                ("complete", 2, "PLM"),
                ("check", 2, "0 rows"),
                ("complete", 3, "PLM"),
                ("check", 3, "1 rows"),
            ),
            3,
        ),
        # nothing answers: the first candidate that ran is the fall-back
        (
            _trace(
                ("complete", 1, "no SQL: nested subquery"),
                ("complete", 2, "PLM"),
                ("check", 2, "0 rows"),
                ("complete", 3, "PLM"),
                ("check", 3, "0 rows"),
            ),
            2,
        ),
        # calibration's corrected SQL returns rows: the candidate answers
        (
            _trace(
                ("complete", 1, "PLM"),
                ("check", 1, "0 rows"),
                ("calibrate", 1, "1 literals corrected"),
                ("execute", 1, "2 rows"),
            ),
            1,
        ),
        (_trace(("complete", 1, "PLM"), ("check", 1, "error 42P01 (no table)")), None),
    ],
)
def test_chosen_candidate(trace: list[TraceRow], chosen: int | None) -> None:
    assert chosen_candidate(trace) == chosen


def test_stage_times_and_trace_rows() -> None:
    rows = [
        ("schema", None, None, "", "2 tables", 1.5),
        ("complete", 1, -0.5, "", "PLM", 0.25),
        ("complete", 2, -1.0, None, "PLM", 0.75),
        ("check", 1, -0.5, "", "3 rows", Decimal("2.0")),
    ]
    trace = trace_rows(rows)
    assert trace[2] == TraceRow("complete", 2, -1.0, "", "PLM", 0.75)
    assert stage_times(trace) == {"schema": 1.5, "complete": 1.0, "check": 2.0}


# A small schema is not needed: sketches name columns and tables by index.
NAME, AGE, COUNTRY = 1, 2, 3
SINGER, CONCERT = 0, 1


def _sketch(
    select: tuple[SelectItem, ...] = (SelectItem("", NAME),),
    tables: tuple[int, ...] = (SINGER,),
    keywords: tuple[str, ...] = ("where",),
    where: tuple[Predicate, ...] = (Predicate(COUNTRY, "="),),
    **slots: object,
) -> Sketch:
    return Sketch(
        frozenset(select),
        frozenset(tables),
        frozenset(keywords),
        Slots(where=where, **slots),  # type: ignore[arg-type]
    )


GOLD = _sketch()


def test_sketch_and_slot_differences() -> None:
    assert sketch_differences(GOLD, GOLD) == []
    other = _sketch(select=(SelectItem("count", STAR),), tables=(SINGER, CONCERT))
    assert sketch_differences(GOLD, other) == ["SELECT", "FROM"]
    assert slot_differences(GOLD, _sketch(where=(Predicate(AGE, ">"),))) == ["WHERE"]
    assert slot_differences(GOLD, _sketch(limit=1, group_by=frozenset({NAME}))) == [
        "GROUP BY",
        "LIMIT",
    ]
    two = (Predicate(COUNTRY, "="), Predicate(AGE, ">"))
    assert slot_differences(_sketch(where=two), _sketch(where=two[::-1])) == []


def _view(gold: Sketch | None, *candidates: Sketch) -> SketchView:
    return SketchView(gold, "" if gold else "subquery in FROM", candidates)


def _loss(view: SketchView | None, chosen: int | None = 1, **kwargs: object) -> str:
    arguments: dict[str, object] = {
        "timed_out": False,
        "sqlstate": "",
        "error": "",
        "view": view,
        "chosen": chosen,
        "predicted_rows": 3,
    }
    arguments.update(kwargs)
    return loss(**arguments)  # type: ignore[arg-type]


def test_loss_attribution() -> None:
    wrong_from = _sketch(tables=(SINGER, CONCERT))
    assert _loss(_view(GOLD, GOLD), timed_out=True) == TIMEOUT
    assert _loss(_view(GOLD, GOLD), sqlstate="NL001", error="NL001: none ran") == NO_CANDIDATE_RAN
    assert _loss(_view(GOLD, GOLD), sqlstate="42P01", error="x") == "proxy error 42P01"
    assert _loss(_view(None, GOLD)).startswith("gold outside the sketch grammar")
    assert _loss(_view(GOLD, GOLD)) == ANSWERED_WRONG
    assert _loss(_view(GOLD, GOLD), predicted_rows=0) == ANSWERED_EMPTY
    # the chosen candidate's sketch is judged, numbered from 1
    assert _loss(_view(GOLD, GOLD, wrong_from), chosen=2) == "sketch wrong: FROM"
    assert _loss(_view(GOLD, wrong_from, GOLD), chosen=2) == ANSWERED_WRONG
    assert _loss(_view(GOLD, wrong_from, GOLD), chosen=None) == "sketch wrong: FROM"
    assert _loss(_view(GOLD, _sketch(order_by=(SelectItem("", AGE),)))) == (
        "sketch right, slot wrong: ORDER BY"
    )
    union = _sketch(keywords=("where", "union"))
    assert _loss(_view(union, union)) == ANSWERED_SET_OPERATION
    nested = _sketch(keywords=("where", "nested"))
    assert _loss(_view(nested, nested)) == ANSWERED_NESTED


def test_every_category_is_charged_to_a_stage() -> None:
    assert stage_of("sketch wrong: SELECT") == "sketch (SELECT/FROM/KEYWORDS)"
    assert stage_of("sketch right, slot wrong: WHERE").startswith("sketch slots")
    assert stage_of(ANSWERED_EMPTY) == stage_of(ANSWERED_SET_OPERATION)
    assert stage_of(NO_CANDIDATE_RAN) == stage_of(TIMEOUT) == "no answer (error or timeout)"
    assert stage_of("gold outside the sketch grammar (OFFSET)") == "not attributable"


@pytest.mark.parametrize(
    ("rows", "blank"),
    [
        ([], True),
        ([(0,)], True),
        ([(None, 0), (0, None)], True),
        ([(0,), (1,)], False),
        ([("",)], False),
        ([("Boston",)], False),
    ],
)
def test_blank_result(rows: list[tuple[object, ...]], blank: bool) -> None:
    assert blank_result(rows) is blank


# ---------------------------------------------------------------- LLM modes, checkpoints


def test_llm_usage_sums_the_trace_notes() -> None:
    trace = [
        TraceRow("schema", None, None, "", "3 tables, 9 columns", 1.0),
        TraceRow("complete", 1, -0.5, "412 prompt + 23 completion tokens", "LLM", 900.0),
        TraceRow("check", 1, -0.5, "", "error 42703 (no column)", 1.0),
        TraceRow(
            "complete", 1, -0.5, "430 prompt + 19 completion tokens", "LLM, after the error", 1
        ),
        TraceRow(
            "complete", 0, None, "388 prompt + 30 completion tokens", "LLM, without the sketch", 1
        ),
        TraceRow("complete", 2, -0.7, "", "LLM failed: timed out", 60_000.0),
        TraceRow("complete", 3, -0.9, "FROM reduced to the tables of the columns named", "PLM", 1),
        TraceRow("calibrate", 0, None, "'x' -> 'X' (0.90, column)", "1 literals corrected", 1),
    ]
    assert llm_usage(trace) == LLMUsage(
        requests=4, prompt_tokens=412 + 430 + 388, completion_tokens=23 + 19 + 30
    )
    assert llm_usage([]) == LLMUsage(0, 0, 0)


def test_rules_fired_reads_the_trace_notes() -> None:
    trace = [
        TraceRow("sketch", None, None, "rules: spoken_order, shown_groups", "8 sketches", 1),
        TraceRow("complete", 1, -0.5, "rules: extreme_row, counted_table", "PLM", 1),
        TraceRow(
            "complete",
            2,
            -0.7,
            "FROM reduced to the tables of the columns named; rules: spoken_range, extreme_row",
            "PLM",
            1,
        ),
        TraceRow("calibrate", 2, -0.7, "'x' -> 'X' (0.90, column)", "1 literals corrected", 1),
    ]
    assert rules_fired(trace) == [
        "spoken_order",
        "shown_groups",
        "extreme_row",
        "counted_table",
        "spoken_range",
    ]
    assert rules_fired(trace[3:]) == []


def test_readings_of_reads_the_ambiguity_rows() -> None:
    sketch = TraceRow("sketch", None, None, "", "8 sketches", 1)
    sought = TraceRow("ambiguity", 1, None, "", "other readings: up to 2 more", 1)
    agreeing = TraceRow("ambiguity", 1, None, "", "2 other readings, all agreeing", 1)
    alone = TraceRow("ambiguity", 1, None, "", "no other reading answers", 1)
    probed = TraceRow("ambiguity", 3, None, "'x' in a.b: 4 rows", "value: open", 1)
    kept = TraceRow("ambiguity", 1, None, "", "the seed (candidate 1) stands: 0 agree", 1)
    assert ambiguity_outcomes([sketch, sought, probed]) == [sought.outcome, probed.outcome]
    for trace, readings in [
        ([sketch, sought, agreeing], AGREE),
        ([sketch, alone], AGREE),
        ([sketch, sought, probed, kept], DISAGREE),
        ([kept], DISAGREE),  # other rows, nothing to compare part by part: they disagree
        ([sketch], ""),  # the stage is off, or nothing answered
    ]:
        assert readings_of(ambiguity_outcomes(trace)) == readings, trace


def test_the_report_sets_the_stage_against_its_twin_where_candidates_disagree() -> None:
    items = [Item(n, "db", f"q{n}?", "SELECT 1", "easy", "SELECT 1") for n in range(6)]
    stage = Mode("full m", "full", "with the stage", 120.0)
    twin = Mode("full m, no ambiguity stage", "full", "without", 120.0)
    for n in range(6):
        # 0-2 disagree (the stage wins 0 and 1, loses 2), 3-4 agree (both right), 5 no answer
        outcomes = ["value: open"] if n < 3 else ["2 other readings, all agreeing"] if n < 5 else []
        stage.results[n] = Asked(latency_ms=130.0, match=n in (0, 1, 3, 4), ambiguity=outcomes)
        twin.results[n] = Asked(latency_ms=100.0, match=n in (2, 3, 4))
    run = Run(items, 6, Counter(), [stage, twin])
    run.judged = items
    text = report(run)
    assert "| full m | 3 | 2 / 1 | 2 | 2 / 2 | 1 | 0 / 0 | 2 / 1 | 130 / 100 | 1.30 |" in text
    # without a twin, no such table
    alone = Run(items, 6, Counter(), [stage])
    alone.judged = items
    assert "against the pipeline without them" not in report(alone)


def test_numbers_choose_questions_by_their_place() -> None:
    assert parse_args(["--numbers", "3,17,250"]).numbers == [3, 17, 250]
    with pytest.raises(SystemExit):
        parse_args(["--numbers", "3,x"])
    with pytest.raises(SystemExit):  # one way of choosing at a time
        parse_args(["--numbers", "3", "--limit", "5"])


def test_the_historys_questions_need_a_history(tmp_path: Path) -> None:
    file = tmp_path / "questions.jsonl"
    args = parse_args(["--history", "leave-one-out", "--history-questions", str(file)])
    assert args.history_questions == file and not args.llm  # the default model writes them
    with pytest.raises(SystemExit):
        parse_args(["--history-questions", str(file)])


def test_choose_draws_a_reproducible_sample_in_order() -> None:
    numbers = list(range(0, 2000, 2))
    drawn = choose(numbers, sample=10, seed=1)
    assert drawn == choose(numbers, sample=10, seed=1)
    assert drawn != choose(numbers, sample=10, seed=2)
    assert drawn == sorted(drawn) and len(set(drawn)) == 10 and set(drawn) <= set(numbers)
    assert max(drawn) > numbers[100]  # across the list, not its beginning
    assert choose(numbers[:5], sample=10, seed=1) == numbers[:5]
    assert choose(numbers, limit=3) == [0, 2, 4]
    assert choose(numbers) == numbers


@pytest.mark.parametrize(
    ("trace", "chosen"),
    [
        # full: the LLM's sketch completion returns nothing, its own query answers
        (
            _trace(
                ("complete", 1, "LLM"),
                ("check", 1, "0 rows"),
                ("complete", 0, "LLM, without the sketch"),
                ("check", 0, "2 rows"),
            ),
            0,
        ),
        # LLM alone: its query runs and returns nothing (the fall-back), or fails
        (_trace(("complete", 0, "LLM, without the sketch"), ("check", 0, "0 rows")), 0),
        (_trace(("complete", 0, "LLM, without the sketch"), ("check", 0, "error 42P01")), None),
        # the LLM's own query fails, a later sketch answers
        (
            _trace(
                ("complete", 0, "LLM, without the sketch"),
                ("check", 0, "error 42601 (syntax)"),
                ("complete", 4, "PLM"),
                ("check", 4, "5 rows"),
            ),
            4,
        ),
    ],
)
def test_chosen_candidate_with_the_llms_own_query(trace: list[TraceRow], chosen: int) -> None:
    assert chosen_candidate(trace) == chosen


def test_the_llms_own_query_is_a_loss_category_of_its_own() -> None:
    wrong_from = _sketch(tables=(SINGER, CONCERT))
    # judged against no sketch (not the top one, which is wrong here), with or without views
    assert _loss(_view(GOLD, wrong_from), chosen=0) == LLM_OWN_QUERY
    assert _loss(None, chosen=0) == LLM_OWN_QUERY
    assert _loss(_view(GOLD, wrong_from), chosen=0, timed_out=True) == TIMEOUT
    assert stage_of(LLM_OWN_QUERY) not in {
        stage_of("sketch wrong: FROM"),
        stage_of(ANSWERED_WRONG),
        stage_of(TIMEOUT),
        "not attributable",
    }


def test_mode_environment() -> None:
    environ = {"PGNL_LLM_BASE_URL": "http://llm:8000/v1", "PGNL_LLM_PROVIDER": "embedded"}
    specs = mode_specs(
        ["plm", "url", "alone", "full"],
        ["qwen2.5-coder-0.5b", "/models/mine.gguf"],
        environ,
        timeout_s=30,
        llm_timeout_s=120,
    )
    assert [s.name for s in specs] == [
        "PLM-only",
        "LLM",
        "LLM alone qwen2.5-coder-0.5b",
        "full qwen2.5-coder-0.5b",
        "LLM alone mine",
        "full mine",
    ]
    assert [s.timeout_s for s in specs] == [30, 30, 120, 120, 120, 120]
    plm, url, alone, full, _, mine = (mode_environment(s, environ) for s in specs)
    assert plm["PGNL_LLM_PROVIDER"] == "none" and plm["PGNL_LLM_BASE_URL"] == ""
    assert (
        url["PGNL_LLM_PROVIDER"] == "openai"
        and url["PGNL_LLM_BASE_URL"] == environ["PGNL_LLM_BASE_URL"]
    )
    assert alone["PGNL_LLM_PROVIDER"] == full["PGNL_LLM_PROVIDER"] == "embedded"
    assert alone["PGNL_LLM_BASE_URL"] == ""
    assert alone["PGNL_LLM_EMBEDDED_MODEL"] == "qwen2.5-coder-0.5b"
    assert alone["PGNL_LLM_MODEL_PATH"] == ""
    assert alone["PGNL_PIPELINE_MAX_CANDIDATES"] == "0"
    assert alone["PGNL_PIPELINE_FEEDBACK_ROUNDS"] == "0"
    assert float(alone["PGNL_CALIBRATION_THRESHOLD"]) > 1.0  # no similarity reaches it
    assert "PGNL_PIPELINE_MAX_CANDIDATES" not in full
    assert mine["PGNL_LLM_MODEL_PATH"] == "/models/mine.gguf"
    # the settings the proxy will read from it
    settings = config.load(environ=alone)
    assert settings.pipeline.max_candidates == 0 and settings.llm.unguided
    assert mode_specs(["plm", "url"], [], {})[-1].name == "PLM-only"  # no URL: no LLM mode
    with pytest.raises(ValueError, match="packaged"):
        model_environment("qwen-9000")


def test_the_twin_modes_without_the_stage_and_with_the_frequent_examples() -> None:
    specs = mode_specs(
        ["plm", "full"],
        ["qwen2.5-coder-1.5b"],
        {},
        without_ambiguity=True,
        frequent_examples=True,
    )
    assert [s.name for s in specs] == [
        "PLM-only",
        "PLM-only, no ambiguity stage",
        "full qwen2.5-coder-1.5b",
        "full qwen2.5-coder-1.5b, frequent examples",
        "full qwen2.5-coder-1.5b, no ambiguity stage",
    ]
    plm, bare, full, frequent, without = (
        config.load(environ=mode_environment(s, {})) for s in specs
    )
    assert plm.ambiguity.enabled and plm.ambiguity.history_records > 0
    # without the stage is without the query history too
    assert not bare.ambiguity.enabled and bare.ambiguity.history_records == 0
    assert not without.ambiguity.enabled and without.ambiguity.history_records == 0
    assert full.ambiguity.history_examples_by == "nearest"  # the default
    assert frequent.ambiguity.history_examples_by == "frequent"


def test_child_process_and_its_memory(tmp_path: Path) -> None:
    def process(pid: int, ppid: int, cmdline: bytes, status: str = "") -> None:
        folder = tmp_path / str(pid)
        folder.mkdir()
        (folder / "stat").write_text(f"{pid} (py thon) S {ppid} {pid} 0 0")
        (folder / "cmdline").write_bytes(cmdline)
        (folder / "status").write_text(status)

    process(10, 1, b"python\0-m\0proxy\0serve")
    process(11, 99, b"python\0-m\0llama_cpp.server\0--model\0a.gguf")  # another's child
    process(12, 10, b"python\0-m\0llama_cpp.server\0--model\0b.gguf", "Name:\tpython\n")
    process(
        13,
        10,
        b"python\0-m\0llama_cpp.server",
        "VmHWM:\t  900000 kB\nVmRSS:\t  614400 kB\nRssFile:\t  512000 kB\n",
    )
    (tmp_path / "self").mkdir()
    assert child_process(10, "llama_cpp.server", tmp_path) == 12
    assert child_process(10, "uvicorn", tmp_path) is None
    assert process_memory(12, tmp_path) is None  # no VmRSS line
    assert process_memory(13, tmp_path) == Memory(600.0, 900000 / 1024, 500.0)
    assert process_memory(14, tmp_path) is None


def test_logged_answer() -> None:
    trace = [
        dict(zip(TRACE_COLUMNS, ("schema", None, None, "", "2 tables", 1.5), strict=True)),
        dict(
            zip(
                TRACE_COLUMNS,
                ("complete", 0, None, "10 prompt + 2 completion tokens", "LLM", 800.0),
                strict=True,
            )
        ),
        dict(zip(TRACE_COLUMNS, ("check", 0, None, "", "3 rows", 2.0), strict=True)),
    ]
    timings = {"schema": 1.5, "complete": 800.0, "check": 2.0, "total": 810.0}
    question = "How many  singers\tare there?"
    sql = "SELECT\n count(*) FROM singer"
    row = ("How many singers are there?", "nl", sql, trace, timings, [sql])
    logged = logged_answer(Reply(rows=[row]), question)
    assert logged.sql == "SELECT count(*) FROM singer"
    assert logged.chosen == 0 and llm_usage(logged.trace) == LLMUsage(1, 10, 2)
    assert logged.stages == {"schema": 1.5, "complete": 800.0, "check": 2.0}
    # jsonb as text is read too
    text = (*row[:3], json.dumps(trace), json.dumps(timings), json.dumps([sql]))
    assert logged_answer(Reply(rows=[text]), question) == logged
    for other in (
        ("Another question?", *row[1:]),
        (row[0], "nl explain", *row[2:]),  # a warm-up or another directive's record
    ):
        with pytest.raises(LookupError):
            logged_answer(Reply(rows=[other]), question)
    with pytest.raises(LookupError):
        logged_answer(Reply(error="42P01: relation nl.query_log does not exist"), question)


def test_candidate_of_sql() -> None:
    # 1 answers without the question's value (partial), 2 returns nothing, 3 and 4 answer
    # partially too: the pipeline chooses 1, the first partial answer; the trace alone says 4
    trace = _trace(
        ("complete", 1, "LLM"),
        ("check", 1, "2 rows"),
        ("calibrate", 1, "literals as found"),
        ("complete", 0, "LLM, without the sketch"),
        ("check", 0, "error 42601 (syntax)"),
        ("complete", 0, "LLM, after the error"),
        ("check", 0, "0 rows"),
        ("complete", 2, "same SQL as an earlier candidate"),
        ("complete", 3, "PLM"),
        ("check", 3, "0 rows"),
        ("calibrate", 3, "1 literals corrected"),
        ("execute", 3, "4 rows"),
        ("complete", 4, "PLM"),
        ("check", 4, "1 rows"),
    )
    candidates = ["SELECT a", "SELEC b", "SELECT b", "SELECT c", "SELECT c'", "SELECT d"]
    assert chosen_candidate(trace) == 4
    assert candidate_of_sql(trace, candidates, "SELECT a") == 1
    assert candidate_of_sql(trace, candidates, "SELECT  b") == 0  # its corrected query
    assert candidate_of_sql(trace, candidates, "SELECT c'") == 3  # calibrated
    assert candidate_of_sql(trace, candidates, "SELECT d") == 4
    assert candidate_of_sql(trace, candidates, None) is None
    assert candidate_of_sql(trace, candidates[:-1], "SELECT a") is None  # do not line up
    # a duplicate is not run: the first that wrote it
    assert candidate_of_sql(trace, ["X", "Y", "Z", "X", "W", "V"], "X") == 1


# A run without PostgreSQL or a proxy: gold rows and answers made up, the real `ask_all`.

_QUESTIONS = [
    (i, f"db{i % 3}", f"question {i}?", "SELECT name FROM singer", level)
    for i, level in zip(range(12), ["easy", "medium", "hard", "extra"] * 3, strict=True)
]


class _Gold:
    def __init__(self) -> None:
        self.failures: list[tuple[Item, str]] = []
        self.disagreements: list[Item] = []

    def rows(self, item: Item, *, ordered: bool) -> list[tuple[object, ...]] | None:
        if item.number == 5:  # fails everywhere: not judged
            self.failures.append((item, "fails on PostgreSQL; fails on SQLite too"))
            return None
        if item.number == 7:
            self.disagreements.append(item)
        return [(0,)] if item.number == 3 else [(item.number,)]


def _answer(mode: Mode, item: Item) -> Asked:
    n = item.number
    embedded = mode.kind in ("alone", "full")
    return Asked(
        rows=1,
        latency_ms=10.0 * n + (1000.0 if embedded else 0.0) + 0.123,
        timed_out=n == 9 and embedded,
        error="timeout after 120 s" if n == 9 and embedded else "",
        sql=f"SELECT {n}",
        notices=["pgnl: fell back"] if n == 4 else [],
        stages={"sketch": 1.5 + n, "complete": 700.25 * embedded, "check": 0.5},
        chosen=0 if (embedded and n % 2) else (None if n == 11 else 1 + n % 3),
        match=n % 3 != 0,
        same_order=n % 3 != 0,
        llm_requests=2 * embedded,
        prompt_tokens=(400 + n) * embedded,
        completion_tokens=(20 + n) * embedded,
        source="query log",
        elapsed_ms=20.0 * n + 0.5,
        restarted=n == 9 and embedded,
        internal_errors=["ERROR boom"] if (n == 10 and embedded) else [],
    )


def _run(checkpoint: Path, resume: bool) -> tuple[Run, list[tuple[str, int]], list[Mode]]:
    items = [Item(n, db, q, gold, level, gold) for n, db, q, gold, level in _QUESTIONS]  # type: ignore[arg-type]
    modes = [
        Mode("PLM-only", "plm", "no LLM"),
        Mode("LLM alone m", "alone", "the LLM alone", 120.0),
        Mode("full m", "full", "the whole pipeline", 120.0),
    ]
    resumed = read_checkpoint(checkpoint) if resume else Resumed()
    for mode in modes:
        mode.memory += resumed.memory.get(mode.name, [])
    run = Run(items, 1034, Counter({"wta_1": 62}), modes)
    asked: list[tuple[str, int]] = []

    async def asker(mode: Mode, item: Item, rows: object, ordered: bool) -> Asked:
        asked.append((mode.name, item.number))
        return _answer(mode, item)

    writer = Checkpoint(checkpoint)
    try:
        asyncio.run(ask_all(run, _Gold(), None, asker, resumed=resumed, checkpoint=writer))
        for mode in modes:
            if mode.kind != "plm" and mode.asked_now:
                reading = Memory(600.0, 650.0, 400.0)  # a real session reads its own
                mode.memory.append(reading)
                writer.memory(mode.name, reading)
    finally:
        writer.close()
    return run, asked, modes


def test_a_resumed_run_reports_as_a_run_in_one_go(tmp_path: Path) -> None:
    whole = tmp_path / "whole.jsonl"
    single, asked, _ = _run(whole, resume=False)
    assert len(asked) == 11 * 3  # question 5 is not judged, so never asked
    expected = report(single)

    lines = whole.read_text().splitlines()
    assert len(lines) == 11 * 3 + 2  # and the two LLM modes' memory
    part = tmp_path / "part.jsonl"
    # interrupted after 13 answers, while writing the 14th
    part.write_text("\n".join(lines[:13]) + "\n" + lines[13][:25])
    first, asked_first, _ = _run(part, resume=True)  # resumed, and finished
    assert set(asked_first) == {
        (json.loads(line)["mode"], json.loads(line)["number"]) for line in lines[13:-2]
    }
    resumed, asked_again, _ = _run(part, resume=True)  # everything from the file
    assert asked_again == []
    assert report(first) == report(resumed)
    # the same report as the run in one go
    assert report(resumed) == expected
    # the report holds what the new rows say (so that the comparison means something)
    assert "| full m | 11 | 2.00 | 406 | 26 | 600 | 400 | 650 |" in expected
    assert "| 0: the LLM's own query | - | 5 (3) | 5 (3) |" in expected
    assert LLM_OWN_QUERY in expected
    assert "- full m: 1 timeouts, 1 restarts, 1 internal errors logged (first: ERROR boom)" in (
        expected
    )
    assert "Dominant stage: **complete**" in expected


def test_a_checkpoint_of_another_dev_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.jsonl"
    item = Item(0, "db0", "another question?", "SELECT 1", "easy", "SELECT 1")
    path.write_text(json.dumps(record_of("PLM-only", item, Asked(match=True))) + "\n")
    with pytest.raises(BenchError, match=r"another dev\.json"):
        _run(path, resume=True)
