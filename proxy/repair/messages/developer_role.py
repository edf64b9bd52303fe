"""`developer` messages sent as `system` where the upstream knows no developer role."""

from __future__ import annotations

from typing import Any

from proxy.wire.json_shapes import objects_in

DEVELOPER_KIND = "role_developer_to_system"


class DeveloperToSystem:
    """OpenAI's newer clients (and agents such as pi, for reasoning models) send the system
    prompt as `role: "developer"`. Upstreams that know only system, user, assistant and tool
    reject the whole request: DeepSeek with 422 `Failed to deserialize the JSON body into the
    target type: messages[0]: unknown role: developer` (pi#7603); Mistral's API, whose roles
    are system, user, assistant and tool (a 422 on any other); chat templates with no branch
    for it (`Unexpected message role.`, halogen-server#3). For them a developer message is what
    a system message is, so its role becomes `system` and nothing else of it changes."""

    KIND = DEVELOPER_KIND

    def apply(self, messages: list[Any]) -> int:
        changed = 0
        for message in objects_in(messages):
            if message.get("role") == "developer":
                message["role"] = "system"
                changed += 1
        return changed
