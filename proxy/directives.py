"""Natural-language directives: query text → a `Directive`, or None to pass the text through.

A directive is a comment that leads a statement, in either of PostgreSQL's comment forms::

    -- nl: which course has the highest score?
    /* nl show: which course has the highest score? */;

psql (since PostgreSQL 15) drops `--` comments that come before any query text unless run with
`-c`, so psql users need the block form followed by `;`.

Grammar (keywords are ASCII case-insensitive; "ws" is PostgreSQL's whitespace, space, tab, LF, CR,
FF and VT; "blank" is space or tab)::

    statement  := ws* (comment ws*)* directive ws* ((comment | ";") ws*)*
    directive  := "--" body            -- body: the rest of the line, up to LF or CR
                | "/*" body "*/"       -- body: everything up to the matching "*/"
    body       := ws* "nl" (blank+ kind)? blank* ":" question
    kind       := "show" | "explain"

- `nl:` runs the question, `nl show:` returns the chosen SQL as one row, `nl explain:` returns the
  trace. So `--nl:q`, `-- NL : q`, `/*Nl  Show:q*/` and `/*\\n  nl explain: q\\n*/` are directives;
  `-- nl is the country code`, `-- nlp: x`, `-- nl-show: x`, `-- nl shwo: x`, `/* nl */` and
  `/*+ nl: x */` are ordinary comments.
- Block comments nest as in PostgreSQL's scanner: `/* nl: a /* b */ c */` is one comment whose
  question is `a /* b */ c`. Inside a block comment `--` is text; inside a `--` comment `/*` and
  `*/` are text.
- A `--` directive's question is the rest of its line only: later `--` lines do not continue it
  (they are ordinary comments, so tools that add their own comments around a query keep working).
  Write a question over several lines in the block form.
- The directive need not be the first comment (`-- Metabase:: userID: 1` may come before it), but
  only comments and whitespace may precede it, and only comments, whitespace and `;` may follow.
  The question is stripped and each run of whitespace in it becomes one space.

Outcomes of `parse`:

- the text does not start with a comment, or none of its leading comments is a directive: None,
  and the text passes through untouched;
- a block comment among the leading or trailing comments is unterminated: None, so that
  PostgreSQL reports its own "unterminated /* comment" (this wins over the errors below);
- a directive followed by SQL: `DirectiveError` 42601, raised at the first character of SQL
  whatever follows it;
- two directives in one statement, or an empty question: 42601;
- a question longer than `MAX_QUESTION_CHARS` (after whitespace is collapsed): 54000.

>>> parse("/* nl show: which course has the  highest score? */;")
Directive(kind=<DirectiveKind.SHOW: 'nl show'>, question='which course has the highest score?')
>>> parse("-- nl is the country code\\nSELECT 1") is None
True
>>> maybe_directive(b"SELECT 1")
False
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

SYNTAX_ERROR = "42601"
PROGRAM_LIMIT_EXCEEDED = "54000"

MAX_QUESTION_CHARS = 4000
"""The longest question accepted, in characters after whitespace runs are collapsed."""

# PostgreSQL's scanner: space [ \t\n\r\f\v]; a `--` comment runs to the next \n or \r.
_WS = " \t\n\r\f\v"
_WS_BYTES = frozenset(_WS.encode("ascii"))
_LINE_ENDS = "\n\r"

_BODY = re.compile(
    r"[ \t\n\r\f\v]*nl(?:[ \t]+(show|explain))?[ \t]*:(.*)",
    re.IGNORECASE | re.ASCII | re.DOTALL,
)

_EXAMPLE = "/* nl: which course has the highest score? */;"


class DirectiveKind(enum.Enum):
    """What to do with the question."""

    RUN = "nl"
    SHOW = "nl show"
    EXPLAIN = "nl explain"

    @property
    def spelling(self) -> str:
        """The directive as written before the question, e.g. `nl show:`."""
        return f"{self.value}:"


@dataclass(frozen=True)
class Directive:
    """A directive found in a statement: its kind and the normalised question."""

    kind: DirectiveKind
    question: str


class DirectiveError(ValueError):
    """A statement carries a directive that cannot be run as written; the client gets an error."""

    def __init__(self, sqlstate: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.hint = hint

    def __repr__(self) -> str:
        return f"DirectiveError({self.sqlstate!r}, {self.message!r}, {self.hint!r})"


def maybe_directive(query: str | bytes) -> bool:
    """Whether `query` could hold a directive; False guarantees that `parse` returns None.

    Cheap enough for every query: it skips leading whitespace, looks for a comment opener there,
    and only then scans the text for `nl` in any case.
    """
    i = 0
    n = len(query)
    if isinstance(query, bytes):
        while i < n and query[i] in _WS_BYTES:
            i += 1
        if not (query.startswith(b"--", i) or query.startswith(b"/*", i)):
            return False
        return b"nl" in query or b"NL" in query or b"Nl" in query or b"nL" in query
    while i < n and query[i] in _WS:
        i += 1
    if not (query.startswith("--", i) or query.startswith("/*", i)):
        return False
    return "nl" in query or "NL" in query or "Nl" in query or "nL" in query


def parse(query: str) -> Directive | None:
    """The directive that `query` consists of, or None when it is not one (pass it through).

    Raises `DirectiveError` when the query is a directive that cannot be run as written.
    """
    if not maybe_directive(query):
        return None
    found: list[tuple[DirectiveKind, str]] = []
    n = len(query)
    pos = _skip_ws(query, 0)
    while pos < n:
        if query.startswith("--", pos):
            end = _line_end(query, pos + 2)
            body = query[pos + 2 : end]
            pos = end
        elif query.startswith("/*", pos):
            close = _block_close(query, pos + 2)
            if close < 0:
                return None  # unterminated: PostgreSQL says so itself
            body = query[pos + 2 : close]
            pos = close + 2
        elif query[pos] == ";" and found:
            pos = _skip_ws(query, pos + 1)
            continue
        elif not found:
            return None  # SQL before any directive: the comments are ordinary ones
        else:
            raise DirectiveError(
                SYNTAX_ERROR,
                f"an {found[0][0].spelling} directive must be the whole statement, "
                "but SQL follows it",
                hint=f"Send the directive on its own, e.g. {_EXAMPLE} "
                "and the SQL as a separate statement.",
            )
        match = _BODY.fullmatch(body)
        if match is not None:
            word = match.group(1)
            kind = DirectiveKind(f"nl {word.lower()}") if word else DirectiveKind.RUN
            found.append((kind, match.group(2)))
        pos = _skip_ws(query, pos)
    if not found:
        return None
    if len(found) > 1:
        raise DirectiveError(
            SYNTAX_ERROR,
            "a statement may carry only one nl directive",
            hint="Send each question as a statement of its own, e.g. "
            "/* nl: first question */; then /* nl: second question */;",
        )
    kind, text = found[0]
    return Directive(kind, _question(kind, text))


def _question(kind: DirectiveKind, text: str) -> str:
    """The question written after the directive, normalised; raises if it cannot be asked."""
    question = " ".join(text.split())
    if not question:
        raise DirectiveError(
            SYNTAX_ERROR,
            f"the {kind.spelling} directive has no question",
            hint=f"Write the question after the colon, e.g. /* {kind.spelling} "
            "which course has the highest score? */;",
        )
    if len(question) > MAX_QUESTION_CHARS:
        raise DirectiveError(
            PROGRAM_LIMIT_EXCEEDED,
            f"the question is {len(question)} characters long; "
            f"a question may be at most {MAX_QUESTION_CHARS} characters",
            hint="Shorten the question: ask for what you need in a sentence or two, "
            "and split a long request into several questions.",
        )
    return question


def _skip_ws(query: str, pos: int) -> int:
    n = len(query)
    while pos < n and query[pos] in _WS:
        pos += 1
    return pos


def _line_end(query: str, pos: int) -> int:
    """The index of the LF or CR that ends the `--` comment running from `pos`, or len(query)."""
    ends = [i for i in (query.find(c, pos) for c in _LINE_ENDS) if i >= 0]
    return min(ends, default=len(query))


def _block_close(query: str, pos: int) -> int:
    """The index of the `*/` closing a block comment whose body starts at `pos`; -1 if none.

    Nested `/*` … `*/` pairs count as in PostgreSQL's scanner: `/*/` opens one level, `*/*`
    closes one and leaves `*`, `**/` closes one.
    """
    depth = 1
    n = len(query)
    while pos < n:
        opens = query.find("/*", pos)
        closes = query.find("*/", pos)
        if closes < 0:
            return -1
        if 0 <= opens < closes:
            depth += 1
            pos = opens + 2
            continue
        depth -= 1
        if depth == 0:
            return closes
        pos = closes + 2
    return -1
