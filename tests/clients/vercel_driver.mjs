// Drives the real Vercel AI SDK (@ai-sdk/openai-compatible + ai) against an
// OpenAI-compatible endpoint, so tests see exactly what an app such as
// opencode would see from a stream our proxy produced.
//
// stdin:  {"sdk": "v1"|"v2"|"v3", "baseURL", "model", "apiKey", "prompt",
//          "tools": [{"name", "description", "parameters": <JSON schema>}],
//          optional:
//          "messages": [<ModelMessage>]  instead of "prompt" (e.g. a previous run's
//                                        "responseMessages" plus a new user message),
//          "execute": {"toolName": <result JSON>}  tools named here get an `execute`
//                                        returning that result, so the SDK runs an agent loop,
//          "maxSteps": N                 stopWhen: stepCountIs(N) (default: ai's, 1 step),
//          "mode": "generate"            generateText instead of streamText (the steps are
//                                        read from the result; "stream" is the default)}
// stdout: one JSON line {"toolCalls", "errors", "finishReason", "text",
//          "rawFinishReason", "steps", "apiErrors", "responseMessages"}; exit 0
//          whenever that line was printed.
//   toolCalls, text: over all steps; finishReason, rawFinishReason: of the whole run.
//   steps: [{"toolCalls", "toolResults", "text", "finishReason", "rawFinishReason"}] per
//          model call that finished (a call that failed has no entry); a step's toolCalls
//          also carry "providerMetadata" (e.g. {"custom": {"thoughtSignature": …}}).
//   apiErrors: [{"name", "status", "body", "url"}] for every APICallError (an HTTP error
//          from the endpoint; also listed as a string in "errors").
//   responseMessages: the run's response messages (ModelMessage JSON), [] when unavailable.
//   executed: [{"toolName", "input"}] for every call of a tool's `execute`, in order: what
//          the SDK itself ran the tool with.

// Each release pair is installed under npm aliases (see package.json).
const SDKS = {
  v1: { provider: "oc-v1", ai: "ai-v1" }, // openai-compatible 1.0.x + ai 5
  v2: { provider: "oc-v2", ai: "ai-v2" }, // openai-compatible 2.0.41 + ai 6 (opencode)
  v3: { provider: "oc-v3", ai: "ai-v3" }, // openai-compatible 3.x + ai 7
  // @ai-sdk/openai's Responses provider (`.responses()`) + ai 6: POST /v1/responses.
  responses: { provider: "openai-v3", ai: "ai-v2", responses: true },
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

function apiError(error) {
  // APICallError (any ai major): statusCode, responseBody, url. A RetryError wraps the
  // last one; maxRetries is 0 here, but unwrap anyway.
  const candidates = [error, error?.lastError, error?.cause];
  for (const e of candidates) {
    if (e && typeof e === "object" && typeof e.statusCode === "number") {
      return { name: e.name ?? null, status: e.statusCode, body: e.responseBody ?? null, url: e.url ?? null };
    }
  }
  return null;
}

async function main() {
  const req = await readStdin();
  const names = SDKS[req.sdk];
  if (!names) throw new Error(`unknown sdk ${JSON.stringify(req.sdk)}; use one of ${Object.keys(SDKS)}`);
  const providerModule = await import(names.provider);
  const ai = await import(names.ai);
  const { streamText, generateText, tool, jsonSchema } = ai;
  // ai 5 and 6 name it stepCountIs; ai 7 calls it isStepCount and keeps stepCountIs as an alias.
  const stepCountIs = ai.stepCountIs ?? ai.isStepCount;

  const provider = names.responses
    ? (id) => providerModule.createOpenAI({ baseURL: req.baseURL, apiKey: req.apiKey }).responses(id)
    : providerModule.createOpenAICompatible({ name: "custom", baseURL: req.baseURL, apiKey: req.apiKey });
  // "store": false / true for the Responses provider (unset: its default, which replays
  // earlier items as item_reference).
  const providerOptions = req.store === undefined ? {} : { providerOptions: { openai: { store: req.store } } };
  // Without `execute` the SDK only parses and validates the calls, like a client
  // that hands them back to the app. ai 5, 6 and 7 all name the schema `inputSchema`.
  const execute = req.execute ?? {};
  const executed = [];
  const tools = Object.fromEntries(
    (req.tools ?? []).map((t) => [
      t.name,
      tool({
        description: t.description ?? "",
        inputSchema: jsonSchema(t.parameters ?? { type: "object", properties: {} }),
        ...(Object.hasOwn(execute, t.name)
          ? {
              execute: async (input) => {
                executed.push({ toolName: t.name, input });
                return execute[t.name];
              },
            }
          : {}),
      }),
    ]),
  );

  const out = {
    toolCalls: [],
    errors: [],
    finishReason: null,
    text: "",
    rawFinishReason: null,
    steps: [],
    apiErrors: [],
    responseMessages: [],
    executed,
  };
  const invalidIds = new Set();
  const newStep = () => ({ toolCalls: [], toolResults: [], text: "", finishReason: null, rawFinishReason: null });
  let step = newStep();
  let result;
  let threw = false;
  if (req.mode === "generate") {
    await generate(generateText, { provider, req, tools, stepCountIs, out, invalidIds, newStep });
    process.stdout.write(JSON.stringify(out) + "\n");
    return;
  }
  try {
    result = streamText({
      model: provider(req.model),
      ...(req.messages ? { messages: req.messages } : { prompt: req.prompt ?? "go" }),
      tools,
      maxRetries: 0,
      ...providerOptions,
      ...(req.maxSteps ? { stopWhen: stepCountIs(req.maxSteps) } : {}),
      // Errors are collected from the stream parts below; the default handler
      // would only print them to stderr.
      onError: () => {},
    });
    for await (const part of result.fullStream) {
      switch (part.type) {
        case "start-step":
          step = newStep();
          break;
        case "text-delta":
          out.text += part.text;
          step.text += part.text;
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
            const call = { toolCallId: part.toolCallId, toolName: part.toolName, input: part.input };
            out.toolCalls.push(call);
            // Per step also what the provider attached (the custom provider's name is the key).
            step.toolCalls.push({ ...call, providerMetadata: part.providerMetadata ?? null });
          }
          break;
        case "tool-result":
          step.toolResults.push({ toolCallId: part.toolCallId, toolName: part.toolName, output: part.output });
          break;
        case "tool-error":
          // Without execute, tool-error only repeats an invalid call: report it once.
          if (!invalidIds.has(part.toolCallId)) {
            out.errors.push(`tool error ${part.toolName} (${part.toolCallId}): ${message(part.error)}`);
          }
          break;
        case "error": {
          out.errors.push(message(part.error));
          const api = apiError(part.error);
          if (api) out.apiErrors.push(api);
          break;
        }
        case "finish-step":
          step.finishReason = part.finishReason ?? null;
          step.rawFinishReason = part.rawFinishReason ?? null;
          out.steps.push(step);
          step = newStep();
          break;
        case "finish":
          out.finishReason = part.finishReason ?? null;
          // Only ai 6+ exposes the provider's raw finish_reason.
          out.rawFinishReason = part.rawFinishReason ?? null;
          break;
      }
    }
  } catch (error) {
    threw = true;
    out.errors.push(`stream threw: ${message(error)}`);
    const api = apiError(error);
    if (api) out.apiErrors.push(api);
  }
  if (result && !threw) {
    // After a thrown stream the response promise may never settle (node would then exit
    // without printing), so it is only read after a stream that ended, and never waited on
    // for long.
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), 2000);
    });
    try {
      // ai 7 has responseMessages (and deprecates response.messages); ai 5 and 6 only the latter.
      const messages = result.responseMessages
        ? result.responseMessages
        : Promise.resolve(result.response).then((response) => response.messages);
      out.responseMessages = (await Promise.race([messages, timeout])) ?? [];
    } catch {
      // A run that failed before any step finished has no response to report.
    } finally {
      clearTimeout(timer);
    }
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

