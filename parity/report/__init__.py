"""Reports: A/B compare, dated phase reports (markdown + plots) and the ledger."""
