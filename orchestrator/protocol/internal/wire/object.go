package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
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

// members are the members of one object in input order, duplicates
// included, as scanMembers read them: a read-only view that costs no
// allocation when the caller's buffer holds them all.
type members []member

// scanMembers scans b, which must hold one JSON object (see DecodeObject
// for what is accepted and the errors), and appends its members to buf.
// Keys and values alias b.
func scanMembers(b []byte, buf []member) (members, error) {
	ms, ok := scanObject(b, buf)
	if ok {
		return ms, nil
	}
	if json.Valid(b) {
		return nil, errNotObject
	}
	var v any
	return nil, json.Unmarshal(b, &v) // the syntax error, with its offset
}

// get returns the value of key (the last of duplicates, as in
// encoding/json), nil when absent. Objects read this way have a handful
// of keys: a linear scan.
func (ms members) get(key string) json.RawMessage {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].key == key {
			return ms[i].value
		}
	}
	return nil
}

// Member returns the value of key in the object raw (the last of
// duplicates), nil when absent; raw must be a valid JSON object (see
// DecodeObject). The value aliases raw. It allocates nothing for an object
// of up to 16 members whose keys need no unescaping.
func Member(raw json.RawMessage, key string) (json.RawMessage, error) {
	var buf [16]member
	ms, err := scanMembers(raw, buf[:0])
	if err != nil {
		return nil, err
	}
	return ms.get(key), nil
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

// The scanners below validate as they go, as json.Valid does (the fuzz
// test holds them to it): each returns the index just past what it
// scanned, or -1 where b is not valid JSON.

// maxDepth is encoding/json's nesting limit: json.Valid rejects input
// with more containers open at once.
const maxDepth = 10000

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanObject scans b, which must be one JSON object and nothing else but
// space, and appends its members to ms in input order, duplicates
// included; ok is false if b is not a valid object.
func scanObject(b []byte, ms []member) (_ []member, ok bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return ms, false
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return ms, skipSpace(b, i+1) == len(b)
	}
	for {
		if i == len(b) || b[i] != '"' {
			return ms, false
		}
		end := scanString(b, i)
		if end < 0 {
			return ms, false
		}
		key := keyOf(b[i:end])
		if i = skipColon(b, end); i < 0 {
			return ms, false
		}
		if end = scanValue(b, i, 1); end < 0 {
			return ms, false
		}
		ms = append(ms, member{key: key, value: b[i:end:end]})
		if i = skipSpace(b, end); i == len(b) {
			return ms, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return ms, skipSpace(b, i+1) == len(b)
		default:
			return ms, false
		}
	}
}

// keyOf returns the key that lit, a valid string literal, spells. Without
// escapes and in valid UTF-8 it is a string over lit's bytes, which must
// not change while it is in use (see DecodeObjectNoCopy); otherwise it is
// unescaped as encoding/json does, invalid UTF-8 becoming U+FFFD.
func keyOf(lit []byte) string {
	s := lit[1 : len(lit)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return unsafe.String(unsafe.SliceData(s), len(s))
	}
	var k string
	_ = json.Unmarshal(lit, &k) // cannot fail: scanString accepted lit
	return k
}

// skipColon skips the space, colon and space after an object key ending
// at b[i].
func skipColon(b []byte, i int) int {
	if i = skipSpace(b, i); i == len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// scanValue scans the value at b[i], which is inside depth open
// containers. It loops rather than recursing, keeping whether each
// container it opened is an object on a stack of its own.
func scanValue(b []byte, i, depth int) int {
	var buf [32]bool
	objects := buf[:0] // per container open in the value: is it an object
	for {
		if i == len(b) {
			return -1
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth+len(objects) == maxDepth {
				return -1
			}
			objects = append(objects, c == '{')
			if i = skipSpace(b, i+1); i < len(b) && b[i] == c+2 { // '}' and ']' are '{' and '[' plus 2
				objects = objects[:len(objects)-1]
				i++
				break
			}
			if c == '{' {
				i = scanMemberKey(b, i)
			}
			if i < 0 {
				return -1
			}
			continue // the first element
		case '"':
			i = scanString(b, i)
		case 't':
			i = scanLiteral(b, i, "true")
		case 'f':
			i = scanLiteral(b, i, "false")
		case 'n':
			i = scanLiteral(b, i, "null")
		default:
			i = scanNumber(b, i)
		}
		if i < 0 {
			return -1
		}
		// A value ended: close containers until one has a next element.
		for next := false; !next; {
			if len(objects) == 0 {
				return i
			}
			if i = skipSpace(b, i); i == len(b) {
				return -1
			}
			object := objects[len(objects)-1]
			switch {
			case b[i] == ',':
				i, next = skipSpace(b, i+1), true
				if object {
					if i = scanMemberKey(b, i); i < 0 {
						return -1
					}
				}
			case object && b[i] == '}', !object && b[i] == ']':
				objects = objects[:len(objects)-1]
				i++
			default:
				return -1
			}
		}
	}
}

// scanMemberKey scans a key at b[i] and the colon after it, and returns
// the index of the member's value.
func scanMemberKey(b []byte, i int) int {
	if i == len(b) || b[i] != '"' {
		return -1
	}
	if i = scanString(b, i); i < 0 {
		return -1
	}
	return skipColon(b, i)
}

// inString marks the bytes a string literal holds as they are: all but
// control characters, the quote and the backslash. Like json.Valid,
// scanString does not check UTF-8.
var inString = func() (t [256]bool) {
	for c := 0x20; c < len(t); c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString scans the string literal at b[i]=='"'.
func scanString(b []byte, i int) int {
	for i++; i < len(b); {
		if inString[b[i]] {
			i++
			continue
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 == len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
	return -1
}

// scanNumber scans the number at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i == len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = skipDigits(b, i+1); b[i-1] == '.' {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		if i = skipDigits(b, i); i == start {
			return -1
		}
	}
	return i
}

// skipDigits returns the index of the first byte at or after i that is
// not a decimal digit.
func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// scanLiteral scans lit (true, false or null) at b[i].
func scanLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
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

// ValidObject reports whether raw is one valid JSON object: json.Valid
// accepts it and it is an object.
func ValidObject(raw json.RawMessage) bool {
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] != '{' {
		return false
	}
	end := scanValue(raw, i, 0)
	return end >= 0 && skipSpace(raw, end) == len(raw)
}
