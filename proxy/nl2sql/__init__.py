"""The natural-language pipeline. It imports nothing from `proxy.wire` or `proxy.server`, and
reaches the database only through `database.Database`, so the SQL functions reuse it unchanged."""
