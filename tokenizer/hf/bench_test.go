package hf

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/duet-serve/duet/tokenizer/internal/reftest"
)

// Benchmarks (numbers in doc.go):
//
//	go test ./tokenizer/hf/ -run '^$' -bench . -benchtime 5x
//
// BenchmarkLoad loads each tokenizer file; BenchmarkEncodeProse encodes
// a ~40k-token prose prompt cold (fresh word cache) and warm (every word
// cached, as when a chat re-sends its earlier turns); BenchmarkAdversarial
// encodes 2 MiB inputs built to be slow.

func BenchmarkLoad(b *testing.B) {
	for _, model := range models {
		b.Run(model, func(b *testing.B) {
			requireReference(b)
			var before, after runtime.MemStats
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				tok, err := Load(reftest.ModelDir(model))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(tok)
				b.StartTimer()
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB")
		})
	}
}

// prose returns about n bytes of English-like prose with code and numbers.
func prose(n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields(`the of and to in is was that for it with as his on be at by had are but from or have an they which one you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three`)
	var b strings.Builder
	for b.Len() < n {
		s := words[rng.IntN(len(words))]
		if rng.IntN(12) == 0 {
			s = strings.ToUpper(s[:1]) + s[1:]
		}
		b.WriteString(s)
		switch rng.IntN(20) {
		case 0:
			b.WriteString(". ")
		case 1:
			b.WriteString(", ")
		case 2:
			b.WriteString("\n\n")
		case 3:
			b.WriteString(" 2024 ")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

func BenchmarkEncodeProse(b *testing.B) {
	text := prose(180_000) // about 40k tokens
	for _, model := range models {
		tok := loadModel(b, model)
		n := len(tok.Encode(text))
		// cold: no cache; words: every word cached (text seen before in
		// other stretches); the segment cache, which would serve the whole
		// text at once, is emptied in both (see tokenizer's chat benchmarks).
		for _, warm := range []bool{false, true} {
			name := model + "/cold"
			if warm {
				name = model + "/words"
			}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					if !warm {
						tok.model.cache = wordCache{}
					}
					tok.segments = segmentCache{}
					tok.Encode(text)
				}
				b.ReportMetric(float64(n), "tokens")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(text)), "ns/byte")
			})
		}
	}
}

// adversarial returns 2 MiB inputs that are slow for some pre-tokenizer
// or for merging.
func adversarial() map[string]string {
	const size = 2 << 20
	rng := rand.New(rand.NewPCG(3, 4))
	randBytes := make([]byte, size)
	for i := range randBytes {
		randBytes[i] = byte(rng.IntN(256))
	}
	letters := make([]byte, size)
	for i := range letters {
		letters[i] = byte('a' + rng.IntN(26))
	}
	var cjk strings.Builder
	for cjk.Len() < size {
		cjk.WriteRune(rune(0x4e00 + rng.IntN(0x5000)))
	}
	return map[string]string{
		"a":           strings.Repeat("a", size),
		"spaces":      strings.Repeat(" ", size),
		"newlines":    strings.Repeat("\n", size),
		"digits":      strings.Repeat("1", size),
		"letters":     string(letters),
		"random":      string(randBytes),
		"emoji":       strings.Repeat("😀", size/4),
		"cjk":         cjk.String(),
		"space-a":     strings.Repeat(" a", size/2),
		"marks":       "e" + strings.Repeat("\u0301", size/2),
		"punct":       strings.Repeat("!", size),
		"angle":       strings.Repeat("<", size),
		"special-ish": strings.Repeat("<|im_start", size/10),
	}
}

func BenchmarkAdversarial(b *testing.B) {
	inputs := adversarial()
	for _, model := range models {
		tok := loadModel(b, model)
		for _, name := range []string{"a", "spaces", "newlines", "digits", "letters", "random", "emoji", "cjk", "space-a", "marks", "punct", "angle", "special-ish"} {
			text := inputs[name]
			b.Run(model+"/"+name, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					tok.model.cache = wordCache{}
					tok.Encode(text)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(text)), "ns/byte")
			})
		}
	}
}
