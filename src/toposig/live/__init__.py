"""Measuring a model while it trains: the monitor every integration drives, and the
executor that lets the offline pipeline's driver write its records."""
