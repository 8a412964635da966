package writefence_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestMemStoreOwnPromises: what MemStore's documentation promises beyond
// the ConditionalStore contract (the conformance suite runs on it in
// writefencetest): a version never repeats within a store, a key deleted
// and written again included; Get and PutIfVersion copy the bytes; Clock
// gives every blob's Modified.
func TestMemStoreOwnPromises(t *testing.T) {
	ctx := t.Context()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := &writefence.MemStore{Clock: func() time.Time { return at }}

	data := []byte("first")
	v1, err := m.PutIfVersion(ctx, "k", data, "")
	require.NoError(t, err)
	data[0] = 'F'
	got, _, err := m.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "first", string(got), "the bytes written were copied")
	got[0] = 'X'
	again, _, err := m.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "first", string(again), "the bytes read were copied")

	require.NoError(t, m.Delete(ctx, "k"))
	v2, err := m.PutIfVersion(ctx, "k", []byte("second"), "")
	require.NoError(t, err)
	assert.NotEqual(t, v1, v2, "a key written again has a new version")
	_, err = m.PutIfVersion(ctx, "k", []byte("third"), v1)
	require.ErrorIs(t, err, writefence.ErrConflict, "the first version is not the second")

	info, err := m.CreateBlob(ctx, "b", strings.NewReader("blob"))
	require.NoError(t, err)
	assert.Equal(t, at, info.Modified)
	info, err = m.StatBlob(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, at, info.Modified)
	assert.Equal(t, at, listBlobs(t, m, "")["b"].Modified)
}
