"""A real stdio MCP server (the `mcp` SDK's MCPServer) with one tool, for Codex CLI to load
from its `mcp_servers` config: Codex offers an MCP server's tools to the model as one
`namespace` tool (`mcp__<server>`), so a call to it reaches the proxy as a namespaced call.

Run as a script: `python notes_mcp_server.py`; it speaks MCP on stdin/stdout."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")


@server.tool()
def remember(text: str) -> str:
    """Store a note and return its receipt."""
    return f"noted: {text}"


if __name__ == "__main__":
    server.run("stdio")
