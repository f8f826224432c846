package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// do sends one command to addr over a fresh connection and returns the reply
// as text: simple strings and bulk strings as-is, integers in decimal, errors
// as a Go error. Arrays are not needed by this package and are rejected.
// It is a deliberately tiny RESP client so that the harness depends on nothing
// but the redis-server binary.
func do(addr string, timeout time.Duration, args ...string) (string, error) {
	replies, err := doAll(addr, timeout, args)
	if err != nil {
		return "", err
	}
	return replies[0], nil
}

// doAll sends commands one after the other on one connection and returns
// their replies, stopping at the first error. What a command waits for on
// its own connection (WAIT: the replicas' copy of that connection's writes)
// needs the commands before it on the same one.
func doAll(addr string, timeout time.Duration, cmds ...[]string) ([]string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	var replies []string
	for _, args := range cmds {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(b.String())); err != nil {
			return nil, err
		}
		reply, err := readReply(r)
		if err != nil {
			return nil, err
		}
		replies = append(replies, reply)
	}
	return replies, nil
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unsupported reply %q", line)
	}
}
