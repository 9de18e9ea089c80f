"""Bisection (issue 24): the first patch of a series, or the first llama.cpp commit of a pin
bump, that breaks what the gates or the measurement say; and the weekly canary that applies
the series to the newest upstream."""
