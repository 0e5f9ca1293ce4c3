// render.mjs renders chat conversations with @huggingface/jinja, the Jinja
// engine transformers.js uses for apply_chat_template, preparing the inputs
// the way vLLM does before it calls transformers' apply_chat_template. It is
// the reference duet's tokenizer/chattemplate tests compare with.
//
// Usage: node render.mjs < request.json > response.json
//
// request:  {"config": "<path to tokenizer_config.json>",
//            "template_name": "<optional name in a chat_template list>",
//            "cases": [{"messages": [...], "tools": [...],
//                       "add_generation_prompt": bool,
//                       "continue_final_message": bool,
//                       "kwargs": {...}}]}
// response: [{"text": "..."} or {"error": "..."}], one per case, in order.
//
// The input preparation follows vLLM's vllm/entrypoints/chat_utils.py
// (_parse_chat_message_content, _postprocess_messages, _detect_content_format)
// and transformers' render_jinja_template (continue_final_message). It is
// written independently of the Go code it checks.

import { readFileSync } from "node:fs";
import { Environment, Template } from "@huggingface/jinja";

// @huggingface/jinja 0.5.11 ignores the argument of str.strip, lstrip and
// rstrip: "a \n".rstrip("\n") gives "a", where Python's Jinja, which the
// engines run, gives "a " (Qwen3's template strips reasoning with
// .strip('\n')). Give its strings Python's methods so the reference
// renders as the engine does.
function patchStrip() {
  const env = new Environment();
  env.set("s", "");
  const StringValue = env.lookupVariable("s").constructor;
  const FunctionValue = env.lookupVariable("s").builtins.get("strip").constructor;
  const original = Object.getOwnPropertyDescriptor(StringValue.prototype, "builtins").get;
  const strip = (s, chars, left, right) => {
    if (chars === undefined || chars === null) {
      if (left) s = s.trimStart();
      if (right) s = s.trimEnd();
      return s;
    }
    let i = 0;
    let j = s.length;
    if (left) while (i < j && chars.includes(s[i])) i++;
    if (right) while (j > i && chars.includes(s[j - 1])) j--;
    return s.slice(i, j);
  };
  Object.defineProperty(StringValue.prototype, "builtins", {
    get() {
      const map = original.call(this);
      if (!map.__python_strip) {
        for (const [name, left, right] of [["strip", true, true], ["lstrip", true, false], ["rstrip", false, true]]) {
          map.set(name, new FunctionValue((args) => {
            const chars = args.length > 0 ? args[0].value : undefined;
            return new StringValue(strip(this.value, chars, left, right));
          }));
        }
        map.__python_strip = true;
      }
      return map;
    },
  });
}
patchStrip();

const SPECIAL_TOKENS = [
  "bos_token", "eos_token", "unk_token", "sep_token",
  "pad_token", "cls_token", "mask_token", "additional_special_tokens",
];

function tokenText(v) {
  if (v && typeof v === "object" && !Array.isArray(v)) return v.content;
  return v;
}

function loadTemplate(configPath, name) {
  const config = JSON.parse(readFileSync(configPath, "utf8"));
  let source = config.chat_template;
  if (Array.isArray(source)) {
    const want = name || "default";
    const found = source.find((t) => t.name === want);
    if (!found) throw new Error(`no chat template named ${want}`);
    source = found.template;
  }
  // transformers' special_tokens_map: the set attributes, then the
  // model-specific extra special tokens.
  const vars = {};
  for (const key of SPECIAL_TOKENS) {
    const v = config[key];
    if (v === undefined || v === null) continue;
    const text = Array.isArray(v) ? v.map(tokenText) : tokenText(v);
    if (text === "" || (Array.isArray(text) && text.length === 0)) continue;
    vars[key] = text;
  }
  const extra = config.extra_special_tokens;
  if (extra && typeof extra === "object" && !Array.isArray(extra)) {
    for (const [k, v] of Object.entries(extra)) {
      const text = tokenText(v);
      if (text) vars[k] = text;
    }
  }
  return { source, vars };
}