// generateText: the same report, built from the result's steps once the run is over.
async function generate(generateText, { provider, req, tools, stepCountIs, out, invalidIds, newStep }) {
  let result;
  try {
    result = await generateText({
      model: provider(req.model),
      ...(req.messages ? { messages: req.messages } : { prompt: req.prompt ?? "go" }),
      tools,
      maxRetries: 0,
      ...(req.maxSteps ? { stopWhen: stepCountIs(req.maxSteps) } : {}),
    });
  } catch (error) {
    out.errors.push(`generate threw: ${message(error)}`);
    const api = apiError(error);
    if (api) out.apiErrors.push(api);
    return;
  }
  for (const done of result.steps ?? []) {
    const step = newStep();
    for (const part of done.content ?? []) {
      switch (part.type) {
        case "text":
          out.text += part.text;
          step.text += part.text;
          break;
        case "tool-call":
          if (part.invalid) {
            invalidIds.add(part.toolCallId);
            out.errors.push(
              `invalid tool call ${part.toolName} (${part.toolCallId}): ${message(part.error)}`,
            );
          } else {
            const call = { toolCallId: part.toolCallId, toolName: part.toolName, input: part.input };
            out.toolCalls.push(call);
            step.toolCalls.push({ ...call, providerMetadata: part.providerMetadata ?? null });
          }
          break;
        case "tool-result":
          step.toolResults.push({ toolCallId: part.toolCallId, toolName: part.toolName, output: part.output });
          break;
        case "tool-error":
          if (!invalidIds.has(part.toolCallId)) {
            out.errors.push(`tool error ${part.toolName} (${part.toolCallId}): ${message(part.error)}`);
          }
          break;
      }
    }
    step.finishReason = done.finishReason ?? null;
    step.rawFinishReason = done.rawFinishReason ?? null;
    out.steps.push(step);
  }
  out.finishReason = result.finishReason ?? null;
  out.rawFinishReason = result.rawFinishReason ?? null;
  // ai 7 has responseMessages; ai 5 and 6 only response.messages.
  out.responseMessages = result.responseMessages ?? result.response?.messages ?? [];
}

main().catch((error) => {
  // A driver crash (bad input, missing node_modules): non-zero exit, stderr.
  console.error(error?.stack ?? String(error));
  process.exit(2);
});
