package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/duet-serve/duet/proto/openai"
)

// meetRetry is the pause before asking an unreachable bootstrap server
// again (SGLang's decode retries its bootstrap queries too).
const meetRetry = 50 * time.Millisecond

// meet takes over the KV of j's bootstrap_room from the context worker
// whose bootstrap server j.remote names. It asks that server until the
// prefill has pinned the room (the legs run concurrently, so the decode
// often arrives first), bounded by kv_transfer_timeout from now. An
// unreachable server is asked again until then; a server that answers
// anything but "not yet" ends the wait at once. Failures are SGLang's
// transfer aborts: 500, reported in-stream for a streaming request. It
// blocks.
func (s *Server) meet(j *job) *httpError {
	start := s.clock.now()
	deadline := start.Add(s.cfg.KVTransferTimeout)
	body := roomPullRequest{PromptTokens: len(j.prompt), BlockSize: s.cfg.BlockSize}
	if len(j.hashes) > 0 {
		body.LastHash = j.hashes[len(j.hashes)-1]
	}
	url := j.remote.url + roomPullPath(j.room)
	var unreachable error
	for {
		remaining := deadline.Sub(s.clock.now())
		if remaining <= 0 {
			reason := fmt.Sprintf("Request %d timed out after %.1fs in KVPoll.WaitingForInput", j.room, s.clock.now().Sub(start).Seconds())
			if unreachable != nil {
				reason = fmt.Sprintf("Could not reach the bootstrap server at %s: %v", strings.TrimPrefix(j.remote.url, "http://"), unreachable)
			}
			return s.transferFailed(j, reason)
		}
		body.WaitMs = min(remaining, maxRoomWait).Milliseconds()
		status, reply, err := s.roomPull(url, body)
		switch {
		case s.abortCtx.Err() != nil:
			return &httpError{status: http.StatusServiceUnavailable, msg: errAborted.Error()}
		case err != nil:
			unreachable = err
			if !s.clock.sleepUntil(s.abortCtx, s.clock.now().Add(min(meetRetry, remaining))) {
				return &httpError{status: http.StatusServiceUnavailable, msg: errAborted.Error()}
			}
		case status == http.StatusOK:
			return nil
		case status == http.StatusNotFound && errorCode(reply) == codeRoomUnknown:
			unreachable = nil // asked again: the long poll already waited
		default:
			return s.transferFailed(j, fmt.Sprintf("bootstrap server %s answered %d: %s",
				strings.TrimPrefix(j.remote.url, "http://"), status, peerMessage(reply)))
		}
	}
}

// roomPull makes one POST /rooms/{room}/pull; err is a transport error.
func (s *Server) roomPull(url string, body roomPullRequest) (int, []byte, error) {
	raw, _ := json.Marshal(body) // plain struct, cannot fail
	wait := time.Duration(body.WaitMs) * time.Millisecond
	ctx, cancel := context.WithTimeout(s.abortCtx, wait+pullTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, reply, nil
}

// transferFailed is SGLang's decode abort for a failed transfer.
func (s *Server) transferFailed(j *job, reason string) *httpError {
	return &httpError{status: http.StatusInternalServerError, inStream: j.stream, code: codeTransferFailed,
		msg: fmt.Sprintf("Decode transfer failed for request rank=0 req.rid=%q req.bootstrap_room=%d with exception KVTransferError(bootstrap_room=%d): %s",
			j.id, j.room, j.room, reason)}
}

// errorCode returns the code of an OpenAI error body as a string ("" when
// absent or not a string).
func errorCode(body []byte) string {
	var e openai.ErrorBody
	var code string
	if json.Unmarshal(body, &e) != nil || json.Unmarshal(e.Error.Code, &code) != nil {
		return ""
	}
	return code
}
