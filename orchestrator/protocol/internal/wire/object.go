package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Object is a JSON object whose values are kept as raw JSON. Decoding and
// encoding it never turns a number into a float64 and never rewrites a
// value, so 64-bit integers and fields duet does not know survive byte for
// byte. The zero Object is empty and ready to use. Like a slice, copies of
// an Object share its members: modify only one of them. An Object is not
// safe for concurrent use if one of the users modifies it.
type Object struct {
	// members are sorted by key (byte order) and their keys are unique, so
	// lookups are binary searches and Encode writes them as they are.
	// Bodies have 5 to 30 keys: a slice costs one allocation where a map
	// costs several.
	members []member
}

// member is one key of an Object and its raw value.
type member struct {
	key   string
	value json.RawMessage
}

// errNotObject is returned by DecodeObject for valid JSON that is not an
// object.
var errNotObject = errors.New("not a JSON object")

// DecodeObject parses b, which must hold one JSON object; it accepts and
// rejects exactly what json.Valid does, and invalid JSON gives
// encoding/json's syntax error. Keys are unescaped as encoding/json does
// ("a\u0062" is the key "ab"), so a key cannot hide from Delete behind an
// escape; of duplicate keys the last wins. Values are the input's bytes,
// in one copy that does not alias b.
func DecodeObject(b []byte) (Object, error) {
	return DecodeObjectNoCopy(bytes.Clone(b))
}

// DecodeObjectNoCopy is DecodeObject without the copy: the Object's values,
// and its keys (strings over b's bytes), alias b, which must not be
// modified while the Object or anything taken from it is in use. It is for
// a rewrite finished within one call, such as an adapter decoding a body
// it is given and encoding the result (Encode's result never aliases b).
func DecodeObjectNoCopy(b []byte) (Object, error) {
	var stack [32]member // most bodies fit: then the Object costs one allocation
	ms, err := scanMembers(b, stack[:0])
	if err != nil {
		return Object{}, err
	}
	// Of equal keys the stable sort keeps input order, so the last of each
	// run is the one that wins.
	slices.SortStableFunc(ms, compareMembers)
	members := make([]member, 0, len(ms)+spareMembers)
	for i, m := range ms {
		if i+1 < len(ms) && ms[i+1].key == m.key {
			continue
		}
		members = append(members, m)
	}
	return Object{members: members}, nil
}

// spareMembers is the room an Object gets for Sets of new keys beyond its
// decoded ones, so that an adapter's few Sets do not reallocate.
const spareMembers = 4

// compareMembers orders members by key.
func compareMembers(a, b member) int { return strings.Compare(a.key, b.key) }

// find returns the index of key, or where it would be inserted.
func (o *Object) find(key string) (int, bool) {
	return slices.BinarySearchFunc(o.members, key, func(m member, key string) int {
		return strings.Compare(m.key, key)
	})
}

// Has reports whether key is present, whatever its value (null included).
func (o *Object) Has(key string) bool {
	_, ok := o.find(key)
	return ok
}

// Get returns the value of key, nil when it is absent.
func (o *Object) Get(key string) json.RawMessage {
	if i, ok := o.find(key); ok {
		return o.members[i].value
	}
	return nil
}

// Set sets key to raw, which must be valid JSON (Encode does not check
// it); nil is written as null. The Object keeps raw, not a copy.
func (o *Object) Set(key string, raw json.RawMessage) {
	i, ok := o.find(key)
	if ok {
		o.members[i].value = raw
		return
	}
	if len(o.members) == cap(o.members) {
		o.members = slices.Grow(o.members, spareMembers)
	}
	o.members = slices.Insert(o.members, i, member{key: key, value: raw})
}

// Delete removes keys; absent keys are ignored.
func (o *Object) Delete(keys ...string) {
	for _, k := range keys {
		if i, ok := o.find(k); ok {
			o.members = slices.Delete(o.members, i, i+1)
		}
	}
}

// Encode returns the object with its keys sorted, so the same object always
// encodes to the same bytes, and its values written as they are. The
// result is newly allocated.
func (o *Object) Encode() []byte {
	n := 2
	for _, m := range o.members {
		n += len(m.key) + len(m.value) + 8 // quotes, colon, comma; null for nil
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, m := range o.members {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, m.key)
		b = append(b, ':')
		if len(m.value) > 0 {
			b = append(b, m.value...)
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
