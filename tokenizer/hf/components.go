package hf

import (
	"fmt"
	"unicode/utf8"

	"github.com/valyala/fastjson"
	"golang.org/x/text/unicode/norm"

	"github.com/duet-serve/duet/tokenizer/pretok"
)

// parseNormalizer reads a normalizer (null for none).
func parseNormalizer(n node) ([]normalizer, error) {
	if n.null() {
		return nil, nil
	}
	typ, err := n.typ()
	if err != nil {
		return nil, err
	}
	forms := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}
	switch typ {
	case "NFC", "NFD", "NFKC", "NFKD":
		if err := n.object("type"); err != nil {
			return nil, err
		}
		return []normalizer{unicodeNormalizer(forms[typ])}, nil
	case "Lowercase":
		if err := n.object("type"); err != nil {
			return nil, err
		}
		return []normalizer{lowercase}, nil
	case "Sequence":
		var out []normalizer
		err := n.sequence("normalizers", func(it node) error {
			ns, err := parseNormalizer(it)
			out = append(out, ns...)
			return err
		})
		return out, err
	case "Prepend":
		if err := n.object("type", "prepend"); err != nil {
			return nil, err
		}
		p, err := n.get("prepend").str()
		return []normalizer{prepend(p)}, err
	case "Strip":
		if err := n.object("type", "strip_left", "strip_right"); err != nil {
			return nil, err
		}
		l, err1 := n.get("strip_left").boolOr(false)
		r, err2 := n.get("strip_right").boolOr(false)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w%w", err1, err2)
		}
		return []normalizer{strip(l, r)}, nil
	case "Replace":
		content, err := replaceContent(n)
		if err != nil {
			return nil, err
		}
		lit, f, err := parsePattern(n.get("pattern"))
		if err != nil {
			return nil, err
		}
		if f == nil {
			return []normalizer{replaceString(lit, content)}, nil
		}
		return []normalizer{replaceRegex(f, content)}, nil
	}
	return nil, n.get("type").unsupported("normalizer " + typ)
}

// replaceContent checks a Replace normalizer's or decoder's keys and
// returns its content (the replacement).
func replaceContent(n node) (string, error) {
	if err := n.object("type", "pattern", "content"); err != nil {
		return "", err
	}
	return n.get("content").str()
}

// parsePattern reads a {"String": s} or {"Regex": r} pattern: a literal
// (f nil) or a find.
func parsePattern(n node) (string, find, error) {
	if err := n.object("String", "Regex"); err != nil {
		return "", nil, err
	}
	if s := n.get("String"); !s.null() {
		lit, err := s.str()
		if err == nil && lit == "" {
			err = s.errorf("an empty pattern is not supported")
		}
		return lit, nil, err
	}
	r := n.get("Regex")
	pat, err := r.str()
	if err != nil {
		return "", nil, err
	}
	if f, ok := pretok.Known(pat); ok {
		return "", f, nil
	}
	f, err := regexFind(pat)
	if err != nil {
		return "", nil, r.errorf("%v", err)
	}
	return "", f, nil
}

