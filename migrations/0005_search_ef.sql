-- Semantic look-ups search the HNSW graph with hnsw.ef_search = 100 (pgvector's default is 40).
-- Measured by benchmarks/calibration.py at 1,000,000 indexed values, recall@1 against an exact
-- scan and p50 latency: rows made by noise from real values, ef 40: 0.825, 1.3 ms; ef 100: 0.920,
-- 1.7 ms; ef 200: 0.950, 3.7 ms. Really embedded distinct values with typo queries (--rows
-- embedded), ef 40: 0.855, 2.5 ms; ef 100: 0.925, 4.3 ms; ef 200: 0.945, 7.8 ms. 100 is the most
-- that keeps p50 under 5 ms in both; at 100,000 values and fewer, recall is 0.98-1.000 at any of
-- them. The same number is proxy.valueindex.common.HNSW_EF_SEARCH (a test keeps them equal).
ALTER FUNCTION nl.search_semantic(text, integer, text, text, text) SET hnsw.ef_search = 100;
