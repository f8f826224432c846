package config

import (
	"reflect"
	"strings"
)

// Key is one key of the configuration as the walk over Config meets
// it.
type Key struct {
	// Name is the dotted YAML name: server.listen, upstreams.NAME.targets,
	// rules[].limit, with the walk's placeholders for map names and list
	// items.
	Name string
	// Type is the key's type, pointers removed.
	Type reflect.Type
	// Value is the key's value when the walk has one (walkValue), invalid
	// for a walk over types, a nil pointer, or the entries of a map or list.
	Value reflect.Value
	// Section is true for a struct whose fields are keys of their own.
	Section bool
	// Entries is true for a map or list of structs: its entries' fields are
	// keys, named with the walk's placeholders.
	Entries bool
}

// KeyWalk walks the keys of a configuration struct by its mapstructure tags,
// in field order, a section before its keys: the one place that knows how a
// Go field becomes a YAML key (its tag, or its lower-cased name; squashed
// structs add their keys to the parent; a type that decodes from text, and
// time's types, are single values). Environment names, unknown-key
// suggestions, reload diffs and the configuration doc's test all list keys
// with it.
type KeyWalk struct {
	// MapName and ListItem name a map's entries and a list's items in the
	// keys below them: ".*" and "[*]" for suggestions, ".NAME" and "[]" in
	// the docs.
	MapName, ListItem string
	// Visit is called for every key; for a section or the entries of a map
	// or list it returns whether to walk the keys below it.
	Visit func(k Key) (descend bool)
}

// WalkType visits the keys of t under prefix.
func (w KeyWalk) WalkType(t reflect.Type, prefix string) {
	w.walk(t, reflect.Value{}, prefix)
}

// WalkValue visits the keys of v under prefix, each with its value.
func (w KeyWalk) WalkValue(v reflect.Value, prefix string) {
	w.walk(v.Type(), v, prefix)
}

func (w KeyWalk) walk(t reflect.Type, v reflect.Value, prefix string) {
	t, v = deref(t, v)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, squash, ok := FieldKey(f)
		if !ok {
			continue
		}
		var fv reflect.Value
		if v.IsValid() {
			fv = v.Field(i)
		}
		if squash {
			w.walk(f.Type, fv, prefix)
			continue
		}
		w.key(f.Type, fv, joinKey(prefix, tag))
	}
}

func (w KeyWalk) key(t reflect.Type, v reflect.Value, name string) {
	t, v = deref(t, v)
	k := Key{Name: name, Type: t, Value: v}
	switch {
	case isSection(t):
		k.Section = true
		if w.Visit(k) {
			w.walk(t, v, name)
		}
	case t.Kind() == reflect.Map && isSection(t.Elem()):
		k.Entries = true
		if w.Visit(k) {
			w.WalkType(t.Elem(), name+w.MapName)
		}
	case t.Kind() == reflect.Slice && isSection(t.Elem()):
		k.Entries = true
		if w.Visit(k) {
			w.WalkType(t.Elem(), name+w.ListItem)
		}
	default:
		w.Visit(k)
	}
}

// deref follows pointers in t and, while it is not nil, in v.
func deref(t reflect.Type, v reflect.Value) (reflect.Type, reflect.Value) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
		if v.IsValid() {
			if v.IsNil() {
				v = reflect.Value{}
			} else {
				v = v.Elem()
			}
		}
	}
	return t, v
}

// isSection reports whether t is a struct whose fields are keys: not one of
// time's types and not a type that decodes from text.
func isSection(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t.PkgPath() != "time" && !implementsTextUnmarshaler(t)
}

func implementsTextUnmarshaler(t reflect.Type) bool {
	return reflect.PointerTo(t).Implements(reflect.TypeFor[interface{ UnmarshalText([]byte) error }]())
}

// FieldKey is the mapstructure key of f (its lower-cased name when the tag
// gives none), whether f is squashed into its parent, and false for fields
// that have no key (unexported, or tagged "-").
func FieldKey(f reflect.StructField) (key string, squash, ok bool) {
	if !f.IsExported() {
		return "", false, false
	}
	tag, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
	switch {
	case tag == "-":
		return "", false, false
	case opts == "squash":
		return "", true, true
	case tag == "":
		tag = strings.ToLower(f.Name)
	}
	return tag, false, true
}

func joinKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// LeafKeys lists the keys of t under prefix that hold a value (a map or a
// list counts as one value under its key).
func LeafKeys(t reflect.Type, prefix string) []string {
	var keys []string
	KeyWalk{Visit: func(k Key) bool {
		if !k.Section {
			keys = append(keys, k.Name)
		}
		return k.Section
	}}.WalkType(t, prefix)
	return keys
}

// KnownKeys lists every key of t: sections, values, and the keys of map
// entries and list items under "*" and "[*]".
func KnownKeys(t reflect.Type) []string {
	var keys []string
	KeyWalk{MapName: ".*", ListItem: "[*]", Visit: func(k Key) bool {
		keys = append(keys, k.Name)
		return true
	}}.WalkType(t, "")
	return keys
}
