-- Exact look-ups of normalised values: the sketch stage asks, for every question, which values
-- the question names word for word (`ValueIndex.named_in`: `normalised = ANY(<the question's
-- runs of words>)`), over the whole database. A btree index answers that without reading the
-- value index through, as nl.search_in_text must.

CREATE INDEX value_index_normalised ON nl.value_index (normalised);
