"""What an SRE runs next to the controller: the alert rules, the Grafana dashboards and their
documentation, checked with promtool and against a real Prometheus scraping a running controller."""
