"""Tool schemas as clients send them: one every dialect takes as it is, an edit tool like
opencode's (zod: `$schema`, `additionalProperties: false`, a type array, `.positive()` as
`exclusiveMinimum`), and a FastMCP/pydantic tool (`$defs`, `Optional` as an `anyOf` with null,
`default`s)."""

from __future__ import annotations

ALREADY_FINE = {
    "type": "object",
    "description": "Read a file.",
    "properties": {
        "path": {"type": "string", "description": "absolute path"},
        "lines": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 2},
        "mode": {"type": "string", "enum": ["text", "bytes"]},
        "since": {"type": "string", "format": "date-time", "nullable": True},
    },
    "required": ["path"],
}

EDIT_TOOL = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "filePath": {"type": "string", "description": "The absolute path to the file to modify"},
        "oldString": {"type": "string", "description": "The text to replace"},
        "newString": {"type": "string", "description": "The text to replace it with"},
        "replaceAll": {"type": ["boolean", "null"], "description": "Replace all occurrences"},
        "limit": {"type": "integer", "exclusiveMinimum": 0},
    },
    "required": ["filePath", "oldString", "newString"],
    "additionalProperties": False,
}

MCP_TOOL = {
    "$defs": {
        "Priority": {"enum": ["low", "high"], "title": "Priority", "type": "string"},
        "Task": {
            "properties": {
                "title": {"title": "Title", "type": "string"},
                "priority": {"$ref": "#/$defs/Priority", "default": "low"},
                "due": {
                    "anyOf": [{"format": "date-time", "type": "string"}, {"type": "null"}],
                    "default": None,
                    "title": "Due",
                },
                "labels": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "title": "Labels",
                },
            },
            "required": ["title"],
            "title": "Task",
            "type": "object",
        },
    },
    "properties": {
        "tasks": {"items": {"$ref": "#/$defs/Task"}, "title": "Tasks", "type": "array"},
        "project": {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "default": None,
            "title": "Project",
        },
    },
    "required": ["tasks"],
    "title": "create_tasksArguments",
    "type": "object",
}
