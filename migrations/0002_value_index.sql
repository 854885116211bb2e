-- nl.value_index: one row per distinct value of each indexed text column, with its embedding, for
-- predicate calibration (a literal that is not in the database is replaced by the closest value
-- that is). Written only by `pgnl index`, run as the owner of these tables (the role that ran
-- `pgnl migrate`); readable by every role, but only for the values that role could read itself.
--
-- Privilege: row-level security on nl.value_index lets a row through only when the reading role
-- may use the source schema and SELECT the source column and, where row-level security is active
-- on the source table for that role, only when some row it can see holds the value. The source is
-- named by OID and attribute number, so a dropped (or dropped and recreated) table or column makes
-- its rows invisible until the next refresh removes them. Superusers and roles with BYPASSRLS skip
-- the policy (the look-up functions still check the column privilege).

CREATE TABLE nl.value_index (
    schema_name   text        NOT NULL,
    table_name    text        NOT NULL,
    column_name   text        NOT NULL,
    schema_oid    oid         NOT NULL,
    table_oid     oid         NOT NULL,
    column_attnum smallint    NOT NULL,
    value         text        NOT NULL,
    normalised    text        NOT NULL,
    frequency     bigint      NOT NULL,
    embedding     vector(384) NOT NULL,
    PRIMARY KEY (schema_name, table_name, column_name, value)
);
COMMENT ON TABLE nl.value_index IS
    'pgnl: distinct values of text columns with their MiniLM embedding (written by pgnl index)';
COMMENT ON COLUMN nl.value_index.frequency IS
    'rows holding the value; 0 for tables with row-level security (counts would reveal hidden rows)';
COMMENT ON COLUMN nl.value_index.normalised IS
    'the value case-folded, accents stripped, whitespace collapsed (proxy.valueindex.normalise)';

-- Semantic look-ups: nearest embeddings by cosine distance.
CREATE INDEX value_index_embedding ON nl.value_index USING hnsw (embedding vector_cosine_ops);

-- Character-level look-ups: a trigram index that serves ORDER BY normalised <-> literal (nearest
-- first). GiST rather than GIN on purpose: under row-level security PostgreSQL will not use a
-- non-leakproof operator such as pg_trgm's `%` as an index condition, so a GIN index would never
-- serve the roles the policy applies to; an ORDER BY is not a condition, so GiST's k-nearest
-- search still works for them (as the HNSW index does).
CREATE INDEX value_index_trigram ON nl.value_index USING gist (normalised gist_trgm_ops);

-- One row per indexed column: what the last refresh saw, so that a column whose distinct values
-- (and their counts) did not change is not read into the embedder again.
CREATE TABLE nl.value_index_columns (
    schema_name   text        NOT NULL,
    table_name    text        NOT NULL,
    column_name   text        NOT NULL,
    schema_oid    oid         NOT NULL,
    table_oid     oid         NOT NULL,
    column_attnum smallint    NOT NULL,
    fingerprint   text        NOT NULL,
    embedder      text        NOT NULL,
    value_count   integer     NOT NULL,
    complete      boolean     NOT NULL,
    indexed_at    timestamptz NOT NULL DEFAULT now(),
    checked_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, table_name, column_name)
);
COMMENT ON COLUMN nl.value_index_columns.fingerprint IS
    'sha256 over the indexed distinct values and their counts, sorted by value';
COMMENT ON COLUMN nl.value_index_columns.embedder IS
    'signature of the embedder that made this column''s embeddings (another one re-embeds it)';
COMMENT ON COLUMN nl.value_index_columns.complete IS
    'every distinct value of the column is in nl.value_index (no cap reached, none filtered out)';
COMMENT ON COLUMN nl.value_index_columns.indexed_at IS 'last time this column''s values changed';
COMMENT ON COLUMN nl.value_index_columns.checked_at IS 'last refresh that read this column';

-- Whether the current role can see a row of the source table that holds the value: a query on
-- the source table, as the current role, so that its row-level security policies apply. False
-- when the column is gone, the value no longer fits its type, or anything else goes wrong.
CREATE FUNCTION nl.row_visible(source_table oid, source_column smallint, source_value text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog
AS $fn$
DECLARE
    target      regclass;
    target_name name;
    target_type text;
    found_row   boolean;
BEGIN
    SELECT a.attrelid::regclass,
           a.attname,
           CASE WHEN a.atttypid = 'pg_catalog.bpchar'::regtype THEN 'pg_catalog.bpchar'
                ELSE a.atttypid::regtype::text END
      INTO target, target_name, target_type
      FROM pg_attribute a
     WHERE a.attrelid = source_table AND a.attnum = source_column AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I = $1::%s)',
                   target, target_name, target_type)
       INTO found_row
      USING source_value;
    RETURN coalesce(found_row, false);
EXCEPTION WHEN OTHERS THEN
    RETURN false;
END
$fn$;

ALTER TABLE nl.value_index ENABLE ROW LEVEL SECURITY;
CREATE POLICY value_readable ON nl.value_index FOR SELECT TO PUBLIC USING (
    has_schema_privilege(schema_oid, 'USAGE')
    AND has_column_privilege(table_oid, column_attnum, 'SELECT')
    AND (NOT row_security_active(table_oid) OR nl.row_visible(table_oid, column_attnum, value))
);
GRANT SELECT ON nl.value_index TO PUBLIC;

ALTER TABLE nl.value_index_columns ENABLE ROW LEVEL SECURITY;
CREATE POLICY column_readable ON nl.value_index_columns FOR SELECT TO PUBLIC USING (
    has_schema_privilege(schema_oid, 'USAGE')
    AND has_column_privilege(table_oid, column_attnum, 'SELECT')
);
-- Not the fingerprint or the number of values: those say something about rows a role may not see.
GRANT SELECT (schema_name, table_name, column_name, schema_oid, table_oid, column_attnum, complete,
              indexed_at)
    ON nl.value_index_columns TO PUBLIC;
