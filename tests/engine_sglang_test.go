package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sglVariant is what the SGLang fakes do. Prefill workers (the context
// pool) each run a bootstrap server on their own port; a decode worker
// finds the prefill that holds its bootstrap_room through
// bootstrap_host:bootstrap_port, as SGLang's KV receiver does, and the two
// legs meet on the room.
type sglVariant struct {
	// pDelay is how long the prefill answers after the KV handoff (SGLang's
	// prefill answers once the transfer is over: sglang.md §7).
	pDelay time.Duration
	// pAbortAfterHandoff makes the prefill abort with a 500 after the
	// handoff (KVPoll.Failed → prepare_abort: sglang.md §7, §8).
	pAbortAfterHandoff bool
	// pUnavailable makes the prefill answer 503 at once, never
	// bootstrapping: the decode waits for the room and aborts (sglang.md §8).
	pUnavailable bool
	// meetTimeout bounds the wait for the other leg (SGLang: 300 s,
	// sglang.md §8); 0 means 2s.
	meetTimeout time.Duration
	// maxContext > 0 rejects a request whose prompt plus max_tokens does
	// not fit, on both legs (sglang.md §9).
	maxContext int
	style      jsonStyle
	sse        sseStyle
	stream     streamShape
}

// sglRoom is where the two legs of one bootstrap_room meet.
type sglRoom struct {
	prefill      string        // the prefill worker the room reached
	prefillIn    chan struct{} // closed when a prefill took the room
	decodeTarget string        // the prefill the decode found through bootstrap
	decodeIn     chan struct{} // closed when a decode registered for the room
}

// sglFakes is the SGLang fleet: prefill workers with their bootstrap
// servers, decode workers, and the rooms between them.
type sglFakes struct {
	fakeFleet
	variantSlot[sglVariant]
	bootstrapPorts []int             // ctx[i]'s bootstrap port
	ranks          map[string]string // rank_ip:rank_port → prefill name; fixed at start

	mu    sync.Mutex // guards rooms
	rooms map[uint64]*sglRoom
}

func startSGLangFakes(t *testing.T, nCtx, nGen int) *sglFakes {
	c := &sglFakes{ranks: map[string]string{}, rooms: map[uint64]*sglRoom{}}
	for i := 0; i < nCtx; i++ {
		e := startEngine(t, fmt.Sprintf("ctx-%d", i), c.serve)
		c.ctx = append(c.ctx, e)
		rankPort := 20000 + i // the prefill rank's (fake) ZMQ port
		c.ranks[fmt.Sprintf("127.0.0.1:%d", rankPort)] = e.name
		c.bootstrapPorts = append(c.bootstrapPorts, startBootstrapServer(t, rankPort))
	}
	c.gen = startPool(t, "gen", nGen, c.serve)
	return c
}

// contextURLs are the urls entries of the prefill pool: "URL BOOTSTRAP_PORT".
func (c *sglFakes) contextURLs() []string {
	out := make([]string, len(c.ctx))
	for i, e := range c.ctx {
		out[i] = fmt.Sprintf("%s %d", e.url, c.bootstrapPorts[i])
	}
	return out
}

// bootstrapPort returns the bootstrap port of the prefill named name.
func (c *sglFakes) bootstrapPort(name string) int {
	for i, e := range c.ctx {
		if e.name == name {
			return c.bootstrapPorts[i]
		}
	}
	return -1
}

// startBootstrapServer runs a prefill's bootstrap server (sglang.md §6:
// GET /route) on a free port and returns the port.
func startBootstrapServer(t *testing.T, rankPort int) int {
	t.Helper()
	port := freePorts(t, 1)[0]
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/route" || r.Method != http.MethodGet {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		q := r.URL.Query()
		rank, group := q.Get("engine_rank"), q.Get("target_dp_group")
		switch {
		case rank == "" || group == "":
			http.Error(w, "Missing inputs for bootstrap server.", http.StatusBadRequest)
		case rank == "-1":
			writeJSONBody(w, []byte(`{"prefill_tp_size":1,"prefill_dp_size":1}`))
		case rank == "0" && group == "0":
			writeJSONBody(w, fmt.Appendf(nil, `{"rank_ip":"127.0.0.1","rank_port":%d}`, rankPort))
		default:
			http.Error(w, "Bootstrap info not Found", http.StatusNotFound)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return port
}

// room returns the meeting place of a room, creating it.
func (c *sglFakes) room(id uint64) *sglRoom {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rooms[id]
	if r == nil {
		r = &sglRoom{prefillIn: make(chan struct{}), decodeIn: make(chan struct{})}
		c.rooms[id] = r
	}
	return r
}

// sglBootstrap is the bootstrap fields of a request.
type sglBootstrap struct {
	Host *string `json:"bootstrap_host"`
	Port *int    `json:"bootstrap_port"`
	Room *uint64 `json:"bootstrap_room"`
}

func (c *sglFakes) serve(e *fakeEngine, w http.ResponseWriter, r *http.Request, body []byte) {
	v := c.variant()
	if v.meetTimeout == 0 {
		v.meetTimeout = 2 * time.Second
	}
	f, err := decodeFields(body)
	var bs sglBootstrap
	if err == nil {
		err = json.Unmarshal(body, &bs)
	}
	if err != nil { // serving_base.py create_error_response (sglang.md §9)
		flatError(400, "BadRequestError", fmt.Sprintf("Invalid request body: %v", err)).write(w)
		return
	}
	if n := promptLen(f) + outputLimit(f); v.maxContext > 0 && n > v.maxContext {
		flatError(400, "BadRequestError", sglTooLong(v.maxContext, promptLen(f), outputLimit(f))).write(w)
		return
	}
	if bs.Room == nil { // scheduler.py handle_generate_request (sglang.md §7)
		flatError(400, "BadRequestError", "Invalid request: Disaggregated request received without bootstrap room id. req.rid='"+r.Header.Get("X-Request-Id")+"'").write(w)
		return
	}
	if strings.HasPrefix(e.name, "ctx") {
		c.prefill(e, w, r, f, *bs.Room, v)
		return
	}
	c.decode(w, r, f, bs, v)
}

// sglTooLong is SGLang's context-length message.
func sglTooLong(limit, prompt, out int) string {
	return fmt.Sprintf("Requested token count exceeds the model's maximum context length of %d tokens. You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
		limit, prompt+out, prompt, out)
}

// prefill takes the room, waits for the decode to register for it, then
// answers its one token (sglang.md §6, §7).
func (c *sglFakes) prefill(e *fakeEngine, w http.ResponseWriter, r *http.Request, f map[string]json.RawMessage, room uint64, v sglVariant) {
	if v.pUnavailable {
		flatError(503, "ServiceUnavailableError", "The server is overloaded or not ready yet.").write(w)
		return
	}
	rm := c.room(room)
	c.mu.Lock()
	taken := rm.prefill != ""
	if !taken {
		rm.prefill = e.name
		close(rm.prefillIn)
	}
	c.mu.Unlock()
	if taken {
		sglAbort(w, r, f, v, 400, fmt.Sprintf("bootstrap_room %d is already in use", room))
		return
	}
	select {
	case <-rm.decodeIn:
	case <-time.After(v.meetTimeout):
	}
	c.mu.Lock()
	met := rm.decodeTarget == e.name
	c.mu.Unlock()
	if !met {
		sglAbort(w, r, f, v, 500, fmt.Sprintf("Request %d timed out after %.1fs in KVPoll.Bootstrapping", room, v.meetTimeout.Seconds()))
		return
	}
	time.Sleep(v.pDelay)
	if v.pAbortAfterHandoff {
		sglAbort(w, r, f, v, 500, fmt.Sprintf("Prefill transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=%d): Failed to send kv chunk", room))
		return
	}
	sglAnswer(w, r, f, v, []string{firstToken}, "length", streamShape{})
}

// decode finds the prefill through the bootstrap server, registers the
// room with it and waits for the prefill leg to hold the room (sglang.md
// §6, §8); then it answers the whole request.
func (c *sglFakes) decode(w http.ResponseWriter, r *http.Request, f map[string]json.RawMessage, bs sglBootstrap, v sglVariant) {
	room := *bs.Room
	if bs.Host == nil || bs.Port == nil {
		sglAbort(w, r, f, v, 500, fmt.Sprintf("Decode transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=%d): no bootstrap_host or bootstrap_port", room))
		return
	}
	target, err := c.lookupPrefill(*bs.Host, *bs.Port)
	if err != nil {
		sglAbort(w, r, f, v, 500, fmt.Sprintf("Decode transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=%d): %v", room, err))
		return
	}
	rm := c.room(room)
	c.mu.Lock()
	reused := rm.decodeTarget != ""
	if !reused {
		rm.decodeTarget = target
		close(rm.decodeIn)
	}
	c.mu.Unlock()
	if reused {
		sglAbort(w, r, f, v, 400, fmt.Sprintf("bootstrap_room %d was already used by another decode request", room))
		return
	}
	select {
	case <-rm.prefillIn:
	case <-time.After(v.meetTimeout):
	}
	c.mu.Lock()
	holder := rm.prefill
	c.mu.Unlock()
	if holder != target {
		sglAbort(w, r, f, v, 500, fmt.Sprintf("Decode transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=%d): Request %d timed out after %.1fs in KVPoll.WaitingForInput (bootstrap %s:%d is %s, the room reached %q)",
			room, room, v.meetTimeout.Seconds(), *bs.Host, *bs.Port, target, holder))
		return
	}
	toks, finish := generate(f)
	sglAnswer(w, r, f, v, toks, finish, v.stream)
}

// lookupPrefill asks the bootstrap server at host:port which prefill rank
// serves it, as the decode's KV receiver does (sglang.md §6).
func (c *sglFakes) lookupPrefill(host string, port int) (string, error) {
	client := &http.Client{Timeout: time.Second}
	base := "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/route?"
	var info struct {
		DPSize int `json:"prefill_dp_size"`
	}
	if err := getJSONTo(client, base+url.Values{"engine_rank": {"-1"}, "target_dp_group": {"-1"}}.Encode(), &info); err != nil {
		return "", fmt.Errorf("could not fetch prefill parallel info from bootstrap_addr %s:%d: %w", host, port, err)
	}
	var rank struct {
		IP   string `json:"rank_ip"`
		Port int    `json:"rank_port"`
	}
	if err := getJSONTo(client, base+url.Values{"engine_rank": {"0"}, "target_dp_group": {"0"}}.Encode(), &rank); err != nil {
		return "", fmt.Errorf("could not fetch bootstrap info from %s:%d: %w", host, port, err)
	}
	name, ok := c.ranks[fmt.Sprintf("%s:%d", rank.IP, rank.Port)]
	if !ok {
		return "", fmt.Errorf("no prefill rank at %s:%d", rank.IP, rank.Port)
	}
	return name, nil
}

func getJSONTo(client *http.Client, u string, v any) error {
	resp, err := client.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// sglAbort ends a request with an error: a status and flat error for a
// whole response; once streaming, a 200 with a json.dumps error frame and
// [DONE] (sglang.md §8).
func sglAbort(w http.ResponseWriter, r *http.Request, f map[string]json.RawMessage, v sglVariant, status int, msg string) {
	if !boolField(f, "stream") {
		e := flatError(status, strconv.Itoa(status), msg) // "Enrich HTTP exception": type is the status
		if status == 400 {
			e = flatError(status, "BadRequestError", msg)
		}
		e.write(w)
		return
	}
	sw := startSSE(w, v.sse)
	sw.event(jsonStyle{spaced: true, escape: true}.encode(object{{"error", object{{"object", "error"}, {"message", msg},
		{"type", sglStatusName[status]}, {"param", nil}, {"code", status}}}}))
	sw.done()
}

// sglStatusName is Python's HTTPStatus(code).name, the type of a stream
// error frame (sglang.md §8).
var sglStatusName = map[int]string{400: "BAD_REQUEST", 500: "INTERNAL_SERVER_ERROR", 503: "SERVICE_UNAVAILABLE"}

// sglAnswer writes an OpenAI answer as SGLang does (sglang.md §7, §10):
// every field present, matched_stop per choice, the usage chunk with
// choices [] when asked for.
func sglAnswer(w http.ResponseWriter, r *http.Request, f map[string]json.RawMessage, v sglVariant, toks []string, finish string, shape streamShape) {
	n := promptLen(f)
	var matched any
	if finish == "stop" {
		matched = 128009
	}
	id, created := "a1b2c3d4e5f60718293a4b5c6d7e8f90", time.Now().Unix()
	usage := object{{"prompt_tokens", n}, {"total_tokens", n + len(toks)}, {"completion_tokens", len(toks)}, {"prompt_tokens_details", nil}}
	if !boolField(f, "stream") {
		ch := object{{"index", 0}, {"text", strings.Join(toks, "")}, {"logprobs", nil}, {"finish_reason", finish}, {"matched_stop", matched}}
		obj := "text_completion"
		if isChat(r) {
			obj = "chat.completion"
			ch = object{{"index", 0}, {"message", object{{"role", "assistant"}, {"content", strings.Join(toks, "")},
				{"reasoning_content", nil}, {"tool_calls", nil}}}, {"logprobs", nil}, {"finish_reason", finish}, {"matched_stop", matched}}
		}
		writeJSONBody(w, v.style.encode(object{{"id", id}, {"object", obj}, {"created", created}, {"model", fakeModel},
			{"choices", []any{ch}}, {"usage", usage}}))
		return
	}
	obj := "text_completion"
	if isChat(r) {
		obj = "chat.completion.chunk"
	}
	chunk := func(choice object) []byte {
		return v.style.encode(object{{"id", id}, {"object", obj}, {"created", created}, {"model", fakeModel},
			{"choices", []any{choice}}, {"usage", nil}})
	}
	m := chunkMaker{token: func(tok string, fr any) []byte {
		var ms any
		if fr != nil {
			ms = matched
		}
		if isChat(r) {
			return chunk(object{{"index", 0}, {"delta", object{{"role", nil}, {"content", tok}, {"reasoning_content", nil},
				{"tool_calls", nil}}}, {"logprobs", nil}, {"finish_reason", fr}, {"matched_stop", ms}})
		}
		return chunk(object{{"index", 0}, {"text", tok}, {"logprobs", nil}, {"finish_reason", fr}, {"matched_stop", ms}})
	}}
	if isChat(r) {
		m.role = func() []byte {
			return chunk(object{{"index", 0}, {"delta", object{{"role", "assistant"}, {"content", ""}, {"reasoning_content", nil},
				{"tool_calls", nil}}}, {"logprobs", nil}, {"finish_reason", nil}, {"matched_stop", nil}})
		}
	}
	if includeUsage(f) { // exclude_none (sglang.md §10)
		m.usage = func() []byte {
			return v.style.encode(object{{"id", id}, {"object", obj}, {"created", created}, {"model", fakeModel},
				{"choices", []any{}}, {"usage", object{{"prompt_tokens", n}, {"total_tokens", n + len(toks)}, {"completion_tokens", len(toks)}}}})
		}
	}
	writeStream(startSSE(w, v.sse), shape, toks, finish, m)
}
