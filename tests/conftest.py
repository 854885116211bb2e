pytest_plugins = ["tests.fix_pg", "tests.fix_proxy", "tests.fix_llm"]
