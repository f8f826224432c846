package cost

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// matcher is a streaming JSON tokenizer that finds the number at a dotted
// path of object keys. It is fed a document in chunks split anywhere and
// keeps no copy of it: only the open containers' kinds, how many of the
// current keys match the path's, and the digits of the number at the path.
// A document that is not JSON, or nests deeper than maxDepth, gives no
// value.
type matcher struct {
	path    string
	ends    [maxPathKeys]uint8 // ends[i]: where key i of path ends
	keys    int                // the number of keys in path; 0: off
	state   uint8
	sub     uint8  // number grammar state, \u digits read or literal bytes matched
	lit     string // the rest of the literal (true, false, null) being read
	hex     rune   // the \u escape being read
	inKey   bool   // the string being read is an object key
	depth   int    // open containers
	arrays  [maxDepth / 64]uint64
	matched int    // current keys, from the top, equal to path's
	key     string // the path's key the current key is compared with
	keyPos  int    // key bytes matched so far; -1: the key cannot match
	capture bool   // the number being read is at the path
	numLen  int    // bytes in num; past len(num): too long to read
	num     [32]byte
	val     int64
	found   bool // val is the number at the path, as far as the document went
	done    bool // the top-level value ended
}

// maxDepth bounds nesting: a deeper document gives no value.
const maxDepth = 128

// Tokenizer states.
const (
	stValue    uint8 = iota // a value is expected
	stArrFirst              // after '[': a value or ']'
	stObjFirst              // after '{': a key or '}'
	stKey                   // after ',' in an object: a key
	stColon                 // after a key: ':'
	stAfter                 // after a value: ',' or the end of its container
	stString                // in a string, key or value
	stEscape                // after '\' in a string
	stHex                   // in a \u escape
	stNumber                // in a number; sub is its grammar state
	stLiteral               // in true, false or null
	stFailed                // not JSON: nothing more is read
)

// reset prepares m to read a document for path; it reports false, and
// turns m off, when path is not a valid dotted path.
func (m *matcher) reset(path string) bool {
	*m = matcher{}
	if checkPath(path) != nil {
		return false
	}
	m.path = path
	for i := 0; i < len(path); i++ {
		if path[i] == '.' {
			m.ends[m.keys] = uint8(i)
			m.keys++
		}
	}
	m.ends[m.keys] = uint8(len(path))
	m.keys++
	return true
}

// restart prepares m to read another document for the same path.
func (m *matcher) restart() {
	path, ends, keys := m.path, m.ends, m.keys
	*m = matcher{path: path, ends: ends, keys: keys}
}

// value returns the number at the path of a complete document, rounded
// up; ok is false when the document is incomplete, not JSON, or has no
// non-negative number at the path.
func (m *matcher) value() (n int64, ok bool) {
	if !m.found || !m.done || m.state == stFailed {
		return 0, false
	}
	return m.val, true
}

// write reads the next bytes of the document.
func (m *matcher) write(p []byte) {
	if m.keys == 0 {
		return
	}
	for i := 0; i < len(p); {
		switch m.state {
		case stString:
			i = m.str(p, i)
		case stNumber:
			i = m.number(p, i)
		case stFailed:
			return
		default:
			m.step(p[i])
			i++
		}
	}
}

// step reads one byte outside strings and numbers.
func (m *matcher) step(c byte) {
	switch m.state {
	case stEscape:
		m.escape(c)
		return
	case stHex:
		m.hexDigit(c)
		return
	case stLiteral:
		m.literal(c)
		return
	}
	if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
		return
	}
	switch m.state {
	case stColon:
		m.expect(c == ':', stValue)
	case stObjFirst, stKey:
		if c == '}' && m.state == stObjFirst {
			m.close()
			return
		}
		if c != '"' {
			m.fail()
			return
		}
		m.state = stString
		m.startKey()
	case stAfter:
		m.after(c)
	case stArrFirst:
		if c == ']' {
			m.close()
			return
		}
		m.startValue(c)
	default:
		m.startValue(c)
	}
}

