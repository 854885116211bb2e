"""What the embedded LLM costs on this machine, and what its KV-cache prefix reuse saves.

    python -m benchmarks.llm_cost [--model qwen2.5-coder-1.5b] [--model qwen2.5-coder-0.5b]
        [--databases 4] [--questions 3] [--seed 0]

For each model: the embedded server is started as `pgnl serve` starts it (`EmbeddedLLM`), and
Spider dev questions of a few databases (`--databases` drawn at random, `--questions` each) are
asked with the pipeline's own unguided prompt (`prompts.unguided_completion`: instructions,
schema, question). Each question is asked twice in one run: first all of them in turn,
database by database as a user's questions come, so that the server reuses the KV cache of
the previous prompt's common prefix (the instructions and, after a database's first question,
its schema); then each behind a beginning of its own (its number before the instructions), so
that nothing is reused (the server keeps only the last prompt's state).
Printed per model: load time, resident memory of the server process (VmRSS) after the run, p50
latency of both forms and their ratio, and p50 prompt and completion tokens. Progress goes to
stderr.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.spider_pg import spider_dir
from proxy.config import LLMSettings
from proxy.llm_server import EmbeddedLLM
from proxy.nl2sql.llm import BlockingLLM, LLMError
from proxy.nl2sql.prompts import Message, unguided_completion
from proxy.nl2sql.schema import load_spider_schemas


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Timed:
    seconds: float
    prompt_tokens: int
    completion_tokens: int


def resident_mib(pid: int) -> float:
    """VmRSS of a process, in MiB (0 where /proc does not say)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def uncached(messages: list[Message], number: int) -> list[Message]:
    """The same prompt behind a beginning of its own (`number`), so that no prefix of it is in
    the cache: the server keeps the last prompt's state only."""
    system = messages[0]
    return [replace(system, content=f"{number}. {system.content}"), *messages[1:]]


def timed(llm: BlockingLLM, messages: list[Message]) -> Timed | None:
    start = time.perf_counter()
    try:
        done = llm.complete(messages)
    except LLMError as exc:
        progress(f"  no answer: {exc}")
        return None
    return Timed(time.perf_counter() - start, done.prompt_tokens, done.completion_tokens)


def questions_of(databases: int, per_database: int, seed: int) -> list[tuple[str, str]]:
    dev = json.loads((spider_dir() / "dev.json").read_text())
    by_db: dict[str, list[str]] = {}
    for item in dev:
        by_db.setdefault(item["db_id"], []).append(item["question"])
    chooser = random.Random(seed)
    chosen = chooser.sample(sorted(by_db), databases)
    return [(db, q) for db in chosen for q in chooser.sample(by_db[db], per_database)]


def measure(model: str, asked: Sequence[tuple[str, str]]) -> dict[str, float]:
    schemas = load_spider_schemas(spider_dir() / "tables.json")
    settings = LLMSettings(provider="embedded", embedded_model=model)
    started = time.perf_counter()
    server = EmbeddedLLM(settings)
    client = server.start()
    loaded = time.perf_counter() - started
    llm = None
    try:
        loop_llm = BlockingLLM.start(replace(client, provider="openai"))
        assert loop_llm is not None
        llm = loop_llm
        prompts = [unguided_completion(question, schemas[db]) for db, question in asked]
        # First every question as a user's come, database by database, so that each reuses the
        # previous prompt's prefix; then every question again behind a beginning of its own.
        warm = [timed(llm, messages) for messages in prompts]
        progress(f"[{model}] {len(asked)} questions asked in turn (prefix reused)")
        cold = [timed(llm, uncached(messages, n)) for n, messages in enumerate(prompts, 1)]
        progress(f"[{model}] {len(asked)} questions asked alone (nothing reused)")
        pairs = [(c, w) for c, w in zip(cold, warm, strict=True) if c and w]
        fresh = [c for c, _ in pairs]
        reused = [w for _, w in pairs]
        rss = resident_mib(server.pid)
    finally:
        if llm is not None:
            llm.close()
        server.stop()
    return {
        "load_s": loaded,
        "rss_mib": rss,
        "fresh_p50_s": statistics.median(t.seconds for t in fresh),
        "reused_p50_s": statistics.median(t.seconds for t in reused),
        "prompt_tokens_p50": statistics.median(t.prompt_tokens for t in fresh),
        "completion_tokens_p50": statistics.median(t.completion_tokens for t in fresh),
        "answered": len(fresh),
    }


def report(results: dict[str, dict[str, float]], asked: int) -> str:
    lines = [
        f"Embedded LLM cost, {asked} Spider dev questions per model (each asked twice):",
        "",
        "| model | load s | RSS MiB | p50 s, nothing reused | p50 s, prefix reused | ratio "
        "| prompt tokens p50 | completion tokens p50 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, r in results.items():
        ratio = r["reused_p50_s"] / r["fresh_p50_s"] if r["fresh_p50_s"] else float("nan")
        lines.append(
            f"| {model} | {r['load_s']:.1f} | {r['rss_mib']:.0f} | {r['fresh_p50_s']:.2f} "
            f"| {r['reused_p50_s']:.2f} | {ratio:.2f} | {r['prompt_tokens_p50']:.0f} "
            f"| {r['completion_tokens_p50']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.llm_cost", description=__doc__)
    parser.add_argument("--model", action="append", help="packaged model name (repeatable)")
    parser.add_argument("--databases", type=int, default=4)
    parser.add_argument("--questions", type=int, default=3, help="questions per database")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    models = args.model or [LLMSettings().embedded_model]
    asked = questions_of(args.databases, args.questions, args.seed)
    results = {model: measure(model, asked) for model in models}
    print(report(results, len(asked)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
