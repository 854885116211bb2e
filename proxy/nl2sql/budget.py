"""One question's time: a budget for all its candidates, relaxations and corrections, and the
planner's cost as a cheap check before a run that would time out again.

- `Budget`: the deadline of a question ([pipeline] budget_s). Each query the pipeline runs gets
  the smaller of its statement timeout and the time left; none starts once the time is up
  (`OutOfTime`). The pipeline then answers with the best candidate so far, with a NOTICE, or says
  that the question ran out of time.
- `CostGuard`: once a candidate ran into its statement timeout, the planner's estimate of its
  cost (EXPLAIN, no run) is remembered, and a later candidate whose estimate is at least as high
  is not run: it would most likely time out in turn. EXPLAIN costs milliseconds; the run it
  saves, the whole statement timeout.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

from proxy.nl2sql.database import Database

OUT_OF_TIME = "NL004"
"""SQLSTATE: the question's time budget ran out before any candidate answered."""
QUERY_CANCELED = "57014"


class OutOfTime(Exception):
    """The question's time budget is spent: no further query is started."""


class Budget:
    """See the module docstring. `clock` is for tests."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.deadline = clock() + seconds if seconds > 0 else math.inf

    def left(self) -> float:
        return self.deadline - self.clock()

    def timeout(self, statement_timeout_s: float) -> float:
        """The timeout of the next query; OutOfTime when no time is left."""
        left = self.left()
        if left <= 0:
            raise OutOfTime
        return min(statement_timeout_s, left) if statement_timeout_s > 0 else left

    def spent(self, margin_s: float = 0.05) -> bool:
        """True when the time is up (within `margin_s`): a query cancelled now was cancelled by
        the budget, not by its own statement timeout."""
        return self.left() <= margin_s


def plan_cost(db: Database, sql: str, timeout_s: float) -> float | None:
    """The planner's total cost estimate of `sql` (EXPLAIN, not run); None when it cannot tell."""
    body = sql.strip().removesuffix(";")
    try:
        rows = db.fetch(f"EXPLAIN (FORMAT JSON) {body}", timeout_s=timeout_s)
    except Exception:
        return None
    try:
        plan: Any = rows[0][0]
        if isinstance(plan, str | bytes):
            plan = json.loads(plan)
        return float(plan[0]["Plan"]["Total Cost"])
    except (IndexError, KeyError, TypeError, ValueError):
        return None


class CostGuard:
    """See the module docstring."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.too_slow: float | None = None  # the lowest cost estimate of a candidate that timed out

    def timed_out(self, sql: str, timeout_s: float) -> None:
        """A candidate ran into its statement timeout: remember what its plan costs."""
        cost = plan_cost(self.db, sql, timeout_s)
        if cost is not None and (self.too_slow is None or cost < self.too_slow):
            self.too_slow = cost

    def skip_reason(self, sql: str, timeout_s: float) -> str | None:
        """Why `sql` is not worth running (its plan costs at least as much as one that timed
        out), or None."""
        if self.too_slow is None:
            return None
        cost = plan_cost(self.db, sql, timeout_s)
        if cost is None or cost < self.too_slow:
            return None
        return (
            f"not run: its plan costs {cost:,.0f}, no less than {self.too_slow:,.0f} of a "
            "candidate that ran into the statement timeout"
        )
