// Package spans counts decisions in windows of time when each one is known
// only to lie within a span (taken before the call that decided it and
// after it): the tests' measure of how many approvals a window of a limit
// held, which no scheduling delay can inflate.
package spans

import (
	"slices"
	"time"
)

// Span is when one decision was made: at some instant in [From, To].
type Span struct{ From, To time.Time }

// Busiest returns the most spans that lie wholly inside one interval of
// length window, when that interval began, and the most that merely touch
// one such interval. The first is a lower bound of the real busiest window
// that no scheduling delay can inflate, and it misses only decisions that
// straddled the window's edges (a store call in flight there); the second
// is an upper bound, for the log. It sorts spans by From.
func Busiest(spans []Span, window time.Duration) (certain int, at time.Time, touching int) {
	slices.SortFunc(spans, func(a, b Span) int { return a.From.Compare(b.From) })
	for i := range spans {
		start, end := spans[i].From, spans[i].From.Add(window)
		n := 0
		for _, s := range spans[i:] {
			if !s.From.Before(end) {
				break
			}
			if s.To.Before(end) {
				n++
			}
		}
		if n > certain {
			certain, at = n, start
		}
		m := 0
		for _, s := range spans {
			if !s.To.Before(start) && s.From.Before(end) {
				m++
			}
		}
		touching = max(touching, m)
	}
	return certain, at, touching
}
