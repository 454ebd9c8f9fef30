"""Sources other than scraping each endpoint: a Prometheus-API server that already holds
the fleet's counters (Prometheus, Thanos, Mimir). See docs/fleet.md."""
