"""Requests pgnl refuses before answering: ones that ask to change data or the server.

pgnl only reads (every query it generates runs read-only), so "delete all orders" or "terminate
every other connection" cannot be answered; answering them with the nearest SELECT would show
rows the user did not ask for. A request is one when it opens, after an optional polite lead-in
("please", "can you", "I want to"), with an imperative verb that writes or administers:
delete, drop, update, insert, grant, terminate and their kin. A question never opens so: it
opens with a question word or a verb that reads ("show", "list", "count"), and the few verbs
of both kinds are told apart by the word after them ("add up", "change in", "set of").
"""

from __future__ import annotations

import re

WRITE_REQUEST = "NL005"
"""SQLSTATE: the request asks pgnl to change data or the server; pgnl only reads."""

_LEAD_IN = re.compile(
    r"""^(?:
        (?:please|kindly|now|ok(?:ay)?|hey|pgnl)[\s,]+
      | (?:can|could|would|will)\s+you\s+(?:please\s+)?
      | (?:i\s+(?:want|need|would\s+like)|i'd\s+like|we\s+(?:want|need))\s+(?:you\s+)?to\s+
      | (?:let's|let\s+us|go\s+ahead\s+and|help\s+me)\s+
      | (?:try\s+to|make\s+sure\s+to|be\s+sure\s+to)\s+
    )""",
    re.I | re.X,
)

# verb -> what it does, in the message
_WRITES: dict[str, str] = {
    "delete": "delete data",
    "remove": "delete data",
    "erase": "delete data",
    "wipe": "delete data",
    "purge": "delete data",
    "clear": "delete data",
    "truncate": "delete data",
    "empty": "delete data",
    "drop": "drop a database object",
    "destroy": "drop a database object",
    "update": "change data",
    "change": "change data",
    "modify": "change data",
    "edit": "change data",
    "set": "change data",
    "replace": "change data",
    "overwrite": "change data",
    "rename": "change the schema",
    "increase": "change data",
    "decrease": "change data",
    "raise": "change data",
    "lower": "change data",
    "reset": "change data",
    "insert": "add data",
    "add": "add data",
    "append": "add data",
    "create": "create a database object",
    "alter": "change the schema",
    "grant": "change privileges",
    "revoke": "change privileges",
    "terminate": "administer the server",
    "kill": "administer the server",
    "cancel": "administer the server",
    "shutdown": "administer the server",
    "shut": "administer the server",
    "restart": "administer the server",
    "reboot": "administer the server",
    "stop": "administer the server",
    "vacuum": "administer the server",
    "reindex": "administer the server",
    "analyze": "administer the server",
    "lock": "administer the server",
    "disable": "administer the server",
    "enable": "administer the server",
    "copy": "add data",
    "import": "add data",
    "load": "add data",
    "merge": "change data",
    "upsert": "change data",
}

# A reading after the verb: "add up the budgets", "change in revenue", "set of courses",
# "lower than", "copy of", "load factor", "clear of", "empty rooms", "stop names".
_READING_AFTER = re.compile(
    r"""^(?:
        (?:add|sum)\s+up\b
      | \w+\s+(?:of|in|per|between|than|over|from\s+\d|by\s+(?:month|year|day|week|quarter))\b
      | (?:empty|lower|clear)\s+(?!all\b|every\b|the\b|out\b|my\b|our\b|this\b|that\b)\w+s\b
    )""",
    re.I | re.X,
)
_WORD = re.compile(r"[a-z']+", re.I)


def write_request(question: str) -> str | None:
    """What the request asks for ("delete data", "administer the server"...) when it asks to
    change data or the server, else None."""
    text = " ".join(question.split()).strip(" .!?")
    while True:
        lead = _LEAD_IN.match(text)
        if lead is None:
            break
        text = text[lead.end() :]
    first = _WORD.match(text)
    if first is None:
        return None
    verb = first.group(0).lower()
    what = _WRITES.get(verb)
    if what is None or _READING_AFTER.match(text):
        return None
    return what
