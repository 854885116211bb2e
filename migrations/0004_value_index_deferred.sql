-- A bulk refresh of the value index (the first one, or one that re-embeds most values) drops the
-- HNSW and trigram indexes, loads the rows, and builds the indexes again in one pass, which is
-- several times faster than maintaining them row by row. The definitions of the dropped indexes
-- wait here until they are rebuilt, so that a refresh interrupted in between rebuilds them the
-- next time it runs (`pgnl index`).
CREATE TABLE nl.value_index_deferred (
    index_name text PRIMARY KEY,
    definition text NOT NULL,
    dropped_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE nl.value_index_deferred IS
    'pgnl: indexes of nl.value_index dropped for a bulk refresh and not yet rebuilt';
