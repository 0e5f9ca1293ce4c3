package orchestrator

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"go.uber.org/zap"
)

// Why an answer is not migrated (outcomes of duet_migrations_total besides
// migrated, failed and limit). Each names a request whose continuation
// would not be the answer the client asked for:
const (
	refuseN          = "n"                 // several choices (n, best_of > 1)
	refuseLogprobs   = "logprobs"          // logprobs of the re-tokenized text would not be the ones sampled
	refuseSeed       = "seed"              // a seeded sample cannot be resumed on another worker
	refuseStructured = "structured_output" // the grammar would restart at the continuation
	refuseEcho       = "echo"              // the client's text holds the echoed prompt
	refuseBatch      = "batch"             // several prompts in one completions request
	refuseAtLimit    = "at_limit"          // the output limit is already reached
	refuseBody       = "unparsable"        // the continuation is not a valid request
)

// structuredKeys are the request fields that constrain the output with a
// grammar (OpenAI's response_format, vLLM's guided_* and structured_outputs,
// SGLang's regex and ebnf).
var structuredKeys = []string{"guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs", "regex", "ebnf"}

// limitKeys are the output limits a continuation reduces by what was sent;
// minKeys the minimum lengths.
var (
	limitKeys = []string{"max_tokens", "max_completion_tokens"}
	minKeys   = []string{"min_tokens", "min_completion_tokens"}
)

// continuation builds the request that continues req's answer after the
// client got text (sent tokens of it): the same request, its prompt
// followed by text, its output limits reduced by sent. It returns nil and
// why when such a request would not give the answer the client asked for.
func (o *Orchestrator) continuation(req *Request, text []byte, sent int) (*Request, string) {
	var body map[string]json.RawMessage
	if json.Unmarshal(req.Body, &body) != nil {
		return nil, refuseBody
	}
	if why := refusal(body); why != "" {
		return nil, why
	}
	if len(text) == 0 { // nothing to continue from: the same request again
		return req, ""
	}
	if !reduceLimits(body, sent) {
		return nil, refuseAtLimit
	}
	plain, err := json.Marshal(body) // the limits reduced, the prompt as it was
	if err != nil {
		return nil, refuseBody
	}
	if req.Endpoint == protocol.EndpointChat {
		err = continueChat(body, text)
	} else {
		err = o.continueCompletion(body, text)
	}
	if err != nil {
		return nil, refuseBatch
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, refuseBody
	}
	cont, err := o.parse(Incoming{Endpoint: req.Endpoint, Body: b, Header: noHeader, RequestID: req.ID, Received: req.Received})
	if err != nil {
		o.log.Warn("continuation is not a valid request", zap.String("request_id", req.ID), zap.Error(err))
		return nil, refuseBody
	}
	cont.SessionKey = req.SessionKey
	if req.Endpoint == protocol.EndpointChat && !o.adapter.ContinuesFinalMessage() {
		// The engine renders no partial answer: it gets the continuation's
		// prompt as the token ids duet rendered, beside the client's messages.
		cont.Body = plain
		cont.PromptIDs, _ = json.Marshal(cont.Tokens)
	}
	return cont, ""
}

func noHeader(string) string { return "" }

// refusal says why a request's answer cannot be continued on another
// worker, "" when it can.
func refusal(body map[string]json.RawMessage) string {
	set := func(k string) bool { v, ok := body[k]; return ok && !isJSONNull(v) }
	switch {
	case isMany(body["n"]) || isMany(body["best_of"]):
		return refuseN
	case isJSONTrue(body["logprobs"]) || set("top_logprobs") || set("prompt_logprobs"):
		return refuseLogprobs
	case set("seed"):
		return refuseSeed
	case isJSONTrue(body["echo"]):
		return refuseEcho
	}
	if rf, ok := body["response_format"]; ok && !isJSONNull(rf) {
		var f struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(rf, &f) != nil || f.Type != "text" {
			return refuseStructured
		}
	}
	for _, k := range structuredKeys {
		if set(k) {
			return refuseStructured
		}
	}
	return ""
}

