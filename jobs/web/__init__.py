"""HTTP faces: JSON API, OpenAPI, tokens, dashboard, metrics, health and probes."""
