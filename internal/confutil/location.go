package confutil

import (
	"fmt"
	"time"
)

// Location is a time zone of the IANA database that the configuration
// spells by name (Europe/Paris). It loads its zone once, when it decodes, so
// that a loaded configuration holds a zone that exists and its users need
// not load it again. The zero Location is UTC.
type Location struct{ loc *time.Location }

// ParseLocation returns the zone of a name, or an error that says it is not
// a zone.
func ParseLocation(name string) (Location, error) {
	loc, err := time.LoadLocation(name)
	if err != nil || name == "" {
		return Location{}, fmt.Errorf("%q is not a time zone such as UTC or Europe/Paris", name)
	}
	return Location{loc}, nil
}

// Location returns the zone (UTC for the zero Location).
func (l Location) Location() *time.Location {
	if l.loc == nil {
		return time.UTC
	}
	return l.loc
}

// String returns the zone's name as the configuration spells it.
func (l Location) String() string { return l.Location().String() }

// MarshalText returns the zone's name.
func (l Location) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText loads the zone of a name; empty text leaves the default
// (UTC), as an absent key does.
func (l *Location) UnmarshalText(text []byte) error {
	return UnmarshalName(l, text, ParseLocation)
}
