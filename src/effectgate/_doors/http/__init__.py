"""The HTTP door: the agent API and the operator API (FastAPI under uvicorn), with MCP and the
console mounted on the same app.

May import doors._shared, doors.mcp, doors.console and the service; never the CLI or the gateway.
"""