// parsePreTokenizer reads a pre-tokenizer (null for none) into steps, and
// reports whether it ends with ByteLevel.
func parsePreTokenizer(n node) ([]step, bool, error) {
	if n.null() {
		return nil, false, nil
	}
	var steps []step
	byteLevel := false
	var add func(n node) error
	add = func(n node) error {
		if byteLevel {
			return n.unsupported("a pre-tokenizer after ByteLevel")
		}
		typ, err := n.typ()
		if err != nil {
			return err
		}
		switch typ {
		case "Sequence":
			return n.sequence("pretokenizers", add)
		case "Split":
			if err := n.object("type", "pattern", "behavior", "invert"); err != nil {
				return err
			}
			lit, f, err := parsePattern(n.get("pattern"))
			if err != nil {
				return err
			}
			if f == nil {
				f = literalFind(lit)
			}
			bn := n.get("behavior")
			b, err := bn.str()
			if err != nil {
				return err
			}
			beh, ok := behaviors[b]
			if !ok {
				return bn.unsupported("behavior " + b)
			}
			inv, err := n.get("invert").boolOr(false)
			if err != nil {
				return err
			}
			steps = append(steps, &splitStep{find: f, behavior: beh, invert: inv})
			return nil
		case "ByteLevel":
			if err := n.object("type", "add_prefix_space", "trim_offsets", "use_regex"); err != nil {
				return err
			}
			aps, err := n.get("add_prefix_space").boolOr(true)
			if err != nil {
				return err
			}
			re, err := n.get("use_regex").boolOr(true)
			if err != nil {
				return err
			}
			byteLevel = true
			if !aps && !re { // only the implicit mapping to bytes
				return nil
			}
			st := &byteLevelStep{addPrefixSpace: aps}
			if re {
				st.regex = &splitStep{find: knownFind(pretok.GPT2), behavior: isolated}
			}
			steps = append(steps, st)
			return nil
		case "Metaspace":
			if err := n.object("type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"); err != nil {
				return err
			}
			st, err := parseMetaspace(n)
			if err != nil {
				return err
			}
			steps = append(steps, st)
			return nil
		case "Digits":
			if err := n.object("type", "individual_digits"); err != nil {
				return err
			}
			ind, err := n.get("individual_digits").boolOr(false)
			if err != nil {
				return err
			}
			beh := contiguous
			if ind {
				beh = isolated
			}
			steps = append(steps, &splitStep{find: findNumeric, behavior: beh})
			return nil
		}
		return n.get("type").unsupported("pre-tokenizer " + typ)
	}
	if err := add(n); err != nil {
		return nil, false, err
	}
	return steps, byteLevel, nil
}

// parseMetaspace reads a Metaspace pre-tokenizer as its deserializer does
// (pre_tokenizers/metaspace.rs): prepend_scheme defaults to always, split
// to true, and add_prefix_space false requires prepend_scheme never.
func parseMetaspace(n node) (*metaspaceStep, error) {
	rn := n.get("replacement")
	rep, err := rn.str()
	if err != nil {
		return nil, err
	}
	if utf8.RuneCountInString(rep) != 1 {
		return nil, rn.errorf("not one character")
	}
	scheme := prependAlways
	if s, ok, err := n.get("prepend_scheme").optStr(); err != nil {
		return nil, err
	} else if ok {
		schemes := map[string]prependScheme{"always": prependAlways, "first": prependFirst, "never": prependNever}
		if scheme, ok = schemes[s]; !ok {
			return nil, n.get("prepend_scheme").unsupported("prepend_scheme " + s)
		}
	}
	if aps := n.get("add_prefix_space"); !aps.null() {
		v, err := aps.boolOr(true)
		if err != nil {
			return nil, err
		}
		if !v {
			if scheme != prependNever && !n.get("prepend_scheme").null() {
				return nil, aps.errorf("add_prefix_space false does not match prepend_scheme")
			}
			scheme = prependNever
		}
	}
	split, err := n.get("split").boolOr(true)
	if err != nil {
		return nil, err
	}
	st := &metaspaceStep{replacement: rep, scheme: scheme}
	if split {
		r, _ := utf8.DecodeRuneInString(rep)
		st.splitter = &splitStep{find: findRune(r), behavior: mergedWithNext}
	}
	return st, nil
}

// parsePostProcessor reads a post-processor (null for none) into the ids
// it puts before and after the text with add_special_tokens.
func parsePostProcessor(n node, t *Tokenizer) (prefix, suffix []int, err error) {
	if n.null() {
		return nil, nil, nil
	}
	typ, err := n.typ()
	if err != nil {
		return nil, nil, err
	}
	switch typ {
	case "ByteLevel": // offsets only
		return nil, nil, n.object("type", "add_prefix_space", "trim_offsets", "use_regex")
	case "Sequence":
		err := n.sequence("processors", func(it node) error { // each wraps what the ones before produced
			p, s, err := parsePostProcessor(it, t)
			prefix, suffix = append(p, prefix...), append(suffix, s...)
			return err
		})
		return prefix, suffix, err
	case "TemplateProcessing":
		return parseTemplate(n)
	case "BertProcessing", "RobertaProcessing":
		if err := n.object("type", "sep", "cls", "trim_offsets", "add_prefix_space"); err != nil {
			return nil, nil, err
		}
		var ids [2]int
		for i, k := range []string{"cls", "sep"} {
			pair, err := n.get(k).array()
			if err != nil {
				return nil, nil, err
			}
			if len(pair) != 2 {
				return nil, nil, n.get(k).errorf("not a [token, id] pair")
			}
			if ids[i], err = pair[1].int(); err != nil {
				return nil, nil, err
			}
		}
		return []int{ids[0]}, []int{ids[1]}, nil
	}
	return nil, nil, n.get("type").unsupported("post-processor " + typ)
}