// detectContentFormat is vLLM's _detect_content_format: "openai" when the
// template loops over the content of a message it got by looping over
// messages (or a variable set from messages), "string" otherwise.
function detectContentFormat(program) {
  const sets = [];
  const fors = [];
  const walk = (node) => {
    if (!node || typeof node !== "object") return;
    if (Array.isArray(node)) { node.forEach(walk); return; }
    if (node.type === "Set") sets.push(node);
    if (node.type === "For") fors.push(node);
    for (const v of Object.values(node)) if (v && typeof v === "object") walk(v);
  };
  walk(program);
  const isVar = (n, name) => n && n.type === "Identifier" && n.value === name;
  const isAttr = (n, name, key) =>
    n && n.type === "MemberExpression" && isVar(n.object, name) &&
    ((n.computed && n.property.type === "StringLiteral" && n.property.value === key) ||
      (!n.computed && n.property.type === "Identifier" && n.property.value === key));
  const access = (n, name, key) => {
    if (!n) return false;
    if (n.type === "FilterExpression") return access(n.operand, name, key);
    if (n.type === "TestExpression") return access(n.operand, name, key);
    if (n.type === "MemberExpression" && n.computed && n.property.type === "SliceExpression") {
      return access(n.object, name, key);
    }
    return key ? isAttr(n, name, key) : isVar(n, name);
  };
  const messageNames = ["messages"];
  for (let i = 0; i < messageNames.length; i++) {
    for (const s of sets) {
      if (s.value && s.assignee.type === "Identifier" && access(s.value, messageNames[i])) {
        if (!messageNames.includes(s.assignee.value)) messageNames.push(s.assignee.value);
      }
    }
  }
  const itemNames = [];
  for (const f of fors) {
    if (f.loopvar.type !== "Identifier") continue;
    if (messageNames.some((m) => access(f.iterable, m))) itemNames.push(f.loopvar.value);
  }
  for (const f of fors) {
    if (itemNames.some((m) => access(f.iterable, m, "content"))) return "openai";
  }
  return "string";
}

// prepare turns OpenAI chat messages into what vLLM hands the template.
function prepare(messages, format) {
  return messages.map((m) => {
    let parts = m.content;
    if (parts === undefined || parts === null) parts = [];
    else if (typeof parts === "string") parts = [{ type: "text", text: parts }];
    const texts = [];
    for (const p of parts) {
      if (typeof p === "string") { texts.push(p); continue; }
      const text = p.type === "refusal" ? p.refusal : p.text;
      if (text === undefined || text === null) continue;
      texts.push(text);
    }
    const out = { role: m.role };
    out.content = format === "openai" ? texts.map((t) => ({ type: "text", text: t })) : texts.join("\n");
    if (m.role === "assistant") {
      if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0) {
        out.tool_calls = m.tool_calls.map((tc) => {
          let args = tc.function.arguments;
          if (typeof args === "string") {
            try { args = JSON.parse(args); } catch { args = {}; }
          } else if (args === null || typeof args !== "object") {
            args = {};
          }
          return { ...tc, function: { ...tc.function, arguments: args } };
        });
      }
      const reasoning = m.reasoning ?? m.reasoning_content;
      if (reasoning !== undefined && reasoning !== null) {
        out.reasoning = reasoning;
        out.reasoning_content = reasoning;
      }
    } else if (m.role === "tool") {
      if ("tool_call_id" in m) out.tool_call_id = m.tool_call_id;
      if (Array.isArray(out.content)) out.content = out.content.map((p) => p.text).join("\n");
    }
    if (typeof m.name === "string") out.name = m.name;
    return out;
  });
}

// normalizeTool is vLLM's ChatCompletionToolsParam.model_dump(): type
// (default "function"), then function with name, description and
// parameters (null when absent) ahead of its other keys, then the tool's
// other keys.
function normalizeTool(tool) {
  const { type = "function", function: fn, ...rest } = tool;
  const { name, description = null, parameters = null, ...fnRest } = fn;
  return { type, function: { name, description, parameters, ...fnRest }, ...rest };
}

// cutFinal is transformers' continue_final_message: cut the rendering just
// after the final message's text so the model continues it.
function cutFinal(rendered, last) {
  let text = last.content;
  if (Array.isArray(text)) {
    const part = [...text].reverse().find((p) => "text" in p);
    if (!part) throw new Error("continue_final_message: no text in the final message");
    text = part.text;
  }
  const stripped = text.trim();
  const at = rendered.lastIndexOf(stripped);
  if (!stripped.length ? false : at < 0) throw new Error("continue_final_message: final message not in the rendering");
  const kept = text.trimStart();
  if (rendered.slice(at, at + kept.length) === text) return rendered.slice(0, at + kept.length);
  return rendered.slice(0, at + stripped.length);
}

const request = JSON.parse(readFileSync(0, "utf8"));
const { source, vars } = loadTemplate(request.config, request.template_name);
const template = new Template(source);
const format = detectContentFormat(template.parsed);
const results = request.cases.map((c) => {
  try {
    const messages = prepare(c.messages, format);
    const ctx = {
      ...vars,
      ...(c.kwargs || {}),
      messages,
      add_generation_prompt: !!c.add_generation_prompt,
    };
    ctx.tools = c.tools ? c.tools.map(normalizeTool) : null;
    ctx.documents = null;
    let text = template.render(ctx);
    if (c.continue_final_message) text = cutFinal(text, messages[messages.length - 1]);
    return { text };
  } catch (e) {
    return { error: String(e && e.message ? e.message : e) };
  }
});
process.stdout.write(JSON.stringify({ content_format: format, results }));
