-- optional: nl.refresh_index is one of the SQL functions (plpython3u, pgnl importable)
-- needs: 0008_sql_functions
--
-- nl.refresh_index(schema): what pgnl index does, from SQL, in the caller's transaction and as
-- the caller (SECURITY INVOKER): only the owner of nl.value_index (who ran pgnl migrate) or a
-- superuser may write the index, and only they may call it until someone GRANTs EXECUTE.
-- The work is proxy.pg_functions.calls.refresh_index: the backend's worker reads the columns
-- and embeds their values through the backend, which writes the rows.

CREATE FUNCTION nl.plpy_refresh_index(schema text)
RETURNS TABLE (schema_name text, table_name text, column_name text, outcome text,
               value_count integer, detail text)
LANGUAGE plpython3u VOLATILE SECURITY INVOKER
AS $fn$
    if "pgnl" not in GD:
        plpy.execute("SELECT nl.pgnl_import()")
    return GD["pgnl"].refresh_index(plpy, schema)
$fn$;

CREATE FUNCTION nl.refresh_index(schema text DEFAULT NULL)
RETURNS TABLE (schema_name text, table_name text, column_name text, outcome text,
               value_count integer, detail text)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;
BEGIN
    RETURN QUERY SELECT * FROM nl.plpy_refresh_index(schema);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    PERFORM nl.pgnl_reraise(e_state, e_message, e_detail, e_hint);
END
$fn$;
COMMENT ON FUNCTION nl.refresh_index(text) IS
    'builds or refreshes the value index (as pgnl index does) of one schema, several separated by commas, or all (NULL); a row a column';

REVOKE EXECUTE ON FUNCTION nl.plpy_refresh_index(text), nl.refresh_index(text) FROM PUBLIC;
