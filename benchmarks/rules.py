"""What each PLM-only rule wins on Spider dev: every question asked once with all the rules, the
rules each one fired recorded, then, for each rule that fired, the questions it fired on asked
again with that rule off ([pipeline] disabled_rules), in one run on one server.

    python -m benchmarks.rules [--dsn ADMIN_DSN] [--db DB_ID ...] [--limit N]
        [--rule NAME ...] [--details DIR]

Both passes are `benchmarks.execution_accuracy` in PLM-only mode, through a real `pgnl serve`,
on one PostgreSQL (a throwaway embedded server, or the one `--dsn` names), so the Spider
databases are loaded and indexed once. A rule "fires" on a question when it changed one of the
question's sketches or completions (the trace's "rules:" notes: `rules.applying`); a rule that
fires nowhere cannot change an answer and is not asked again. The report (Markdown, stdout), a
row per rule in the order they apply: the questions it fired on, how many of them are right
with it and without it, and the questions it wins (right only with it) and loses (right only
without it). A rule that wins nothing and loses something is a candidate for deletion; one that
wins nothing and loses nothing changes no answer here. `--details DIR` keeps each pass's
`--details` file (all.jsonl, then one a rule); progress goes to stderr.

Asking a question again can give another answer with nothing changed (ties among equally
near values in the value index): won and lost count such flips too, so read a rule's one or
two won or lost questions in the `--details` files before deleting it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks import execution_accuracy
from benchmarks.execution_accuracy import progress, start_postgres
from benchmarks.proxy_overhead import workspace
from benchmarks.spider_pg import DEV_DATABASES
from proxy.nl2sql.rules import RULES, validate

DISABLED = "PGNL_PIPELINE_DISABLED_RULES"


@dataclass(frozen=True)
class Outcome:
    """One question's answer in one pass."""

    match: bool
    sql: str
    rules: tuple[str, ...]


def read_details(path: Path) -> dict[int, Outcome]:
    """A `--details` file of a PLM-only pass, by dev number."""
    outcomes: dict[int, Outcome] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        outcomes[int(record["number"])] = Outcome(
            bool(record["match"]), str(record.get("sql", "")), tuple(record.get("rules", ()))
        )
    return outcomes


def ask(admin_dsn: str, details: Path, chosen: Sequence[str], disabled: str = "") -> int:
    """One PLM-only pass of `benchmarks.execution_accuracy` with `disabled` rules off; its
    report goes to stderr (this program's stdout is the rules' report)."""
    argv = ["--dsn", admin_dsn, "--modes", "plm", "--no-attribution", "--details", str(details)]
    argv += chosen
    previous = os.environ.get(DISABLED)
    os.environ[DISABLED] = disabled
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return execution_accuracy.main(argv)
    finally:
        if previous is None:
            del os.environ[DISABLED]
        else:
            os.environ[DISABLED] = previous


@dataclass(frozen=True)
class Row:
    name: str
    stage: str
    fired: int
    right_with: int
    right_without: int
    won: list[int]
    lost: list[int]


def compare(name: str, stage: str, all_on: dict[int, Outcome], off: dict[int, Outcome]) -> Row:
    numbers = sorted(off)
    return Row(
        name,
        stage,
        len(numbers),
        sum(all_on[n].match for n in numbers),
        sum(off[n].match for n in numbers),
        [n for n in numbers if all_on[n].match and not off[n].match],
        [n for n in numbers if off[n].match and not all_on[n].match],
    )


def report(rows: Sequence[Row], all_on: dict[int, Outcome], unfired: Sequence[str]) -> str:
    right = sum(o.match for o in all_on.values())
    lines = [
        f"# PLM-only rules on Spider dev: {len(all_on)} questions, {right} right with every rule",
        "",
        "| stage | rule | fired on | right with it | right without it | won | lost |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        won = ", ".join(map(str, row.won[:8])) + (" ..." if len(row.won) > 8 else "")
        lost = ", ".join(map(str, row.lost[:8])) + (" ..." if len(row.lost) > 8 else "")
        lines.append(
            f"| {row.stage} | `{row.name}` | {row.fired} | {row.right_with} | "
            f"{row.right_without} | {len(row.won)}{': ' + won if won else ''} | "
            f"{len(row.lost)}{': ' + lost if lost else ''} |"
        )
    idle = [r.name for r in rows if not r.won and not r.lost]
    losing = [r.name for r in rows if not r.won and r.lost]
    lines += [
        "",
        "Won and lost list dev.json numbers (`--details` files hold their SQL).",
        f"- fired nowhere: {', '.join(unfired) or 'none'}",
        f"- fired, changed no answer: {', '.join(idle) or 'none'}",
        f"- win nothing, lose something: {', '.join(losing) or 'none'}",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rules", description=__doc__)
    parser.add_argument("--dsn", help="admin DSN (default: a throwaway embedded server)")
    parser.add_argument("--db", action="append", choices=DEV_DATABASES, metavar="DB_ID")
    parser.add_argument("--limit", type=int, default=0, help="the first N questions (0: all)")
    parser.add_argument(
        "--rule", action="append", default=[], help="only this rule (repeatable; default: all)"
    )
    parser.add_argument("--details", type=Path, help="a folder to keep each pass's details in")
    args = parser.parse_args(argv)
    try:
        validate(args.rule)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    chosen = [*(f"--db={db}" for db in args.db or ()), f"--limit={args.limit}"]
    with workspace() as base, contextlib.ExitStack() as stack:
        folder = args.details or Path(tempfile.mkdtemp(dir=base))
        folder.mkdir(parents=True, exist_ok=True)
        admin_dsn = args.dsn or start_postgres(base, stack)
        progress("pass 1: every question, every rule")
        if ask(admin_dsn, folder / "all.jsonl", chosen) != 0:
            return 1
        all_on = read_details(folder / "all.jsonl")
        rows: list[Row] = []
        unfired: list[str] = []
        wanted = [r for r in RULES if not args.rule or r.name in args.rule]
        for number, rule in enumerate(wanted, start=1):
            fired = [n for n, o in all_on.items() if rule.name in o.rules]
            if not fired:
                unfired.append(rule.name)
                continue
            progress(f"rule {number}/{len(wanted)} {rule.name}: {len(fired)} questions, off")
            details = folder / f"{rule.name}.jsonl"
            numbers = ",".join(map(str, sorted(fired)))
            if ask(admin_dsn, details, [f"--numbers={numbers}"], disabled=rule.name) != 0:
                return 1
            rows.append(compare(rule.name, rule.stage, all_on, read_details(details)))
        print(report(rows, all_on, unfired), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
