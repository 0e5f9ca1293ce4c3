package hf

import (
	"fmt"
	"hash/maphash"
)

// parseBPE reads the model, which must be BPE without dropout, subword
// prefix or suffix (models/bpe/serialization.rs, tokenizers v0.22.2). It
// also returns the vocabulary by its own strings, which loading added
// tokens needs. With byteLevel the model holds the vocabulary as the raw
// bytes its strings stand for.
func parseBPE(n node, big *bigMembers, byteLevel bool) (*bpe, map[string]int32, error) {
	if err := n.object("type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
		"fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"); err != nil {
		return nil, nil, err
	}
	typ, err := n.typ()
	if err != nil {
		return nil, nil, err
	}
	if typ != "BPE" {
		return nil, nil, n.get("type").unsupported("model " + typ)
	}
	if d := n.get("dropout"); !d.null() {
		if f, err := d.v.Float64(); err != nil || f != 0 {
			return nil, nil, d.unsupported("dropout")
		}
	}
	for _, k := range []string{"continuing_subword_prefix", "end_of_word_suffix"} {
		if s, _, err := n.get(k).optStr(); err != nil || s != "" {
			return nil, nil, n.get(k).unsupported("a non-empty " + k)
		}
	}
	m := &bpe{unk: -1, byteLevel: byteLevel}
	for _, f := range []struct {
		key string
		dst *bool
	}{{"fuse_unk", &m.fuseUnk}, {"byte_fallback", &m.byteFallback}, {"ignore_merges", &m.ignoreMerges}} {
		if *f.dst, err = n.get(f.key).boolOr(false); err != nil {
			return nil, nil, err
		}
	}

	if big.vocab == nil || !big.haveMerges {
		return nil, nil, n.errorf("no vocab or no merges")
	}
	vocab, merges := big.vocab, big.merges
	if err := m.build(vocab, merges, n.where()); err != nil {
		return nil, nil, err
	}
	if unk, ok, err := n.get("unk_token").optStr(); err != nil {
		return nil, nil, err
	} else if ok {
		id, ok := vocab[unk]
		if !ok {
			return nil, nil, n.get("unk_token").errorf("%q is not in the vocabulary", unk)
		}
		m.unk = id
	}
	return m, vocab, nil
}

// build fills the model's tables from the vocabulary and merges (the
// ranks are the merges' indexes).
func (m *bpe) build(vocab map[string]int32, merges [][2]string, path string) error {
	maxID := int32(-1)
	for _, id := range vocab {
		maxID = max(maxID, id)
	}
	m.tokens = make([]string, maxID+1)
	keys := make([]string, maxID+1)
	for tok, id := range vocab {
		if m.tokens[id] != "" {
			return fmt.Errorf("%s.vocab: id %d is given to both %q and %q", path, id, m.tokens[id], tok)
		}
		if tok == "" {
			return fmt.Errorf("%s.vocab: an empty token is not supported", path)
		}
		m.tokens[id] = tok
		keys[id] = tok
		if m.byteLevel {
			keys[id], _ = fromByteLevel(tok) // "" (unreachable) outside the alphabet
		}
	}
	m.vocab = newVocabTable(maphash.MakeSeed(), keys)
	m.merges = newMergeTable(len(merges))
	for i, mg := range merges {
		a, okA := vocab[mg[0]]
		b, okB := vocab[mg[1]]
		c, okC := vocab[mg[0]+mg[1]]
		if !okA || !okB || !okC {
			return fmt.Errorf("%s.merges[%d]: %q %q: a token is not in the vocabulary", path, i, mg[0], mg[1])
		}
		m.merges.put(a, b, uint32(i), uint32(c))
	}
	for b := range 256 {
		m.byteToken[b] = lookup(vocab, fmt.Sprintf("<0x%02X>", b))
		m.byteChar[b] = string(byteToRune[b])
		switch {
		case m.byteLevel:
			m.charID[b] = lookup(vocab, m.byteChar[b])
		case b < 0x80:
			m.charID[b] = lookup(vocab, string(rune(b)))
		default:
			m.charID[b] = -1
		}
	}
	return nil
}

func lookup(vocab map[string]int32, s string) int32 {
	if id, ok := vocab[s]; ok {
		return id
	}
	return -1
}

// tokenID returns the id of a vocabulary string, or -1.
func (m *bpe) tokenID(s string) int32 {
	key := s
	if m.byteLevel {
		raw, ok := fromByteLevel(s)
		if !ok {
			for id, tok := range m.tokens { // outside the alphabet: rare
				if tok == s {
					return int32(id)
				}
			}
			return -1
		}
		key = raw
	}
	return m.vocab.get(key)
}
