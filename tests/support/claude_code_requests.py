"""Messages requests of Claude Code's size and make-up, made up deterministically.

Claude Code's main requests carry a long system prompt (its instructions, the environment, the
project's CLAUDE.md), some sixteen tools with long descriptions and JSON schemas, and a history
in which the Read tool's results, source files with their newlines and quotes, soon weigh most.
`claude_code_request(seed, files)` is one such request: the system prompt and tools alike for
every seed of a session, the history `files` reads of different made-up files.
"""

from __future__ import annotations

import random
from typing import Any

INSTRUCTIONS = (
    "the user asks you to change code in their repository and you answer with tools when a "
    "file must be read edited or searched never guess paths run commands only when they are "
    "needed keep answers short explain what you changed prefer small diffs check the tests "
    "before and after every change follow the project's conventions naming and layout do not "
    "add dependencies without asking report errors with their messages quote file paths with "
    "line numbers when the task is done say so and stop"
)
WORDS = tuple(INSTRUCTIONS.split(" "))
TOOL_NAMES = (
    "Task",
    "Bash",
    "Glob",
    "Grep",
    "LS",
    "ExitPlanMode",
    "Read",
    "Edit",
    "MultiEdit",
    "Write",
    "NotebookEdit",
    "WebFetch",
    "TodoWrite",
    "WebSearch",
    "BashOutput",
    "KillShell",
)
IDENTIFIERS = ("config", "value", "result", "items", "index", "handler", "request", "response")


def prose(rng: random.Random, words: int) -> str:
    sentences = []
    while words > 0:
        length = rng.randint(8, 22)
        sentence = " ".join(rng.choice(WORDS) for _ in range(min(length, words)))
        sentences.append(sentence.capitalize() + ".")
        words -= length
    paragraphs = [" ".join(sentences[i : i + 5]) for i in range(0, len(sentences), 5)]
    return "\n\n".join(paragraphs)


def source_file(rng: random.Random, lines: int) -> str:
    """Made-up Python, numbered as Read numbers it (`     1\\t…`)."""
    out = []
    for number in range(1, lines + 1):
        a, b = rng.choice(IDENTIFIERS), rng.choice(IDENTIFIERS)
        line = rng.choice(
            (
                f'    {a} = {b}.get("{rng.choice(IDENTIFIERS)}", {rng.randint(0, 99)})',
                f"def {a}_{b}({b}: dict[str, str]) -> str:",
                f'        raise ValueError(f"bad {a}: {{{b}!r}}")',
                f"    return [{a} for {a} in {b} if {a}]",
                f"    # {prose(rng, rng.randint(4, 10))}",
                "",
            )
        )
        out.append(f"{number:6d}\t{line}")
    return "\n".join(out)


def tools(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for name in TOOL_NAMES:
        properties = {
            field: {"type": "string", "description": prose(rng, rng.randint(6, 20))}
            for field in rng.sample(IDENTIFIERS, rng.randint(1, 4))
        }
        schema = {
            "type": "object",
            "properties": properties,
            "required": sorted(properties)[:1],
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        }
        description = prose(rng, rng.randint(60, 400))
        out.append({"name": name, "description": description, "input_schema": schema})
    return out


def claude_code_request(
    seed: int, files: int, *, model: str, stream: bool, session: int = 0
) -> dict[str, Any]:
    """A Claude Code-sized Messages request: the session's system prompt and tools (the same
    for every seed of one `session`), and a history of `files` Read calls, each file its own
    (by `seed`)."""
    shared = random.Random(session)
    system = [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {"type": "text", "text": prose(shared, 5000), "cache_control": {"type": "ephemeral"}},
    ]
    declared = tools(shared)
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "user", "content": prose(rng, 40)}]
    for number in range(files):
        call_id = f"toolu_{seed:04d}{number:04d}"
        path = f"/work/src/{rng.choice(IDENTIFIERS)}_{number}.py"
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": prose(rng, 15)},
                    {"type": "tool_use", "id": call_id, "name": "Read", "input": {"path": path}},
                ],
            }
        )
        result = {
            "type": "tool_result",
            "tool_use_id": call_id,
            "content": source_file(rng, rng.randint(80, 200)),
        }
        messages.append({"role": "user", "content": [result]})
    if files:
        messages[-1]["content"].append({"type": "text", "text": prose(rng, 30)})
    return {
        "model": model,
        "max_tokens": 32000 if stream else 4096,  # the SDK streams anything longer
        "system": system,
        "messages": messages,
        "tools": declared,
        "stream": stream,
    }
