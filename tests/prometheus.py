"""Prometheus' text exposition format (0.0.4), read back strictly: for the tests of pgnl's
metrics."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


@dataclass
class Parsed:
    """An exposition read back: each family's help and type, and every sample."""

    help: dict[str, str] = field(default_factory=dict)
    type: dict[str, str] = field(default_factory=dict)
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def value(self, name: str, **labels: str) -> float:
        found = [v for n, ls, v in self.samples if n == name and ls == labels]
        assert len(found) == 1, (name, labels, found)
        return found[0]


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], text)


def parse(text: str) -> Parsed:
    """Prometheus' text format 0.0.4, strictly: every sample belongs to the family whose TYPE
    came last, and a family's HELP and TYPE come before its samples."""
    assert text.endswith("\n")
    parsed = Parsed()
    family = ""
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, doc = line.removeprefix("# HELP ").partition(" ")
            assert name not in parsed.help, f"{name} described twice"
            parsed.help[name] = _unescape(doc)
            family = ""
        elif line.startswith("# TYPE "):
            name, _, kind = line.removeprefix("# TYPE ").partition(" ")
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            assert name in parsed.help, f"TYPE before HELP for {name}"
            parsed.type[name] = kind
            family = name
        else:
            match = _SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, raw_labels, raw_value = match.groups()
            suffixes = ("_bucket", "_sum", "_count") if parsed.type[family] == "histogram" else ()
            assert name == family or name in {family + s for s in suffixes}, (family, line)
            labels: dict[str, str] = {}
            if raw_labels:
                consumed = "".join(m[0] for m in _LABEL.finditer(raw_labels))
                assert consumed == raw_labels, f"bad labels in {line!r}"
                labels = {k: _unescape(v) for k, v in _LABEL.findall(raw_labels)}
            value = float(raw_value.replace("+Inf", "inf"))
            parsed.samples.append((name, labels, value))
    return parsed
