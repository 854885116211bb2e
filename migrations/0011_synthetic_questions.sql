-- Questions the LLM wrote for the query history's statements that came without one (`pgnl
-- learn` with an LLM, proxy.learn_questions): `question` holds it, `synthetic` says so, and the
-- record's embedding is then that question's. A user's own question (nl.query_log) replaces a
-- synthetic one when the statement is learned again.

ALTER TABLE nl.ambiguity ADD COLUMN synthetic boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN nl.ambiguity.synthetic IS
    'true where question was written by the LLM from the statement, not asked by a user';
