// Package model holds a model of the lease protocol (lease.pml, in
// Promela) and the test that checks it exhaustively with spin: no window
// holds more uses than the limit, and no request is refused while its pod's
// share and the window have room, under every interleaving of calls,
// answers, timeouts, outages, partitions of one pod, losses of the store's
// data and reloads. It checks the gateway's own hold of a missing pod's
// share too (GATEWAY_HOLD), where it keeps the limit and where it does not.
// The file's header maps the model to the Go names.
package model
