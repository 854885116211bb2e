"""The sketch stage's wording rules: the repairs it makes to a sketch from the question's own
words (`sketcher._repaired`, `sketcher._spoken`), each registered by its name in `rules.RULES`,
and the helpers they share with PLM-only completion (`complete_plm`, `value_evidence`).

- `words`: how the question's words name the schema's tables and columns (the helpers the
  others share), and the FROM a pair's own columns call for;
- `columns`: where the columns are (most of the repairs `sketcher._repaired` makes);
- `select`: what the SELECT says;
- `order`: what ORDER BY says, and in which direction;
- `groups`: what GROUP BY says.
"""
