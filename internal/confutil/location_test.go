package confutil

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLocation: a zone decodes once into its *time.Location and keeps its
// name; empty text and the zero value are UTC; a bad name says so.
func TestLocation(t *testing.T) {
	var l Location
	assert.Equal(t, time.UTC, l.Location())
	require.NoError(t, l.UnmarshalText([]byte("Europe/Paris")))
	assert.Equal(t, "Europe/Paris", l.Location().String())
	text, err := l.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "Europe/Paris", string(text))
	require.NoError(t, l.UnmarshalText(nil))
	assert.Equal(t, "UTC", l.String())
	assert.EqualError(t, l.UnmarshalText([]byte("Mars/Base")), `"Mars/Base" is not a time zone such as UTC or Europe/Paris`)
}
