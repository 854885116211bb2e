"""The PLM-only rules: the repairs the sketch stage makes to a sketch from the question's own
words (`sketcher._repaired`, `sketcher._spoken`) and the rewrites PLM-only completion makes
before it writes the SQL (`complete_plm.complete`) and while it writes each clause (its clause
writers), listed in the order they apply (`pgnl rules` prints them; `[pipeline]
disabled_rules` names those not to apply).

    with rules.applying(frozenset({"spoken_order"})) as fired:
        sketches = sketcher.sketch(question, schema, values)
    fired  # the names of the rules that changed something, in order, each once

A rule stays where it is written (the sketch stage's in `sketch_rules/`, a module by concern,
and `value_evidence.py`; completion's in `complete_plm.py`); its call site asks `apply`, `found`
(or `enabled` and `noted`) by the rule's name, and a rule "fires" where its result differs from
what it was given. Outside `applying` every rule applies and nothing is recorded. The state is
a `ContextVar`, read in the thread the rules run in: enter `applying` in the thread that
sketches and completes (a `ThreadPoolExecutor` does not carry it over).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, ParamSpec, TypeVar

Stage = Literal["sketch", "complete"]

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class Rule:
    """One rule: its name (a setting's value: `[pipeline] disabled_rules`), the stage it
    applies in, and what it does, in one line."""

    name: str
    stage: Stage
    purpose: str


def _sketch(name: str, purpose: str) -> Rule:
    return Rule(name, "sketch", purpose)


def _complete(name: str, purpose: str) -> Rule:
    return Rule(name, "complete", purpose)


RULES: tuple[Rule, ...] = (
    # sketcher._repaired: where the columns are (value_evidence.py, then sketch_rules/columns.py)
    _sketch(
        "conditions_on_named_values",
        "a WHERE value condition moves to a column that holds a value the question names",
    ),
    _sketch(
        "conditions_on_a_year",
        "a WHERE condition on a text column holding no named value moves to the year column",
    ),
    _sketch(
        "nested_on_shown_table",
        "an IN/NOT IN subquery condition on an unread table moves to the shown table",
    ),
    _sketch(
        "ordered_on_shown_table",
        "an ORDER BY column of an unread table moves to the shown table's column of its name",
    ),
    _sketch(
        "columns_of_named_tables",
        "a column of a table the question does not name moves to the named table's column",
    ),
    _sketch("read_by_name", "a key that stands for a name is shown and grouped by that name"),
    _sketch(
        "nearest_equals",
        "a column a key makes equal to another is read from the nearer table",
    ),
    # sketcher._spoken: what the question says (sketch_rules/groups.py, order.py, select.py;
    # aggregates_of_one_table in columns.py)
    _sketch(
        "counted_by_value",
        'a grouped column the question gives a number of ("4 cylinders") becomes a WHERE',
    ),
    _sketch(
        "grouped_by_its_aggregate",
        "a column the SELECT averages (max, min) is not grouped by",
    ),
    _sketch(
        "ordered_by_a_quantity",
        "a superlative naming a numeric column orders by it, not by a group's count",
    ),
    _sketch(
        "spoken_order",
        'ORDER BY the column the superlative or "ordered by" names, not another',
    ),
    _sketch("spoken_group", 'GROUP BY the column "each year", "per director" names'),
    _sketch(
        "grouped_by_asked",
        'a count grouped by its table\'s key groups by the shown column "which" asks of',
    ),
    _sketch(
        "spoken_aggregates",
        'the SELECT a list of aggregates of one column spells out ("the average and max age")',
    ),
    _sketch(
        "spoken_select",
        "the SELECT the question's first words spell out as aggregates of named columns",
    ),
    _sketch(
        "spoken_aggregate_of",
        "an aggregate of a column becomes the one the question says (max, not sum)",
    ),
    _sketch("spoken_columns", "the columns a list in the question's first words names are shown"),
    _sketch(
        "spoken_extreme",
        'a column named after "smallest", "highest" is shown as its min or max',
    ),
    _sketch(
        "aggregates_of_one_table",
        "aggregates spread over tables are read from the one table that has them all",
    ),
    _sketch("grouped_without_aggregate", "GROUP BY goes where nothing is aggregated"),
    _sketch(
        "ordered_by_frequency",
        '"sorted by frequency" groups by the shown columns and orders by count(*)',
    ),
    _sketch(
        "spoken_age_order",
        '"youngest" and "oldest" order by an age or a birth date, in their direction',
    ),
    _sketch(
        "spoken_recency",
        '"most recent" and "earliest" order by the one date column',
    ),
    _sketch(
        "one_number_asked",
        '"how many different" counts distinct values of a column, "together" sums it',
    ),
    _sketch("shown_groups", "a grouped SELECT of aggregates only shows what it groups by too"),
    # complete_plm.complete: before the clauses are written
    _complete(
        "extreme_row",
        "a max or min beside plain columns orders by it, LIMIT 1 (the row of the extreme)",
    ),
    _complete(
        "spoken_range",
        'a comparison becomes BETWEEN where the question says "between 5 and 10"',
    ),
    _complete(
        "counted_table",
        "count(*) over a join counts the distinct keys of the table the question counts",
    ),
    _complete(
        "people_counted",
        '"how many people" of a table with a population sums the population',
    ),
    # complete_plm's clause writers, in the order of the clauses
    _complete(
        "cued_operator",
        'a WHERE operator becomes the one the words around its value say ("less than")',
    ),
    _complete(
        "compared_column",
        'a comparison is on the column named before "greater than" (HAVING\'s too)',
    ),
    _complete(
        "compared_with_average",
        'a comparison with no value compares with the average ("older than average")',
    ),
    _complete(
        "or_partner",
        'an equality whose value the question pairs with "or" becomes IN (both values)',
    ),
    _complete(
        "by_shown_reference",
        "GROUP BY a table's key becomes the shown foreign key of that table",
    ),
    _complete(
        "by_entity_key",
        "GROUP BY a naming column over a join also groups by its table's key",
    ),
)
"""Every rule, in the order it applies: the sketch stage's, then completion's. A name is the
rule's function's, without its underscore."""

_NAMES = frozenset(rule.name for rule in RULES)


def validate(names: Iterable[str]) -> frozenset[str]:
    """`names` as a set, each the name of a rule; a ValueError names one that is not (the first
    in alphabetical order) and says how to list them."""
    chosen = frozenset(names)
    unknown = sorted(chosen - _NAMES)
    if unknown:
        raise ValueError(f"no rule is named {unknown[0]!r}: run `pgnl rules` to list them")
    return chosen


@dataclass
class _Applying:
    disabled: frozenset[str]
    outer: _Applying | None
    fired: list[str] = field(default_factory=list)


_active: contextvars.ContextVar[_Applying | None] = contextvars.ContextVar(
    "pgnl_rules", default=None
)


@contextlib.contextmanager
def applying(disabled: Iterable[str] = frozenset()) -> Iterator[list[str]]:
    """Within the block, the rules named in `disabled` do not apply; yields the list of the
    names of the rules that changed something meanwhile, in order, each once. A block within
    another also leaves out the outer one's rules, and what fires in it is recorded in both
    (a question's block around a stage's). Raises ValueError for a name no rule has
    (`validate`)."""
    outer = _active.get()
    off = validate(disabled) | (outer.disabled if outer is not None else frozenset())
    state = _Applying(off, outer)
    token = _active.set(state)
    try:
        yield state.fired
    finally:
        _active.reset(token)


def enabled(name: str) -> bool:
    """Whether rule `name` applies here: always outside `applying`. Raises ValueError for a
    name no rule has, so that a call site cannot ask for a rule the registry lacks."""
    if name not in _NAMES:
        raise ValueError(f"no rule is named {name!r}: add it to proxy.nl2sql.rules.RULES")
    state = _active.get()
    return state is None or name not in state.disabled


def noted(name: str, before: object, after: T) -> T:
    """`after`, rule `name`'s result on `before`: recorded as fired (within `applying`) where
    it is not None and differs from `before`."""
    if after is not None and after != before:
        state = _active.get()
        while state is not None:
            if name not in state.fired:
                state.fired.append(name)
            state = state.outer
    return after


def found(name: str, rule: Callable[P, T | None], *args: P.args, **kwargs: P.kwargs) -> T | None:
    """`rule(*args, **kwargs)` where rule `name` is enabled, else None: for a rule that finds
    something or nothing (None); it fired where it found something."""
    if not enabled(name):
        return None
    return noted(name, None, rule(*args, **kwargs))


def apply(name: str, value: T, rule: Callable[P, T | None], *args: P.args, **kwargs: P.kwargs) -> T:
    """`rule(*args, **kwargs)`, what rule `name` makes of `value`, where it is enabled, else
    `value`; a rule that answers None leaves `value` as it is."""
    if not enabled(name):
        return value
    result = noted(name, value, rule(*args, **kwargs))
    return value if result is None else result
