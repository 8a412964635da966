package testserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"cloud.google.com/go/storage"
	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"
)

// Fault is damage done to a stored value from outside the store: a disk
// fault, a hand edit, a program that writes the object directly.
type Fault struct {
	// Flip is the index, in the data as the store's Get returns it, of the
	// byte whose lowest bit flips; it is taken modulo the data's length.
	Flip int

	// Empty leaves the key holding nothing at all instead: a file
	// truncated to zero bytes, a Valkey value set to "", an empty object.
	Empty bool
}

// Damager does a Fault to the value at key, bypassing the store's
// conditional write. A store that keeps its version beside the data keeps
// it: the damage is in place.
type Damager func(ctx context.Context, key string, f Fault) error

// Apply returns data with f's byte flipped, or nothing when f empties it.
func (f Fault) Apply(data []byte) []byte {
	if f.Empty {
		return []byte{}
	}
	c := append([]byte(nil), data...)
	if len(c) > 0 {
		c[(f.Flip%len(c)+len(c))%len(c)] ^= 1
	}
	return c
}

// rawStore is the core of a ConditionalStore, for a store that has no
// raw access of its own: a Fault there is an overwrite at whatever version
// the key holds (a store whose version changes with any write, such as
// MemStore, cannot be damaged in place).
type rawStore interface {
	Get(ctx context.Context, key string) ([]byte, string, error)
	PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error)
}

// DamageByOverwrite damages keys of s by overwriting them with the damaged
// bytes, conditioned on the version read.
func DamageByOverwrite(s rawStore) Damager {
	return func(ctx context.Context, key string, f Fault) error {
		data, v, err := s.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("damage %s: %w", key, err)
		}
		_, err = s.PutIfVersion(ctx, key, f.Apply(data), v)
		return err
	}
}

// Directory store object files: a 31-byte header (magic, format version,
// token, key length at 21, data length at 23), the key, the data, a
// CRC-32C. See DirConditionalStore.
const dirFileHeader = 31

// DirObjectFile returns the file of key in the directory store at dir.
func DirObjectFile(dir, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(dir, "objects", hex.EncodeToString(sum[:]))
}

// DamageDir damages the directory store at dir in place: a flip changes
// one byte of the key's data inside its file, leaving the file's header,
// token and checksum as they were; Empty truncates the file to zero bytes.
func DamageDir(dir string) Damager {
	return func(_ context.Context, key string, f Fault) error {
		path := DirObjectFile(dir, key)
		if f.Empty {
			return os.Truncate(path, 0)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(b) < dirFileHeader {
			return fmt.Errorf("damage %s: the file holds no header", key)
		}
		start := dirFileHeader + int(binary.BigEndian.Uint16(b[21:]))
		n := int(binary.BigEndian.Uint64(b[23:]))
		if n == 0 || start+n > len(b) {
			return fmt.Errorf("damage %s: no data to flip", key)
		}
		copy(b[start:start+n], f.Apply(b[start:start+n]))
		return os.WriteFile(path, b, 0o600)
	}
}

// valkeyHeader is what precedes the data in a Valkey store's value: the
// 100-byte header of its layout ("WFV2" first), or the 72 bytes of the
// first layout (a digest and a token).
func valkeyHeader(v []byte) int {
	if bytes.HasPrefix(v, []byte("WFV2")) {
		return 100
	}
	return 72
}

// DamageValkey damages values of the Valkey store on c in place: a flip
// changes one byte of the data with SETRANGE, leaving the header; Empty
// sets the value to "".
func DamageValkey(c redis.UniversalClient) Damager {
	return func(ctx context.Context, key string, f Fault) error {
		if f.Empty {
			return c.Set(ctx, key, "", 0).Err()
		}
		v, err := c.Get(ctx, key).Bytes()
		if err != nil {
			return err
		}
		h := valkeyHeader(v)
		if len(v) <= h {
			return fmt.Errorf("damage %s: no data to flip", key)
		}
		i := h + (f.Flip%(len(v)-h)+len(v)-h)%(len(v)-h)
		return c.SetRange(ctx, key, int64(i), string([]byte{v[i] ^ 1})).Err()
	}
}

// DamageS3 damages objects of bucket on c by writing the damaged bytes
// over them unconditionally, as a program that writes the object directly
// would; the object gets a new ETag.
func DamageS3(c *minio.Client, bucket string) Damager {
	return func(ctx context.Context, key string, f Fault) error {
		data, err := readAll(c.GetObject(ctx, bucket, key, minio.GetObjectOptions{}))
		if err != nil {
			return err
		}
		d := f.Apply(data)
		_, err = c.PutObject(ctx, bucket, key, bytes.NewReader(d), int64(len(d)), minio.PutObjectOptions{})
		return err
	}
}

// DamageGCS damages objects of bucket on c by writing the damaged bytes
// over them unconditionally; the object gets a new generation.
func DamageGCS(c *storage.Client, bucket string) Damager {
	return func(ctx context.Context, key string, f Fault) error {
		obj := c.Bucket(bucket).Object(key)
		data, err := readAll(obj.NewReader(ctx))
		if err != nil {
			return err
		}
		w := obj.NewWriter(ctx)
		if _, err := w.Write(f.Apply(data)); err != nil {
			_ = w.Close()
			return err
		}
		return w.Close()
	}
}

// readAll reads r whole and closes it; err is the error of opening it,
// which it returns instead.
func readAll(r io.ReadCloser, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
