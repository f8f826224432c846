package confutil

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type color string

func parseColor(name string) (color, error) {
	return OneOf(name, color("red"), color("green"), color("blue"))
}

func (c *color) UnmarshalText(text []byte) error { return UnmarshalName(c, text, parseColor) }

func (c *color) UnmarshalJSON(b []byte) error { return UnmarshalJSONText(b, c) }

// TestEnumNames: a name decodes, empty text is the zero value, and a bad
// name says what is allowed, in YAML's text and in JSON, where the field is
// named and TextError gives the parser's words back.
func TestEnumNames(t *testing.T) {
	var c color
	require.NoError(t, c.UnmarshalText([]byte("green")))
	assert.Equal(t, color("green"), c)
	require.NoError(t, c.UnmarshalText(nil))
	assert.Equal(t, color(""), c)
	assert.EqualError(t, c.UnmarshalText([]byte("pink")), `"pink" is not one of red, green, blue`)
	_, err := OneOfWords("pink", color("red"), color("green"), color("blue"))
	assert.EqualError(t, err, `"pink" is not red, green or blue`)

	var v struct {
		Color color `json:"color"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"color":"blue"}`), &v))
	assert.Equal(t, color("blue"), v.Color)
	var typ *json.UnmarshalTypeError
	require.ErrorAs(t, json.Unmarshal([]byte(`{"color":"pink"}`), &v), &typ)
	assert.Equal(t, "color", typ.Field)
	assert.EqualError(t, TextError(typ.Type, typ.Value), `"pink" is not one of red, green, blue`)
	require.ErrorAs(t, json.Unmarshal([]byte(`{"color":5}`), &v), &typ)
	assert.Equal(t, "color", typ.Field)
	assert.Equal(t, reflect.TypeFor[string](), typ.Type, "a non-string is the error of a string field")
	assert.NoError(t, TextError(typ.Type, typ.Value))
}
