package orchestrator

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/openai"
	"github.com/valyala/fastjson"
)

// errNotJSONObject is returned for a worker body or event that is not a
// JSON object.
var errNotJSONObject = errors.New("not a JSON object")

// contentKeys are the keys of a choice's delta (streaming chat) that carry
// output: text, reasoning text (vLLM writes reasoning_content, newer
// versions reasoning) and tool calls.
var contentKeys = []string{"content", "reasoning_content", "reasoning", "tool_calls"}

// chunkReader reads worker JSON (a whole response or one stream event) as
// JSON, whatever its whitespace, key order or escapes, and rewrites it by
// key. One parse per body; nothing is found by matching bytes. A
// chunkReader is not safe for concurrent use; get one from chunkReaders
// and put it back when the values it returned are no longer used.
type chunkReader struct {
	p     fastjson.Parser
	arena fastjson.Arena
	out   []byte
}

// chunkReaders recycles chunkReaders: a relay holds one for its stream.
var chunkReaders = sync.Pool{New: func() any { return &chunkReader{} }}

func getChunkReader() *chunkReader { return chunkReaders.Get().(*chunkReader) }

func putChunkReader(r *chunkReader) {
	if cap(r.out) > 64<<10 { // do not keep one giant response's buffer
		r.out = nil
	}
	chunkReaders.Put(r)
}

// chunk is what duet needs from one worker body. It is valid until the
// chunkReader's next read.
type chunk struct {
	v *fastjson.Value
	// finish is the first non-null choices[i].finish_reason, "" when none.
	finish string
	// failed reports that a choice ended with a failure reason (abort,
	// error, ...); oddFinish that one ended with a reason OpenAI does not
	// define (rewrite makes it stop).
	failed, oddFinish bool
	// content reports that a choice carries output: a non-empty delta
	// content, reasoning or tool call (chat stream), message content
	// (chat) or text (completions).
	content bool
	// text is a choice's output text (delta or message content, or the
	// completion text), unescaped; toolCalls and reasoning report that a
	// choice carries tool calls or reasoning text. Valid until the next read.
	text                 []byte
	toolCalls, reasoning bool
	// usage is the top-level usage object; nil when absent or null.
	usage *fastjson.Value
	// isError reports a worker error in a 200 body or an event: a non-null
	// top-level "error", or vLLM's older {"object":"error",...}.
	isError bool
	// duplicate reports that a key duet reads occurs twice (read fails).
	duplicate bool
}

// strictFrom is the size from which read validates data before fastjson
// parses it. fastjson quotes the unparsed tail into its error once per
// level of nesting, so a garbage event costs up to about a hundred times
// its size; below strictFrom that is bounded and small, and validating
// every small event would cost more than parsing it (~300 ns against
// ~190 ns).
const strictFrom = 1 << 10

// errInvalidJSON is returned for data of strictFrom bytes or more that is
// not valid JSON.
var errInvalidJSON = errors.New("not valid JSON")

// read parses one stream event, which must be a JSON object, validating
// it first when it is strictFrom bytes or more.
func (r *chunkReader) read(data []byte) (chunk, error) {
	if len(data) >= strictFrom && !json.Valid(data) {
		return chunk{}, errInvalidJSON
	}
	return r.parse(data)
}

// parse parses data, which must be one JSON object, without validating it
// first (the caller did, or it is small). Each object is walked once.
func (r *chunkReader) parse(data []byte) (chunk, error) {
	if err := openai.CheckDepth(data, openai.MaxWorkerDepth); err != nil {
		return chunk{}, err
	}
	v, err := r.p.ParseBytes(data)
	if err != nil {
		return chunk{}, err
	}
	top, err := v.Object()
	if err != nil {
		return chunk{}, errNotJSONObject
	}
	c := chunk{v: v}
	var seen keySet
	top.Visit(func(key []byte, f *fastjson.Value) {
		switch string(key) {
		case "usage":
			seen.add(0)
			if f.Type() == fastjson.TypeObject {
				c.usage = f
				c.duplicate = c.duplicate || hasDuplicate(f.GetObject(), usageKeys)
			}
		case "error":
			seen.add(1)
			c.isError = c.isError || f.Type() != fastjson.TypeNull
		case "object":
			seen.add(2)
			c.isError = c.isError || string(f.GetStringBytes()) == "error"
		case "choices":
			seen.add(3)
			for _, ch := range f.GetArray() {
				readChoice(ch, &c)
			}
		}
	})
	if c.duplicate || seen.duplicate {
		return chunk{}, errDuplicateKey
	}
	return c, nil
}

// errDuplicateKey is returned for a worker body that repeats a key duet
// reads or rewrites. Python's json, which the engines write with, never
// does; a reader could take either copy (fastjson the first, most clients
// the last), so duet and its client could disagree on the usage or the
// finish reason.
var errDuplicateKey = errors.New("a key duet reads occurs twice")

