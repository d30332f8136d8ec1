// Writes tokenizer/testdata/gpt2_reference.json: GPT-2 token ids of a few
// texts (Debian's fortunes, and cases that exercise the split pattern) as
// the gpt-3-encoder npm package computes them. Run from the repository root
// after `npm pack gpt-3-encoder@1.1.4` and extracting it:
//   node scripts/tokenizer_fixtures.js /path/to/package
const fs = require('fs');
const path = require('path');
const { encode } = require(path.resolve(process.argv[2], 'index.js'));
const texts = [
  'Hello world',
  "It's   a test\n\n  of 123 numbers 4567, \u00fcn\u00efc\u00f6d\u00e9 \u65e5\u672c\u8a9e \ud83d\ude42 don't",
  "  leading spaces, trailing spaces   ",
  "tabs\tand\nnewlines\r\n\r\nand  double  spaces",
  "I'M SHOUTING, I'll you'd we've they're",
  "numbers: 1234567890 3.14159 1,000,000 -42 +7e10",
  "punctuation!!! ??? ... --- *** (brackets) [more] {braces} <angle>",
  "mixed\u00a0no-break\u2003em-space\u3000ideographic",
];
const fortunes = fs.readFileSync('/usr/share/games/fortunes/fortunes', 'utf-8').split('\n%\n');
for (let i = 0; i < fortunes.length && texts.length < 48; i += 11) texts.push(fortunes[i]);
const out = texts.map((t) => ({ text: t, ids: encode(t) }));
fs.writeFileSync(path.join('tokenizer', 'testdata', 'gpt2_reference.json'), JSON.stringify(out, null, 0) + '\n');
console.log(`${out.length} texts`);
