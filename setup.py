"""The optional C build of the proxy's hot path (proxy/wire/_framing.c).

Everything else is declared in pyproject.toml. Without a C compiler the build is skipped and the
pure-Python relay, which behaves the same, is used.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("proxy.wire._framing", ["proxy/wire/_framing.c"], optional=True),
    ]
)
