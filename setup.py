"""What pyproject.toml cannot say: the packages, with the top-level migrations/ and pg_functions/
folders shipped as `proxy.migrations` and `proxy.pg_functions`, and the optional C builds of the
proxy's hot path (proxy/wire/_framing.c, and the native relay proxy/_relay_loop.c; without a C
compiler they are skipped and the pure-Python relay, which behaves the same, is used).
"""

import sys

from setuptools import Extension, find_packages, setup

# The native relay (proxy/_relay_loop.c) runs an epoll loop: Linux only, optional like the rest.
native_relay = (
    [
        Extension(
            "proxy._relay_loop",
            ["proxy/_relay_loop.c"],
            depends=["proxy/wire/_scan.h"],
            optional=True,
        )
    ]
    if sys.platform.startswith("linux")
    else []
)

setup(
    packages=[
        *find_packages(include=["proxy", "proxy.*"]),
        "proxy.migrations",
        "proxy.pg_functions",
    ],
    package_dir={"proxy.migrations": "migrations", "proxy.pg_functions": "pg_functions"},
    ext_modules=[
        Extension(
            "proxy.wire._framing",
            ["proxy/wire/_framing.c"],
            depends=["proxy/wire/_scan.h"],
            optional=True,
        ),
        *native_relay,
    ],
)
