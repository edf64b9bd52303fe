// The AI SDK's Anthropic provider through the Messages front: streamText with tools and
// stopWhen over two user turns, the second sent with the first turn's response messages as the
// SDK kept them (thinking with its signature, tool calls, tool results).
// argv[2]: JSON {baseURL, apiKey, model, questions}. Prints one JSON line: texts, errors, steps.
import { createAnthropic } from '@ai-sdk/anthropic';
import { stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

const config = JSON.parse(process.argv[2]);
const anthropic = createAnthropic({ baseURL: config.baseURL, apiKey: config.apiKey });
const tools = {
  read_file: tool({
    description: 'read a file',
    inputSchema: z.object({ path: z.string() }),
    execute: async ({ path }) => `contents of ${path}`,
  }),
  list_dir: tool({
    description: 'list a directory',
    inputSchema: z.object({ path: z.string() }),
    execute: async ({ path }) => `entries of ${path}`,
  }),
};
const messages = [];
const out = { texts: [], errors: [], steps: [], reasoning: [] };
for (const question of config.questions) {
  messages.push({ role: 'user', content: question });
  const result = streamText({
    model: anthropic(config.model),
    tools,
    messages,
    stopWhen: stepCountIs(6),
    onError: ({ error }) => out.errors.push(String(error?.message ?? error)),
  });
  await result.consumeStream();
  const steps = await result.steps;
  out.steps.push(steps.map((s) => ({ finishReason: s.finishReason, calls: s.toolCalls.length })));
  out.texts.push(await result.text);
  out.reasoning.push((await result.reasoning).length);
  messages.push(...(await result.response).messages);
}
console.log(JSON.stringify(out));
