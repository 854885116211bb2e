-- nl.ambiguity: the database's query history mined into records that later questions retrieve
-- (`pgnl learn`, proxy.learn): one row per distinct statement that ran on this database, from
-- pg_stat_statements (its normalised text, $n for the constants), from nl.query_log (answers
-- that were not asked again) or from a file of SQL. Each row holds the statement, the parts
-- the ambiguity stage compares readings by (`features`: joins, columns, aggregates, DISTINCT,
-- filters, grouping, ordering; proxy.nl2sql.history), the values it filtered by, the question
-- it answered where one is known, and an embedding (all-MiniLM-L6-v2, 384-d) of that question
-- or of the statement in words, for retrieval by a question's embedding.
--
-- Row-level security: a role sees only the records whose every table and column it may SELECT
-- (nl.may_read), so nothing from a table the asking role cannot read is retrieved for it. Only
-- the owner (who ran pgnl migrate and runs pgnl learn) writes.

CREATE TABLE nl.ambiguity (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    database_name   text        NOT NULL DEFAULT current_database(),
    statement_hash  text        NOT NULL,
    fingerprint     text        NOT NULL,
    statement       text        NOT NULL,
    source          text        NOT NULL,
    calls           bigint      NOT NULL DEFAULT 1,
    table_oids      oid[]       NOT NULL,
    column_oids     oid[]       NOT NULL,
    column_attnums  smallint[]  NOT NULL,
    features        text[]      NOT NULL,
    filter_values   jsonb       NOT NULL DEFAULT '{}',
    question        text,
    description     text        NOT NULL,
    embedding       vector(384) NOT NULL,
    first_seen      timestamptz NOT NULL DEFAULT now(),
    last_seen       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (database_name, statement_hash),
    CHECK (cardinality(column_oids) = cardinality(column_attnums))
);
COMMENT ON TABLE nl.ambiguity IS
    'the SQL that ran on this database (pg_stat_statements, nl.query_log, pgnl learn --file), as records of its parts with an embedding, retrieved for later questions';
CREATE INDEX ambiguity_fingerprint ON nl.ambiguity (database_name, fingerprint);

-- Whether the current role may read every table and column a record names (an oid that no
-- longer names a table or column counts as unreadable).
CREATE FUNCTION nl.may_read(table_oids oid[], column_oids oid[], column_attnums smallint[])
RETURNS boolean
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path FROM CURRENT
AS $fn$
    SELECT NOT EXISTS (SELECT 1 FROM unnest(table_oids) t
                        WHERE has_any_column_privilege(t, 'SELECT') IS NOT TRUE)
       AND NOT EXISTS (SELECT 1 FROM unnest(column_oids, column_attnums) AS c(t, a)
                        WHERE has_column_privilege(c.t, c.a, 'SELECT') IS NOT TRUE);
$fn$;

ALTER TABLE nl.ambiguity ENABLE ROW LEVEL SECURITY;
CREATE POLICY readable_records ON nl.ambiguity FOR SELECT TO PUBLIC
    USING (nl.may_read(table_oids, column_oids, column_attnums));
GRANT SELECT ON nl.ambiguity TO PUBLIC;
