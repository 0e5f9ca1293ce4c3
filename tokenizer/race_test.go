//go:build race

package tokenizer

// raceEnabled makes the slowest tests smaller under the race detector.
const raceEnabled = true
