"""History: every run's cells in one DuckDB file, change points over its series, the alert
that starts a bisection, and a static dashboard (docs/HISTORY.md)."""
