package cost

import "bytes"

// Meter reads an answer's cost from its body as the body streams past: it
// is an io.Writer the proxy copies the body into, and Value gives the
// number found. It keeps no copy of the body, only a few hundred bytes of
// state, and a Meter reused after Reset allocates nothing. The zero Meter
// reads nothing until Reset. A Meter is not safe for concurrent use.
type Meter struct {
	doc  matcher // the whole answer, or the data of the current SSE event
	mode uint8

	// The SSE framing, in the terms of the WHATWG HTML standard, section
	// "Parsing an event stream".
	line   uint8 // where the current line is
	field  uint8 // bytes of "data" the field name matched
	cr     bool  // the last byte was a CR: an LF right after it ends no line
	data   bool  // the event has a data line: the next one is joined by "\n"
	last   int64 // the number of the last event that carried one
	lastOK bool
}

// Meter framings.
const (
	modeOff  uint8 = iota
	modeJSON       // the answer is one JSON document
	modeSSE        // the answer is a text/event-stream
)

var newline = []byte{'\n'}

// SSE line states.
const (
	lnStart uint8 = iota // at the start of a line
	lnField              // in the field name
	lnSpace              // at the first byte of a data line's value
	lnData               // in a data line's value
	lnSkip               // in a comment or a line of another field
)

// Reset prepares m to read an answer for a's JSON or SSE path, and forgets
// the previous answer. The answer's media type (contentType, the
// Content-Type header) picks the framing: text/event-stream is read as
// SSE, application/json and */*+json as one JSON document, and any other
// type as a's key says. So an sse path also reads the usage of an answer
// that a client asked not to stream, and an error answer in JSON is read
// as JSON. A nil a, or one without a valid JSON or SSE path, makes m read
// nothing. Reset allocates nothing.
func (m *Meter) Reset(a *Actual, contentType []byte) {
	*m = Meter{}
	if a == nil || !a.NeedsBody() {
		return
	}
	path, sse := a.JSON, false
	if a.SSE != "" {
		path, sse = a.SSE, true
	}
	switch mediaType(contentType) {
	case "sse":
		sse = true
	case "json":
		sse = false
	}
	if !m.doc.reset(path) {
		return
	}
	m.mode = modeJSON
	if sse {
		m.mode = modeSSE
	}
}

// mediaType names the framing of a Content-Type: "sse", "json" or "".
func mediaType(ct []byte) string {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	switch {
	case bytes.EqualFold(ct, []byte("text/event-stream")):
		return "sse"
	case bytes.EqualFold(ct, []byte("application/json")),
		len(ct) > 5 && bytes.EqualFold(ct[len(ct)-5:], []byte("+json")):
		return "json"
	}
	return ""
}

// Write reads the next bytes of the answer, split anywhere. It never
// fails, so that metering never breaks the answer's stream.
func (m *Meter) Write(p []byte) (int, error) {
	switch m.mode {
	case modeJSON:
		m.doc.write(p)
	case modeSSE:
		m.sse(p)
	}
	return len(p), nil
}

// Value returns the number found, rounded up: the one at the path of a
// complete JSON answer, or of the last SSE event whose data is a JSON
// document with a number there. ok is false when there is none, or it is
// negative. A stream cut inside its last event still counts that event
// when its data is complete JSON.
func (m *Meter) Value() (n int64, ok bool) {
	switch m.mode {
	case modeJSON:
		return m.doc.value()
	case modeSSE:
		if n, ok := m.doc.value(); ok && m.data {
			return n, true
		}
		return m.last, m.lastOK
	}
	return 0, false
}

// sse reads bytes of an event stream.
func (m *Meter) sse(p []byte) {
	for len(p) > 0 {
		c := p[0]
		if m.cr && c == '\n' { // the LF of a CRLF
			m.cr = false
			p = p[1:]
			continue
		}
		m.cr = false
		switch m.line {
		case lnData, lnSkip:
			if n := lineLen(p); n > 0 {
				if m.line == lnData {
					m.doc.write(p[:n])
				}
				p = p[n:]
				continue
			}
		case lnSpace:
			m.line = lnData
			if c == ' ' {
				p = p[1:]
				continue
			}
			if c != '\r' && c != '\n' {
				continue
			}
		}
		m.lineByte(c)
		p = p[1:]
	}
}

// lineLen is the length of p's bytes before its first CR or LF.
func lineLen(p []byte) int {
	n := bytes.IndexByte(p, '\n')
	if n < 0 {
		n = len(p)
	}
	if r := bytes.IndexByte(p[:n], '\r'); r >= 0 {
		n = r
	}
	return n
}

// lineByte reads a byte at the start of a line, in a field name, or the
// end of a line.
func (m *Meter) lineByte(c byte) {
	if c == '\r' || c == '\n' {
		m.cr = c == '\r'
		m.endLine()
		return
	}
	switch {
	case m.line == lnStart && c == ':': // a comment
		m.line = lnSkip
	case m.line == lnStart:
		m.line, m.field = lnField, 0
		m.fieldByte(c)
	default:
		m.fieldByte(c)
	}
}

// fieldByte reads a byte of a field name.
func (m *Meter) fieldByte(c byte) {
	const data = "data"
	switch {
	case c == ':' && m.field == uint8(len(data)):
		m.startData()
		m.line = lnSpace
	case c == ':':
		m.line = lnSkip
	case int(m.field) < len(data) && data[m.field] == c:
		m.field++
	default:
		m.field = 0xff
	}
}

// startData begins a data line's value: a second one in an event is
// joined to the first by a newline.
func (m *Meter) startData() {
	if m.data {
		m.doc.write(newline)
	}
	m.data = true
}

// endLine follows a CR or an LF.
func (m *Meter) endLine() {
	switch m.line {
	case lnStart: // a blank line ends the event
		m.dispatch()
	case lnField:
		if m.field == 4 { // "data" alone: a data line with an empty value
			m.startData()
		}
	}
	m.line = lnStart
}

// dispatch ends an event: the number its data carries at the path, if any,
// replaces the last one.
func (m *Meter) dispatch() {
	if !m.data {
		return
	}
	if n, ok := m.doc.value(); ok {
		m.last, m.lastOK = n, true
	}
	m.data = false
	m.doc.restart()
}