// isJSONNull reports a JSON null.
func isJSONNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// isJSONTrue reports a value that is present and neither null, false nor 0
// (logprobs is a bool in chat and a count in completions).
func isJSONTrue(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && !isJSONNull(v) && !bytes.Equal(v, []byte("false")) && !bytes.Equal(v, []byte("0"))
}

// isMany reports a count above 1.
func isMany(v json.RawMessage) bool {
	var n int
	return json.Unmarshal(v, &n) == nil && n > 1
}

// reduceLimits lowers the output limits and minimum lengths by sent; it
// returns false when a limit is already reached.
func reduceLimits(body map[string]json.RawMessage, sent int) bool {
	for _, k := range limitKeys {
		var n int
		if json.Unmarshal(body[k], &n) != nil {
			continue
		}
		if n-sent < 1 {
			return false
		}
		body[k] = intJSON(n - sent)
	}
	for _, k := range minKeys {
		var n int
		if json.Unmarshal(body[k], &n) != nil {
			continue
		}
		if n-sent < 1 {
			delete(body, k)
		} else {
			body[k] = intJSON(n - sent)
		}
	}
	return true
}

func intJSON(n int) json.RawMessage {
	b, _ := json.Marshal(n)
	return b
}

// continueChat makes a chat body continue its answer from text: text
// becomes the final assistant message (or is added to it when the client
// already continued its own final message), rendered with
// continue_final_message and without a generation prompt, as vLLM and
// SGLang continue a partial answer.
func continueChat(body map[string]json.RawMessage, text []byte) error {
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(body["messages"], &msgs); err != nil || len(msgs) == 0 {
		return errors.New("messages")
	}
	last := msgs[len(msgs)-1]
	var role string
	_ = json.Unmarshal(last["role"], &role)
	if isJSONTrue(body["continue_final_message"]) && role == "assistant" {
		if err := appendContent(last, string(text)); err != nil {
			return err
		}
	} else {
		content, _ := json.Marshal(string(text))
		msgs = append(msgs, map[string]json.RawMessage{"role": json.RawMessage(`"assistant"`), "content": content})
	}
	var err error
	if body["messages"], err = json.Marshal(msgs); err != nil {
		return err
	}
	body["continue_final_message"] = json.RawMessage("true")
	body["add_generation_prompt"] = json.RawMessage("false")
	return nil
}

// appendContent adds text to a message's content: a string grows, a list
// of parts gets a text part.
func appendContent(msg map[string]json.RawMessage, text string) error {
	var s string
	if err := json.Unmarshal(msg["content"], &s); err == nil {
		msg["content"], _ = json.Marshal(s + text)
		return nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(msg["content"], &parts); err != nil {
		return err
	}
	part, _ := json.Marshal(map[string]string{"type": "text", "text": text})
	msg["content"], _ = json.Marshal(append(parts, part))
	return nil
}

// continueCompletion makes a completions body continue its answer from
// text: a text prompt is followed by text, a token prompt by text's
// tokens. Several prompts are not continued.
func (o *Orchestrator) continueCompletion(body map[string]json.RawMessage, text []byte) error {
	p := body["prompt"]
	var s string
	if json.Unmarshal(p, &s) == nil {
		body["prompt"], _ = json.Marshal(s + string(text))
		return nil
	}
	var texts []string
	if json.Unmarshal(p, &texts) == nil && len(texts) == 1 {
		body["prompt"], _ = json.Marshal(texts[0] + string(text))
		return nil
	}
	var ids []int
	if json.Unmarshal(p, &ids) == nil && len(ids) > 0 {
		body["prompt"], _ = json.Marshal(append(ids, o.tok.Encode(string(text))...))
		return nil
	}
	var batch [][]int
	if json.Unmarshal(p, &batch) == nil && len(batch) == 1 {
		body["prompt"], _ = json.Marshal(append(batch[0], o.tok.Encode(string(text))...))
		return nil
	}
	return errors.New("prompt")
}
