"""What the doors share: wire models of operations and controls, the MCP refusal screen, the
run-call and budget wire forms, offloading blocking calls, tracing of requests.

May import the service and below; never a door.
"""
