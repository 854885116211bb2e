-- The nl schema, and the extensions the value index needs: pgvector (0.8 or later, for HNSW
-- iterative scans) and pg_trgm.
--
-- This file runs with the session's own search_path, so that the extensions land where
-- `CREATE EXTENSION` would put them for this role (usually public). Every later file runs with
-- search_path = pg_catalog, <the extensions' schemas>, and names its own objects with `nl.`.

CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE SCHEMA IF NOT EXISTS nl;
COMMENT ON SCHEMA nl IS 'pgnl: natural-language questions (value index, query log, functions)';
GRANT USAGE ON SCHEMA nl TO PUBLIC;
