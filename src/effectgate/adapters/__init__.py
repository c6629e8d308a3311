"""Reference venue adapters: the paper venue and a generic HTTP venue adapter."""
