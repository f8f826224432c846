package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPeriodParse(t *testing.T) {
	for _, name := range []string{"hour", "day", "week", "month", "year", ""} {
		p, err := ParsePeriod(name)
		require.NoError(t, err, name)
		assert.Equal(t, name, p.String())
		b, err := p.MarshalText()
		require.NoError(t, err)
		var q Period
		require.NoError(t, q.UnmarshalText(b))
		assert.Equal(t, p, q)
	}
	_, err := ParsePeriod("fortnight")
	assert.Error(t, err)
	var q Period
	assert.Error(t, q.UnmarshalText([]byte("Day")))
	_, err = Period(99).MarshalText()
	assert.Error(t, err)
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// TestPeriodBounds checks each period's start and end on the days that
// make calendars hard: month ends, leap years, changes of offset, ISO weeks
// across a year end.
func TestPeriodBounds(t *testing.T) {
	berlin, newYork := mustZone(t, "Europe/Berlin"), mustZone(t, "America/New_York")
	kathmandu := mustZone(t, "Asia/Kathmandu") // +05:45
	at := func(loc *time.Location, s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
		require.NoError(t, err)
		return v
	}
	utc := time.UTC
	for _, c := range []struct {
		name       string
		p          Period
		loc        *time.Location
		t          time.Time
		start, end time.Time
		length     time.Duration
	}{
		{"31 Jan to Feb", Month, utc, at(utc, "2025-01-31 23:59:59"), at(utc, "2025-01-01 00:00:00"), at(utc, "2025-02-01 00:00:00"), 31 * 24 * time.Hour},
		{"February", Month, utc, at(utc, "2025-02-01 00:00:00"), at(utc, "2025-02-01 00:00:00"), at(utc, "2025-03-01 00:00:00"), 28 * 24 * time.Hour},
		{"leap February", Month, utc, at(utc, "2024-02-29 12:00:00"), at(utc, "2024-02-01 00:00:00"), at(utc, "2024-03-01 00:00:00"), 29 * 24 * time.Hour},
		{"leap year", Year, utc, at(utc, "2024-12-31 23:59:59"), at(utc, "2024-01-01 00:00:00"), at(utc, "2025-01-01 00:00:00"), 366 * 24 * time.Hour},
		{"nil zone is UTC", Day, nil, at(utc, "2025-03-30 10:00:00"), at(utc, "2025-03-30 00:00:00"), at(utc, "2025-03-31 00:00:00"), 24 * time.Hour},
		{"Berlin spring forward day", Day, berlin, at(berlin, "2025-03-30 12:00:00"), at(berlin, "2025-03-30 00:00:00"), at(berlin, "2025-03-31 00:00:00"), 23 * time.Hour},
		{"Berlin fall back day", Day, berlin, at(berlin, "2025-10-26 01:00:00"), at(berlin, "2025-10-26 00:00:00"), at(berlin, "2025-10-27 00:00:00"), 25 * time.Hour},
		{"Berlin hour after the gap", Hour, berlin, at(berlin, "2025-03-30 03:30:00"), at(berlin, "2025-03-30 03:00:00"), at(berlin, "2025-03-30 04:00:00"), time.Hour},
		{"Berlin October month", Month, berlin, at(berlin, "2025-10-31 23:30:00"), at(berlin, "2025-10-01 00:00:00"), at(berlin, "2025-11-01 00:00:00"), 31*24*time.Hour + time.Hour},
		{"New York spring forward day", Day, newYork, at(newYork, "2025-03-09 23:59:59"), at(newYork, "2025-03-09 00:00:00"), at(newYork, "2025-03-10 00:00:00"), 23 * time.Hour},
		{"New York fall back week", Week, newYork, at(newYork, "2025-11-02 12:00:00"), at(newYork, "2025-10-27 00:00:00"), at(newYork, "2025-11-03 00:00:00"), 7*24*time.Hour + time.Hour},
		{"ISO week across a year end", Week, utc, at(utc, "2025-01-01 08:00:00"), at(utc, "2024-12-30 00:00:00"), at(utc, "2025-01-06 00:00:00"), 7 * 24 * time.Hour},
		{"ISO week on Sunday", Week, utc, at(utc, "2025-01-05 23:59:59"), at(utc, "2024-12-30 00:00:00"), at(utc, "2025-01-06 00:00:00"), 7 * 24 * time.Hour},
		{"ISO week on Monday", Week, utc, at(utc, "2025-01-06 00:00:00"), at(utc, "2025-01-06 00:00:00"), at(utc, "2025-01-13 00:00:00"), 7 * 24 * time.Hour},
		{"hour in a +05:45 zone", Hour, kathmandu, at(utc, "2025-06-01 10:00:00"), at(utc, "2025-06-01 09:15:00"), at(utc, "2025-06-01 10:15:00"), time.Hour},
		{"day in a +05:45 zone", Day, kathmandu, at(utc, "2025-06-01 18:14:59"), at(utc, "2025-05-31 18:15:00"), at(utc, "2025-06-01 18:15:00"), 24 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			start, end := c.p.Bounds(c.t, c.loc)
			assert.True(t, start.Equal(c.start), "start %v, want %v", start, c.start)
			assert.True(t, end.Equal(c.end), "end %v, want %v", end, c.end)
			assert.Equal(t, c.length, end.Sub(start))
		})
	}
}

// TestPeriodBoundsTile walks two years hour by hour in zones with offset
// changes (one of them at midnight) and checks that the periods tile time:
// each holds its instant, and the next one starts where it ends.
func TestPeriodBoundsTile(t *testing.T) {
	for _, name := range []string{"UTC", "Europe/Berlin", "America/New_York", "America/Santiago", "Australia/Lord_Howe", "Asia/Kathmandu"} {
		loc := mustZone(t, name)
		for p := Hour; p <= Year; p++ {
			from := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
			_, prevEnd := p.Bounds(from, loc)
			for at := from; at.Before(from.Add(2 * 366 * 24 * time.Hour)); at = at.Add(17 * time.Minute) {
				start, end := p.Bounds(at, loc)
				require.True(t, !start.After(at) && at.Before(end), "%s %s: %v not in [%v, %v)", name, p, at, start, end)
				require.True(t, start.Equal(prevEnd) || end.Equal(prevEnd), "%s %s at %v: [%v, %v) after a period that ended %v", name, p, at, start, end, prevEnd)
				prevEnd = end
			}
		}
	}
}

func TestPeriodBoundsAllocs(t *testing.T) {
	loc := mustZone(t, "Europe/Berlin")
	now := time.Now()
	n := testing.AllocsPerRun(100, func() {
		for p := Hour; p <= Year; p++ {
			p.Bounds(now, loc)
		}
	})
	assert.Zero(t, n)
}
