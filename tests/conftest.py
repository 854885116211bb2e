pytest_plugins = ["tests.fix_pg", "tests.fix_proxy"]
