"""The MCP door: an MCP tool per action class (official SDK), and the operators' MCP tool set.

May import doors._shared and the service; never the CLI, HTTP or gateway doors.
"""
