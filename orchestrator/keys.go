package orchestrator

import (
	"reflect"
	"strconv"
	"strings"
	"unicode"

	"github.com/duet-serve/duet/proto/openai"
	"github.com/valyala/fastjson"
)

// keySchema lists the keys duet decodes in one JSON object of a request,
// with the schema of each key's value when duet decodes inside it.
// encoding/json matches keys case-insensitively and keeps the last of
// duplicate keys; the Python engines (vLLM, SGLang, TensorRT-LLM's
// pydantic models) match exactly. So {"MAX_TOKENS":5,"max_tokens":2000}
// would be charged as 5 by duet and generate 2000 on the engine. checkKeys
// makes duet read what the engine reads by rejecting the keys on which the
// two would differ.
type keySchema struct {
	// index numbers the exact keys; children[i] is the schema of key i's
	// value (nil: a leaf).
	index    map[string]int
	children []*keySchema
	// folded maps a key's case fold to the exact key.
	folded map[string]string
}

var (
	chatKeys       = schemaOf(reflect.TypeFor[chatBody]())
	completionKeys = schemaOf(reflect.TypeFor[completionBody]())
)

// schemaOf builds the schema of the objects a value of type t decodes:
// struct fields by their json names (embedded structs inlined), through
// pointers and slices. A chat message's content decodes as an array of
// content parts.
func schemaOf(t reflect.Type) *keySchema {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t == reflect.TypeFor[openai.Content]() {
		t = reflect.TypeFor[openai.ContentPart]()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	s := &keySchema{index: map[string]int{}, folded: map[string]string{}}
	s.addFields(t)
	if len(s.children) > maxSchemaFields {
		panic("orchestrator: a request object decodes more than maxSchemaFields keys")
	}
	return s
}

// maxSchemaFields bounds the keys of one schema object, so checkObject
// tracks the keys it has seen in one word.
const maxSchemaFields = 64

func (s *keySchema) addFields(t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case f.Anonymous && name == "":
			s.addFields(f.Type)
		case f.IsExported():
			if name == "" {
				name = f.Name
			}
			s.index[name] = len(s.children)
			s.children = append(s.children, schemaOf(f.Type))
			s.folded[foldKey(name)] = name
		}
	}
}

// checkKeys returns a 400 naming the first key of body (valid JSON) that
// duet and the engines would read differently: a case variant of a key
// duet decodes, or a duplicate of one.
func checkKeys(body []byte, s *keySchema) error {
	if err := openai.CheckDepth(body, maxRequestDepth); err != nil {
		return badRequest("", "invalid request: %v", err)
	}
	p := keyParsers.Get()
	defer keyParsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return badRequest("", "invalid request: %s", truncate([]byte(err.Error()), 200))
	}
	bad := s.check(v)
	switch {
	case bad == nil:
		return nil
	case bad.field == "":
		return badRequest(bad.path, "duplicate key %q in the request body", bad.path)
	default:
		return badRequest(bad.path, "unknown key %q: keys are case-sensitive; did you mean %q?",
			bad.path, bad.path[:len(bad.path)-len(bad.key)]+bad.field)
	}
}

var keyParsers fastjson.ParserPool

// maxRequestDepth bounds a client body's nesting: fastjson's own limit,
// checked first because its error text grows with the square of the depth
// (openai.CheckDepth).
const maxRequestDepth = 300

// badKey is a key checkKeys rejects: a case variant of field, or a
// duplicate when field is "". path grows as the error is returned up the
// document, so a valid body builds no paths.
type badKey struct {
	path, key, field string
}

func (b *badKey) under(parent string) *badKey {
	if strings.HasPrefix(b.path, "[") {
		b.path = parent + b.path
	} else {
		b.path = parent + "." + b.path
	}
	return b
}

// check walks v: an object's keys against s, an array's elements with s.
func (s *keySchema) check(v *fastjson.Value) *badKey {
	if s == nil {
		return nil
	}
	switch v.Type() {
	case fastjson.TypeArray:
		for i, e := range v.GetArray() {
			if bad := s.check(e); bad != nil {
				return bad.under("[" + strconv.Itoa(i) + "]")
			}
		}
	case fastjson.TypeObject:
		return s.checkObject(v.GetObject())
	}
	return nil
}

func (s *keySchema) checkObject(o *fastjson.Object) *badKey {
	var bad *badKey
	var seen uint64
	o.Visit(func(k []byte, v *fastjson.Value) {
		if bad != nil {
			return
		}
		i, known := s.index[string(k)]
		switch {
		case known && seen&(1<<i) != 0:
			bad = &badKey{path: string(k), key: string(k)}
		case known:
			seen |= 1 << i
			if bad = s.children[i].check(v); bad != nil {
				bad.under(string(k))
			}
		default:
			if exact, ok := s.folded[foldKey(string(k))]; ok {
				bad = &badKey{path: string(k), key: string(k), field: exact}
			}
		}
	})
	return bad
}

// foldKey maps every key encoding/json would match to one string: each rune
// is replaced by the upper case of its lower case, so "ſ" (long s) and "s",
// or "K" (Kelvin sign) and "k", fold alike, as bytes.EqualFold has them.
func foldKey(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	for _, r := range key {
		b.WriteRune(unicode.ToUpper(unicode.ToLower(r)))
	}
	return b.String()
}
