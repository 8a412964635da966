package writefence_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
)

// keyRecordingWriter is a MemStore that declares a BlobWriter, which
// records the keys it was asked to write.
type keyRecordingWriter struct {
	*writefence.MemStore
	wrote []string
}

func (s *keyRecordingWriter) Capabilities() writefence.ConditionalStore { return s }

func (s *keyRecordingWriter) WriteBlob(ctx context.Context, key string, r io.Reader) (int64, error) {
	s.wrote = append(s.wrote, key)
	info, err := s.MemStore.CreateBlob(ctx, key, r)
	return info.Size, err
}

// TestWriteBlob: WriteBlob writes through the store's BlobWriter when the
// store declares one, else through CreateBlob, whose refusal it returns,
// and returns the size the store holds; a store that holds no blobs is
// unsupported.
func TestWriteBlob(t *testing.T) {
	ctx := t.Context()

	w := &keyRecordingWriter{MemStore: &writefence.MemStore{}}
	n, err := writefence.WriteBlob(ctx, w, "k", strings.NewReader("seven b"))
	require.NoError(t, err)
	assert.EqualValues(t, 7, n)
	assert.Equal(t, []string{"k"}, w.wrote, "through the BlobWriter")

	mem := &writefence.MemStore{}
	n, err = writefence.WriteBlob(ctx, mem, "k", strings.NewReader("five!"))
	require.NoError(t, err)
	assert.EqualValues(t, 5, n)
	info, err := mem.StatBlob(ctx, "k")
	require.NoError(t, err)
	assert.EqualValues(t, 5, info.Size, "through CreateBlob")
	_, err = writefence.WriteBlob(ctx, mem, "k", strings.NewReader("again"))
	require.ErrorIs(t, err, writefence.ErrConflict, "CreateBlob's refusal")

	hidden := fakestore.New(mem, fakestore.Options{Hide: fakestore.Declared})
	_, err = writefence.WriteBlob(ctx, hidden, "other", strings.NewReader("x"))
	require.ErrorIs(t, err, errors.ErrUnsupported)
}
