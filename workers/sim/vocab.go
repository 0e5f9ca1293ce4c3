package sim

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/duet-serve/duet/tokenizer"
)

// vocab is the set of tokens the simulated model emits: common English
// words, each a single token " word" that decodes and re-encodes to itself.
// Any sequence of them re-tokenizes to the same ids (the pre-tokenizer
// splits before every space-led word), so a reply that a client sends back
// in the next turn's prompt hits the prefix cache. It is immutable.
type vocab struct {
	ids    []int       // word index -> token id
	texts  []string    // word index -> " word"
	quoted [][]byte    // word index -> JSON string of " word"
	index  map[int]int // token id -> word index
	tok    *tokenizer.Tokenizer
	eos    int
}

// minVocab is the fewest words that make the text varied enough.
const minVocab = 64

const vocabWords = `the of and to in is that for it as was with be by on not he this are or his
from at which but have an they you were her she there been one all we their has would when if more no
out so said what up its about into than them can only other new some time could these two may then do
first any my now such like our over man me even most made after also did many before must through back
years where much your way well down should because each just those people how too little state good
very make world still own see men work long get here between both life being under never day same
another know while last might us great old year off come since against go came right used take three
small large next early young important few public bad able point group problem fact hand part place
case week company system program question number night home water room mother area money story month
lot book eye job word business issue side kind head house service friend father power hour game line
end member law car city community name president team minute idea kid body information school face
others level office door health person art war history party result change morning reason research
girl guy moment air teacher force education`

func newVocab(tok *tokenizer.Tokenizer) (*vocab, error) {
	v := &vocab{index: make(map[int]int), tok: tok, eos: tok.EOS()}
	if v.eos < 0 {
		return nil, fmt.Errorf("vocab: tokenizer %s names no end-of-sequence token", tok.Info().Tokenizer)
	}
	for _, w := range strings.Fields(vocabWords) {
		text := " " + w
		ids := tok.Encode(text)
		if len(ids) != 1 || tok.Decode(ids) != text {
			continue
		}
		if _, dup := v.index[ids[0]]; dup {
			continue
		}
		q, err := json.Marshal(text)
		if err != nil {
			return nil, fmt.Errorf("vocab: %w", err)
		}
		v.index[ids[0]] = len(v.ids)
		v.ids = append(v.ids, ids[0])
		v.texts = append(v.texts, text)
		v.quoted = append(v.quoted, q)
	}
	if len(v.ids) < minVocab {
		return nil, fmt.Errorf("vocab: only %d single-token words in tokenizer %s, need %d", len(v.ids), tok.Info().Tokenizer, minVocab)
	}
	return v, nil
}

// size is the number of words.
func (v *vocab) size() int { return len(v.ids) }

// text returns the text of a token id: the word for vocab tokens, "" for
// EOS, else the tokenizer's decoding (a first_gen_token from a real engine).
func (v *vocab) text(id int) string {
	if i, ok := v.index[id]; ok {
		return v.texts[i]
	}
	if id == v.eos {
		return ""
	}
	return v.tok.Decode([]int{id})
}

// quotedText returns the JSON string of a token's text.
func (v *vocab) quotedText(id int) []byte {
	if i, ok := v.index[id]; ok {
		return v.quoted[i]
	}
	q, _ := json.Marshal(v.text(id)) // a string always marshals
	return q
}
