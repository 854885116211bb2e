"""The PostgreSQL wire protocol, sans I/O: bytes to message objects and back.

- `messages`: one class a message the proxy reads or writes itself.
- `framing`: message boundaries in a stream, without decoding what the proxy need not read.
- `errors`: a named builder, with its SQLSTATE, for every ErrorResponse the proxy sends.
"""
