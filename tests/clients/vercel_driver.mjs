// Drives the real Vercel AI SDK (@ai-sdk/openai-compatible + ai) against an
// OpenAI-compatible endpoint, so tests see exactly what an app such as
// opencode would see from a stream our proxy produced.
//
// stdin:  {"sdk": "v1"|"v2"|"v3", "baseURL", "model", "apiKey", "prompt",
//          "tools": [{"name", "description", "parameters": <JSON schema>}]}
// stdout: one JSON line {"toolCalls", "errors", "finishReason", "text",
//          "rawFinishReason"}; exit 0 whenever that line was printed.

// Each release pair is installed under npm aliases (see package.json).
const SDKS = {
  v1: { provider: "oc-v1", ai: "ai-v1" }, // openai-compatible 1.0.x + ai 5
  v2: { provider: "oc-v2", ai: "ai-v2" }, // openai-compatible 2.0.41 + ai 6 (opencode)
  v3: { provider: "oc-v3", ai: "ai-v3" }, // openai-compatible 3.x + ai 7
};

function message(error) {
  if (error instanceof Error) {
    // Name first: tests assert on e.g. AI_TypeValidationError vs AI_APICallError.
    const cause = error.cause instanceof Error && !error.message.includes(error.cause.message)
      ? ` (cause: ${error.cause.name}: ${error.cause.message})`
      : "";
    return `${error.name}: ${error.message}${cause}`;
  }
  return typeof error === "string" ? error : JSON.stringify(error);
}

async function readStdin() {
  let data = "";
  for await (const chunk of process.stdin) data += chunk;
  return JSON.parse(data);
}

async function main() {
  const req = await readStdin();
  const names = SDKS[req.sdk];
  if (!names) throw new Error(`unknown sdk ${JSON.stringify(req.sdk)}; use one of ${Object.keys(SDKS)}`);
  const { createOpenAICompatible } = await import(names.provider);
  const { streamText, tool, jsonSchema } = await import(names.ai);

  const provider = createOpenAICompatible({ name: "custom", baseURL: req.baseURL, apiKey: req.apiKey });
  // No `execute`: the SDK only parses and validates the calls, like a client
  // that hands them back to the app. ai 5, 6 and 7 all name the schema `inputSchema`.
  const tools = Object.fromEntries(
    (req.tools ?? []).map((t) => [
      t.name,
      tool({
        description: t.description ?? "",
        inputSchema: jsonSchema(t.parameters ?? { type: "object", properties: {} }),
      }),
    ]),
  );

  const out = { toolCalls: [], errors: [], finishReason: null, text: "", rawFinishReason: null };
  const invalidIds = new Set();
  try {
    const result = streamText({
      model: provider(req.model),
      prompt: req.prompt ?? "go",
      tools,
      maxRetries: 0,
      // Errors are collected from the stream parts below; the default handler
      // would only print them to stderr.
      onError: () => {},
    });
    for await (const part of result.fullStream) {
      switch (part.type) {
        case "text-delta":
          out.text += part.text;
          break;
        case "tool-call":
          // ai 5+ reports unparseable input, schema failures and unknown tools
          // as a tool-call with invalid: true instead of failing the stream.
          if (part.invalid) {
            invalidIds.add(part.toolCallId);
            out.errors.push(
              `invalid tool call ${part.toolName} (${part.toolCallId}): ${message(part.error)}`,
            );
          } else {
            out.toolCalls.push({ toolCallId: part.toolCallId, toolName: part.toolName, input: part.input });
          }
          break;
        case "tool-error":
          // Without execute, tool-error only repeats an invalid call: report it once.
          if (!invalidIds.has(part.toolCallId)) {
            out.errors.push(`tool error ${part.toolName} (${part.toolCallId}): ${message(part.error)}`);
          }
          break;
        case "error":
          out.errors.push(message(part.error));
          break;
        case "finish":
          out.finishReason = part.finishReason ?? null;
          // Only ai 6+ exposes the provider's raw finish_reason.
          out.rawFinishReason = part.rawFinishReason ?? null;
          break;
      }
    }
  } catch (error) {
    out.errors.push(`stream threw: ${message(error)}`);
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((error) => {
  // A driver crash (bad input, missing node_modules): non-zero exit, stderr.
  console.error(error?.stack ?? String(error));
  process.exit(2);
});
