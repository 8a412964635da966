package writefence

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestNewRefs: a commit's new references are those of its manifest the
// recorded one does not hold as they are: a reference replaced where it
// stands, or with another size or checksum, is new.
func TestNewRefs(t *testing.T) {
	a, b, c := BlobRef{Name: "a", Size: 1, CRC: 1}, BlobRef{Name: "b", Size: 2, CRC: 2}, BlobRef{Name: "c", Size: 3, CRC: 3}
	resized := a
	resized.Size++
	for _, tc := range []struct {
		name          string
		current, next []BlobRef
		want          []BlobRef
	}{
		{"none recorded", nil, []BlobRef{a, b}, []BlobRef{a, b}},
		{"one appended", []BlobRef{a, b}, []BlobRef{a, b, c}, []BlobRef{c}},
		{"one dropped", []BlobRef{a, b}, []BlobRef{b}, nil},
		{"replaced where it stands", []BlobRef{a, b}, []BlobRef{c, b}, []BlobRef{c}},
		{"another size", []BlobRef{a}, []BlobRef{resized}, []BlobRef{resized}},
	} {
		assert.Equal(t, tc.want, newRefs(tc.current, tc.next), tc.name)
	}
}

// TestOnlyDamage: an error is damage alone when it, or every error it
// joins, matches ErrCorrupt.
func TestOnlyDamage(t *testing.T) {
	corrupt := &CorruptError{Key: "k", Check: "checksum"}
	other := errors.New("network")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"corrupt", corrupt, true},
		{"wrapped", fmt.Errorf("read: %w", corrupt), true},
		{"another error", other, false},
		{"joined, all corrupt", errors.Join(corrupt, fmt.Errorf("x: %w", ErrCorrupt)), true},
		{"joined, one not", errors.Join(corrupt, other), false},
		{"nested joins", errors.Join(corrupt, errors.Join(corrupt, other)), false},
	} {
		assert.Equal(t, tc.want, onlyDamage(tc.err), tc.name)
	}
}

// TestManifestClone: a clone is equal to its manifest and shares none of
// its memory, so a manifest function that edits its argument in place
// leaves the recorded manifest as it was.
func TestManifestClone(t *testing.T) {
	m := Manifest{Payload: []byte("payload"), Blobs: []BlobRef{{Name: "a", Size: 1, CRC: 1}}}
	c := m.clone()
	assert.True(t, m.equal(c))
	c.Payload[0] = 'P'
	c.Blobs[0].Size = 2
	assert.False(t, m.equal(c))
	assert.Equal(t, "payload", string(m.Payload))
	assert.Equal(t, int64(1), m.Blobs[0].Size)
}
