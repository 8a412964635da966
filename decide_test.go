package writefence

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// TestDecide: the decision of a write over one read of the record, a pure
// function of what was read: write (and what), done (the write is found
// landed), or a refusal. The tenure floor a write hands on rises with a
// change of writer and starts at a seal's epoch; a manifest that names a
// blob twice is refused before its blobs are checked.
func TestDecide(t *testing.T) {
	ref := BlobRef{Name: keys.BlobName(1, "a", strings.Repeat("0", 32)), Size: 1, CRC: 1}
	recorded := func(identity, writer string, epoch uint64, b record.Body) *snapshot {
		data := wholeRecord(identity, writer, epoch, b)
		return &snapshot{found: true, whole: true, version: "v", data: data, size: int64(len(data))}
	}
	ours := func(writer string, epoch uint64, b record.Body) *snapshot {
		return recorded(defaultIdentity, writer, epoch, b)
	}
	push := func(p string) pushWrite { return pushWrite{payload: []byte(p), sum: record.CRC32C([]byte(p))} }
	keep := updateWrite{fn: func(m Manifest) (Manifest, error) { return m, nil }}
	twice := commitWrite{
		updateWrite: updateWrite{fn: func(m Manifest) (Manifest, error) { m.Blobs = []BlobRef{ref, ref}; return m, nil }},
		check: func([]BlobRef, []BlobRef, uint64, int64, string) error {
			t.Error("the blobs of a manifest that names one twice were checked")
			return nil
		},
	}
	stream := record.Body{Payload: []byte("old"), Refs: []BlobRef{ref}, Since: 2, Stream: true}
	damaged := ours("a", 3, record.Body{Payload: []byte("old")})
	damaged.data[len(damaged.data)-1] ^= 1

	for _, tc := range []struct {
		name      string
		read      *snapshot
		writer    string
		epoch     uint64
		w         recordWrite
		newTenure bool
		err       error // the refusal, matched with errors.Is
		done      bool
		want      record.Body // the body to write, when neither
	}{
		{name: "no record", read: &snapshot{}, writer: "a", epoch: 5, w: push("x"),
			want: record.Body{Payload: []byte("x")}},
		{name: "over a lower epoch", read: ours("b", 3, record.Body{Payload: []byte("old")}), writer: "a", epoch: 5, w: push("x"),
			want: record.Body{Payload: []byte("x")}},
		{name: "the push, landed", read: ours("a", 5, record.Body{Payload: []byte("x")}), writer: "a", epoch: 5, w: push("x"),
			done: true},
		{name: "another push at its epoch", read: ours("a", 5, record.Body{Payload: []byte("y")}), writer: "a", epoch: 5, w: push("x"),
			err: ErrStaleEpoch},
		{name: "another writer at its epoch", read: ours("b", 5, record.Body{Payload: []byte("x")}), writer: "a", epoch: 5, w: push("x"),
			err: ErrStaleEpoch},
		{name: "a higher epoch", read: ours("a", 7, record.Body{Payload: []byte("x")}), writer: "a", epoch: 5, w: push("x"),
			err: ErrStaleEpoch},
		{name: "an update next leaves as it is, landed", read: ours("a", 5, record.Body{Payload: []byte("x")}), writer: "a", epoch: 5, w: keep,
			done: true},
		{name: "a stream's record, same writer: the floor stays", read: ours("a", 3, stream), writer: "a", epoch: 5, w: push("x"),
			want: record.Body{Payload: []byte("x"), Refs: []BlobRef{ref}, Since: 2, Stream: true}},
		{name: "a stream's record, another writer: the floor rises", read: ours("b", 3, stream), writer: "a", epoch: 5, w: push("x"),
			want: record.Body{Payload: []byte("x"), Refs: []BlobRef{ref}, Since: 4, Stream: true}},
		{name: "a seal: the floor is its epoch", read: ours("a", 3, stream), writer: "a", epoch: 5, w: keep, newTenure: true,
			want: record.Body{Payload: []byte("old"), Refs: []BlobRef{ref}, Since: 5, Stream: true}},
		{name: "a blob named twice", read: &snapshot{}, writer: "a", epoch: 5, w: twice,
			err: ErrInvalidArgument},
		{name: "a damaged record", read: damaged, writer: "a", epoch: 5, w: push("x"),
			err: ErrCorrupt},
		{name: "another wire identity", read: recorded("other/v1", "b", 3, record.Body{}), writer: "a", epoch: 5, w: push("x"),
			err: ErrWire},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := (&Fence{Store: &MemStore{}}).newUpdate(opPush, "wal", "0", tc.writer, tc.epoch)
			require.NoError(t, err)
			u.w, u.newTenure = tc.w, tc.newTenure
			parts, done, body, err := u.decide(tc.read)
			switch {
			case tc.err != nil:
				require.ErrorIs(t, err, tc.err)
				assert.Nil(t, parts)
			case tc.done:
				require.NoError(t, err)
				assert.True(t, done)
				assert.Nil(t, parts, "nothing to write")
			default:
				require.NoError(t, err)
				assert.False(t, done)
				assert.Equal(t, tc.want, body)
				h, written, check := record.Decode(bytes.Join(parts, nil))
				require.Empty(t, check)
				assert.Equal(t, tc.writer, h.Writer)
				assert.Equal(t, tc.epoch, h.Epoch)
				assert.Equal(t, tc.want, written, "the bytes to write hold the body")
			}
		})
	}
}
