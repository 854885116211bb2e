-- The record of every translation (nl.query_log), and the look-up that finds a column's values
-- inside a question's text (nl.search_in_text), which PLM-only completion uses for values the
-- question names without quotes ("singers from france" -> 'France').
--
-- nl.query_log: one row per question answered through the proxy or `pgnl ask`, written as the
-- asking role. Row-level security: a role reads and writes only its own rows (the owner of the
-- table, who ran `pgnl migrate`, reads them all). Columns hold what `proxy.nl2sql.querylog`
-- writes; jsonb columns are lists and objects of plain values.

CREATE TABLE nl.query_log (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    logged_at      timestamptz NOT NULL DEFAULT now(),
    role_name      text        NOT NULL DEFAULT current_user,
    database_name  text        NOT NULL DEFAULT current_database(),
    directive      text        NOT NULL,
    question       text        NOT NULL,
    chosen_sql     text,
    outcome        text        NOT NULL,
    error          text,
    candidates     jsonb       NOT NULL DEFAULT '[]',
    trace          jsonb       NOT NULL DEFAULT '[]',
    timings_ms     jsonb       NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE nl.query_log IS
    'every natural-language question pgnl translated: who asked, the SQL chosen, every candidate, the trace and stage timings';
CREATE INDEX query_log_logged_at ON nl.query_log (logged_at);

ALTER TABLE nl.query_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_rows ON nl.query_log FOR ALL TO PUBLIC
    USING (role_name = current_user) WITH CHECK (role_name = current_user);
GRANT SELECT, INSERT ON nl.query_log TO PUBLIC;

CREATE FUNCTION nl.search_in_text(
    query_text text,
    k integer,
    scope_schema text DEFAULT NULL,
    scope_tables jsonb DEFAULT NULL,
    min_score double precision DEFAULT 0.5
)
RETURNS TABLE (
    schema_name text,
    table_name text,
    column_name text,
    value text,
    score double precision,
    frequency bigint
)
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path FROM CURRENT
AS $fn$
    -- The values that appear in the text, in the tables named (a JSON array; all of the schema's when
    -- scope_tables is NULL; the whole database when scope_schema is NULL too): pg_trgm's strict
    -- word similarity of the value to the closest run of whole words of the text (1.0: all of
    -- the value's words are there). No index serves this direction of the comparison, so the
    -- scope's rows are scanned: callers widen the scope only when a narrower one found nothing.
    SELECT v.schema_name, v.table_name, v.column_name, v.value,
           strict_word_similarity(v.normalised, query_text)::double precision AS score,
           v.frequency
      FROM nl.value_index v
     WHERE (scope_schema IS NULL OR v.schema_name = scope_schema)
       AND (scope_tables IS NULL
            OR v.table_name IN (SELECT jsonb_array_elements_text(scope_tables)))
       AND has_column_privilege(v.table_oid, v.column_attnum, 'SELECT')
       AND length(v.normalised) > 1
       AND strict_word_similarity(v.normalised, query_text) >= min_score
     ORDER BY score DESC, length(v.normalised) DESC, v.frequency DESC, v.value
     LIMIT k;
$fn$;
