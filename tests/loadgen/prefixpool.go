package loadgen

import (
	"math"
	"math/rand/v2"
	"sort"
)

// prefixPoolStream is the PCG stream of the prefix pool's draws (0 is the
// shared system prompt's, 1 and 2 the profiled and warm-up sessions', 3 the
// input files', 4 the arrivals').
const prefixPoolStream = 5

// prefixPool is aiperf's prefix prompt pool: --prefix-prompt-pool-size
// prompts of --prefix-prompt-length tokens cut from the corpus once, one of
// which is picked for each synthetic session and put before the text of
// its first turn, joined by a space. Read from aiperf v0.1.1
// (ai-dynamo/aiperf@db4f639): aiperf/common/config/prompt_config.py
// (PrefixPromptConfig: the flags, both >= 0),
// aiperf/dataset/generator/prompt.py (_create_prefix_prompt_pool: pool_size
// corpus cuts of `length` tokens; get_random_prefix_prompt:
// random.choice, uniform with replacement) and
// aiperf/dataset/composer/synthetic.py (_generate_text_payloads:
// f"{prefix} {content}" on the first turn of each conversation only); the
// same in aiperf 0.5 (src/aiperf/..., the choice from its own derived RNG)
// and 0.12 (config field prefix_prompts.pool_size/length, exclusive with
// shared_system_length/user_context_length). duet adds a spread of the
// lengths (PrefixPromptLengthStddev) and a Zipf popularity
// (PrefixPromptZipf). A pool is read-only once made.
type prefixPool struct {
	prompts []string
	// cdf is the cumulative pick probability of each prompt, nil for a
	// uniform pick.
	cdf []float64
}

// newPrefixPool cuts the pool from the corpus; it depends on the seed only,
// so the warm-up and the profiled sessions draw from the same documents.
// It returns nil when the configuration has no pool.
func newPrefixPool(cfg Config, corpus *Corpus, seed uint64) *prefixPool {
	if cfg.PrefixPromptPoolSize <= 0 || cfg.PrefixPromptLength <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, prefixPoolStream))
	p := &prefixPool{prompts: make([]string, cfg.PrefixPromptPoolSize)}
	for i := range p.prompts {
		n := max(1, normalInt(rng, float64(cfg.PrefixPromptLength), cfg.PrefixPromptLengthStddev))
		p.prompts[i] = corpus.Text(rng, n)
	}
	if cfg.PrefixPromptZipf > 0 {
		p.cdf = make([]float64, len(p.prompts))
		sum := 0.0
		for i := range p.cdf {
			sum += math.Pow(float64(i+1), -cfg.PrefixPromptZipf)
			p.cdf[i] = sum
		}
		for i := range p.cdf {
			p.cdf[i] /= sum
		}
	}
	return p
}

// pick returns the index of a prompt drawn from rng: uniform, or by the
// Zipf weights.
func (p *prefixPool) pick(rng *rand.Rand) int {
	if p.cdf == nil {
		return rng.IntN(len(p.prompts))
	}
	u := rng.Float64()
	return min(sort.SearchFloat64s(p.cdf, u), len(p.prompts)-1)
}

// prepend returns text after the prompt picked from rng, as aiperf joins
// them: prefix, a space, text.
func (p *prefixPool) prepend(rng *rand.Rand, text string) string {
	return p.prompts[p.pick(rng)] + " " + text
}