// expect moves to next when ok, and fails otherwise.
func (m *matcher) expect(ok bool, next uint8) {
	if !ok {
		m.fail()
		return
	}
	m.state = next
}

func (m *matcher) fail() {
	m.state = stFailed
	m.found = false
}

// after reads the byte that follows a value.
func (m *matcher) after(c byte) {
	inArray := m.inArray()
	switch {
	case m.depth == 0:
		m.fail() // bytes after the document
	case c == ',' && inArray:
		m.state = stValue
	case c == ',':
		m.state = stKey
	case c == ']' && inArray, c == '}' && !inArray:
		m.close()
	default:
		m.fail()
	}
}

// startValue reads the first byte of a value.
func (m *matcher) startValue(c byte) {
	if m.depth > 0 && m.matched == m.depth {
		// A value at the path or above it: as in encoding/json, the
		// last value of a repeated key counts.
		m.found = false
	}
	at := m.matched == m.keys && m.depth == m.keys
	switch {
	case c == '{' || c == '[':
		m.open(c == '[')
	case c == '"':
		m.inKey, m.keyPos, m.state = false, -1, stString
	case c == '-' || '0' <= c && c <= '9':
		m.capture, m.numLen, m.state = at, 1, stNumber
		m.sub, m.num[0] = numNext(numStart, c), c
	case c == 't':
		m.lit, m.sub, m.state = "rue", 0, stLiteral
	case c == 'f':
		m.lit, m.sub, m.state = "alse", 0, stLiteral
	case c == 'n':
		m.lit, m.sub, m.state = "ull", 0, stLiteral
	default:
		m.fail()
	}
}

// endValue follows the end of any value.
func (m *matcher) endValue() {
	m.state = stAfter
	if m.depth == 0 {
		m.done = true
	}
}

func (m *matcher) open(array bool) {
	if m.depth == maxDepth {
		m.fail()
		return
	}
	w, bit := m.depth/64, uint64(1)<<(m.depth%64)
	if array {
		m.arrays[w] |= bit
		m.state = stArrFirst
	} else {
		m.arrays[w] &^= bit
		m.state = stObjFirst
	}
	m.depth++
}

func (m *matcher) close() {
	m.depth--
	m.matched = min(m.matched, m.depth)
	m.endValue()
}

// inArray reports whether the innermost open container is an array.
func (m *matcher) inArray() bool {
	d := m.depth - 1
	return d >= 0 && m.arrays[d/64]&(1<<(d%64)) != 0
}

// startKey follows the quote that opens a key at the current depth: the
// key replaces the previous key of its object in the current path.
func (m *matcher) startKey() {
	d := m.depth
	m.matched = min(m.matched, d-1)
	m.inKey, m.keyPos = true, -1
	if m.matched == d-1 && d <= m.keys {
		start := 0
		if d > 1 {
			start = int(m.ends[d-2]) + 1
		}
		m.key, m.keyPos = m.path[start:m.ends[d-1]], 0
	}
}

// keyByte compares the next byte of a key, escapes decoded, with the
// path's key.
func (m *matcher) keyByte(c byte) {
	if m.keyPos < 0 {
		return
	}
	if m.keyPos < len(m.key) && m.key[m.keyPos] == c {
		m.keyPos++
		return
	}
	m.keyPos = -1
}

// str reads a string's bytes from p[i:] and returns where it stopped.
func (m *matcher) str(p []byte, i int) int {
	for ; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '"':
			m.endString()
			return i + 1
		case c == '\\':
			m.state = stEscape
			return i + 1
		case c < 0x20:
			m.fail()
			return len(p)
		}
		if m.keyPos >= 0 {
			m.keyByte(c)
		}
	}
	return i
}

func (m *matcher) endString() {
	if !m.inKey {
		m.endValue()
		return
	}
	if m.keyPos == len(m.key) {
		m.matched = m.depth
	}
	m.state = stColon
}

