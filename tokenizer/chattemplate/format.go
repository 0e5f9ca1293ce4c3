package chattemplate

import (
	"fmt"
	"slices"
)

// ContentFormat is how a template expects a message's content: the
// content format vLLM detects for it.
type ContentFormat int

const (
	// FormatString: content is a string (text parts joined by "\n").
	FormatString ContentFormat = iota
	// FormatOpenAI: content is a list of {"type": "text", "text": ...}.
	FormatOpenAI
)

// String returns vLLM's name for the format.
func (f ContentFormat) String() string {
	if f == FormatOpenAI {
		return "openai"
	}
	return "string"
}

// detectContentFormat is vLLM's _detect_content_format
// (vllm/entrypoints/chat_utils.py, v0.11): a template is "openai" when it
// loops over the content of a message it got by looping over messages, or
// over a variable set from messages ({% set loop_messages = messages[1:] %}),
// "string" otherwise. An access is the name itself or its 'content' key
// (x['content'] or x.content), under any slices, filters and one test. Like
// vLLM, a set or loop over messages whose target is not a plain name makes
// the detection fail, and the format falls back to "string".
func detectContentFormat(tags []tag) ContentFormat {
	f, err := detect(tags)
	if err != nil {
		return FormatString
	}
	return f
}

func detect(tags []tag) (ContentFormat, error) {
	type loop struct{ target, iter []tok }
	type assign struct{ target, value []tok }
	var loops []loop
	var sets []assign
	for _, t := range tags {
		if t.kind != tagStmt || len(t.toks) < 2 {
			continue
		}
		switch {
		case t.toks[0].is(tokName, "for"):
			in := index(t.toks, func(x tok) bool { return x.is(tokName, "in") })
			if in < 0 {
				continue
			}
			iter := t.toks[in+1:]
			if end := index(iter, func(x tok) bool { return x.is(tokName, "if") || x.is(tokName, "recursive") }); end >= 0 {
				iter = iter[:end]
			}
			loops = append(loops, loop{t.toks[1:in], iter})
		case t.toks[0].is(tokName, "set"):
			eq := index(t.toks, func(x tok) bool { return x.is(tokOp, "=") })
			if eq < 0 {
				continue // {% set x %}...{% endset %}
			}
			sets = append(sets, assign{t.toks[1:eq], t.toks[eq+1:]})
		}
	}
	plain := func(target []tok) (string, error) {
		if len(target) != 1 || target[0].kind != tokName {
			return "", fmt.Errorf("target is not a name")
		}
		return target[0].text, nil
	}
	names := []string{"messages"}
	for i := 0; i < len(names); i++ {
		for _, s := range sets {
			if !accesses(s.value, names[i], "") {
				continue
			}
			n, err := plain(s.target)
			if err != nil {
				return FormatString, err
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	var items []string
	for _, l := range loops {
		for _, n := range names {
			if accesses(l.iter, n, "") {
				item, err := plain(l.target)
				if err != nil {
					return FormatString, err
				}
				items = append(items, item)
				break
			}
		}
	}
	for _, l := range loops {
		for _, item := range items {
			if accesses(l.iter, item, "content") {
				return FormatOpenAI, nil
			}
		}
	}
	return FormatString, nil
}

// accesses reports whether toks is name (or name's key when key is set),
// then any slices, filters and at most one test, and nothing else.
func accesses(toks []tok, name, key string) bool {
	if len(toks) == 0 || !toks[0].is(tokName, name) {
		return false
	}
	i := 1
	if key != "" {
		switch {
		case i+1 < len(toks) && toks[i].is(tokOp, ".") && toks[i+1].is(tokName, key):
			i += 2
		case i+2 < len(toks) && toks[i].is(tokOp, "[") && toks[i+1].is(tokString, key) && toks[i+2].is(tokOp, "]"):
			i += 3
		default:
			return false
		}
	}
	for i < len(toks) && toks[i].is(tokOp, "[") { // slices
		end := closing(toks, i)
		if end < 0 || index(toks[i:end], func(x tok) bool { return x.is(tokOp, ":") }) < 0 {
			return false
		}
		i = end + 1
	}
	for i+1 < len(toks) && toks[i].is(tokOp, "|") && toks[i+1].kind == tokName { // filters
		i += 2
		if i < len(toks) && toks[i].is(tokOp, "(") {
			if i = closing(toks, i); i < 0 {
				return false
			}
			i++
		}
	}
	if i < len(toks) && toks[i].is(tokName, "is") { // a test
		i++
		if i < len(toks) && toks[i].is(tokName, "not") {
			i++
		}
		if i >= len(toks) || toks[i].kind != tokName {
			return false
		}
		i++
		if i < len(toks) && toks[i].is(tokOp, "(") {
			if i = closing(toks, i); i < 0 {
				return false
			}
			i++
		}
	}
	return i == len(toks)
}

// closing returns the index of the bracket closing the one at toks[open].
func closing(toks []tok, open int) int {
	depth := 0
	for i := open; i < len(toks); i++ {
		if toks[i].kind != tokOp {
			continue
		}
		switch toks[i].text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func index(toks []tok, f func(tok) bool) int {
	for i, t := range toks {
		if f(t) {
			return i
		}
	}
	return -1
}
