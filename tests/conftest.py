import os

# Tests choose their LLM: none unless a test asks for one (the embedded model by
# PGNL_LLM_PROVIDER=embedded, a scripted server by base_url). Without this, every proxy a test
# starts would load the embedded model wherever pgnl[llm] is installed.
os.environ["PGNL_LLM_PROVIDER"] = "none"

pytest_plugins = ["tests.fix_pg", "tests.fix_proxy", "tests.fix_llm"]
