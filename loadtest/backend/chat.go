package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

const (
	defaultMaxTokens = 100                  // max_tokens when neither the body nor X-Max-Tokens sets it
	maxTokensCap     = 1 << 20              // largest tokens or max_tokens accepted
	tokensPerChunk   = 10                   // completion tokens per streamed content event
	defaultDelay     = 5 * time.Millisecond // pause between streamed events
)

// words is the text of every answer, one word per streamed event.
var words = strings.Fields("the gateway settles each call from the usage the model reports at the end of its answer")

// chatCall is one parsed chat call. It holds no RequestCtx data, since the
// stream writer runs after the handler has returned.
type chatCall struct {
	id, model  string
	created    int64
	prompt     int // prompt tokens
	completion int // completion tokens
	stream     bool
	delay      time.Duration // between streamed events
}

type usage struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

type message struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type choice struct {
	Index        int      `json:"index"`
	Message      *message `json:"message,omitempty"`
	Delta        *message `json:"delta,omitempty"`
	FinishReason string   `json:"finish_reason,omitempty"`
}

// completion is both the whole answer (object chat.completion) and one
// streamed event (object chat.completion.chunk).
type completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

// chat serves /v1/chat/completions (any method), an OpenAI-style model call
// whose usage is known only at the end: a whole JSON answer with its usage
// in the body and in X-Usage-Total-Tokens, or, with stream, server-sent
// events that end with a usage event and [DONE], as OpenAI does with
// stream_options.include_usage.
func chat(ctx *fasthttp.RequestCtx) {
	c, err := parseChat(ctx)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	if !c.stream {
		ctx.Response.Header.Set("X-Usage-Total-Tokens", strconv.Itoa(c.prompt+c.completion))
		writeJSON(ctx, c.whole())
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStreamWriter(c.writeStream) // no length: chunked
}

// chatBody is the part of an OpenAI request body that the demo reads.
type chatBody struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	Stream    bool            `json:"stream"`
	Messages  json.RawMessage `json:"messages"`
}

// parseChat reads the call: the JSON body (model, max_tokens, stream,
// messages), the X-Max-Tokens header, and the query (tokens, stream, delay).
func parseChat(ctx *fasthttp.RequestCtx) (chatCall, error) {
	var in chatBody
	if body := ctx.PostBody(); len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			return chatCall{}, fmt.Errorf("cannot parse the JSON body: %v", err)
		}
	}
	q := ctx.QueryArgs()
	maxTokens, err := intParam("X-Max-Tokens", ctx.Request.Header.Peek("X-Max-Tokens"), defaultMaxTokens)
	if err != nil {
		return chatCall{}, err
	}
	if in.MaxTokens > 0 { // the body wins over the header
		maxTokens = min(in.MaxTokens, maxTokensCap)
	}
	completion, err := intParam("tokens", q.Peek("tokens"), 0)
	if err != nil {
		return chatCall{}, err
	}
	if !q.Has("tokens") {
		completion = 1 + rand.IntN(max(maxTokens, 1))
	}
	c := chatCall{id: fmt.Sprintf("chatcmpl-%016x", rand.Uint64()), model: cmpOr(in.Model, "demo"),
		created: time.Now().Unix(), prompt: max(1, len(in.Messages)/4), completion: completion,
		stream: in.Stream, delay: defaultDelay}
	if s := q.Peek("stream"); len(s) > 0 {
		v, err := strconv.ParseBool(string(s))
		if err != nil {
			return chatCall{}, errors.New("stream: want true or false")
		}
		c.stream = c.stream || v
	}
	if s := q.Peek("delay"); len(s) > 0 {
		if c.delay, err = time.ParseDuration(string(s)); err != nil || c.delay < 0 {
			return chatCall{}, errors.New("delay: want a duration such as 5ms")
		}
	}
	return c, nil
}

// intParam returns the number in raw, or def when raw is empty. The number
// must lie in [0, maxTokensCap].
func intParam(name string, raw []byte, def int) (int, error) {
	if len(raw) == 0 {
		return def, nil
	}
	v, err := strconv.Atoi(string(raw))
	if err != nil || v < 0 || v > maxTokensCap {
		return 0, fmt.Errorf("%s: want a whole number from 0 to %d", name, maxTokensCap)
	}
	return v, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// chunks is the number of streamed content events: one per tokensPerChunk
// completion tokens, rounded up.
func (c chatCall) chunks() int {
	return (c.completion + tokensPerChunk - 1) / tokensPerChunk
}

func (c chatCall) usage() *usage {
	return &usage{Prompt: c.prompt, Completion: c.completion, Total: c.prompt + c.completion}
}

func (c chatCall) object(kind string, choices []choice, u *usage) completion {
	return completion{ID: c.id, Object: kind, Created: c.created, Model: c.model, Choices: choices, Usage: u}
}

// whole is the non-streamed answer: the text of all the streamed events.
func (c chatCall) whole() completion {
	var text strings.Builder
	for i := range c.chunks() {
		text.WriteString(words[i%len(words)] + " ")
	}
	msg := &message{Role: "assistant", Content: text.String()}
	return c.object("chat.completion", []choice{{Message: msg, FinishReason: "stop"}}, c.usage())
}

// writeStream writes the events, flushing each one (one chunk on the wire),
// delay apart, and stops when the client has gone.
func (c chatCall) writeStream(w *bufio.Writer) {
	n := c.chunks()
	for i := range n {
		delta := &message{Content: words[i%len(words)] + " "}
		if i > 0 {
			time.Sleep(c.delay)
		}
		if writeEvent(w, c.object("chat.completion.chunk", []choice{{Delta: delta}}, nil)) != nil {
			return
		}
	}
	if n > 0 {
		time.Sleep(c.delay)
	}
	if writeEvent(w, c.object("chat.completion.chunk", []choice{}, c.usage())) != nil {
		return
	}
	_, _ = w.WriteString("data: [DONE]\n\n")
	_ = w.Flush()
}

// writeEvent writes v as one server-sent event and flushes it.
func writeEvent(w *bufio.Writer, v any) error {
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, _ = w.WriteString("data: ")
	_, _ = w.Write(out)
	_, _ = w.WriteString("\n\n")
	return w.Flush()
}
