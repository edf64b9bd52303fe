"""Model markup that arrived as text: tool calls and reasoning the serving layer did not parse."""
