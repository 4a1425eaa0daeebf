"""Records -> one tidy table (results.parquet) with derived metrics."""
