"""MCP tools of the Responses API: the router lists an MCP server's tools, shows them to the
model, calls them when the model does and generates again, in one response.

- :mod:`~turnout.responses.mcp.servers`: a request's ``mcp`` tools, checked, and the operator's
  allow-list of server hosts and addresses.
- :mod:`~turnout.responses.mcp.client`: one server through the official ``mcp`` SDK (an extra:
  ``pip install 'turnout[mcp]'``), within deadlines and a byte limit.
- :mod:`~turnout.responses.mcp.render`: the MCP items and their stream events.
- :mod:`~turnout.responses.mcp.run`: the generations and calls of one response.
"""
