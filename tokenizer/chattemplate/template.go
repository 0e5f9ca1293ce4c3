package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/ardanlabs/jinja"
)

// Errors Render classifies by.
var (
	// ErrUnsupportedPart: a content part duet does not render (images, audio).
	ErrUnsupportedPart = errors.New("unsupported content part")
	// ErrInvalidRequest: the conversation asks for something the engine
	// rejects too (continue_final_message with add_generation_prompt, a
	// reserved chat_template_kwargs key, a malformed tool).
	ErrInvalidRequest = errors.New("invalid chat template request")
)

// TemplateError is an error the template raised itself with
// raise_exception, such as "Conversation roles must alternate
// user/assistant/user/assistant/...". The engine answers such a request
// with a 400, and so should duet.
type TemplateError struct {
	Message string
}

func (e *TemplateError) Error() string { return "chat template: " + e.Message }

// tojsonFilter is the name duet's tojson is registered under: a name
// ardanlabs/jinja has no builtin for, so its evaluator looks it up among
// the render's variables (builtin filters cannot be overridden).
const tojsonFilter = "__duet_tojson"

// Template is a model's chat template, compiled and checked. It is safe
// for concurrent use.
type Template struct {
	src    string // as loaded, before the tojson rewrite
	from   string
	tmpl   *jinja.Template
	format ContentFormat
	// vars are the special tokens and duet's functions, shared read-only by
	// every render.
	vars     map[string]jinja.Value
	special  map[string]any // the special tokens, as loaded
	usesTool bool
}

// Options tune Load. The zero value is the default.
type Options struct {
	// Name picks a template from a tokenizer_config.json whose chat_template
	// is a list of {name, template}; empty means "default".
	Name string
	// Format overrides the detected content format when set to a pointer,
	// as vLLM's --chat-template-content-format does; nil detects it.
	Format *ContentFormat
	// Now is strftime_now's clock; nil means time.Now.
	Now func() time.Time
}

// Load reads the chat template at path: a model directory (its
// chat_template.jinja, else tokenizer_config.json's chat_template), a
// .jinja file, or a tokenizer_config.json. name picks a template from a
// named list ("" or "default" for the default); a name the list lacks is an
// error listing the names it has. The special tokens come from the
// tokenizer_config.json beside the template. A template duet cannot render
// exactly is an error naming the construct (an *UnsupportedError, or the
// error of rendering a probe conversation).
func Load(path, name string) (*Template, error) {
	return LoadOptions(path, Options{Name: name})
}

// LoadOptions is Load with options.
func LoadOptions(path string, opts Options) (*Template, error) {
	src, err := readSource(path, opts.Name)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	t, err := compile(src.text, src.vars, opts)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", src.from, err)
	}
	t.from = src.from
	return t, nil
}

// Parse compiles a template from its source, with vars as the special
// tokens (bos_token, eos_token, ...; values are strings or lists of
// strings), and checks it as Load does.
func Parse(text string, vars map[string]any, opts Options) (*Template, error) {
	return compile(text, vars, opts)
}

