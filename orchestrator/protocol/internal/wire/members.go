package wire

import "encoding/json"

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
