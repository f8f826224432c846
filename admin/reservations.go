package admin

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sentinel-gateway/sentinel/limit"
)

// Bounds of the check API's reservations.
const (
	// DefaultReservationTTL is how long a check's reservation waits for
	// its settlement (reservation_ttl) before it settles at its estimate.
	DefaultReservationTTL = time.Minute
	// MaxReservationTTL bounds reservation_ttl.
	MaxReservationTTL = time.Hour
	// MaxReservations bounds the reservations a pod holds open; a check
	// admitted past it settles at its estimate at once and answers no
	// reservation.
	MaxReservations = 100_000
)

// reservations are the open reservations of the check API's admitted
// checks on this pod, by id: what each took of its cost and count_if
// limits, until POST /v1/ratelimit/settle settles it or its TTL ends
// (then it settles at its estimate: the caller never said what it cost).
// They live in this pod's memory: a settlement goes to the pod that
// answered the check, and a reservation of a pod that stops is never
// given back (its estimate stands, as the store counted it).
type reservations struct {
	settle func(r *limit.Reservation, actual int64)
	now    func() time.Time

	mu sync.Mutex
	m  map[string]*held
}

// held is one check's reservations.
type held struct {
	res     [limit.MaxReserved]limit.Reservation
	n       int
	expires time.Time
}

var (
	reservationsOpen    = metrics.NewGauge(`sentinel_check_reservations_open`, nil)
	reservationsExpired = metrics.NewCounter(`sentinel_check_reservations_expired_total`)
	reservationsRefused = metrics.NewCounter(`sentinel_check_reservations_unkept_total`)
)

func newReservations(settle func(r *limit.Reservation, actual int64), now func() time.Time) *reservations {
	return &reservations{settle: settle, now: now, m: map[string]*held{}}
}

// hold keeps d's reservations for ttl under a new id, which it returns;
// "" when d holds none, or when the table is full (they are settled at
// their estimates at once).
func (rs *reservations) hold(d *limit.Decision, ttl time.Duration) string {
	if d.NReserved == 0 {
		return ""
	}
	h := &held{n: d.NReserved, expires: rs.now().Add(ttl)}
	copy(h.res[:], d.Reserved[:d.NReserved])
	d.NReserved = 0
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	rs.mu.Lock()
	full := len(rs.m) >= MaxReservations
	if !full {
		rs.m[id] = h
		reservationsOpen.Set(float64(len(rs.m)))
	}
	rs.mu.Unlock()
	if full {
		reservationsRefused.Inc()
		h.settleAll(rs.settle, -1, 0)
		return ""
	}
	return id
}

// take removes and returns the reservations of id; nil when there are
// none (never held, settled, or expired).
func (rs *reservations) take(id string) *held {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	h := rs.m[id]
	delete(rs.m, id)
	reservationsOpen.Set(float64(len(rs.m)))
	return h
}

// expire settles at their estimates the reservations whose TTL ended by
// now.
func (rs *reservations) expire(now time.Time) {
	var done []*held
	rs.mu.Lock()
	for id, h := range rs.m {
		if !now.Before(h.expires) {
			done = append(done, h)
			delete(rs.m, id)
		}
	}
	reservationsOpen.Set(float64(len(rs.m)))
	rs.mu.Unlock()
	for _, h := range done {
		reservationsExpired.Inc()
		h.settleAll(rs.settle, -1, 0)
	}
}

// run expires reservations every second until stop closes.
func (rs *reservations) run(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			rs.expire(rs.now())
		}
	}
}

// settleAll settles h's reservations: a count_if limit at 0 when status
// (0: none given) is not one it counts; a cost limit at cost (-1: none
// given, the estimate stands); any other at its estimate. It returns
// what each settled at.
func (h *held) settleAll(settle func(*limit.Reservation, int64), cost int64, status int) [limit.MaxReserved]int64 {
	var got [limit.MaxReserved]int64
	for i := range h.res[:h.n] {
		r := &h.res[i]
		actual := r.N
		switch {
		case status != 0 && !r.Meter.Counts(status):
			actual = 0
		case cost >= 0 && r.Meter.Cost != nil:
			actual = cost
		}
		got[i] = actual
		settle(r, actual)
	}
	return got
}
