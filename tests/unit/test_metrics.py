"""The metrics' Prometheus text exposition, parsed back line by line: HELP and TYPE before each
family's samples, names, labels (escaped), values; histograms cumulative with +Inf, _sum and
_count; what the proxy's counters, the questions' record and the LLM client's queue become."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import pytest

from proxy import metrics
from proxy.config import LLMSettings
from proxy.metrics import Family, Sample
from proxy.nl2sql.llm import LLMCompleter, LLMUnavailable
from proxy.nl2sql.prompts import Message
from tests.fix_llm import Answer, ScriptedLLM, Stall
from tests.prometheus import parse


def test_families_come_back_with_help_type_labels_and_values() -> None:
    text = metrics.exposition(
        [
            Family(
                "t_things_total",
                "counter",
                'Things.\nWith "quotes" and a \\ backslash.',
                (
                    Sample("", (("kind", 'a "b"\nc\\d'),), 3),
                    Sample("", (("kind", "plain"),), 0),
                ),
            ),
            Family("t_level", "gauge", "A level.", (Sample("", (), 2.5),)),
        ]
    )
    parsed = parse(text)
    assert parsed.type == {"t_things_total": "counter", "t_level": "gauge"}
    assert parsed.help["t_things_total"] == 'Things.\nWith "quotes" and a \\ backslash.'
    assert parsed.value("t_things_total", kind='a "b"\nc\\d') == 3
    assert parsed.value("t_things_total", kind="plain") == 0
    assert parsed.value("t_level") == 2.5
    assert 't_things_total{kind="plain"} 0\n' in text  # integers without a point


def test_format_value() -> None:
    assert metrics.format_value(3) == "3"
    assert metrics.format_value(3.0) == "3"
    assert metrics.format_value(0.25) == "0.25"
    assert metrics.format_value(math.inf) == "+Inf"
    assert metrics.format_value(math.nan) == "NaN"


def test_questions_count_outcomes_and_time_stages_in_cumulative_buckets() -> None:
    questions = metrics.Questions()
    questions.record("answered", "", {"schema": 2.0, "sketch": 40.0, "total": 60.0})
    questions.record("answered", "", {"schema": 0.5, "sketch": 300.0, "total": 320.0})
    questions.record("error", "NL001", {"schema": 1.0, "total": 5.0})
    questions.record("error", "58000", {})
    questions.record("refused", "", {"intent": 0.1, "total": 0.2})
    parsed = parse(metrics.exposition(questions.families()))
    assert parsed.type["pgnl_questions_total"] == "counter"
    assert parsed.value("pgnl_questions_total", outcome="answered") == 2
    assert parsed.value("pgnl_questions_total", outcome="fallback") == 0  # there from the start
    assert parsed.value("pgnl_questions_total", outcome="refused") == 1
    assert parsed.value("pgnl_questions_total", outcome="error", sqlstate="NL001") == 1
    assert parsed.value("pgnl_questions_total", outcome="error", sqlstate="58000") == 1
    stage = "pgnl_question_stage_seconds"
    assert parsed.type[stage] == "histogram"
    assert parsed.value(f"{stage}_count", stage="schema") == 3
    assert parsed.value(f"{stage}_count", stage="sketch") == 2
    assert parsed.value(f"{stage}_sum", stage="sketch") == pytest.approx(0.34)
    assert parsed.value(f"{stage}_bucket", stage="sketch", le="0.05") == 1
    assert parsed.value(f"{stage}_bucket", stage="sketch", le="0.25") == 1
    assert parsed.value(f"{stage}_bucket", stage="sketch", le="0.5") == 2
    assert parsed.value(f"{stage}_bucket", stage="sketch", le="+Inf") == 2
    buckets = [
        (float(ls["le"].replace("+Inf", "inf")), v)
        for n, ls, v in parsed.samples
        if n == f"{stage}_bucket" and ls["stage"] == "schema"
    ]
    assert [b for b, _ in buckets] == sorted(b for b, _ in buckets)
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    assert not any(ls.get("stage") == "total" for _, ls, _ in parsed.samples)
    assert parsed.value("pgnl_question_seconds_count") == 4
    assert parsed.value("pgnl_question_seconds_sum") == pytest.approx(0.3852)


def test_proxy_counters_add_the_open_connections_traffic_to_the_closed_ones() -> None:
    counters = metrics.ProxyCounters(accepted=5, refused=1)
    counters.closed_traffic.add(metrics.Traffic(10, 100, 20, 2000))
    live = metrics.Traffic(1, 14, 4, 66)
    queue = metrics.LLMQueue(waiting=2, in_flight=1)
    parsed = parse(metrics.exposition([*counters.families(3, live), *queue.families()]))
    assert parsed.value("pgnl_client_connections_open") == 3
    assert parsed.value("pgnl_client_connections_accepted_total") == 5
    assert parsed.value("pgnl_client_connections_refused_total") == 1
    messages, octets = "pgnl_relayed_messages_total", "pgnl_relayed_bytes_total"
    assert parsed.value(messages, direction="client_to_server") == 11
    assert parsed.value(messages, direction="server_to_client") == 24
    assert parsed.value(octets, direction="client_to_server") == 114
    assert parsed.value(octets, direction="server_to_client") == 2066
    assert parsed.value("pgnl_llm_queue_depth") == 2
    assert parsed.value("pgnl_llm_requests_in_flight") == 1
    assert parsed.type["pgnl_llm_queue_depth"] == "gauge"


def test_a_bad_sample_line_is_caught_by_the_parser() -> None:
    """The parser the other tests trust refuses what Prometheus would."""
    with pytest.raises(AssertionError):
        parse("# HELP x X.\n# TYPE x gauge\nx{a=b} 1\n")
    with pytest.raises(AssertionError):
        parse("# HELP x X.\n# TYPE x gauge\ny 1\n")


def test_the_llm_queue_counts_requests_waiting_for_the_model_and_in_flight(
    llm_server: ScriptedLLM,
) -> None:
    """An LLM that answers one request at a time (the embedded one): a second request waits
    for it, and the gauges say so; one that gives up waiting leaves the queue too."""
    llm_server.script(
        Stall(0.6, then=Answer("SELECT 1")), "SELECT 2", Stall(1.0, then=Answer("SELECT 3"))
    )
    queue = metrics.LLM
    base = (queue.waiting, queue.in_flight)
    seen: list[tuple[int, int]] = []

    def now() -> tuple[int, int]:
        return (queue.waiting - base[0], queue.in_flight - base[1])

    async def run() -> list[str]:
        settings = LLMSettings(base_url=llm_server.base_url, model="m", deadline_s=10.0)
        async with LLMCompleter(settings, environ={}, concurrency=1) as completer:
            ask = completer.complete
            first = asyncio.create_task(ask([Message("user", "one")]))
            second = asyncio.create_task(ask([Message("user", "two")]))
            await asyncio.sleep(0.3)
            seen.append(now())
            answers = list(await asyncio.gather(first, second))
            seen.append(now())
            third = asyncio.create_task(ask([Message("user", "three")]))  # 1 s
            await asyncio.sleep(0.1)
            completer.settings = replace(settings, deadline_s=0.3)
            with pytest.raises(LLMUnavailable, match="busy with other questions"):
                await ask([Message("user", "four")])
            seen.append(now())
            answers.append(await third)
            seen.append(now())
            return answers

    assert asyncio.run(run()) == ["SELECT 1", "SELECT 2", "SELECT 3"]
    assert seen == [(1, 1), (0, 0), (0, 1), (0, 0)]
