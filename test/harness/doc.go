// Package harness is what the end-to-end tests and the fault suite share:
// a gateway started from a configuration on free loopback ports (Start), a
// stub upstream that records what reached it (StartUpstream), a builder of
// test configurations (Config), HTTP requests read whole (Do, Status), a
// metrics scrape (Scrape), the admin API's state (Gateway.State), a log
// buffer (CaptureLog), free ports (FreePorts), a TCP relay a test can cut
// or slow between one gateway and its Redis (Listen) and a condition polled
// until it holds (Eventually). Real redis-server processes, single or a 3-node
// cluster, come from internal/redistest.
//
// Tests reach the gateway through this surface only, as a client or an
// operator would: its listeners, its admin API, its configuration file and
// a reload.
package harness
