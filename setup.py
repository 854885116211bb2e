"""What pyproject.toml cannot say: the packages, with the top-level migrations/ and pg_functions/
folders shipped as `proxy.migrations` and `proxy.pg_functions`, and the optional C build of the
proxy's hot path (proxy/wire/_framing.c; without a C compiler it is skipped and the pure-Python
relay, which behaves the same, is used).
"""

from setuptools import Extension, find_packages, setup

setup(
    packages=[
        *find_packages(include=["proxy", "proxy.*"]),
        "proxy.migrations",
        "proxy.pg_functions",
    ],
    package_dir={"proxy.migrations": "migrations", "proxy.pg_functions": "pg_functions"},
    ext_modules=[
        Extension("proxy.wire._framing", ["proxy/wire/_framing.c"], optional=True),
    ],
)