// escape reads the byte after a backslash.
func (m *matcher) escape(c byte) {
	const from, to = `"\/bfnrt`, "\"\\/\b\f\n\r\t"
	if c == 'u' {
		m.hex, m.sub, m.state = 0, 0, stHex
		return
	}
	i := strings.IndexByte(from, c)
	if i < 0 {
		m.fail()
		return
	}
	m.keyByte(to[i])
	m.state = stString
}

// hexDigit reads a digit of a \u escape. A key compares the escaped
// character's UTF-8 bytes; a surrogate never matches.
func (m *matcher) hexDigit(c byte) {
	v, ok := unhex(c)
	if !ok {
		m.fail()
		return
	}
	m.hex = m.hex<<4 | rune(v)
	if m.sub++; m.sub < 4 {
		return
	}
	m.state = stString
	if m.keyPos < 0 {
		return
	}
	if utf8.RuneLen(m.hex) < 0 { // a surrogate
		m.keyPos = -1
		return
	}
	var b [utf8.UTFMax]byte
	for _, c := range b[:utf8.EncodeRune(b[:], m.hex)] {
		m.keyByte(c)
	}
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func (m *matcher) literal(c byte) {
	if c != m.lit[m.sub] {
		m.fail()
		return
	}
	if m.sub++; int(m.sub) == len(m.lit) {
		m.endValue()
	}
}

// Number grammar states (RFC 8259): -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
const (
	numStart    uint8 = iota // nothing read
	numSign                  // after '-'
	numZero                  // after a leading 0
	numInt                   // in the integer digits
	numDot                   // after '.'
	numFrac                  // in the fraction digits
	numExp                   // after 'e'
	numExpSign               // after the exponent's sign
	numExpDigit              // in the exponent digits
	numEnd                   // the byte ends a complete number
	numBad                   // the byte cannot follow
)

// numNext is the number grammar's state after c.
func numNext(s uint8, c byte) uint8 {
	digit := '0' <= c && c <= '9'
	switch {
	case (s == numStart || s == numSign) && c == '0':
		return numZero
	case s == numStart && c == '-':
		return numSign
	case (s == numStart || s == numSign || s == numInt) && digit:
		return numInt
	case (s == numZero || s == numInt) && c == '.':
		return numDot
	case (s == numDot || s == numFrac) && digit:
		return numFrac
	case (s == numZero || s == numInt || s == numFrac) && (c == 'e' || c == 'E'):
		return numExp
	case s == numExp && (c == '+' || c == '-'):
		return numExpSign
	case (s == numExp || s == numExpSign || s == numExpDigit) && digit:
		return numExpDigit
	case s == numZero || s == numInt || s == numFrac || s == numExpDigit:
		return numEnd
	}
	return numBad
}

// number reads a number's bytes from p[i:] and returns where it stopped:
// at the byte after the number, which is read as what follows a value.
func (m *matcher) number(p []byte, i int) int {
	for ; i < len(p); i++ {
		c := p[i]
		switch s := numNext(m.sub, c); s {
		case numEnd:
			m.endNumber()
			return i
		case numBad:
			m.fail()
			return len(p)
		default:
			m.sub = s
		}
		if m.capture {
			if m.numLen < len(m.num) {
				m.num[m.numLen] = c
			}
			m.numLen++
		}
	}
	return i
}

func (m *matcher) endNumber() {
	if m.capture && m.numLen <= len(m.num) {
		m.val, m.found = parseNumber(m.num[:m.numLen])
	}
	m.capture = false
	m.endValue()
}

// parseNumber returns a JSON number rounded up; ok is false for a negative
// number and one past int64.
func parseNumber(b []byte) (int64, bool) {
	if b[0] == '-' {
		f, err := strconv.ParseFloat(string(b), 64)
		return 0, err == nil && f == 0 // -0, -0.0
	}
	if n, ok := parseCount(b); ok {
		return n, true
	}
	// The conversion does not allocate: ParseFloat keeps no reference to
	// its argument, so the compiler builds it on the stack (len(b) <= 32).
	f, err := strconv.ParseFloat(string(b), 64)
	f = math.Ceil(f)
	if err != nil || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}
