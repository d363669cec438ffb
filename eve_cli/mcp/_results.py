"""An MCP ``CallToolResult`` as eve keeps it: the text the model reads, plus the images (as
bytes), audio, resources and structured content, journaled with the call's result.
"""

from __future__ import annotations

import base64
import binascii
import json

import mcp_types

from eve_cli._tools import ResultPart, ToolExtra, ToolResult

MAX_TEXT = 100_000  # characters of a result the model reads; the rest is cut, and said so


def to_result(result: mcp_types.CallToolResult, server: str, tool: str) -> ToolResult:
    """The harness's result for one call (``extra``: ``server``, ``tool``, ``parts`` that are
    not text, ``structured``)."""
    texts: list[str] = []
    parts: list[ResultPart] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
            data = _bytes(block.data)
            parts.append({"type": kind, "mimeType": block.mime_type, "data": data})
            texts.append(f"[{kind} {block.mime_type}, {len(data)} bytes]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                texts.append(resource.text)
            else:
                data = _bytes(resource.blob)
                parts.append({"type": "resource", "uri": str(resource.uri), "data": data})
                texts.append(f"[resource {resource.uri}, {len(data)} bytes]")
        elif isinstance(block, mcp_types.ResourceLink):
            texts.append(f"[resource link {block.uri}]")
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, default=str))
    extra: ToolExtra = {"server": server, "tool": tool}
    if parts:
        extra["parts"] = parts
    if result.structured_content is not None:
        extra["structured"] = result.structured_content
    return ToolResult(clip("\n".join(texts)), bool(result.is_error), extra)


def clip(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"\n[cut: {len(text) - MAX_TEXT} more characters]"


def _bytes(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return data.encode()
