"""A real Prometheus server and small exporters for the adapter tests; no test logic here."""
