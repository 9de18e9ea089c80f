"""CLI command groups; each module has register(app) and stays import-light."""
