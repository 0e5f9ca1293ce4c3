package hf

import (
	"fmt"
	"sort"
	"strings"

	"github.com/valyala/fastjson"
)

// node is a JSON value of tokenizer.json with its path, so that every
// error names where it is (model.merges[12], pre_tokenizer.pretokenizers[0].pattern).
type node struct {
	v    *fastjson.Value
	path string
	idx  int // >= 0: the element idx of the array at path
}

func (n node) where() string {
	if n.idx >= 0 {
		return fmt.Sprintf("%s[%d]", n.path, n.idx)
	}
	return n.path
}

func (n node) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: %s", n.where(), fmt.Sprintf(format, args...))
}

func (n node) null() bool { return n.v == nil || n.v.Type() == fastjson.TypeNull }

// get returns the member key of an object (null if absent).
func (n node) get(key string) node {
	return node{n.v.Get(key), n.where() + "." + key, -1}
}

// object checks that n is an object whose members are all in known.
func (n node) object(known ...string) error {
	o, err := n.v.Object()
	if err != nil {
		return n.errorf("not an object")
	}
	var unknown []string
	o.Visit(func(k []byte, _ *fastjson.Value) {
		for _, want := range known {
			if string(k) == want {
				return
			}
		}
		unknown = append(unknown, string(k))
	})
	if len(unknown) > 0 {
		sort.Strings(known)
		return n.errorf("unknown field(s) %s (known: %s)", strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return nil
}

// typ returns the "type" member of an object.
func (n node) typ() (string, error) {
	t := n.get("type")
	if t.null() {
		return "", n.errorf("no type")
	}
	return t.str()
}

func (n node) str() (string, error) {
	b, err := n.v.StringBytes()
	if err != nil {
		return "", n.errorf("not a string")
	}
	return string(b), nil
}

// optStr returns a string or null ("", false).
func (n node) optStr() (string, bool, error) {
	if n.null() {
		return "", false, nil
	}
	s, err := n.str()
	return s, err == nil, err
}

// boolOr returns a boolean, def if absent or null.
func (n node) boolOr(def bool) (bool, error) {
	if n.null() {
		return def, nil
	}
	b, err := n.v.Bool()
	if err != nil {
		return false, n.errorf("not a boolean")
	}
	return b, nil
}

func (n node) int() (int, error) {
	i, err := n.v.Int()
	if err != nil || i < 0 || i >= 1<<31 {
		return 0, n.errorf("not an id (an integer in [0, 2^31))")
	}
	return i, nil
}

func (n node) array() ([]node, error) {
	a, err := n.v.Array()
	if err != nil {
		return nil, n.errorf("not an array")
	}
	out := make([]node, len(a))
	for i, v := range a {
		out[i] = node{v, n.where(), i}
	}
	return out, nil
}

// sequence reads a Sequence component, {"type": "Sequence", key: [...]},
// calling each for every item in order.
func (n node) sequence(key string, each func(node) error) error {
	if err := n.object("type", key); err != nil {
		return err
	}
	items, err := n.get(key).array()
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := each(it); err != nil {
			return err
		}
	}
	return nil
}

// unsupported is the error for a construct duet does not implement.
func (n node) unsupported(what string) error {
	return n.errorf("%s is not supported", what)
}
