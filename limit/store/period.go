package store

import (
	"fmt"
	"time"

	// The zone database goes into every binary that has quotas, so that a
	// zone (limits.quota_time_zone) loads on a machine or image without
	// /usr/share/zoneinfo; time.LoadLocation prefers the system's copy.
	_ "time/tzdata"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
)

// Period is a calendar period of a quota limit ("2,000 a day"): a fixed
// window that starts and ends on calendar boundaries in a time zone, not a
// sliding one. The zero value is none: the limit is not a quota.
type Period uint8

const (
	// NoPeriod: the limit slides (or is a token bucket).
	NoPeriod Period = iota
	// Hour starts at every full hour of local time (and, in a zone that
	// shifts by half an hour, at the shift).
	Hour
	// Day starts at local midnight; it lasts 23 or 25 hours on the days
	// a zone changes its offset.
	Day
	// Week is an ISO week: it starts on Monday at local midnight.
	Week
	// Month starts on the 1st at local midnight.
	Month
	// Year starts on January 1st at local midnight.
	Year
)

// periodNames are the configuration names, by Period.
var periodNames = [...]string{NoPeriod: "", Hour: "hour", Day: "day", Week: "week", Month: "month", Year: "year"}

// ParsePeriod returns the period of a configuration name: hour, day, week,
// month or year. The empty name is NoPeriod.
func ParsePeriod(name string) (Period, error) {
	for p, n := range periodNames {
		if n == name {
			return Period(p), nil
		}
	}
	return 0, fmt.Errorf("%q is not one of hour, day, week, month, year", name)
}

// String returns the configuration name of the period ("" for NoPeriod).
func (p Period) String() string {
	if int(p) < len(periodNames) {
		return periodNames[p]
	}
	return fmt.Sprintf("period(%d)", uint8(p))
}

// MarshalText implements encoding.TextMarshaler with the configuration name.
func (p Period) MarshalText() ([]byte, error) {
	if int(p) >= len(periodNames) {
		return nil, fmt.Errorf("unknown period %d", uint8(p))
	}
	return []byte(periodNames[p]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParsePeriod;
// empty text is NoPeriod, as an absent key is.
func (p *Period) UnmarshalText(b []byte) error {
	return confutil.UnmarshalName(p, b, ParsePeriod)
}

// UnmarshalJSON reads a JSON string as UnmarshalText does; a bad value is
// a *json.UnmarshalTypeError that names the field.
func (p *Period) UnmarshalJSON(b []byte) error { return confutil.UnmarshalJSONText(b, p) }

// Bounds returns the period that holds t in loc (nil: UTC): start <= t <
// end. The boundaries are local wall-clock times (midnight, the 1st, ...),
// so a day is 23 or 25 hours long across a change of offset, and a month
// as long as the month; where a zone skips midnight, the date starts at the
// change of offset. Bounds does not allocate.
func (p Period) Bounds(t time.Time, loc *time.Location) (start, end time.Time) {
	if loc == nil {
		loc = time.UTC
	}
	t = t.In(loc)
	switch p {
	case Hour:
		return hourBounds(t)
	case NoPeriod:
		return t, t
	}
	y, m, d := t.Date()
	switch p {
	case Day:
		start, end = localDate(y, m, d, loc), localDate(y, m, d+1, loc)
	case Week:
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
		start, end = localDate(y, m, d, loc), localDate(y, m, d+7, loc)
	case Month:
		start, end = localDate(y, m, 1, loc), localDate(y, m+1, 1, loc)
	case Year:
		start, end = localDate(y, 1, 1, loc), localDate(y+1, 1, 1, loc)
	default:
		return t, t
	}
	return start, end
}

// hourBounds is the local hour that holds t: t less its local minutes,
// never a wall time (which the repeated hour of a fall-back day makes
// ambiguous). A change of offset inside the hour (zones that shift by 30
// minutes) cuts it in two at the change, so that the hours tile.
func hourBounds(t time.Time) (start, end time.Time) {
	start = t.Add(-time.Duration(t.Minute())*time.Minute - time.Duration(t.Second())*time.Second - time.Duration(t.Nanosecond()))
	end = start.Add(time.Hour)
	zoneStart, zoneEnd := t.ZoneBounds()
	if start.Before(zoneStart) {
		start = zoneStart
	}
	if !zoneEnd.IsZero() && zoneEnd.Before(end) {
		end = zoneEnd
	}
	return start, end
}

// localDate is the first instant of the local date y-m-d (normalised) in
// loc: its midnight, or, where a change of offset skips midnight, the
// change itself. time.Date leaves the instant of a skipped wall time open
// (it may fall an hour before the gap, on the date before); the zone's
// bounds put it on the change, so that every instant of a date is in its
// day, and the periods tile.
func localDate(y int, m time.Month, d int, loc *time.Location) time.Time {
	x := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if x.Hour() == 0 {
		return x
	}
	zoneStart, zoneEnd := x.ZoneBounds()
	if x.Hour() >= 12 {
		return zoneEnd // x is on the date before the gap: the change is next
	}
	return zoneStart // x is past the gap, in the zone that the change starts
}

// MaxPeriod bounds the length of a calendar period (a leap year): how long
// a quota's counter can matter.
const MaxPeriod = 366 * 24 * time.Hour
