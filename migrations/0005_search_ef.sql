-- Semantic look-ups search the HNSW graph with hnsw.ef_search = 200 (pgvector's default is 40).
-- Measured by benchmarks/calibration.py at 1,000,000 indexed values: recall@1 against an exact
-- scan 0.825 at 40 and 0.980 at 200, p50 1.1 ms and 3.4 ms. A value index answers a handful of
-- look-ups per question, so the exact nearest value is worth 2 ms. The same number is
-- proxy.valueindex.common.HNSW_EF_SEARCH (a test keeps them equal).
ALTER FUNCTION nl.search_semantic(text, integer, text, text, text) SET hnsw.ef_search = 200;
