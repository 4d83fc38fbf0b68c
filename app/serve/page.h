// The page `megatron-app serve` gives at /: a prompt, the sampling options, and the continuation
// streaming in from /v1/completions (server-sent events read with fetch).
#pragma once

namespace megatron::app::serve {

inline constexpr const char* kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>megatron-app</title>
<style>
  body { font-family: sans-serif; max-width: 48em; margin: 2em auto; padding: 0 1em; }
  textarea { width: 100%; height: 8em; font: inherit; }
  label { display: inline-block; margin: 0.4em 1em 0.4em 0; }
  input[type=number] { width: 6em; }
  #output { white-space: pre-wrap; border: 1px solid #ccc; padding: 0.8em; min-height: 6em; }
  #prompt-echo { color: #666; }
  #status { color: #666; font-size: 0.9em; }
</style>
</head>
<body>
<h1>megatron-app</h1>
<p id="model"></p>
<textarea id="prompt" placeholder="Type a prompt">It is a truth universally acknowledged</textarea>
<div>
  <label>tokens <input id="max_tokens" type="number" value="64" min="1"></label>
  <label>temperature <input id="temperature" type="number" value="1.0" step="0.1" min="0"></label>
  <label>top-k <input id="top_k" type="number" value="0" min="0"></label>
  <label>top-p <input id="top_p" type="number" value="1.0" step="0.05" min="0" max="1"></label>
  <label>seed <input id="seed" type="number" value=""></label>
</div>
<button id="generate">Generate</button> <button id="stop" disabled>Stop</button>
<span id="status"></span>
<h2>Continuation</h2>
<div id="output"><span id="prompt-echo"></span><span id="continuation"></span></div>
<script>
const $ = (id) => document.getElementById(id);
let controller = null;
fetch('/v1/models').then(r => r.json()).then(m => { $('model').textContent = 'model: ' + m.data[0].id; });
async function generate() {
  const body = {
    prompt: $('prompt').value,
    max_tokens: Number($('max_tokens').value),
    temperature: Number($('temperature').value),
    top_k: Number($('top_k').value),
    top_p: Number($('top_p').value),
    stream: true,
  };
  if ($('seed').value !== '') body.seed = Number($('seed').value);
  $('prompt-echo').textContent = body.prompt;
  $('continuation').textContent = '';
  $('status').textContent = 'generating...';
  $('generate').disabled = true;
  $('stop').disabled = false;
  controller = new AbortController();
  try {
    const response = await fetch('/v1/completions', {
      method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify(body), signal: controller.signal});
    if (!response.ok) {
      const error = await response.json();
      throw new Error(error.error ? error.error.message : response.statusText);
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '', finish = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        for (const choice of chunk.choices) {
          $('continuation').textContent += choice.text;
          if (choice.finish_reason) finish = choice.finish_reason;
        }
      }
    }
    $('status').textContent = 'done (' + finish + ')';
  } catch (e) {
    $('status').textContent = e.name === 'AbortError' ? 'stopped' : 'error: ' + e.message;
  } finally {
    $('generate').disabled = false;
    $('stop').disabled = true;
  }
}
$('generate').addEventListener('click', generate);
$('stop').addEventListener('click', () => controller && controller.abort());
</script>
</body>
</html>
)html";

}  // namespace megatron::app::serve
