"""The SQL functions `nl.sql`, `nl.ask`, `nl.explain` (migrations/0008_sql_functions.sql): thin
PL/Python wrappers over the pipeline the proxy runs (`proxy.nl2sql`), shipped as
`proxy.pg_functions`.

- `calls`: what each SQL function does, in the backend: start the backend's worker, run the
  queries it sends as the caller, inside a read-only subtransaction that is always rolled back,
  and raise the proxy's SQLSTATEs; `nl.pgnl_import()` (`calls.where`), which `pgnl migrate`
  runs before it installs the functions, checks that all of this works on the server;
- `plpy_database`: the pipeline's `Database` protocol (docs/method.md) over PL/Python's `plpy`;
- `worker`: the process that runs the pipeline for one backend (the models stay out of the
  server's processes); `channel`: the pipe between the two.
"""
