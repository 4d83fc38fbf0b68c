// `megatron-app serve` through the official OpenAI client library (npm's `openai`, which no one
// here wrote): the model list, completions and chat completions, whole and streamed, equal to
// each other and to `megatron-app generate`'s greedy text; a refused request raises its 400.
//   node openai_client.mjs URL GENERATE.json
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';

const [url, generatedFile] = process.argv.slice(2);
const generated = JSON.parse(readFileSync(generatedFile, 'utf8'));
const client = new OpenAI({ baseURL: url + '/v1', apiKey: 'not-needed' });
const fail = (what) => { console.error('FAIL: ' + what); process.exit(1); };
const expect = (cond, what) => { if (!cond) fail(what); };

const models = await client.models.list();
const model = models.data[0].id;
expect(models.data.length === 1 && model === 'gpt_tiny', 'one model, gpt_tiny: ' + model);

// Completions: greedy equals generate (which stopped at its token count or end of document).
const g = generated[0];
const whole = await client.completions.create({
  model, prompt: g.prompt, max_tokens: g.tokens.length, temperature: 0 });
expect(whole.choices[0].text === g.text, `completion ${JSON.stringify(whole.choices[0].text)} != generate's ${JSON.stringify(g.text)}`);
expect(whole.usage.prompt_tokens === g.prompt_tokens.length, 'usage counts the prompt');
let streamed = '', finish = null;
for await (const chunk of await client.completions.create({
  model, prompt: g.prompt, max_tokens: g.tokens.length, temperature: 0, stream: true })) {
  for (const c of chunk.choices) { streamed += c.text; finish = c.finish_reason ?? finish; }
}
expect(streamed === g.text, 'streamed completion equals generate');
expect(finish === whole.choices[0].finish_reason, 'the stream ends with the finish reason');

// Chat: the pretraining template (the user's content and a newline), whole and streamed.
const user = 'It is a truth universally acknowledged';
const chat = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: user }], max_tokens: 16, temperature: 0 });
const plain = await client.completions.create({
  model, prompt: user + '\n', max_tokens: 16, temperature: 0 });
expect(chat.choices[0].message.role === 'assistant', 'the assistant answers');
expect(chat.choices[0].message.content === plain.choices[0].text,
  'chat equals the completion of its template');
let chatStreamed = '', sawRole = false;
for await (const chunk of await client.chat.completions.create({
  model, messages: [{ role: 'user', content: user }], max_tokens: 16, temperature: 0,
  stream: true })) {
  const delta = chunk.choices[0]?.delta ?? {};
  if (delta.role === 'assistant') sawRole = true;
  chatStreamed += delta.content ?? '';
}
expect(sawRole && chatStreamed === chat.choices[0].message.content, 'streamed chat equals whole');

// Seeded sampling is reproducible; a different seed may differ but stays well formed.
const sampled = (seed) => client.completions.create({
  model, prompt: g.prompt, max_tokens: 12, temperature: 0.9, top_p: 0.95, seed });
const [a, b] = [await sampled(5), await sampled(5)];
expect(a.choices[0].text === b.choices[0].text, 'the same seed samples the same text');

try {
  await client.completions.create({ model, prompt: 'x', max_tokens: 3, n: 2 });
  fail('n: 2 was accepted');
} catch (e) {
  expect(e instanceof OpenAI.BadRequestError && e.status === 400, 'n: 2 raises BadRequestError: ' + e);
  expect(String(e.message).includes('n > 1 not supported'), 'the message names n: ' + e.message);
}
console.log('ok   openai client: models, completions and chat, whole and streamed, seeds, a 400');
