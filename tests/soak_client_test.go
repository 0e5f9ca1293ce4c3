//go:build soak

package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duet-serve/duet/proto/openai"
)

// outcome is how one soak request ended, as its client saw it.
type outcome int

const (
	outFull        outcome = iota // the whole answer: finish_reason length, every token, [DONE]
	outErrorEvent                 // a stream that ended with an error event and [DONE]
	outErrorStatus                // a non-200 status with an OpenAI error body
	outClientLeft                 // the client closed its connection on purpose
	outClosed                     // duet closed the connection without any answer
	outBroken                     // anything else: a stream cut without [DONE], a body that is neither
	outHung                       // no end within the request's deadline
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"full", "error event", "error status", "client left", "closed", "broken", "hung"}

// tally counts outcomes from many goroutines and keeps a few details of
// each kind but full answers, for the log.
type tally struct {
	counts [numOutcomes]atomic.Int64
	mu     sync.Mutex // guards samples
	// samples holds up to maxSamples details per outcome.
	samples [numOutcomes][]string
}

const maxSamples = 5

func (tl *tally) add(o outcome, detail string) {
	tl.counts[o].Add(1)
	if o == outFull || o == outClientLeft || detail == "" {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.samples[o]) < maxSamples {
		tl.samples[o] = append(tl.samples[o], detail)
	}
}

func (tl *tally) into(row *soakRow) {
	for o := range tl.counts {
		row.counts[o] += tl.counts[o].Load()
	}
}

func (tl *tally) summary() string {
	var parts []string
	for o := range tl.counts {
		if n := tl.counts[o].Load(); n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", outcomeNames[o], n))
		}
	}
	return strings.Join(parts, ", ")
}

// log writes the counts and the kept details.
func (tl *tally) log(t *testing.T) {
	t.Helper()
	t.Logf("outcomes: %s", tl.summary())
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for o, s := range tl.samples {
		for _, d := range s {
			t.Logf("  %s: %s", outcomeNames[o], d)
		}
	}
}

// runPool runs job(0..n-1), conc at a time, and waits for all.
func runPool(n, conc int, job func(i int)) {
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			job(i)
		}()
	}
	wg.Wait()
}

const soakModel = "meta-llama/Llama-3.1-8B-Instruct"

// soakBody is chat request i: a prompt of its own, exactly maxTokens
// output tokens (ignore_eos), usage in the stream.
func soakBody(i int, stream bool, maxTokens int) string {
	usage := ""
	if stream {
		usage = `,"stream_options":{"include_usage":true}`
	}
	return fmt.Sprintf(`{"model":%q,"stream":%t,"max_tokens":%d,"ignore_eos":true%s,"messages":[{"role":"user","content":"soak request %d: tell me about rivers"}]}`,
		soakModel, stream, maxTokens, usage, i)
}

// soakClient sends chat requests to duet over pooled keep-alive
// connections.
type soakClient struct {
	url string
	tr  *http.Transport
	c   *http.Client
}

func newSoakClient(url string) *soakClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true, IdleConnTimeout: 30 * time.Second}
	return &soakClient{url: url, tr: tr, c: &http.Client{Transport: tr}}
}

// closeIdle closes the client's idle connections, which duet would
// otherwise count as live.
func (c *soakClient) closeIdle() { c.tr.CloseIdleConnections() }

// chat sends request i and reads its answer to the end, within deadline.
func (c *soakClient) chat(i int, stream bool, maxTokens int, deadline time.Duration) (outcome, string) {
	return c.send(i, stream, maxTokens, deadline, nil)
}

// send is chat with the body of a 200 answer read through wrap, when set.
func (c *soakClient) send(i int, stream bool, maxTokens int, deadline time.Duration, wrap func(io.Reader) io.Reader) (outcome, string) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/chat/completions", strings.NewReader(soakBody(i, stream, maxTokens)))
	if err != nil {
		return outBroken, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	expired := func(error) bool { return ctx.Err() != nil }
	resp, err := c.c.Do(req)
	if err != nil {
		if expired(err) {
			return outHung, fmt.Sprintf("no response within %s", deadline)
		}
		return outClosed, err.Error()
	}
	defer resp.Body.Close()
	if wrap != nil && resp.StatusCode == http.StatusOK {
		resp.Body = io.NopCloser(wrap(resp.Body))
	}
	return judge(resp, stream, maxTokens, 0, expired)
}

// judge reads resp to its end (or, for a stream, until leaveAfter events
// when > 0) and says how it was answered; expired tells a read error
// caused by the client's deadline.
func judge(resp *http.Response, stream bool, maxTokens, leaveAfter int, expired func(error) bool) (outcome, string) {
	if !stream || resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(resp.Body)
		switch {
		case err != nil && expired(err):
			return outHung, fmt.Sprintf("status %d, body unfinished at the deadline", resp.StatusCode)
		case err != nil:
			return outBroken, fmt.Sprintf("status %d, body cut: %v", resp.StatusCode, err)
		}
		return judgeBody(resp.StatusCode, b, maxTokens)
	}
	return judgeStream(openai.NewSSEReader(resp.Body, 0), maxTokens, leaveAfter, expired)
}

// chunkView is the part of a response or stream event judged.
type chunkView struct {
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Choices []struct {
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func judgeBody(status int, b []byte, maxTokens int) (outcome, string) {
	var v chunkView
	err := json.Unmarshal(b, &v)
	if status != http.StatusOK {
		if err == nil && v.Error != nil && v.Error.Message != "" {
			return outErrorStatus, fmt.Sprintf("%d %s", status, v.Error.Message)
		}
		return outBroken, fmt.Sprintf("status %d without an OpenAI error body: %.200q", status, b)
	}
	if err != nil || len(v.Choices) != 1 || v.Choices[0].FinishReason == nil || v.Usage == nil {
		return outBroken, fmt.Sprintf("200 that is not a chat completion: %.200q", b)
	}
	if *v.Choices[0].FinishReason != "length" || v.Usage.CompletionTokens != maxTokens {
		return outBroken, fmt.Sprintf("finish %q with %d of %d tokens", *v.Choices[0].FinishReason, v.Usage.CompletionTokens, maxTokens)
	}
	return outFull, ""
}

func judgeStream(sr *openai.SSEReader, maxTokens, leaveAfter int, expired func(error) bool) (outcome, string) {
	finish, tokens, events, errMsg := "", -1, 0, ""
	for {
		data, err := sr.Next()
		switch {
		case err != nil && expired(err):
			return outHung, fmt.Sprintf("stream unfinished at the deadline after %d events", events)
		case err != nil:
			return outBroken, fmt.Sprintf("stream ended without [DONE] after %d events: %v", events, err)
		case openai.IsDone(data):
			switch {
			case errMsg != "":
				return outErrorEvent, errMsg
			case finish != "length" || tokens != maxTokens:
				return outBroken, fmt.Sprintf("stream done with finish %q and %d of %d tokens", finish, tokens, maxTokens)
			}
			return outFull, ""
		}
		events++
		var v chunkView
		if err := json.Unmarshal(data, &v); err != nil {
			return outBroken, fmt.Sprintf("event %d is not JSON: %.200q", events, data)
		}
		if v.Error != nil {
			errMsg = "error event: " + v.Error.Message
		}
		for _, c := range v.Choices {
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		if v.Usage != nil {
			tokens = v.Usage.CompletionTokens
		}
		if leaveAfter > 0 && events >= leaveAfter && errMsg == "" {
			return outClientLeft, ""
		}
	}
}

// isTimeout reports a read or write that failed at a connection deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
