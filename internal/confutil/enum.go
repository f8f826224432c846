package confutil

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
