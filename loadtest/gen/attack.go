package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The attacker's requests, written to raw sockets because no HTTP client
// sends broken framing: each is a chunked POST whose body is the fault.
const (
	kindMalformed = iota // chunk size "ZZ"
	kindOversized        // a chunked body larger than the gateway's max_request_body
	kindSlow             // a chunked body that trickles in, one byte per interval
	kinds
)

var kindNames = [kinds]string{"malformed", "oversized", "slow"}

// attackOptions shape the hostile uploads.
type attackOptions struct {
	key       string        // API key the attacker sends
	oversize  int           // bytes of an oversized body
	slowFor   time.Duration // how long a slow upload trickles
	slowEvery time.Duration // interval between its one-byte chunks
	timeout   time.Duration // longest wait for an answer after the body
}

// attackTally counts the attacker's outcomes by kind: "400", "413",
// "closed" (no answer), "timeout", "dial".
type attackTally struct {
	mu       sync.Mutex
	outcomes [kinds]map[string]int
}

func newAttackTally() *attackTally {
	a := &attackTally{}
	for i := range a.outcomes {
		a.outcomes[i] = map[string]int{}
	}
	return a
}

func (a *attackTally) add(kind int, outcome string) {
	a.mu.Lock()
	a.outcomes[kind][outcome]++
	a.mu.Unlock()
}

// summary is "malformed 17 (400:17); oversized 16 (413:16); ...".
func (a *attackTally) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var parts []string
	for k, m := range a.outcomes {
		n, keys := 0, make([]string, 0, len(m))
		for o, c := range m {
			n += c
			keys = append(keys, o)
		}
		if n == 0 {
			continue
		}
		sort.Strings(keys)
		var outs []string
		for _, o := range keys {
			outs = append(outs, o+":"+strconv.Itoa(m[o]))
		}
		parts = append(parts, fmt.Sprintf("%s %d (%s)", kindNames[k], n, strings.Join(outs, " ")))
	}
	return strings.Join(parts, "; ")
}

// attackAt sends rate hostile uploads per second for d, cycling through the
// kinds, each on a new connection, and waits for them to end.
func (g *generator) attackAt(rate float64, d time.Duration, t *attackTally) {
	u, err := url.Parse(g.target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen: attack:", err)
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	every := time.Duration(float64(time.Second) / rate)
	tick := time.NewTicker(every)
	defer tick.Stop()
	end := time.After(d)
	for n := 0; ; n++ {
		select {
		case <-end:
			return
		case <-tick.C:
		}
		kind := n % kinds
		wg.Go(func() { t.add(kind, g.attack.send(u.Host, kind)) })
	}
}

// send writes one hostile upload to addr and returns the outcome.
func (o attackOptions) send(addr string, kind int) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "dial"
	}
	defer c.Close()
	head := "POST /upload HTTP/1.1\r\nHost: " + addr + "\r\nX-API-Key: " + o.key +
		"\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	_, err = c.Write([]byte(head))
	if err == nil {
		err = o.writeBody(c, kind)
	}
	// Even when the server stopped reading (a write error), it may have
	// answered first: read what it said.
	_ = c.SetReadDeadline(time.Now().Add(o.timeout))
	line, rerr := bufio.NewReader(c).ReadString('\n')
	f := strings.Fields(line)
	switch {
	case len(f) >= 2 && strings.HasPrefix(f[0], "HTTP/"):
		return f[1]
	case isTimeout(rerr) && err == nil:
		return "timeout"
	}
	return "closed"
}

func (o attackOptions) writeBody(c net.Conn, kind int) error {
	switch kind {
	case kindMalformed:
		_, err := c.Write([]byte("ZZ\r\nhello\r\n0\r\n\r\n"))
		return err
	case kindOversized:
		chunk := make([]byte, 0, 64<<10+16)
		chunk = append(strconv.AppendInt(chunk, 64<<10, 16), "\r\n"...)
		chunk = append(chunk, make([]byte, 64<<10)...)
		chunk = append(chunk, "\r\n"...)
		for sent := 0; sent < o.oversize; sent += 64 << 10 {
			if _, err := c.Write(chunk); err != nil {
				return err
			}
		}
	case kindSlow:
		for end := time.Now().Add(o.slowFor); time.Now().Before(end); time.Sleep(o.slowEvery) {
			if _, err := c.Write([]byte("1\r\nx\r\n")); err != nil {
				return err
			}
		}
	}
	_, err := c.Write([]byte("0\r\n\r\n"))
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
