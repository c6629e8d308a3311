"""The front doors: ``cli/`` (Typer + Rich), ``http/`` (FastAPI), ``mcp/`` (the official SDK),
``console/`` (Jinja2 + htmx), ``gateway/`` (effectgate in front of upstream MCP servers), and
``_shared/`` (wire models the doors share).

Doors import the service and everything below it; nothing below imports a door.
"""