func compile(text string, special map[string]any, opts Options) (*Template, error) {
	tags, err := scanTags(text)
	if err != nil {
		return nil, err
	}
	if err := checkSupported(tags); err != nil {
		return nil, err
	}
	tmpl, err := jinja.Compile(rewriteFilters(text, tags, map[string]string{"tojson": tojsonFilter}))
	if err != nil {
		return nil, err
	}
	t := &Template{src: text, tmpl: tmpl, format: detectContentFormat(tags), special: special, usesTool: mentions(tags, "tools")}
	if opts.Format != nil {
		t.format = *opts.Format
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	t.vars = map[string]jinja.Value{
		tojsonFilter:      jinja.NewCallable("tojson", tojson),
		"raise_exception": jinja.NewCallable("raise_exception", raiseException),
		"strftime_now":    jinja.NewCallable("strftime_now", strftimeNow(now)),
	}
	for k, v := range special {
		t.vars[k] = jinja.FromGoValue(v)
	}
	if err := t.probe(); err != nil {
		return nil, err
	}
	return t, nil
}

// ContentFormat returns the content format the template is rendered with.
func (t *Template) ContentFormat() ContentFormat { return t.format }

// Source returns the template's text.
func (t *Template) Source() string { return t.src }

// From returns where the template was loaded from: a path, with "#name"
// for a named template of a list; empty for a parsed one.
func (t *Template) From() string { return t.from }

// SpecialToken returns the special token the template gets as the
// variable name (eos_token, bos_token, ...), or "" when it has none.
func (t *Template) SpecialToken(name string) string {
	s, _ := t.special[name].(string)
	return s
}

// Render renders conv into the prompt text the engine renders for it:
// vLLM's message preparation (see messageValues), then transformers'
// apply_chat_template with messages, tools, documents,
// add_generation_prompt, the special tokens and the kwargs as variables,
// and its continue_final_message cut.
func (t *Template) Render(conv Conversation) (string, error) {
	vars, cont, err := t.variables(&conv)
	if err != nil {
		return "", err
	}
	out, err := t.tmpl.RenderValues(vars)
	if err != nil {
		var te *TemplateError
		if errors.As(err, &te) {
			return "", te
		}
		return "", fmt.Errorf("chat template: %w", err)
	}
	if cont {
		return continueFinal(out, vars["messages"])
	}
	return out, nil
}

// reservedKwargs are apply_chat_template's own parameters: a request's
// chat_template_kwargs may not set the first ones (vLLM rejects
// chat_template and tokenize; messages and conversation would collide), and
// the others are consumed as parameters, never seen by the template.
var (
	rejectedKwargs = set("chat_template", "tokenize", "messages", "conversation")
	consumedKwargs = set("padding", "truncation", "max_length", "return_tensors",
		"return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs")
)

// variables returns the template's variables for conv. Their order of
// precedence is transformers': the special tokens, overridden by the
// kwargs, overridden by messages, tools, documents and
// add_generation_prompt, which the kwargs may set instead of the fields.
// It also returns whether to continue the final message, a parameter of
// apply_chat_template that the template does not see.
func (t *Template) variables(conv *Conversation) (map[string]jinja.Value, bool, error) {
	vars := make(map[string]jinja.Value, len(t.vars)+len(conv.Kwargs)+6)
	maps.Copy(vars, t.vars)
	addGen, cont := conv.AddGenerationPrompt, conv.ContinueFinalMessage
	tools, docs := jinja.None(), jinja.None()
	var err error
	if conv.Tools != nil {
		if tools, err = listValue(conv.Tools, toolValue); err != nil {
			return nil, false, fmt.Errorf("%w: tools%v", ErrInvalidRequest, err)
		}
	}
	if conv.Documents != nil {
		if docs, err = listValue(conv.Documents, func(r json.RawMessage) (jinja.Value, error) { return decodeJSON(r) }); err != nil {
			return nil, false, fmt.Errorf("%w: documents%v", ErrInvalidRequest, err)
		}
	}
	for k, raw := range conv.Kwargs {
		if rejectedKwargs[k] {
			return nil, false, fmt.Errorf("%w: chat_template_kwargs.%s is not allowed", ErrInvalidRequest, k)
		}
		if consumedKwargs[k] {
			continue
		}
		v, err := decodeJSON(raw)
		if err != nil {
			return nil, false, fmt.Errorf("%w: chat_template_kwargs.%s: %v", ErrInvalidRequest, k, err)
		}
		switch k {
		case "add_generation_prompt":
			addGen = v.IsTruthy()
		case "continue_final_message":
			cont = v.IsTruthy()
		case "tools":
			tools = v
		case "documents":
			docs = v
		default:
			vars[k] = v
		}
	}
	if cont && addGen {
		return nil, false, fmt.Errorf("%w: continue_final_message and add_generation_prompt cannot both be set", ErrInvalidRequest)
	}
	if cont && len(conv.Messages) == 0 {
		return nil, false, fmt.Errorf("%w: continue_final_message needs a final message", ErrInvalidRequest)
	}
	msgs, err := messageValues(conv.Messages, t.format)
	if err != nil {
		return nil, false, err
	}
	vars["messages"] = msgs
	vars["tools"] = tools
	vars["documents"] = docs
	vars["add_generation_prompt"] = jinja.NewBool(addGen)
	return vars, cont, nil
}

// listValue decodes each raw JSON item with f.
func listValue(raw []json.RawMessage, f func(json.RawMessage) (jinja.Value, error)) (jinja.Value, error) {
	items := make([]jinja.Value, len(raw))
	for i, r := range raw {
		v, err := f(r)
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("[%d]: %w", i, err)
		}
		items[i] = v
	}
	return jinja.NewList(items), nil
}

// raiseException is transformers' raise_exception: it fails the render
// with the template's message.
func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	msg := "raise_exception called"
	if len(args) > 0 && args[0].IsString() {
		msg = args[0].AsString()
	}
	return jinja.Undefined(), &TemplateError{Message: msg}
}

// mentions reports whether any tag names the variable.
func mentions(tags []tag, name string) bool {
	for _, t := range tags {
		for _, tk := range t.toks {
			if tk.is(tokName, name) {
				return true
			}
		}
	}
	return false
}
