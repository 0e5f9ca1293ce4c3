// Package chattemplate renders a chat conversation into the prompt text an
// engine (vLLM, SGLang, TensorRT-LLM) renders for it with the served
// model's Jinja chat template, byte for byte, so that duet's token counts
// and block hashes match the engine's.
//
// Load reads a model's template (chat_template.jinja or
// tokenizer_config.json's chat_template, a string or a named list) and its
// special tokens, checks that every construct it uses is one duet renders
// exactly, and renders a probe conversation; a template that fails either
// is an error at load, never a silent fallback. Render then prepares the
// messages as vLLM's chat_utils.py does (content flattened to a string or
// kept as a list of text parts, by the content format vLLM detects for the
// template; tool call arguments parsed from JSON; tools normalised as
// vLLM's pydantic model dumps them) and renders them as transformers'
// apply_chat_template does (trim_blocks, lstrip_blocks, loop controls,
// tojson with ensure_ascii=False, raise_exception, strftime_now,
// continue_final_message).
//
// The Jinja engine is github.com/ardanlabs/jinja v1.8.0, with duet's own
// tojson (Python's json.dumps), raise_exception (a typed error) and
// strftime_now (an injectable clock). The subset it renders is listed in
// supported.go. Known differences from Python's Jinja that no supported
// construct can reach in the reference templates but a template could:
// str.lstrip()/rstrip() without arguments strip only " \t\n\r" and
// str.strip()/|trim use Go's unicode.IsSpace (Python's also strips
// U+001C..U+001F); "+" of a string and a non-string concatenates where
// Python raises; None prints as "" (Python: "None") and floats print with
// %g (Python: 1.0, 1000000.0).
//
// Concurrency: a *Template is immutable after Load and safe for concurrent
// Render calls; the package starts no goroutines.
package chattemplate
