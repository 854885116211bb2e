-- The look-ups calibration needs, as SQL functions so that the proxy, PL/Python and psql share
-- them: nearest values by meaning (nl.search_semantic) and by spelling (nl.search_trigram), within
-- a column, a table (schema and table given) or the whole database (no scope given).
--
-- Both are SECURITY INVOKER: nl.value_index's row-level security applies to the caller, so a
-- role only ever gets values it could read itself. They also skip values whose column no longer
-- exists, for the roles that bypass the policy. Results come nearest first; score is a
-- similarity in [0, 1] (cosine similarity; pg_trgm's similarity of the normalised text).
--
-- Their search_path is the one this file runs with: pg_catalog, then the extensions' schemas.
-- hnsw.iterative_scan = relaxed_order lets the HNSW scan go on past ef_search candidates until
-- enough rows pass the policy (pgvector 0.8); results may come slightly out of order, and callers
-- sort by score.

-- Load pgvector's library in this session, so that its settings below are known ones.
SELECT '[0]'::vector;

CREATE FUNCTION nl.search_semantic(
    query_embedding text,
    k integer,
    scope_schema text DEFAULT NULL,
    scope_table text DEFAULT NULL,
    scope_column text DEFAULT NULL
)
RETURNS TABLE (
    schema_name text,
    table_name text,
    column_name text,
    value text,
    score double precision,
    frequency bigint
)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path FROM CURRENT
SET hnsw.iterative_scan = relaxed_order
AS $fn$
#variable_conflict use_column
DECLARE
    target vector := query_embedding::vector;
BEGIN
    IF scope_column IS NOT NULL THEN
        RETURN QUERY
        SELECT v.schema_name, v.table_name, v.column_name, v.value,
               1 - (v.embedding <=> target), v.frequency
          FROM nl.value_index v
         WHERE v.schema_name = scope_schema AND v.table_name = scope_table
           AND v.column_name = scope_column
           AND has_column_privilege(v.table_oid, v.column_attnum, 'SELECT')
         ORDER BY v.embedding <=> target, v.value
         LIMIT k;
    ELSIF scope_table IS NOT NULL THEN
        RETURN QUERY
        SELECT v.schema_name, v.table_name, v.column_name, v.value,
               1 - (v.embedding <=> target), v.frequency
          FROM nl.value_index v
         WHERE v.schema_name = scope_schema AND v.table_name = scope_table
           AND has_column_privilege(v.table_oid, v.column_attnum, 'SELECT')
         ORDER BY v.embedding <=> target
         LIMIT k;
    ELSE
        RETURN QUERY
        SELECT v.schema_name, v.table_name, v.column_name, v.value,
               1 - (v.embedding <=> target), v.frequency
          FROM nl.value_index v
         WHERE has_column_privilege(v.table_oid, v.column_attnum, 'SELECT')
         ORDER BY v.embedding <=> target
         LIMIT k;
    END IF;
END
$fn$;

CREATE FUNCTION nl.search_trigram(
    query_text text,
    k integer,
    scope_schema text DEFAULT NULL,
    scope_table text DEFAULT NULL,
    scope_column text DEFAULT NULL
)
RETURNS TABLE (
    schema_name text,
    table_name text,
    column_name text,
    value text,
    score double precision,
    frequency bigint
)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path FROM CURRENT
AS $fn$
#variable_conflict use_column
BEGIN
    IF scope_column IS NOT NULL THEN
        RETURN QUERY
        SELECT v.schema_name, v.table_name, v.column_name, v.value,
               similarity(v.normalised, query_text)::double precision, v.frequency
          FROM nl.value_index v
         WHERE v.schema_name = scope_schema AND v.table_name = scope_table
           AND v.column_name = scope_column
           AND has_column_privilege(v.table_oid, v.column_attnum, 'SELECT')
         ORDER BY v.normalised <-> query_text, v.value
         LIMIT k;
    ELSIF scope_table IS NOT NULL THEN
        RETURN QUERY
        SELECT v.schema_name, v.table_name, v.column_name, v.value,
               similarity(v.normalised, query_text)::double precision, v.frequency
          FROM nl.value_index v
         WHERE v.schema_name = scope_schema AND v.table_name = scope_table
           AND has_column_privilege(v.table_oid, v.column_attnum, 'SELECT')
         ORDER BY v.normalised <-> query_text
         LIMIT k;
    ELSE
        RETURN QUERY
        SELECT v.schema_name, v.table_name, v.column_name, v.value,
               similarity(v.normalised, query_text)::double precision, v.frequency
          FROM nl.value_index v
         WHERE has_column_privilege(v.table_oid, v.column_attnum, 'SELECT')
         ORDER BY v.normalised <-> query_text
         LIMIT k;
    END IF;
END
$fn$;
