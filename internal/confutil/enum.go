package confutil

import (
	"fmt"
	"strings"
)

// UnmarshalName is the UnmarshalText of an enum that the configuration
// spells by name: text is a name parse reads, or empty, which sets the zero
// value (the default, or none) as an absent key does. parse is the enum's
// one parser, so decoding and validation say the same of a bad name.
func UnmarshalName[T any](p *T, text []byte, parse func(string) (T, error)) error {
	if len(text) == 0 {
		var zero T
		*p = zero
		return nil
	}
	v, err := parse(string(text))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// OneOf returns the value of values that name spells, for the parser of a
// string enum; its error says `"name" is not one of a, b, c`.
func OneOf[T ~string](name string, values ...T) (T, error) {
	if v, ok := find(name, values); ok {
		return v, nil
	}
	return "", fmt.Errorf("%q is not one of %s", name, join(values, ", ", ", "))
}

// OneOfWords is OneOf whose error says `"name" is not a, b or c`.
func OneOfWords[T ~string](name string, values ...T) (T, error) {
	if v, ok := find(name, values); ok {
		return v, nil
	}
	return "", fmt.Errorf("%q is not %s", name, join(values, ", ", " or "))
}

func find[T ~string](name string, values []T) (T, bool) {
	for _, v := range values {
		if string(v) == name {
			return v, true
		}
	}
	return "", false
}

// join writes values apart by sep, the last two by last.
func join[T ~string](values []T, sep, last string) string {
	var b strings.Builder
	for i, v := range values {
		switch {
		case i == 0:
		case i == len(values)-1:
			b.WriteString(last)
		default:
			b.WriteString(sep)
		}
		b.WriteString(string(v))
	}
	return b.String()
}