// parseTemplate reads TemplateProcessing's single template: the special
// tokens before and after the sequence A.
func parseTemplate(n node) (prefix, suffix []int, err error) {
	if err := n.object("type", "single", "pair", "special_tokens"); err != nil {
		return nil, nil, err
	}
	specials := map[string][]int{}
	sn := n.get("special_tokens")
	if !sn.null() {
		o, err := sn.v.Object()
		if err != nil {
			return nil, nil, sn.errorf("not an object")
		}
		var perr error
		o.Visit(func(k []byte, v *fastjson.Value) {
			if perr != nil {
				return
			}
			tn := node{v, sn.where() + "." + string(k), -1}
			if perr = tn.object("id", "ids", "tokens"); perr != nil {
				return
			}
			idn, err := tn.get("ids").array()
			if err != nil {
				perr = err
				return
			}
			var ids []int
			for _, x := range idn {
				id, err := x.int()
				if err != nil {
					perr = err
					return
				}
				ids = append(ids, id)
			}
			specials[string(k)] = ids
		})
		if perr != nil {
			return nil, nil, perr
		}
	}
	items, err := n.get("single").array()
	if err != nil {
		return nil, nil, err
	}
	seen := false
	for _, it := range items {
		if err := it.object("SpecialToken", "Sequence"); err != nil {
			return nil, nil, err
		}
		if sq := it.get("Sequence"); !sq.null() {
			if id, _ := sq.get("id").str(); id != "A" || seen {
				return nil, nil, sq.unsupported("a single template with other sequences than one A")
			}
			seen = true
			continue
		}
		st := it.get("SpecialToken")
		id, err := st.get("id").str()
		if err != nil {
			return nil, nil, err
		}
		ids, ok := specials[id]
		if !ok {
			return nil, nil, st.errorf("special token %q is not in special_tokens", id)
		}
		if seen {
			suffix = append(suffix, ids...)
		} else {
			prefix = append(prefix, ids...)
		}
	}
	if !seen {
		return nil, nil, n.get("single").errorf("no sequence A")
	}
	return prefix, suffix, nil
}

// parseDecoder reads a decoder (null for none).
func parseDecoder(n node) (decoder, error) {
	if n.null() {
		return nil, nil
	}
	typ, err := n.typ()
	if err != nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		return byteLevelDecoder, n.object("type", "add_prefix_space", "trim_offsets", "use_regex")
	case "ByteFallback":
		return byteFallbackDecoder, n.object("type")
	case "Fuse":
		return fuseDecoder, n.object("type")
	case "Replace":
		content, err := replaceContent(n)
		if err != nil {
			return nil, err
		}
		pn := n.get("pattern")
		if err := pn.object("String"); err != nil {
			return nil, pn.unsupported("a Regex pattern in a Replace decoder")
		}
		lit, err := pn.get("String").str()
		if err != nil || lit == "" {
			return nil, pn.errorf("not a non-empty string")
		}
		return replaceDecoder(lit, content), nil
	case "Strip":
		if err := n.object("type", "content", "start", "stop"); err != nil {
			return nil, err
		}
		c, err := n.get("content").str()
		if err != nil || utf8.RuneCountInString(c) != 1 {
			return nil, n.get("content").errorf("not one character")
		}
		start, err1 := n.get("start").int()
		stop, err2 := n.get("stop").int()
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w%w", err1, err2)
		}
		r, _ := utf8.DecodeRuneInString(c)
		return stripDecoder(r, start, stop), nil
	case "Metaspace":
		if err := n.object("type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"); err != nil {
			return nil, err
		}
		st, err := parseMetaspace(n)
		if err != nil {
			return nil, err
		}
		r, _ := utf8.DecodeRuneInString(st.replacement)
		return metaspaceDecoder(r, st.scheme), nil
	case "Sequence":
		var ds []decoder
		err := n.sequence("decoders", func(it node) error {
			d, err := parseDecoder(it)
			if d != nil {
				ds = append(ds, d)
			}
			return err
		})
		return decoderChain(ds), err
	}
	return nil, n.get("type").unsupported("decoder " + typ)
}
