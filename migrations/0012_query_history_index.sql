-- An HNSW index (cosine) on the query history's embeddings: the records nearest a question are
-- then read from the index, and the row-level security check (nl.may_read) runs only on the
-- records it yields, not on every record of a large history (pg_stat_statements keeps up to
-- 5,000 statements by default).

CREATE INDEX ambiguity_embedding ON nl.ambiguity USING hnsw (embedding vector_cosine_ops);
