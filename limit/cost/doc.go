// Package cost says what a cost-counting limit reads from a request and
// from its answer: how many permits a request is estimated to use before
// it is forwarded, how many the answer says it used, and which answers a
// count_if limit counts at all.
//
// A limit that counts cost (tokens of a language model, bytes of an
// upload) cannot know a request's cost before the answer comes back, yet
// it must decide before forwarding. So it takes an Estimate from the
// request (a fixed weight, a header, a number in the JSON body, the body's
// length), and, when the answer carries the true figure, an Actual that
// corrects the count: a header, a number in a JSON answer, or the number
// in the last event of a server-sent event stream that carries it (the
// usage chunk OpenAI-style streams end with).
//
// The Meter reads the answer's body as it streams past the proxy without
// keeping a copy of it: a small JSON tokenizer follows the object keys
// down to the configured path and keeps only the number found there, so
// a stream of any length costs a fixed few hundred bytes and no
// allocation per write.
//
// A path is a dotted list of object keys (usage.total_tokens). It reaches
// no array element, and a key holding a dot cannot be named. The same
// matcher reads request bodies and answers, so a path means the same in
// cost.estimate.json, cost.actual.json and cost.actual.sse.
//
// The package imports nothing of the gateway: the proxy hands it header
// lookups, bytes and status codes.
package cost
