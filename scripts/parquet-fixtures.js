// parquet-fixtures.js writes data/testdata/records/*.parquet and their
// JSON Lines twins (*.jsonl): the same records in both, so that data's
// tests hold memfit's parquet reader to an independent writer. The
// parquet files are written by parquet-wasm (Apache Arrow's Rust parquet
// writer, compiled to WebAssembly) from Arrow tables built with
// apache-arrow, in the layout pyarrow gives Hugging Face datasets: nullable
// UTF-8 columns, messages a list of structs whose element is named
// "element"; compressed (ZSTD, Snappy), dictionary-encoded, and cut into
// row groups of a few rows. Run it through scripts/parquet-fixtures.sh.
'use strict';
const fs = require('fs');
const path = require('path');
const arrow = require('apache-arrow');
const pw = require('parquet-wasm/node');

const out = process.argv[2];
fs.mkdirSync(out, { recursive: true });

const utf8 = () => new arrow.Utf8();
const message = new arrow.Struct([new arrow.Field('content', utf8(), true), new arrow.Field('role', utf8(), true)]);
const messages = new arrow.List(new arrow.Field('element', message, true));

const sets = {
  text: {
    columns: { text: utf8() },
    rows: [{ text: 'The first document.' }, { text: 'Grüße, 東京 😀' }, { text: '' }, { text: 'line one\nline two' }, { text: 'x'.repeat(300) }],
    compression: pw.Compression.SNAPPY, rowGroup: 2,
  },
  prompt_completion: {
    columns: { prompt: utf8(), completion: utf8() },
    rows: [
      { prompt: 'What is 2+2?', completion: ' 4' },
      { prompt: 'Capital of France?', completion: ' Paris.' },
      { prompt: 'Say nothing:', completion: '' },
      { prompt: 'Greet in German:', completion: ' Grüß Gott!' },
      { prompt: 'Repeat', completion: ' Repeat' },
      { prompt: 'Repeat', completion: ' Repeat' },
      { prompt: 'Last?', completion: ' Yes.' },
    ],
    compression: pw.Compression.ZSTD, rowGroup: 3,
  },
  chat: {
    columns: { messages },
    rows: [
      { messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'yo' }] },
      { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Capital of France?' }, { role: 'assistant', content: 'Paris.' },
        { role: 'user', content: 'Of Germany?' }, { role: 'assistant', content: 'Berlin.' }] },
      { messages: [{ role: 'user', content: 'Grüße 😀' }, { role: 'assistant', content: '東京' }] },
    ],
    compression: pw.Compression.ZSTD, rowGroup: 2,
  },
  alpaca: {
    columns: { instruction: utf8(), input: utf8(), output: utf8() },
    rows: [
      { instruction: 'Add the numbers.', input: '2, 3', output: '5' },
      { instruction: 'Name a colour.', input: '', output: 'Blue.' },
      { instruction: 'Translate to French.', input: 'cat', output: 'chat' },
      { instruction: 'Say hi.', input: null, output: 'Hi!' },
    ],
    compression: pw.Compression.SNAPPY, rowGroup: 3,
  },
};

for (const [name, set] of Object.entries(sets)) {
  const vectors = {};
  for (const [col, type] of Object.entries(set.columns)) {
    vectors[col] = arrow.vectorFromArray(set.rows.map(r => r[col]), type);
  }
  const table = new arrow.Table(vectors);
  const props = new pw.WriterPropertiesBuilder()
    .setCompression(set.compression)
    .setDictionaryEnabled(true)
    .setMaxRowGroupSize(set.rowGroup)
    .build();
  const buf = pw.writeParquet(pw.Table.fromIPCStream(arrow.tableToIPC(table, 'stream')), props);
  fs.writeFileSync(path.join(out, name + '.parquet'), buf);
  fs.writeFileSync(path.join(out, name + '.jsonl'), set.rows.map(r => JSON.stringify(r)).join('\n') + '\n');
}