// keySet records which of up to 64 keys an object has, and whether one came
// twice.
type keySet struct {
	bits      uint64
	duplicate bool
}

func (s *keySet) add(i int) {
	s.duplicate = s.duplicate || s.bits&(1<<i) != 0
	s.bits |= 1 << i
}

// usageKeys are the usage keys duet reads and rewrites.
var usageKeys = []string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}

// hasDuplicate reports whether one of keys occurs twice in o.
func hasDuplicate(o *fastjson.Object, keys []string) bool {
	var seen keySet
	o.Visit(func(key []byte, _ *fastjson.Value) {
		if i := slices.Index(keys, string(key)); i >= 0 {
			seen.add(i)
		}
	})
	return seen.duplicate
}

// readChoice adds one choice's finish reason and content to c.
func readChoice(ch *fastjson.Value, c *chunk) {
	o, err := ch.Object()
	if err != nil {
		return
	}
	var seen keySet
	o.Visit(func(key []byte, f *fastjson.Value) {
		switch string(key) {
		case "finish_reason":
			seen.add(0)
			reason := string(f.GetStringBytes())
			if c.finish == "" {
				c.finish = reason
			}
			c.failed = c.failed || openai.IsFailureFinishReason(reason)
			c.oddFinish = c.oddFinish || engineOnlyReason(reason)
		case "text":
			seen.add(1)
			c.text = f.GetStringBytes()
			c.content = c.content || len(c.text) > 0
		case "message":
			seen.add(2)
			c.text = f.GetStringBytes("content")
			c.content = c.content || len(c.text) > 0
		case "delta":
			seen.add(3)
			readDelta(f, c)
		}
	})
	c.duplicate = c.duplicate || seen.duplicate
}

// readDelta adds a streamed chat delta's output to c: its text, and
// whether it carries any output, tool calls or reasoning.
func readDelta(delta *fastjson.Value, c *chunk) {
	o, err := delta.Object()
	if err != nil {
		return
	}
	o.Visit(func(key []byte, f *fastjson.Value) {
		k := string(key)
		if !slices.Contains(contentKeys, k) {
			return
		}
		found := false
		switch f.Type() {
		case fastjson.TypeString:
			b := f.GetStringBytes()
			found = len(b) > 0
			if k == "content" {
				c.text = b
			}
		case fastjson.TypeArray:
			found = len(f.GetArray()) > 0
		}
		c.content = c.content || found
		c.toolCalls = c.toolCalls || found && k == "tool_calls"
		c.reasoning = c.reasoning || found && k != "content" && k != "tool_calls"
	})
}

// usageOf returns the usage the chunk reports (zero when it has none).
func usageOf(c chunk) openai.Usage {
	if c.usage == nil {
		return openai.Usage{}
	}
	u := openai.Usage{
		PromptTokens:     c.usage.GetInt("prompt_tokens"),
		CompletionTokens: c.usage.GetInt("completion_tokens"),
		TotalTokens:      c.usage.GetInt("total_tokens"),
	}
	if d := c.usage.Get("prompt_tokens_details"); d != nil && d.Type() == fastjson.TypeObject {
		u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: d.GetInt("cached_tokens")}
	}
	return u
}

// rewrite returns the chunk as the client must see it and the usage it
// reports. With a context phase (ctx non-nil and prompt tokens known),
// usage reports the context phase's prompt and cached tokens, which the gen
// worker did not see; a choice's finish reason outside OpenAI's set becomes
// "stop". Only those keys change; when neither applies the original data is
// returned as is. data must be what c was read from. The result is valid
// until the chunkReader's next read.
func (r *chunkReader) rewrite(data []byte, c chunk, ctx *protocol.Context) ([]byte, openai.Usage) {
	u := usageOf(c)
	patchUsage := c.usage != nil && ctx != nil && ctx.PromptTokens > 0
	if !patchUsage && !c.oddFinish {
		return data, u
	}
	// Parse again: reading c unescaped some strings in place, and fastjson
	// would write those back in Go's quoting, not JSON's. Values of a fresh
	// parse that are not read are written back byte for byte.
	v, err := r.p.ParseBytes(data)
	if err != nil {
		return data, u // cannot happen: data parsed before
	}
	r.arena.Reset()
	if usage := v.Get("usage"); patchUsage && usage != nil {
		u = r.setUsage(usage, u, ctx)
	}
	if c.oddFinish {
		r.normaliseFinish(v)
	}
	r.out = appendJSON(r.out[:0], v)
	return r.out, u
}

