// encode.mjs: the reference token ids duet's tokenizer/hf tests compare
// with. Usage:
//
//   node tests/reference/encode.mjs <model dir with tokenizer.json> <corpus.jsonl>
//
// Each corpus line is {"text": "..."} or {"b64": "..."} (bytes that may be
// invalid UTF-8, decoded here as Node's Buffer does: each maximal
// ill-formed subsequence becomes U+FFFD). For each line it writes one JSON
// line: the ids of Hugging Face's Rust tokenizers (through the
// @anush008/tokenizers bindings) with add_special_tokens false ("rust")
// and true ("rust_special"), the Rust decode of "rust" ("decoded"), and
// the ids of tokenizers.js ("js", "js_special"; null with "js_error" if it
// threw). Install the pinned packages with `make reference`.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const require = createRequire(import.meta.url);
const { Tokenizer: RustTokenizer } = require('@anush008/tokenizers');
const { Tokenizer: JSTokenizer } = await import('@huggingface/tokenizers');

const [dir, corpusPath] = process.argv.slice(2);
if (!dir || !corpusPath) {
  console.error('usage: node encode.mjs <model dir> <corpus.jsonl>');
  process.exit(2);
}
const json = readFileSync(join(dir, 'tokenizer.json'), 'utf8');
let config = {};
try {
  config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
} catch {}
const rust = RustTokenizer.fromString(json);
let js = null;
let jsError = '';
try {
  js = new JSTokenizer(JSON.parse(json), config);
} catch (e) {
  jsError = String(e);
}

const texts = readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l !== '').map((l) => {
  const o = JSON.parse(l);
  return o.b64 !== undefined ? Buffer.from(o.b64, 'base64').toString('utf8') : o.text;
});

const plain = await rust.encodeBatch(texts, { addSpecialTokens: false });
const special = await rust.encodeBatch(texts, { addSpecialTokens: true });
const out = [];
for (let i = 0; i < texts.length; i++) {
  const r = { rust: plain[i].getIds(), rust_special: special[i].getIds() };
  r.decoded = await rust.decode(r.rust, false);
  try {
    if (js === null) throw new Error(jsError);
    r.js = js.encode(texts[i], { add_special_tokens: false }).ids;
    r.js_special = js.encode(texts[i], { add_special_tokens: true }).ids;
  } catch (e) {
    r.js = r.js_special = null;
    r.js_error = String(e);
  }
  out.push(JSON.stringify(r));
}
process.stdout.write(out.join('\n') + '\n');
