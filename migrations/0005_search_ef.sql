-- Semantic look-ups search the HNSW graph with hnsw.ef_search = 200 (pgvector's default is 40).
-- Measured by benchmarks/calibration.py at 1,000,000 indexed values (two runs): recall@1 against
-- an exact scan 0.825 at 40 and 0.95-0.98 at 200, p50 1.1-1.3 ms and 3.4-3.7 ms; at 100,000
-- values and fewer, 1.000 either way. A value index answers a handful of look-ups per question,
-- so the nearer value is worth 2 ms. The same number is
-- proxy.valueindex.common.HNSW_EF_SEARCH (a test keeps them equal).
ALTER FUNCTION nl.search_semantic(text, integer, text, text, text) SET hnsw.ef_search = 200;
