-- optional: the SQL functions need plpython3u, and pgnl importable by the server's Python
--
-- The SQL functions: nl.sql, nl.ask and nl.explain answer a question inside the database, as
-- the proxy's directives do (pg_functions/, shipped as proxy.pg_functions). pgnl migrate applies
-- this file only where nl.pgnl_import() succeeds inside its transaction, and otherwise says why
-- and leaves it for a later run.
--
-- The backend imports only the thin part of pgnl (proxy.pg_functions); the pipeline runs in a
-- worker process that the backend starts on its first call (see pg_functions/worker.py).
--
-- nl.plpython_setup and nl.plpython_path: what pgnl migrate found (the Python that ran it, which
-- runs the worker; the site folders where that pgnl is installed, tried before the server
-- Python's own; the settings file it was given). Whoever may write them chooses the code the
-- server runs: only their owner may.

CREATE EXTENSION IF NOT EXISTS plpython3u;

CREATE TABLE nl.plpython_path (
    position integer PRIMARY KEY,
    dir      text NOT NULL
);
CREATE TABLE nl.plpython_setup (
    only_row    boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    python      text,
    config_file text
);
INSERT INTO nl.plpython_setup DEFAULT VALUES;
REVOKE ALL ON nl.plpython_path, nl.plpython_setup FROM PUBLIC;
GRANT SELECT ON nl.plpython_path, nl.plpython_setup TO PUBLIC;

CREATE FUNCTION nl.pgnl_import() RETURNS text
LANGUAGE plpython3u VOLATILE SECURITY INVOKER
AS $fn$
    # Make pgnl importable in this backend (once), start its worker, say where pgnl was found.
    if "pgnl" not in GD:
        import site
        import sys

        before = list(sys.path)
        for row in plpy.execute("SELECT dir FROM nl.plpython_path ORDER BY position"):
            site.addsitedir(row["dir"])
        sys.path[:] = [p for p in sys.path if p not in before] + before
        try:
            from proxy.pg_functions import calls
        except ImportError as exc:
            sys.path[:] = before
            plpy.error(
                f"the server's Python (Python {sys.version.split()[0]}, {sys.executable}) "
                f"cannot import pgnl: {exc}",
                hint="Install pgnl into that Python (python3 -m pip install pgnl), or make the "
                "folders of nl.plpython_path readable by the server's account and built for "
                "the same Python version; then run pgnl migrate again.",
                sqlstate="58000",
            )
        GD["pgnl"] = calls
    return GD["pgnl"].where(plpy)
$fn$;
COMMENT ON FUNCTION nl.pgnl_import() IS
    'makes pgnl importable in this backend, starts its worker and says where pgnl is';

-- The work of each function, in PL/Python (proxy.pg_functions.calls).
CREATE FUNCTION nl.plpy_sql(question text) RETURNS text
LANGUAGE plpython3u VOLATILE SECURITY INVOKER
AS $fn$
    if "pgnl" not in GD:
        plpy.execute("SELECT nl.pgnl_import()")
    return GD["pgnl"].sql(plpy, question)
$fn$;

CREATE FUNCTION nl.plpy_ask(question text) RETURNS SETOF jsonb
LANGUAGE plpython3u VOLATILE SECURITY INVOKER
AS $fn$
    if "pgnl" not in GD:
        plpy.execute("SELECT nl.pgnl_import()")
    return GD["pgnl"].ask(plpy, question)
$fn$;

CREATE FUNCTION nl.plpy_explain(question text)
RETURNS TABLE (stage text, candidate integer, score double precision, calibration text,
               outcome text, ms double precision)
LANGUAGE plpython3u VOLATILE SECURITY INVOKER
AS $fn$
    if "pgnl" not in GD:
        plpy.execute("SELECT nl.pgnl_import()")
    return GD["pgnl"].explain(plpy, question)
$fn$;

-- An error of the PL/Python functions as the proxy sends it: the same SQLSTATE, message, detail
-- and hint, without PL/Python's "plpy.Error: " before the message and its traceback after it.
-- (A cancel, 57014, is not caught by WHEN OTHERS: it ends the call as it is.)
CREATE FUNCTION nl.pgnl_reraise(state text, message text, detail text, hint text)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    text_only text := regexp_replace(message, '^((plpy\.Error|spiexceptions\.[A-Za-z]+): )+', '');
BEGIN
    IF coalesce(detail, '') = '' AND coalesce(hint, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = text_only;
    ELSIF coalesce(detail, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = text_only, HINT = hint;
    ELSIF coalesce(hint, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = text_only, DETAIL = detail;
    ELSE
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = text_only, DETAIL = detail, HINT = hint;
    END IF;
END
$fn$;

CREATE FUNCTION nl.sql(question text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $fn$
DECLARE
    state text; message text; detail text; hint text;
BEGIN
    RETURN nl.plpy_sql(question);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM nl.pgnl_reraise(state, message, detail, hint);
END
$fn$;
COMMENT ON FUNCTION nl.sql(text) IS
    'the SQL pgnl chooses for a natural-language question (as -- nl show:)';

CREATE FUNCTION nl.ask(question text) RETURNS SETOF jsonb
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $fn$
DECLARE
    state text; message text; detail text; hint text;
BEGIN
    RETURN QUERY SELECT * FROM nl.plpy_ask(question);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM nl.pgnl_reraise(state, message, detail, hint);
END
$fn$;
COMMENT ON FUNCTION nl.ask(text) IS
    'the rows of the SQL pgnl chooses for a natural-language question, one JSON object each';

CREATE FUNCTION nl.explain(question text)
RETURNS TABLE (stage text, candidate integer, score double precision, calibration text,
               outcome text, ms double precision)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $fn$
DECLARE
    state text; message text; detail text; hint text;
BEGIN
    RETURN QUERY SELECT * FROM nl.plpy_explain(question);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM nl.pgnl_reraise(state, message, detail, hint);
END
$fn$;
COMMENT ON FUNCTION nl.explain(text) IS
    'how pgnl answers a natural-language question: a row a step (as -- nl explain:)';
