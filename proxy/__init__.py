"""pgnl: natural-language questions for PostgreSQL, through a wire-protocol proxy."""

__version__ = "0.1.0"
