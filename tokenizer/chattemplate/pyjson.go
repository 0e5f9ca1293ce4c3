package chattemplate

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// tojson is transformers' tojson filter (utils/chat_template_utils.py,
// _compile_jinja_template): Python's json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys).
// ardanlabs/jinja v1.8.0's own tojson differs from it where prompts can
// tell: floats (Go's %g prints 1.0 as 1 and 1e6 as 1e+06, Python 1.0 and
// 1000000.0), U+2028/U+2029 (escaped by Go's encoder, raw in Python), and
// indent (sorted keys, HTML escapes). Templates are rewritten at load to
// call this one instead (see rewriteFilters).
func tojson(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("tojson: no value")
	}
	e := pyEncoder{item: ", ", key: ": "}
	if v, ok := kwargs["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			e.indent = strings.Repeat(" ", int(max(v.AsInt(), 0)))
		case v.IsString():
			e.indent = v.AsString()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an int or a string")
		}
		e.pretty, e.item = true, ","
	}
	if v, ok := kwargs["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return jinja.Undefined(), fmt.Errorf("tojson: separators must be two strings")
		}
		e.item, e.key = v.AsList().Items[0].AsString(), v.AsList().Items[1].AsString()
	}
	if v, ok := kwargs["sort_keys"]; ok {
		e.sortKeys = v.IsTruthy()
	}
	if v, ok := kwargs["ensure_ascii"]; ok {
		e.ascii = v.IsTruthy()
	}
	for k := range kwargs {
		switch k {
		case "indent", "separators", "sort_keys", "ensure_ascii":
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: unexpected keyword argument %q", k)
		}
	}
	var b strings.Builder
	if err := e.encode(&b, args[0], 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

type pyEncoder struct {
	item, key string
	indent    string
	pretty    bool
	sortKeys  bool
	ascii     bool
}

func (e *pyEncoder) newline(b *strings.Builder, depth int) {
	b.WriteByte('\n')
	for range depth {
		b.WriteString(e.indent)
	}
}

// container writes a list or dict of n members at depth, open and close
// around them, item(i) writing member i: "[]" or "{}" when empty, else
// the members separated by e.item, each on its own line when pretty.
func (e *pyEncoder) container(b *strings.Builder, open, close byte, n, depth int, item func(i int) error) error {
	if n == 0 {
		b.WriteByte(open)
		b.WriteByte(close)
		return nil
	}
	b.WriteByte(open)
	for i := range n {
		if i > 0 {
			b.WriteString(e.item)
		}
		if e.pretty {
			e.newline(b, depth+1)
		}
		if err := item(i); err != nil {
			return err
		}
	}
	if e.pretty {
		e.newline(b, depth)
	}
	b.WriteByte(close)
	return nil
}

func (e *pyEncoder) encode(b *strings.Builder, v jinja.Value, depth int) error {
	switch {
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		b.WriteString(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloat(v.AsFloat()))
	case v.IsString():
		pyString(b, v.AsString(), e.ascii)
	case v.IsList():
		items := v.AsList().Items
		return e.container(b, '[', ']', len(items), depth, func(i int) error {
			return e.encode(b, items[i], depth+1)
		})
	case v.IsDict():
		d := v.AsDict()
		keys := d.Keys
		if e.sortKeys {
			keys = slices.Sorted(slices.Values(keys))
		}
		return e.container(b, '{', '}', len(keys), depth, func(i int) error {
			pyString(b, keys[i], e.ascii)
			b.WriteString(e.key)
			return e.encode(b, d.Data[keys[i]], depth+1)
		})
	case v.IsUndefined():
		return fmt.Errorf("tojson: Object of type Undefined is not JSON serializable")
	default:
		return fmt.Errorf("tojson: %s is not JSON serializable", v.String())
	}
	return nil
}

// pyFloat formats f as Python's float repr, which json.dumps uses: the
// shortest digits that round-trip, positional notation with at least one
// decimal for exponents in [-4, 16), else d.ddde±XX.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	exp := int(math.Floor(math.Log10(math.Abs(f))))
	// Log10 can be off by one next to powers of ten; the 'e' form is exact.
	s := strconv.FormatFloat(f, 'e', -1, 64)
	if i := strings.LastIndexByte(s, 'e'); i >= 0 {
		exp, _ = strconv.Atoi(s[i+1:])
	}
	if exp < -4 || exp >= 16 {
		return s
	}
	s = strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}

// pyString writes s as json.dumps quotes it: \" \\ \n \r \t \b \f, other
// control characters as \u00XX, everything else raw (ensure_ascii=False)
// or non-ASCII as \uXXXX with surrogate pairs (ensure_ascii=True).
func pyString(b *strings.Builder, s string, ascii bool) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (ascii && r > 0x7f):
				for _, u := range utf16Units(r) {
					b.WriteString(`\u`)
					b.WriteByte(hex[u>>12&0xf])
					b.WriteByte(hex[u>>8&0xf])
					b.WriteByte(hex[u>>4&0xf])
					b.WriteByte(hex[u&0xf])
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

func utf16Units(r rune) []uint16 {
	if r < 0x10000 {
		return []uint16{uint16(r)}
	}
	if r > utf8.MaxRune {
		r = utf8.RuneError
	}
	r -= 0x10000
	return []uint16{uint16(0xd800 + r>>10), uint16(0xdc00 + r&0x3ff)}
}