// appendJSON appends v as JSON. fastjson's own MarshalTo writes the keys of
// an object it has looked into with Go's quoting, which is not JSON for a
// control character ("\x01"); appendJSON quotes keys as JSON and writes
// every other value with MarshalTo, byte for byte unless read. The only
// strings rewrite reads are finish reasons, which are OpenAI's names or
// replaced, so none needs quoting.
func appendJSON(dst []byte, v *fastjson.Value) []byte {
	// GetObject and GetArray test the type without unescaping a string,
	// as Object and Array do for their error text. An empty array is nil
	// here and left to MarshalTo.
	if o := v.GetObject(); o != nil {
		dst = append(dst, '{')
		n := 0
		o.Visit(func(key []byte, f *fastjson.Value) {
			if n++; n > 1 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, key)
			dst = append(dst, ':')
			dst = appendJSON(dst, f)
		})
		return append(dst, '}')
	}
	if a := v.GetArray(); a != nil {
		dst = append(dst, '[')
		for i, e := range a {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSON(dst, e)
		}
		return append(dst, ']')
	}
	return v.MarshalTo(dst)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(dst, s []byte) []byte {
	if !needsEscape(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	quoted, _ := json.Marshal(string(s)) // a string always marshals
	return append(dst, quoted...)
}

func needsEscape(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// engineOnlyReason reports a finish reason an engine invented
// (remote_decode, not_finished, repetition, ...): neither OpenAI's nor a
// failure. Clients get "stop" instead.
func engineOnlyReason(reason string) bool {
	return reason != "" && !openai.IsOpenAIFinishReason(reason) && !openai.IsFailureFinishReason(reason)
}

// normaliseFinish sets each choice's finish reason that OpenAI does not
// define (remote_decode, not_finished, ...) to "stop"; the others are kept.
func (r *chunkReader) normaliseFinish(v *fastjson.Value) {
	for _, ch := range v.GetArray("choices") {
		if engineOnlyReason(string(ch.GetStringBytes("finish_reason"))) {
			ch.Set("finish_reason", r.arena.NewString(openai.FinishStop))
		}
	}
}

// setUsage overrides prompt_tokens, total_tokens and
// prompt_tokens_details.cached_tokens of usage with the context phase's
// (other keys are kept) and returns the usage now reported.
func (r *chunkReader) setUsage(usage *fastjson.Value, u openai.Usage, ctx *protocol.Context) openai.Usage {
	u.PromptTokens = ctx.PromptTokens
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: ctx.CachedTokens}
	r.writeUsage(usage, u)
	return u
}

// writeUsage sets usage's prompt_tokens, total_tokens and
// prompt_tokens_details.cached_tokens to u's; other keys are kept.
func (r *chunkReader) writeUsage(usage *fastjson.Value, u openai.Usage) {
	usage.Set("prompt_tokens", r.arena.NewNumberInt(u.PromptTokens))
	usage.Set("total_tokens", r.arena.NewNumberInt(u.TotalTokens))
	details := usage.Get("prompt_tokens_details")
	if details == nil || details.Type() != fastjson.TypeObject {
		details = r.arena.NewObject()
		usage.Set("prompt_tokens_details", details)
	}
	details.Set("cached_tokens", r.arena.NewNumberInt(u.CachedTokens()))
}

// splice returns an event of a continuation leg (see migrate.go) as the
// client must see it, and the usage it reports: the first leg's id and
// created time, no role in its deltas (the client had it), a finish reason
// outside OpenAI's set made "stop", and usage counting the whole answer:
// the first leg's prompt and cached tokens, and the completion tokens of
// every leg. data must be what c was read from; the result is valid until
// the chunkReader's next read.
func (r *chunkReader) splice(data []byte, c chunk, a *answer) ([]byte, openai.Usage) {
	v, err := r.p.ParseBytes(data) // see rewrite: parse again before writing
	if err != nil {
		return data, usageOf(c)
	}
	r.arena.Reset()
	u := usageOf(c)
	if v.Exists("id") {
		v.Set("id", r.arena.NewString(a.id))
	}
	if v.Exists("created") {
		v.Set("created", r.arena.NewNumberString(strconv.FormatInt(a.created, 10)))
	}
	for _, ch := range v.GetArray("choices") {
		if d := ch.Get("delta"); d != nil && d.Type() == fastjson.TypeObject {
			d.Del("role")
		}
	}
	if c.oddFinish {
		r.normaliseFinish(v)
	}
	if usage := v.Get("usage"); c.usage != nil && usage != nil {
		u = openai.Usage{PromptTokens: a.promptTokens, CompletionTokens: a.sentTokens + u.CompletionTokens,
			PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: a.cachedTokens}}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		r.writeUsage(usage, u)
		usage.Set("completion_tokens", r.arena.NewNumberInt(u.CompletionTokens))
	}
	r.out = appendJSON(r.out[:0], v)
	return r.out, u
}
