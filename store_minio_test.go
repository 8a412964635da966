package writefence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeS3API serves Get from a body the test controls and counts the bytes
// the adapter pulls from it.
type fakeS3API struct {
	size   int64 // the object's length; the ObjectInfo.Size (Content-Length) unless unknown
	known  bool  // whether the response declares size
	failAt int64 // when positive, the body fails after this many bytes
	pulled atomic.Int64
}

var errInjected = errors.New("connection reset by the test")

func (f *fakeS3API) GetObject(ctx context.Context, bucket, key string, opts minio.GetObjectOptions) (io.ReadCloser, minio.ObjectInfo, http.Header, error) {
	info := minio.ObjectInfo{Key: key, ETag: "e1", Size: -1}
	if f.known {
		info.Size = f.size
	}
	return io.NopCloser(&countingBody{f: f, left: f.size}), info, http.Header{}, nil
}

func (f *fakeS3API) PutObject(context.Context, string, string, io.Reader, int64, string, string, minio.PutObjectOptions) (minio.UploadInfo, error) {
	return minio.UploadInfo{}, errors.New("not used")
}

func (f *fakeS3API) RemoveObject(context.Context, string, string, minio.RemoveObjectOptions) error {
	return errors.New("not used")
}

type countingBody struct {
	f    *fakeS3API
	left int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > b.left {
		n = b.left
	}
	if fa := b.f.failAt; fa > 0 {
		done := b.f.pulled.Load()
		if done >= fa {
			return 0, errInjected
		}
		n = min(n, fa-done)
	}
	clear(p[:n])
	b.left -= n
	b.f.pulled.Add(n)
	return int(n), nil
}

// TestMinioStoreGetLimit checks the read limit at its boundary and that the
// adapter never pulls more than limit+1 bytes, whatever the object's size
// and whether or not the response declares it.
func TestMinioStoreGetLimit(t *testing.T) {
	const limit = 1000
	const huge = 1 << 40 // never materialised: the body is generated on demand
	tests := []struct {
		name      string
		size      int64
		known     bool
		tooLarge  bool
		maxPulled int64
	}{
		{"at limit, declared", limit, true, false, limit},
		{"at limit, undeclared", limit, false, false, limit},
		{"one over, declared", limit + 1, true, true, 0},
		{"one over, undeclared", limit + 1, false, true, limit + 1},
		{"huge, declared", huge, true, true, 0},
		{"huge, undeclared", huge, false, true, limit + 1},
		{"empty", 0, true, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &fakeS3API{size: tt.size, known: tt.known}
			s := &MinioConditionalStore{MaxObjectSize: limit, api: api, bucket: "bucket"}
			data, v, err := s.Get(t.Context(), "k")
			assert.LessOrEqual(t, api.pulled.Load(), tt.maxPulled)
			if !tt.tooLarge {
				require.NoError(t, err)
				assert.Len(t, data, int(tt.size))
				assert.Equal(t, "e1", v)
				return
			}
			require.ErrorIs(t, err, ErrTooLarge)
			var tl *StoreError
			require.ErrorAs(t, err, &tl)
			assert.Equal(t, "k", tl.Key)
			assert.Contains(t, tl.Error(), fmt.Sprintf("more than %d bytes", limit))
		})
	}
}

func TestMinioStoreGetDefaultLimit(t *testing.T) {
	api := &fakeS3API{size: defaultMaxObjectSize + 1, known: true}
	s := &MinioConditionalStore{api: api, bucket: "bucket"}
	_, _, err := s.Get(t.Context(), "k")
	var tl *StoreError
	require.ErrorAs(t, err, &tl)
	assert.Contains(t, tl.Error(), fmt.Sprintf("more than %d bytes", defaultMaxObjectSize))
	assert.Zero(t, api.pulled.Load())
}

// TestMinioStoreGetBodyFailure: a response cut mid-body is an ordinary
// failure that keeps its cause.
func TestMinioStoreGetBodyFailure(t *testing.T) {
	api := &fakeS3API{size: 500, known: true, failAt: 100}
	s := &MinioConditionalStore{api: api, bucket: "bucket"}
	_, _, err := s.Get(t.Context(), "k")
	require.ErrorIs(t, err, errInjected)
	assert.NotErrorIs(t, err, ErrNotFound)
	assert.NotErrorIs(t, err, ErrConflict)
	assert.Equal(t, "writefence: s3 get k: connection reset by the test", err.Error())
}

// TestMinioStoreGetTooLargeOverHTTP serves a body 1000 times the limit and
// counts what the server managed to write before the adapter hung up: the
// limit plus what loopback socket buffers hold, far from the whole body.
func TestMinioStoreGetTooLargeOverHTTP(t *testing.T) {
	const limit = 1 << 20
	const served = 1000 * limit
	for _, declare := range []bool{true, false} {
		t.Run("content-length "+strconv.FormatBool(declare), func(t *testing.T) {
			var written atomic.Int64
			done := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(done)
				w.Header().Set("ETag", `"e1"`)
				w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
				if declare {
					w.Header().Set("Content-Length", strconv.Itoa(served))
				}
				chunk := make([]byte, 32<<10)
				for written.Load() < served {
					n, err := w.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
			}))
			defer srv.Close()
			client, err := minio.New(srv.Listener.Addr().String(), &minio.Options{
				Creds:      credentials.NewStaticV4("AKIAWRITEFENCETEST", "fake-secret", ""),
				Region:     "us-east-1",
				MaxRetries: 1,
			})
			require.NoError(t, err)
			s := NewMinioConditionalStore(client, "bucket")
			s.MaxObjectSize = limit

			_, _, err = s.Get(t.Context(), "k")
			require.ErrorIs(t, err, ErrTooLarge)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the server is still writing: the adapter did not hang up")
			}
			t.Logf("server wrote %d of %d bytes for a limit of %d", written.Load(), served, limit)
			assert.Less(t, written.Load(), int64(64<<20))
		})
	}
}
