package chattemplate

import (
	"fmt"
	"slices"
)

// The Jinja subset duet renders: what github.com/ardanlabs/jinja v1.8.0
// implements (its parse.go, builtins.go and eval.go), plus duet's own
// tojson, raise_exception and strftime_now. A template using anything else
// fails Load with an *UnsupportedError naming it, rather than rendering
// differently from the engine.
var (
	supportedStatements = set(
		"if", "elif", "else", "endif", "for", "endfor", "set", "endset",
		"macro", "endmacro", "call", "endcall", "filter", "endfilter",
		"raw", "endraw", "break", "continue", "generation", "endgeneration",
	)
	supportedFilters = set(
		"tojson", "fromjson", "from_json", "items", "join", "default", "d",
		"trim", "lower", "upper", "title", "capitalize", "first", "last",
		"length", "count", "reverse", "sort", "unique", "list", "int",
		"float", "string", "safe", "replace", "round", "abs", "map",
		"select", "reject", "selectattr", "rejectattr", "indent",
		"wordcount", "escape", "e", "dictsort", "max", "min", "sum", "batch",
	)
	supportedTests = set(
		"defined", "undefined", "none", "boolean", "integer", "float",
		"number", "string", "mapping", "iterable", "sequence", "callable",
		"true", "false", "eq", "equalto", "ne", "gt", "greaterthan", "ge",
		"lt", "lessthan", "le", "in", "odd", "even", "upper", "lower", "sameas",
	)
	// supportedMethods are the str, list and dict methods.
	supportedMethods = set(
		"strip", "lstrip", "rstrip", "split", "startswith", "endswith",
		"replace", "upper", "lower", "title", "capitalize", "count", "find",
		"format", "append", "pop", "insert", "items", "keys", "values",
		"get", "update",
	)
	supportedGlobals = set(
		"namespace", "raise_exception", "range", "joiner", "dict", "cycler",
		"strftime_now", "caller", "loop",
	)
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// UnsupportedError is a template construct duet cannot render.
type UnsupportedError struct {
	// Kind is "statement", "filter", "test", "method" or "function".
	Kind string
	// Name is the construct's name as the template spells it.
	Name string
	// Line is the 1-based line of the tag that uses it.
	Line int
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("line %d: %s %q is not supported by duet's chat template renderer", e.Line, e.Kind, e.Name)
}

// checkSupported returns an *UnsupportedError for the first construct in
// tags outside the supported subset.
func checkSupported(tags []tag) error {
	macros := map[string]bool{}
	for _, t := range tags {
		if t.kind == tagStmt && len(t.toks) > 1 && t.toks[0].is(tokName, "macro") {
			macros[t.toks[1].text] = true
		}
	}
	for _, t := range tags {
		if err := checkTag(t, macros); err != nil {
			return err
		}
	}
	return nil
}

func checkTag(t tag, macros map[string]bool) error {
	toks := t.toks
	bad := func(kind, name string) error { return &UnsupportedError{Kind: kind, Name: name, Line: t.line} }
	if t.kind == tagStmt {
		if len(toks) == 0 || toks[0].kind != tokName {
			return bad("statement", "")
		}
		if !supportedStatements[toks[0].text] {
			return bad("statement", toks[0].text)
		}
		if toks[0].text == "filter" && len(toks) > 1 && !supportedFilters[toks[1].text] {
			return bad("filter", toks[1].text)
		}
	}
	for i, tk := range toks {
		if tk.kind != tokName {
			continue
		}
		prev := func(k int) tok {
			if i-k < 0 {
				return tok{}
			}
			return toks[i-k]
		}
		next := tok{}
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch {
		case prev(1).is(tokOp, "|"):
			if !supportedFilters[tk.text] {
				return bad("filter", tk.text)
			}
		case prev(1).is(tokName, "is") || (prev(1).is(tokName, "not") && prev(2).is(tokName, "is")):
			if tk.text != "not" && !supportedTests[tk.text] {
				return bad("test", tk.text)
			}
		case next.is(tokOp, "("):
			switch {
			case prev(1).is(tokOp, "."):
				if !supportedMethods[tk.text] {
					return bad("method", tk.text)
				}
			case t.kind == tagStmt && i == 1 && (toks[0].is(tokName, "macro") || toks[0].is(tokName, "filter")):
			case !supportedGlobals[tk.text] && !macros[tk.text] && !slices.Contains(pyKeywords, tk.text):
				return bad("function", tk.text)
			}
		}
	}
	return nil
}

// pyKeywords may precede a parenthesis without being called.
var pyKeywords = []string{"not", "and", "or", "in", "if", "else", "is", "for", "recursive"}
