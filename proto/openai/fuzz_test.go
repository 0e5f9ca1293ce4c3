package openai

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// sseSeeds are streams as the engines frame them (vLLM and SGLang write
// "data: <json>\n\n"; TensorRT-LLM a trailing space after its role chunk;
// proxies CRLF and ": ping" comments), plus the edge cases of the framing.
var sseSeeds = []string{
	"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" hi\"},\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}]}\n\n" +
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":6,\"completion_tokens\":1}}\n\n" +
		"data: [DONE]\n\n",
	"data: {\"id\":\"cmpl-2\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]} \n\n" +
		"data: {\"id\":\"cmpl-2\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
	"data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\r\n\r\n: ping\r\n\r\ndata: [DONE]\r\n\r\n",
	"data: {\"error\": {\"object\": \"error\", \"message\": \"boom\", \"type\": \"BadRequestError\", \"param\": null, \"code\": 400}}\n\ndata: [DONE]\n\n",
	": ping\n\n: keep-alive\ndata: a\ndata:b\n\nevent: message\nid: 3\nretry: 10\ndata: y\n\n",
	"data: x\n\ndata: {\"par",
	"data: x\n\ndata: y\n",
	"data:\n\ndata: \n\n\n\n",
	"data: x\r\r\n\n",
	"data: 0123456789abcdef0123456789abcdef\n\n",
	": a comment longer than sixteen bytes and than the limit\ndata: z\n\n",
	"",
	"\n",
}

// FuzzSSEReader compares SSEReader with a line-by-line model of its
// contract: the same events, the same final error, events never over the
// limit, however the stream is split into reads and whatever the size of
// the buffered reader, and memory linear in the input.
func FuzzSSEReader(f *testing.F) {
	for _, s := range sseSeeds {
		f.Add([]byte(s), uint16(0), uint8(0), false)
		f.Add([]byte(s), uint16(20), uint8(7), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, limit uint16, piece uint8, smallBuffer bool) {
		in := bytes.Clone(data)
		var r io.Reader = &pieceReader{b: data, n: int(piece)}
		bufSize := 16 << 10 // NewSSEReader's own buffer
		if smallBuffer {
			bufSize = 16 // bufio's minimum: lines longer than it take the slow path
			r = bufio.NewReaderSize(r, bufSize)
		}
		want, wantErr := sseModel(data, int(limit), bufSize)

		var got []string
		var err error
		allocated := allocatedBy(len(data), func() {
			sr := NewSSEReader(r, int(limit))
			for {
				var ev []byte
				if ev, err = sr.Next(); err != nil {
					return
				}
				require.LessOrEqual(t, len(ev), effectiveLimit(int(limit)), "event over the limit")
				got = append(got, string(ev))
				require.LessOrEqual(t, len(got), len(data), "more events than bytes")
			}
		})

		require.Equal(t, in, data, "the reader modified its input")
		require.ErrorIs(t, err, wantErr)
		require.Equal(t, want, got)
		// The reader's buffers (16 KiB) plus a few copies of the longest
		// line; the events themselves are cloned above.
		require.LessOrEqual(t, allocated, uint64(8*len(data)+sizeOf(got)+256<<10), "allocated %d bytes for %d", allocated, len(data))
	})
}

// sseModel is the reader's contract written plainly: lines end at '\n'
// (CRs before it are dropped); a blank line ends an event that has data;
// "data:" lines (one optional space after the colon) add to the event,
// joined with '\n'; other lines are skipped; an unterminated last line and
// an unfinished last event are dropped (io.EOF). An event over the limit,
// or a line whose buffered part goes over it (lines longer than the
// buffer are gathered bufSize bytes at a time), is ErrEventTooLarge.
func sseModel(data []byte, limit, bufSize int) ([]string, error) {
	limit = effectiveLimit(limit)
	var events []string
	var ev []byte
	have := false
	for len(data) > 0 {
		end := bytes.IndexByte(data, '\n')
		n := end
		if end < 0 {
			n = len(data)
		}
		if gathered := n / bufSize * bufSize; gathered > limit {
			return events, ErrEventTooLarge
		}
		if end < 0 {
			break
		}
		line := bytes.TrimRight(data[:end], "\r\n")
		data = data[end+1:]
		switch {
		case len(line) == 0:
			if have {
				events = append(events, string(ev))
				ev, have = nil, false
			}
		case bytes.HasPrefix(line, []byte("data:")):
			payload := bytes.TrimPrefix(line[len("data:"):], []byte(" "))
			if have {
				ev = append(ev, '\n')
			}
			if len(ev)+len(payload) > limit {
				return events, ErrEventTooLarge
			}
			ev = append(ev, payload...)
			have = true
		}
	}
	return events, io.EOF
}

func effectiveLimit(limit int) int {
	if limit <= 0 {
		return 1 << 20
	}
	return limit
}

// pieceReader returns at most n bytes per Read (all of them when n is 0):
// a stream arrives in any number of reads.
type pieceReader struct {
	b []byte
	n int
}

func (p *pieceReader) Read(out []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	k := len(out)
	if p.n > 0 {
		k = min(k, p.n)
	}
	k = copy(out[:k], p.b)
	p.b = p.b[k:]
	return k, nil
}

func sizeOf(events []string) int {
	n := 0
	for _, e := range events {
		n += len(e) + 16
	}
	return n
}

// measureFrom is the smallest input whose allocations the fuzz targets
// measure: below it the fixed allowance dominates, and measuring stops the
// world twice per input.
const measureFrom = 256

// allocatedBy runs fn and returns the bytes it allocated, or 0 without
// measuring when size is under measureFrom. It reads a counter, not a
// clock, so a bound on it does not flake on a loaded machine.
func allocatedBy(size int, fn func()) uint64 {
	if size < measureFrom {
		fn()
		return 0
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestSSEModelAgreesOnTheUnitCases keeps the fuzz model honest: it must
// give what TestSSEReader expects.
func TestSSEModelAgreesOnTheUnitCases(t *testing.T) {
	got, err := sseModel([]byte("data: a\ndata: b\n\n: c\n\ndata: [DONE]\n\ndata: cut"), 64, 16<<10)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, []string{"a\nb", "[DONE]"}, got)
	_, err = sseModel([]byte("data: "+string(bytes.Repeat([]byte("z"), 100))+"\n\n"), 64, 16<<10)
	require.True(t, errors.Is(err, ErrEventTooLarge))
}
