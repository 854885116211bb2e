-- nl.history_near: the records of nl.ambiguity nearest a question's embedding, as the caller's
-- role sees them (SECURITY INVOKER: nl.may_read applies). The HNSW index of 0012 yields
-- candidates before the row-level security check; hnsw.iterative_scan = relaxed_order lets the
-- scan go on past ef_search candidates until k records pass it (pgvector 0.8), so a role that
-- may read few of a large history still gets its k nearest. Results may come slightly out of
-- order: callers sort by similarity. The embedding comes as a vector, not text: a cast inside
-- would parse the text anew for every row a sequential scan reads. Its search_path is the one
-- this file runs with.

-- Load pgvector's library in this session, so that its setting below is a known one.
SELECT '[0]'::vector;

CREATE FUNCTION nl.history_near(query_embedding vector, k integer)
RETURNS TABLE (
    statement text,
    features text,
    question text,
    calls bigint,
    similarity double precision
)
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path FROM CURRENT
SET hnsw.iterative_scan = relaxed_order
AS $fn$
    SELECT a.statement, array_to_string(a.features, E'\n'), a.question, a.calls,
           1 - (a.embedding <=> query_embedding)
      FROM nl.ambiguity a
     WHERE a.database_name = current_database()
     ORDER BY a.embedding <=> query_embedding
     LIMIT k
$fn$;
COMMENT ON FUNCTION nl.history_near(vector, integer) IS
    'the k records of nl.ambiguity nearest an embedding that the calling role may read (similarity: cosine)';
