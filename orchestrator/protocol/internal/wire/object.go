package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Object is a JSON object whose values are kept as raw JSON. Decoding and
// encoding it never turns a number into a float64 and never rewrites a
// value, so 64-bit integers and fields duet does not know survive byte for
// byte.
type Object map[string]json.RawMessage

// errNotObject is returned by DecodeObject for valid JSON that is not an
// object.
var errNotObject = errors.New("not a JSON object")

// DecodeObject parses b, which must hold one JSON object. Keys are
// unescaped as encoding/json does ("a\u0062" is the key "ab"), so a key
// cannot hide from Delete behind an escape; of duplicate keys the last
// wins. Values are the input's bytes, in one copy that does not alias b.
func DecodeObject(b []byte) (Object, error) {
	if !json.Valid(b) {
		var v any
		return nil, json.Unmarshal(b, &v) // the syntax error, with its offset
	}
	b = bytes.Clone(b)
	i := skipSpace(b, 0)
	if b[i] != '{' {
		return nil, errNotObject
	}
	o := Object{}
	i = skipSpace(b, i+1)
	for b[i] != '}' {
		end := endOfString(b, i)
		key, err := unquote(b[i:end])
		if err != nil {
			return nil, err
		}
		i = skipSpace(b, end)
		i = skipSpace(b, i+1) // past ':'
		end = endOfValue(b, i)
		o[key] = b[i:end:end]
		i = skipSpace(b, end)
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return o, nil
}

// Has reports whether key is present, whatever its value (null included).
func (o Object) Has(key string) bool {
	_, ok := o[key]
	return ok
}

// Set sets key to raw, which must be valid JSON (Encode does not check
// it); nil is written as null.
func (o Object) Set(key string, raw json.RawMessage) { o[key] = raw }

// Delete removes keys; absent keys are ignored.
func (o Object) Delete(keys ...string) {
	for _, k := range keys {
		delete(o, k)
	}
}

// Encode returns the object with its keys sorted, so the same object always
// encodes to the same bytes, and its values written as they are.
func (o Object) Encode() []byte {
	keys := make([]string, 0, len(o))
	n := 2
	for k, v := range o {
		keys = append(keys, k)
		n += len(k) + len(v) + 8
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		if v := o[k]; len(v) > 0 {
			b = append(b, v...)
		} else {
			b = append(b, Null...)
		}
	}
	return append(b, '}')
}

// JSON literals for Set.
var (
	// True is the JSON literal true.
	True = json.RawMessage("true")
	// False is the JSON literal false.
	False = json.RawMessage("false")
	// Null is the JSON literal null.
	Null = json.RawMessage("null")
)

// Uint returns v as a JSON number, exactly (no float64 on the way).
func Uint(v uint64) json.RawMessage { return strconv.AppendUint(nil, v, 10) }

// Int returns v as a JSON number.
func Int(v int) json.RawMessage { return strconv.AppendInt(nil, int64(v), 10) }

// String returns s as a JSON string.
func String(s string) json.RawMessage { return appendString(nil, s) }

// IsNull reports whether raw is absent (empty) or the literal null.
func IsNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, Null)
}

// IsObject reports whether raw starts like a JSON object. It does not
// validate the rest.
func IsObject(raw json.RawMessage) bool { return first(raw) == '{' }

// IsArray reports whether raw starts like a JSON array; see IsObject.
func IsArray(raw json.RawMessage) bool { return first(raw) == '[' }

// first returns the first non-space byte of b, or 0.
func first(b []byte) byte {
	if i := skipSpace(b, 0); i < len(b) {
		return b[i]
	}
	return 0
}

// The scanning helpers below run on input json.Valid accepted, so they
// need not check for malformed or truncated input.

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// endOfString returns the index just past the string starting at b[i]=='"'.
func endOfString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// structural marks the bytes endOfValue stops at inside a container.
var structural = [256]bool{'"': true, '{': true, '[': true, '}': true, ']': true}

// endOfValue returns the index just past the value starting at b[i].
func endOfValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return endOfString(b, i)
	case '{', '[':
		depth := 0
		for {
			for !structural[b[i]] {
				i++
			}
			switch b[i] {
			case '"':
				i = endOfString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	for i < len(b) { // number, true, false, null
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// unquote decodes a JSON string literal, quickly when it has no escapes;
// like encoding/json it turns invalid UTF-8 into U+FFFD.
func unquote(lit []byte) (string, error) {
	if bytes.IndexByte(lit, '\\') < 0 && utf8.Valid(lit) {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

// appendString appends s as a JSON string literal. Control characters,
// quote and backslash are escaped and invalid UTF-8 becomes U+FFFD;
// everything else, HTML characters included, is written as is.
func appendString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		return appendEscaped(b, s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			return appendEscaped(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendEscaped is appendString's slow path.
func appendEscaped(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// ValidObject reports whether raw is one valid JSON object.
func ValidObject(raw json.RawMessage) bool { return IsObject(raw) && json.Valid(raw) }
