"""The sketch stage: a question and a schema in, ranked SQL sketches out.

    sketcher = load_sketcher()
    for sketch in sketcher.sketch("how many singers are there?", schema):
        print(sketch.select_text(schema), sketch.from_text(schema), sketch.keywords_text())

The sketch model (ONNX) reads the question beside each window of the serialized schema
(`encoding`), its outputs are merged over windows (`sketch.merge_windows`), and decoded into the
K1 most probable SELECT sets, K2 FROM sets and K3 keyword sets (`[sketch]` settings; the paper's
4, 2, 2). The aligner (ONNX) re-ranks the K1 x K3 SELECT x KEYWORDS pairs; each pair is combined
with every FROM set, and the sketches come back best first (by pair, then by FROM). Every sketch
names only schema items that exist: the models pick items by position, never by text. Given the
values the question names in the database (`value_evidence.NamedValues`), a WHERE condition on
a column that holds none of them moves to one that holds one (`rank`); a sketch model trained to
read them (manifest.json's `reads_values`) also sees them beside their columns
(`encoding.value_marks`).

Both models are verified against manifest.json when loaded, loaded once per settings and shared;
a `Sketcher` is thread-safe (ONNX Runtime sessions may run concurrently).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from proxy.config import ConfigError, RuntimeSettings, SketchSettings
from proxy.nl2sql import rules
from proxy.nl2sql.aligner import Aligner, FloatArray, pair_text
from proxy.nl2sql.encoding import MAX_LENGTH, WindowEncoder, batch, value_marks
from proxy.nl2sql.schema import Schema, spelled_out
from proxy.nl2sql.sketch import (
    SelectItem,
    Sketch,
    SketchParts,
    SketchScores,
    Slots,
    from_candidates,
    keyword_candidates,
    merge_windows,
    select_candidates,
    slots_for,
)
from proxy.nl2sql.sketch_rules.columns import (
    aggregates_of_one_table,
    columns_of_named_tables,
    nearest_equals,
    nested_on_shown_table,
    ordered_on_shown_table,
    read_by_name,
)
from proxy.nl2sql.sketch_rules.groups import (
    counted_by_value,
    grouped_by_asked,
    grouped_by_its_aggregate,
    grouped_without_aggregate,
    spoken_group,
)
from proxy.nl2sql.sketch_rules.order import (
    ordered_by_a_quantity,
    ordered_by_frequency,
    spoken_age_order,
    spoken_order,
    spoken_recency,
)
from proxy.nl2sql.sketch_rules.select import (
    one_number_asked,
    shown_groups,
    spoken_aggregate_of,
    spoken_aggregates,
    spoken_columns,
    spoken_extreme,
    spoken_select,
)
from proxy.nl2sql.sketch_rules.words import named_tables, tables_counted_in, tables_named_in
from proxy.nl2sql.value_evidence import (
    NamedValues,
    conditions_on_a_year,
    conditions_on_named_values,
)
from proxy.runtime import (
    choose_providers,
    create_session,
    load_tokenizer,
    resolve_models_dir,
    verify_model,
)

log = logging.getLogger(__name__)

SKETCH_MODEL = "sketch"
ALIGNER_MODEL = "aligner"


@dataclass(frozen=True)
class Hypotheses:
    """Everything the sketch stage decided for one question: the top-k of each part, each with
    its log-probability under the sketch model, and the ranked sketches."""

    scores: SketchScores
    selects: list[tuple[frozenset[SelectItem], float]]
    """The SELECT sets the pairs were made of, most probable first: `[sketch] select_pool` of
    them where the aligner ranks the pairs (`rank` keeps the pairs of the `select_k` best),
    else `select_k`."""
    froms: list[tuple[frozenset[int], float]]
    keywords: list[tuple[frozenset[str], float]]
    aligned: FloatArray | None
    """The aligner's logit for each SELECT x KEYWORDS pair (`itertools.product` order; a pair
    it did not read, the lowest of those it read: `Sketcher.align`), or None without an
    aligner."""
    sketches: list[Sketch]


def _check(settings: SketchSettings) -> None:
    for name in ("select_k", "select_pool", "from_k", "keywords_k"):
        value = getattr(settings, name)
        if value < 1:
            raise ConfigError(f"[sketch] {name} must be at least 1, not {value}")
    if not settings.align_within >= 0:  # NaN too
        raise ConfigError(
            f"[sketch] align_within must be 0 or more nats (inf: every pair), not "
            f"{settings.align_within}"
        )


class Sketcher:
    """The sketch model and, optionally, the aligner."""

    def __init__(
        self,
        sketch_session: ort.InferenceSession,
        aligner: Aligner | None,
        encoder: WindowEncoder,
        settings: SketchSettings | None = None,
        *,
        reads_values: bool = False,
    ) -> None:
        self.settings = settings if settings is not None else SketchSettings()
        self.reads_values = reads_values
        """Whether the sketch model was trained to see, beside each column, the values of it
        the question names (`scores`)."""
        _check(self.settings)
        self._session = sketch_session
        self._aligner = aligner
        self._encoder = encoder
        self.max_length = encoder.max_length
        """The tokens of a window, question and schema together, as the sketch model was
        trained (manifest.json's `max_length`)."""
        # whole words of the tokenizer's vocabulary: run-together names are split into them,
        # once per schema asked about (the pipeline keeps its schema while the catalog stands)
        vocabulary = frozenset(
            w for w in encoder.tokenizer.get_vocab() if w.isalpha() and w.islower()
        )
        self._spelled_out = functools.lru_cache(maxsize=128)(
            functools.partial(spelled_out, vocabulary=vocabulary)
        )
        self.provider = sketch_session.get_providers()[0]

    @classmethod
    def from_files(
        cls,
        sketch_model: Path,
        aligner_model: Path | None,
        tokenizer: Path,
        *,
        settings: SketchSettings | None = None,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        threads: int = 0,
        reads_values: bool = False,
        max_length: int = MAX_LENGTH,
    ) -> Sketcher:
        """A sketcher over these files, unchecked (`load_sketcher` verifies them first);
        `reads_values` and `max_length` (the tokens of a window, as the sketch model was trained):
        as manifest.json says of the sketch model."""
        aligner = None
        if aligner_model is not None:
            aligner = Aligner(
                create_session(aligner_model, providers, threads), load_tokenizer(tokenizer, 512)
            )
        return cls(
            create_session(sketch_model, providers, threads),
            aligner,
            WindowEncoder(load_tokenizer(tokenizer, 512), max_length),
            settings,
            reads_values=reads_values,
        )

    def scores(
        self, question: str, schema: Schema, values: NamedValues | None = None
    ) -> SketchScores:
        """The sketch model's logits for every item of `schema`, its windows merged; a model
        that `reads_values` sees `values` (the database's values the question names) beside
        their columns."""
        marks = value_marks(values.columns) if self.reads_values and values is not None else ()
        encoded = self._encoder.encode(question, schema, marks)
        arrays = batch(encoded)
        column_logits, table_logits, question_logits = self._session.run(
            ["column_logits", "table_logits", "question_logits"],
            {
                "input_ids": arrays.input_ids,
                "attention_mask": arrays.attention_mask,
                "token_type_ids": arrays.token_type_ids,
                "column_pool": arrays.column_pool,
                "table_pool": arrays.table_pool,
            },
        )
        return merge_windows(
            schema,
            window_columns=[e.window.columns for e in encoded],
            window_tables=[e.window.tables for e in encoded],
            column_logits=list(np.asarray(column_logits, dtype=np.float32)),
            table_logits=list(np.asarray(table_logits, dtype=np.float32)),
            question_logits=list(np.asarray(question_logits, dtype=np.float32)),
        )

    @property
    def aligner(self) -> Aligner | None:
        """The aligner this sketcher loaded (None without one), whatever `[sketch] aligner` says."""
        return self._aligner

    @property
    def aligns(self) -> bool:
        """Whether pairs are re-ranked by the aligner (one is loaded and `[sketch] aligner`)."""
        return self._aligner is not None and self.settings.aligner

    def align(
        self,
        question: str,
        schema: Schema,
        selects: Sequence[tuple[frozenset[SelectItem], float]],
        keywords: Sequence[tuple[frozenset[str], float]],
    ) -> FloatArray | None:
        """The aligner's logit for each SELECT x KEYWORDS pair (in `itertools.product` order), or
        None when there is no aligner or `[sketch] aligner` is off. The aligner reads only the
        pairs the sketch model finds within `[sketch] align_within` nats of its most probable
        pair; each of the others takes the lowest logit of those read, which ranks it after
        them (`rank`). An int8 aligner's logits move a little with the batch they are read in
        (its activations are quantized per batch), so reading fewer pairs can move a ranking
        slightly."""
        if self._aligner is None or not self.settings.aligner:
            return None
        pairs = list(itertools.product(selects, keywords))
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        probable = pair_log_probabilities(selects, keywords)
        read = np.flatnonzero(probable >= probable.max() - self.settings.align_within)
        logits = self._aligner.score(
            [pair_text(question, pairs[i][0][0], pairs[i][1][0], schema) for i in read]
        )
        aligned = np.full(len(pairs), logits.min(), dtype=np.float32)
        aligned[read] = logits
        return aligned

    def hypotheses(
        self, question: str, schema: Schema, values: NamedValues | None = None
    ) -> Hypotheses:
        """The top-k of each part and the ranked sketches for `question` over `schema`; with
        `values`, the database's values the question names (`rank`)."""
        if not schema.columns:
            raise ValueError(
                f"schema {schema.name!r} has no column this role may read: there is nothing to "
                "ask about (check the role's grants)"
            )
        schema = self._spelled_out(schema)
        settings = self.settings
        scores = self.scores(question, schema, values)
        pool = max(settings.select_k, settings.select_pool) if self.aligns else settings.select_k
        selects = select_candidates(scores, pool, schema)
        keywords = keyword_candidates(scores, settings.keywords_k)
        froms = from_candidates(scores, settings.from_k)
        aligned = self.align(question, schema, selects, keywords)
        sketches = rank(
            scores,
            selects,
            keywords,
            froms,
            aligned,
            combine=settings.combine,
            select_k=settings.select_k,
            named=(schema, question) if settings.named_from else None,
            more_where=settings.more_where_logit,
            values=values,
        )
        return Hypotheses(scores, selects, froms, keywords, aligned, sketches)

    def sketch(
        self, question: str, schema: Schema, values: NamedValues | None = None
    ) -> list[Sketch]:
        """Ranked sketches, best first: K1 x K3 SELECT x KEYWORDS pairs, each with K2 FROMs."""
        return self.hypotheses(question, schema, values).sketches


def pair_log_probabilities(
    selects: Sequence[tuple[frozenset[SelectItem], float]],
    keywords: Sequence[tuple[frozenset[str], float]],
) -> npt.NDArray[np.float64]:
    """The sketch model's log-probability of each SELECT x KEYWORDS pair, in
    `itertools.product(selects, keywords)` order: what `rank` adds to the aligner's logit and
    what `Sketcher.align` reads pairs by."""
    return np.array(
        [s + k for (_, s), (_, k) in itertools.product(selects, keywords)], dtype=np.float64
    )


def rank(
    scores: SketchScores,
    selects: Sequence[tuple[frozenset[SelectItem], float]],
    keywords: Sequence[tuple[frozenset[str], float]],
    froms: Sequence[tuple[frozenset[int], float]],
    aligned: FloatArray | None,
    *,
    combine: bool,
    select_k: int = 0,
    named: tuple[Schema, str] | None = None,
    more_where: float = 0.0,
    values: NamedValues | None = None,
) -> list[Sketch]:
    """Sketches best first. A SELECT x KEYWORDS pair scores its aligner logit (`aligned`, in
    `itertools.product(selects, keywords)` order), plus the sketch model's log-probability of
    both parts when `combine`; without an aligner, that log-probability alone. With `select_k`,
    only the pairs of the `select_k` SELECT sets whose best pair scores highest are kept (the
    aligner ranks a wider pool than goes on: `[sketch] select_pool`). Each pair is
    combined with every FROM set: ordered by pair, then by FROM probability. With `named` (the
    schema and the question), a WHERE condition on a column that holds none of the values the
    question names (`values`, from the database) moves to one that holds one
    (`value_evidence.conditions_on_named_values`); a pair's first FROM set is the one its own
    columns call for (`sketch_rules.words.named_tables`), scored as the model's best; a key
    shown or grouped by where its table's name is meant is read by that name
    (`sketch_rules.columns.read_by_name`), and one a key makes equal to a column of a nearer
    table is read there (`nearest_equals`; the sketches as they were before that move come after
    all the others, so that the K1 SELECT sets proposed stay as many); a SELECT the question
    spells out as a list of aggregates replaces the pair's
    (`sketch_rules.select.spoken_aggregates`, `spoken_select`, `spoken_aggregate_of`), or one it
    lists as columns, some the pair's (`spoken_columns`); a grouped column the question gives a
    number of ("4 cylinders") becomes a WHERE condition
    (`sketch_rules.groups.counted_by_value`), a sketch grouped by one column is grouped by the
    one "each year" names (`spoken_group`), one grouped by its table's key that counts by the
    column "which grades" names (`grouped_by_asked`), a column the SELECT averages (max, min) is
    not grouped by (`grouped_by_its_aggregate`), a superlative that names a quantity orders by
    it, not by the count of a group (`ordered_by_a_quantity`); groups that aggregate nothing go
    (`grouped_without_aggregate`), a question that sorts "by frequency" groups and counts
    (`ordered_by_frequency`), and "youngest" and "oldest" order by an age or a birth date, in
    the direction they say (`spoken_age_order`), "most recent" and "earliest" by the one date
    column (`spoken_recency`); "how many different ..." counts one column's distinct
    values and "... together" sums it (`one_number_asked`). A sketch that would show back only
    the values the question names comes after all the others (`shows_only_its_values`)."""
    pairs = list(itertools.product(selects, keywords))
    probable = pair_log_probabilities(selects, keywords)
    pair_scores = probable
    if aligned is not None:
        logits = np.asarray(aligned, dtype=np.float64)
        pair_scores = logits + probable if combine else logits
    # ties (the pairs the aligner did not read, ranked by it alone) go by probability
    ranked = sorted(range(len(pairs)), key=lambda i: (-pair_scores[i], -probable[i]))
    if select_k:
        width = max(len(keywords), 1)  # pair i is (selects[i // width], keywords[i % width])
        kept = list(dict.fromkeys(i // width for i in ranked))[:select_k]
        ranked = [i for i in ranked if i // width in kept]
    slots = {chosen: slots_for(scores, chosen, more_where=more_where) for chosen, _ in keywords}
    said = tables_named_in(named[1], named[0]) if named is not None else frozenset()
    counted = tables_counted_in(named[1], named[0]) if named is not None else frozenset()
    sketches: list[Sketch] = []
    replaced: list[Sketch] = []  # what `nearest_equals` moved, kept as a last resort
    for i in ranked:
        select, chosen = pairs[i][0][0], pairs[i][1][0]
        variants = [(select, chosen, slots[chosen])]
        if named is not None:
            variants = _repaired(named, said, select, chosen, slots[chosen], values=values)
            if len(variants) > 1 and variants[1][0] == variants[0][0]:
                variants.pop()
        for n, (shown, keywords_chosen, pair_slots) in enumerate(variants):
            pair_froms = list(froms)
            if named is not None and froms:
                own = named_tables(named[0], shown, pair_slots, said, froms[0][0], counted=counted)
                if own is not None:
                    pair_froms = [(own, froms[0][1]), *(f for f in froms if f[0] != own)]
            (replaced if n else sketches).extend(
                Sketch(
                    select=shown,
                    tables=tables,
                    keywords=keywords_chosen,
                    slots=pair_slots,
                    score=float(pair_scores[i] + from_score),
                )
                for tables, from_score in pair_froms
            )
    if values is None:
        return sketches + replaced
    return sorted(sketches + replaced, key=lambda s: shows_only_its_values(s, values))  # stable


def shows_only_its_values(sketch: Sketch, values: NamedValues) -> bool:
    """Whether every column `sketch` shows is one a WHERE condition makes equal to a value the
    question names: its answer would be those values back ("which students live in Boston or
    Chicago?" showing home_city). `rank` puts such sketches after all the others. Dropping such
    columns from a SELECT that shows others too lost more than it won, and was not kept."""
    equal = {
        p.column
        for p in sketch.slots.where
        if p.operator == "=" and not p.nested and p.column in values.columns
    }
    return bool(equal) and all(
        item.aggregate == "" and item.column in equal for item in sketch.select
    )


def _repaired(
    named: tuple[Schema, str],
    said: frozenset[int],
    select: frozenset[SelectItem],
    chosen: frozenset[str],
    pair_slots: Slots,
    *,
    values: NamedValues | None = None,
) -> list[SketchParts]:
    """A pair's SELECT, KEYWORDS and slots after the rules `rank` lists (each by its name in
    `rules.RULES`, which can disable it); where
    `nearest_equals` moved a column, then also without that move (what it replaced, which
    `rank` proposes after everything else)."""
    schema, question = named
    if values is not None:
        pair_slots = rules.apply(
            "conditions_on_named_values",
            pair_slots,
            conditions_on_named_values,
            *(question, schema, select, pair_slots, values),
            said=said,
        )
        pair_slots = rules.apply(
            "conditions_on_a_year",
            pair_slots,
            conditions_on_a_year,
            *(question, schema, select, pair_slots, values),
            said=said,
        )
    for name, placed in (
        ("nested_on_shown_table", nested_on_shown_table),
        ("ordered_on_shown_table", ordered_on_shown_table),
    ):
        pair_slots = rules.apply(name, pair_slots, placed, schema, select, pair_slots)
    holding = frozenset(values.columns) if values is not None else frozenset()
    select, pair_slots = rules.apply(
        "columns_of_named_tables",
        (select, pair_slots),
        columns_of_named_tables,
        *(question, schema, select, pair_slots, said),
        holding=holding,
    )
    select, pair_slots = rules.apply(
        "read_by_name", (select, pair_slots), read_by_name, question, schema, select, pair_slots
    )
    nearer = rules.apply(
        "nearest_equals", (select, pair_slots), nearest_equals, schema, select, pair_slots
    )
    starts = [nearer] if nearer == (select, pair_slots) else [nearer, (select, pair_slots)]
    return [_spoken(question, schema, s, chosen, slots) for s, slots in starts]


def _spoken(
    question: str,
    schema: Schema,
    select: frozenset[SelectItem],
    chosen: frozenset[str],
    pair_slots: Slots,
) -> SketchParts:
    """The rules of `rank` that read what the question says, after the columns are placed.
    Each rule of a group reads the sketch as the group found it; a later one's answer wins."""
    start = (select, chosen, pair_slots)
    for name, repair in (
        ("counted_by_value", counted_by_value),
        ("grouped_by_its_aggregate", grouped_by_its_aggregate),
        ("ordered_by_a_quantity", ordered_by_a_quantity),
    ):
        if rules.enabled(name):
            repaired = rules.noted(name, start, repair(question, schema, *start))
            if repaired is not None:
                select, chosen, pair_slots = repaired
    pair_slots = rules.apply(
        "spoken_order", pair_slots, spoken_order, question, schema, select, pair_slots
    )
    select, pair_slots = rules.apply(
        "spoken_group", (select, pair_slots), spoken_group, question, schema, select, pair_slots
    )
    pair_slots = rules.apply(
        "grouped_by_asked", pair_slots, grouped_by_asked, question, schema, select, pair_slots
    )
    group_by = pair_slots.group_by
    said: tuple[tuple[str, Callable[[], frozenset[SelectItem] | None]], ...] = (
        ("spoken_aggregates", lambda: spoken_aggregates(question, schema, select, group_by)),
        ("spoken_select", lambda: spoken_select(question, schema, select, group_by)),
        ("spoken_aggregate_of", lambda: spoken_aggregate_of(question, schema, select)),
        ("spoken_columns", lambda: spoken_columns(question, schema, select)),
        ("spoken_extreme", lambda: spoken_extreme(question, schema, select, chosen)),
    )
    spoken = None  # the first of these that answers
    for name, speak in said:
        if rules.enabled(name):
            spoken = rules.noted(name, select, speak())
            if spoken:
                break
    shown = spoken if spoken is not None else select
    select = rules.apply("aggregates_of_one_table", shown, aggregates_of_one_table, schema, shown)
    start = (select, chosen, pair_slots)
    for name, regroup in (
        ("grouped_without_aggregate", grouped_without_aggregate),
        ("ordered_by_frequency", ordered_by_frequency),
    ):
        if rules.enabled(name):
            regrouped = rules.noted(name, start, regroup(question, *start))
            if regrouped is not None:
                select, chosen, pair_slots = regrouped
    ordered = (chosen, pair_slots)
    chosen, pair_slots = rules.apply(
        "spoken_age_order", ordered, spoken_age_order, question, schema, select, *ordered
    )
    ordered = (chosen, pair_slots)
    chosen, pair_slots = rules.apply(
        "spoken_recency", ordered, spoken_recency, question, schema, select, *ordered
    )
    select, chosen = rules.apply(
        "one_number_asked",
        (select, chosen),
        one_number_asked,
        *(question, schema, select, chosen, pair_slots),
    )
    select = rules.apply("shown_groups", select, shown_groups, select, pair_slots)
    return select, chosen, pair_slots


_cache: dict[tuple[str, str, int, str], Sketcher] = {}
_cache_lock = threading.Lock()


def load_sketcher(
    runtime: RuntimeSettings | None = None, settings: SketchSettings | None = None
) -> Sketcher:
    """The shipped (or `[runtime] models_dir`) sketch model and aligner, files verified against
    manifest.json, loaded once per settings and shared."""
    runtime = runtime if runtime is not None else RuntimeSettings()
    settings = settings if settings is not None else SketchSettings()
    _check(settings)
    models_dir = resolve_models_dir(runtime)
    key = (str(models_dir), runtime.provider.strip().lower(), runtime.threads, repr(settings))
    with _cache_lock:
        sketcher = _cache.get(key)
        if sketcher is None:
            providers, reason = choose_providers(runtime.provider)
            files = ("model.onnx", "tokenizer.json")
            sketch = verify_model(models_dir, SKETCH_MODEL, files)
            aligner = verify_model(models_dir, ALIGNER_MODEL, files) if settings.aligner else None
            sketcher = Sketcher.from_files(
                sketch.file("model.onnx"),
                aligner.file("model.onnx") if aligner is not None else None,
                sketch.file("tokenizer.json"),
                settings=settings,
                providers=providers,
                threads=runtime.threads,
                reads_values=sketch.entry.get("reads_values") is True,
                max_length=int(sketch.entry.get("max_length", MAX_LENGTH)),
            )
            log.info(
                "sketch model and aligner loaded from %s on %s (%s)",
                models_dir,
                sketcher.provider,
                reason,
            )
            _cache[key] = sketcher
        return sketcher
