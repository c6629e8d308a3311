"""Front doors: CLI, HTTP API, MCP server."""
