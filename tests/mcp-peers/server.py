"""An MCP server on the official Python SDK (mcp==2.3.0) over stdio, which speaks MCP
2026-07-28 to a client that asks for it (server/discover, no initialize): the peer the
wrap tests of `input_required` put behind `aegis wrap`, since server-everything answers
2025-11-25. One tool, `echo`.

The SDK seals every `requestState` it mints and refuses one it did not, so a retry the
relay forwarded with its own `requestState` would fail here.

Usage: server.py   (PYTHONPATH must reach the SDK)
"""

from mcp.server.mcpserver import MCPServer

app = MCPServer("aegis-test-modern")


@app.tool()
def echo(message: str) -> str:
    """Echoes the message back."""
    return f"Echo: {message}"


if __name__ == "__main__":
    app.run("stdio")
