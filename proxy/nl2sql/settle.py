"""The ambiguity stage: the chosen answer (the seed) against the question's other readings,
settled by probing the data (Soma-SQL).

The other readings are candidates that also answer ([ambiguity] readings of them: the next
ranked sketches completed PLM-only and, under [llm] selection `llm-first`, the sketch models'
answer beside the LLM's own query). One that returns the same rows agrees, and settles nothing.
One that returns other rows is compared part by part (`ambiguity.dimensions`), each dimension
probed (`probes`), within [ambiguity] probe_budget_s. Then:

- the seed is refuted on some dimension and the other reading on none: the seed is repaired
  along the refuted value dimensions (its literal replaced by the other reading's, on the same
  column) when those are all it got wrong and the repair returns values, else the other
  reading is chosen;
- otherwise, where a reading the data leaves open matches the database's query history
  (`history.support`) better than the seed by [ambiguity] history_margin, it is chosen: the
  users of the database write their queries that way;
- otherwise the seed stands; where a reading differs and nothing refuted it, the dimension
  stays open, in the trace; a NOTICE names that reading with its SQL where the user can tell
  the readings apart by a value, or where it is the other model's answer (`_worth_a_notice`).

Every dimension and probe is a row of the trace (stage `ambiguity`: `-- nl explain:`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pglast import ast, parse_sql
from pglast.parser import ParseError
from pglast.stream import RawStream

from proxy.config import AmbiguitySettings
from proxy.nl2sql.agreement import same_result
from proxy.nl2sql.ambiguity import VALUE, Dimension, dimensions
from proxy.nl2sql.budget import Budget, OutOfTime
from proxy.nl2sql.calibrate import nodes_of
from proxy.nl2sql.candidate import ANSWERED, Candidate, Chosen, has_values
from proxy.nl2sql.database import QueryFailed, connection_lost, sqlstate
from proxy.nl2sql.execution import Executor
from proxy.nl2sql.history import Retrieved, support
from proxy.nl2sql.probes import OTHER, SEED, Evidence, Prober
from proxy.nl2sql.question import Question, Stage
from proxy.nl2sql.readings import Parts, Predicate, read
from proxy.nl2sql.trace import one_line

NOTICE_READINGS = 2  # other readings a NOTICE names at most
# The outcome of the stage's one trace row where no reading returns other rows than the seed:
ALL_AGREEING = "other readings, all agreeing"  # after the count of them
NO_OTHER_READING = "no other reading answers"


@dataclass
class _Comparison:
    other: Candidate
    parts: Parts
    dimensions: list[Dimension]
    evidence: list[Evidence]

    @property
    def seed_refuted(self) -> bool:
        return any(e.favours == OTHER for e in self.evidence)

    @property
    def other_refuted(self) -> bool:
        return any(e.favours == SEED for e in self.evidence)


class Ambiguity(Stage):
    """One question's ambiguity stage."""

    def __init__(
        self,
        question: Question,
        executor: Executor,
        settings: AmbiguitySettings,
        history: Sequence[Retrieved] = (),
    ) -> None:
        super().__init__(question)
        self.executor = executor
        self.settings = settings
        self.history = history  # the query history's records nearest the question
        self.budget = Budget(settings.probe_budget_s)
        self.prober = Prober(self.schema, self._run)
        self.comparisons: list[_Comparison] = []
        self.independent: Candidate | None = None  # the sketch models' answer, beside the LLM's

    def settle(
        self, chosen: Chosen, others: Sequence[Candidate], independent: Candidate | None = None
    ) -> Chosen:
        """The answer after weighing `chosen` against the other readings (see the module
        docstring); `independent` is the one of them that another model wrote (the sketch
        models' answer where the LLM's own query is `chosen`)."""
        self.independent = independent
        if chosen.outcome != ANSWERED:
            return chosen
        seed = chosen.candidate
        seed_parts = read(seed.sql, self.schema)
        differing = [o for o in others if o is not seed and not same_result(o.rows, seed.rows)]
        agreeing = len(others) - len(differing)
        if seed_parts is None or not differing:
            with self.trace.stage("ambiguity", seed) as step:
                step.outcome = f"{len(others)} {ALL_AGREEING}" if others else NO_OTHER_READING
            return chosen
        for other in differing:
            other_parts = read(other.sql, self.schema)
            if other_parts is None:
                continue
            try:
                comparison = self._compare(seed, seed_parts, other, other_parts)
            except OutOfTime:
                break
            self.comparisons.append(comparison)
            if comparison.seed_refuted and not comparison.other_refuted:
                return self._replace(chosen, comparison)
        preferred = self._by_history(chosen, seed_parts)
        if preferred is not None:
            return preferred
        return self._keep(chosen, agreeing)

    # ------------------------------------------------------------------ comparing

    def _compare(
        self, seed: Candidate, seed_parts: Parts, other: Candidate, other_parts: Parts
    ) -> _Comparison:
        found = dimensions(seed_parts, other_parts)
        evidence: list[Evidence] = []
        for dimension in found:
            with self.trace.stage("ambiguity", other) as step:
                gathered = self.prober.probe(
                    dimension, seed_parts, other_parts, seed.rows, other.rows
                )
                evidence.extend(gathered)
                step.note = "; ".join(e.finding for e in gathered)
                step.outcome = f"{dimension.text()}: " + _verdict(gathered, seed, other)
        degenerate = self.prober.degenerate(seed.rows, other.rows)
        if degenerate is not None:
            evidence.append(degenerate)
            with self.trace.stage("ambiguity", other) as step:
                step.note = degenerate.finding
                step.outcome = "result: " + _verdict([degenerate], seed, other)
        return _Comparison(other, other_parts, found, evidence)

    def _run(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        """One probe, within the probe budget and the question's (OutOfTime once either is
        spent); QueryFailed on an error of the query, a lost connection propagates."""
        timeout = min(
            self.budget.timeout(self.executor.settings.statement_timeout_s),
            self.executor.budget.timeout(self.executor.settings.statement_timeout_s),
        )
        try:
            return self.executor.db.fetch(sql, params, timeout_s=timeout)
        except Exception as exc:
            state = sqlstate(exc)
            if connection_lost(state):
                raise
            raise QueryFailed(state or "", one_line(str(exc))) from exc

    # ------------------------------------------------------------------ choosing

    def _replace(self, chosen: Chosen, comparison: _Comparison) -> Chosen:
        seed, other = chosen.candidate, comparison.other
        refuted = [e for e in comparison.evidence if e.favours == OTHER]
        reasons = "; ".join(e.finding for e in refuted)
        repaired = self._repair(seed, comparison)
        with self.trace.stage("ambiguity", repaired or other) as step:
            step.note = reasons
            if repaired is not None:
                step.outcome = f"the seed (candidate {seed.number}) repaired along " + ", ".join(
                    sorted({e.dimension.name for e in refuted})
                )
            else:
                step.outcome = (
                    f"candidate {other.number} instead of the seed (candidate {seed.number}), "
                    "whose reading the data refutes"
                )
        return Chosen(repaired or other, ANSWERED, chosen.notice)

    def _repair(self, seed: Candidate, comparison: _Comparison) -> Candidate | None:
        """The seed with the other reading's literals where the evidence refuted the seed's
        value on the same column, when that is all the evidence refuted and the repaired query
        returns values; else None."""
        refuted = [e for e in comparison.evidence if e.favours == OTHER]
        swaps: list[tuple[Predicate, Predicate]] = []
        for e in refuted:
            d = e.dimension
            if (
                d.kind != VALUE
                or d.name != "value"
                or d.seed_predicate is None
                or d.other_predicate is None
            ):
                return None
            swaps.append((d.seed_predicate, d.other_predicate))
        if not swaps or len(comparison.dimensions) == len(swaps):
            return None  # nothing to repair, or the other reading is the repair itself
        sql = _with_literals(seed.sql, swaps)
        if sql is None:
            return None
        repaired = Candidate(seed.number, seed.sketch, sql=sql, conversation=seed.conversation)
        repaired.unguided = seed.unguided
        self.trace.tried(sql)
        try:
            ran = self.executor.check(repaired)
        except OutOfTime:
            return None
        return repaired if ran and has_values(repaired.rows) else None

    def _by_history(self, chosen: Chosen, seed_parts: Parts) -> Chosen | None:
        """The open reading the query history matches best, where it matches it better than
        the seed by [ambiguity] history_margin; None otherwise."""
        if not self.history:
            return None
        seed = chosen.candidate
        seed_support, _ = support(seed_parts, self.history)
        best: tuple[float, _Comparison, Retrieved] | None = None
        for comparison in self.comparisons:
            if comparison.other_refuted or comparison.seed_refuted:
                continue
            score, record = support(comparison.parts, self.history)
            if record is not None and (best is None or score > best[0]):
                best = (score, comparison, record)
        if best is None or best[0] < seed_support + self.settings.history_margin:
            return None
        score, comparison, record = best
        with self.trace.stage("ambiguity", comparison.other) as step:
            step.note = (
                f"the history's nearest match ({record.similarity:.2f} close to the question, "
                f"{record.calls} calls): {one_line(record.statement, 200)}"
            )
            step.outcome = (
                f"candidate {comparison.other.number} instead of the seed (candidate "
                f"{seed.number}): it matches the query history {score:.2f}, the seed "
                f"{seed_support:.2f}"
            )
        return Chosen(comparison.other, ANSWERED, chosen.notice)

    def _keep(self, chosen: Chosen, agreeing: int) -> Chosen:
        seed = chosen.candidate
        open_ones = [c for c in self.comparisons if not c.other_refuted]
        with self.trace.stage("ambiguity", seed) as step:
            refuted = len(self.comparisons) - len(open_ones)
            step.outcome = (
                f"the seed (candidate {seed.number}) stands: {agreeing} other readings agree, "
                f"{refuted} refuted, {len(open_ones)} open"
            )
        shown = [c for c in open_ones if self._worth_a_notice(c)][:NOTICE_READINGS]
        if not shown:
            return chosen
        lines = [
            f"  candidate {c.other.number} ("
            + ", ".join(sorted({f"{d.kind} {d.name}" for d in c.dimensions}) or {"other rows"})
            + f"): {one_line(c.other.sql, 400)}"
            for c in shown
        ]
        notice = (
            "pgnl: the question can be read another way, and the data does not say which "
            "reading is meant; the answer is the first reading. The other "
            + ("readings:\n" if len(shown) > 1 else "reading:\n")
            + "\n".join(lines)
        )
        return Chosen(seed, chosen.outcome, _joined(chosen.notice, notice))

    def _worth_a_notice(self, comparison: _Comparison) -> bool:
        """Whether an open reading is named to the user: one that reads another value or
        column for a value (which the user can tell at a glance), or the sketch models'
        answer where the LLM's own query was chosen (two independent readings). Lower-ranked
        sketches that differ otherwise are the models' own less likely readings: in the
        trace only."""
        return comparison.other is self.independent or any(
            d.kind == VALUE and d.name != "condition" for d in comparison.dimensions
        )


def _joined(first: str, second: str) -> str:
    return f"{first}\n{second}" if first else second


def _verdict(evidence: Sequence[Evidence], seed: Candidate, other: Candidate) -> str:
    if any(e.favours == OTHER for e in evidence):
        return f"refutes the seed (candidate {seed.number})"
    if any(e.favours == SEED for e in evidence):
        return f"refutes candidate {other.number}"
    return "open"


def _with_literals(sql: str, swaps: Sequence[tuple[Predicate, Predicate]]) -> str | None:
    """`sql` with each swap's first predicate's constants replaced by the second's (same
    column, same operator kind), on the syntax tree; None where a predicate is not found."""
    try:
        statements = parse_sql(sql)
    except ParseError:
        return None
    tree = statements[0].stmt
    if tree is None:
        return None
    for old, new in swaps:
        if len(old.values) != len(new.values):
            return None
        consts = [
            c
            for c in nodes_of(tree, ast.A_Const, inside=True)
            if isinstance(c, ast.A_Const)
            and isinstance(c.val, ast.String)
            and str(c.val.sval) in old.values
        ]
        if len(consts) != len(old.values):
            return None
        for const, value in zip(consts, new.values, strict=True):
            const.val = ast.String(sval=value)
    return str(RawStream()(tree))
