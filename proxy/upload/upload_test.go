package upload

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/upstream"
)

func TestReaderPassesTheBodyThrough(t *testing.T) {
	var b Reader
	b.Reset([]byte("head,"), strings.NewReader("rest"), 9, 0)
	got, err := io.ReadAll(&b)
	require.NoError(t, err)
	assert.Equal(t, "head,rest", string(got))
	assert.NoError(t, b.Fault())
}

func TestReaderFaults(t *testing.T) {
	var cbe *upstream.ClientBodyError
	var b Reader
	b.Reset([]byte("head,"), strings.NewReader("rest"), 8, 0)
	_, err := io.ReadAll(&b)
	require.ErrorAs(t, err, &cbe, "the pool must not count it against the target")
	assert.ErrorIs(t, b.Fault(), ErrTooLarge)

	broken := errors.New("connection reset")
	b.Reset(nil, io.MultiReader(strings.NewReader("a"), &failing{broken}), 100, 0)
	_, err = io.ReadAll(&b)
	require.ErrorAs(t, err, &cbe)
	assert.ErrorIs(t, b.Fault(), broken)

	b.Reset(nil, strings.NewReader("late"), 100, time.Nanosecond)
	time.Sleep(time.Millisecond)
	_, err = io.ReadAll(&b)
	require.ErrorAs(t, err, &cbe)
	var ne net.Error
	require.ErrorAs(t, b.Fault(), &ne)
	assert.True(t, ne.Timeout(), "a trickling upload is the client's timeout")
}

type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }
