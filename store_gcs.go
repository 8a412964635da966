package writefence

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"net/http"
	"strconv"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
)

// GCSConditionalStore is a ConditionalStore over one Google Cloud Storage
// bucket. The version token is the object's generation in decimal; the
// conditional write is a generation precondition decided by the server.
//
// Errors: every failure is a *StoreError whose Err reaches the client's
// error (a *googleapi.Error for an answer of the server, with its Code). A
// 412 matches ErrConflict; a 401 or a 403 matches fs.ErrPermission: the
// request was refused and did nothing, and a Fence does not retry it. A
// 429 is transient (see gcsError).
//
// MaxObjectSize is the read limit of Get in bytes; zero (or less) means
// defaultMaxObjectSize. It is read without locking and must be set before
// first use.
type GCSConditionalStore struct {
	MaxObjectSize int64

	client *storage.Client
	bucket string
}

var _ ConditionalStore = (*GCSConditionalStore)(nil)

var _ Capable = (*GCSConditionalStore)(nil)

// Capabilities implements Capable: the store's PrefixReader and
// PartsPutter are its own.
func (s *GCSConditionalStore) Capabilities() ConditionalStore { return s }

// NewGCSConditionalStore returns a store that keeps its objects in bucket,
// using the caller's client. The bucket must exist; the store never creates
// or configures it.
//
// Server requirements: the JSON API's ifGenerationMatch and
// ifGenerationMatch=0 (does-not-exist) preconditions on object inserts,
// answered with HTTP 412 when they fail, and an x-goog-generation header on
// reads. Cloud Storage has both; so does fake-gcs-server, when started with
// -public-host set to its own address so the client's XML reads reach it.
// Object versioning and retention policies on the bucket are not needed and
// do not change the protocol; a bucket lifecycle rule that deletes objects
// would delete records, so do not set one on the records' prefix.
//
// Retries follow the client's configuration (Client.SetRetry). Reads are
// retried by the client; writes are not, see PutIfVersion.
func NewGCSConditionalStore(client *storage.Client, bucket string) *GCSConditionalStore {
	return &GCSConditionalStore{client: client, bucket: bucket}
}

// Get implements ConditionalStore. The bytes and the generation come from
// one reader, and so from one server response: the client pins any reopen
// of a broken download to the generation of the first response.
func (s *GCSConditionalStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	limit := readLimit(s.MaxObjectSize)
	// ReadCompressed: the stored bytes as they are, so the size the server
	// reports is the size we read.
	r, err := s.client.Bucket(s.bucket).Object(key).ReadCompressed(true).NewReader(ctx)
	if err != nil {
		return nil, "", gcsError("get", key, err)
	}
	defer r.Close()
	// Refuse before reading when the server already says it is too big.
	if r.Attrs.Size > limit {
		return nil, "", tooLarge("gcs get", key, limit)
	}
	// The reported size may be absent (-1); one byte past the limit is
	// enough to tell.
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, "", gcsError("get", key, err)
	}
	if int64(len(data)) > limit {
		return nil, "", tooLarge("gcs get", key, limit)
	}
	gen := r.Attrs.Generation
	if gen <= 0 {
		return nil, "", storeErr("gcs get", key, nil, errNoGeneration)
	}
	return data, strconv.FormatInt(gen, 10), nil
}

var _ PrefixReader = (*GCSConditionalStore)(nil)

// GetPrefix implements PrefixReader with one range reader over bytes 0 to
// n-1. The prefix, the generation and the object's total size come from one
// response: the client takes the size from the total of the Content-Range,
// not from the length of the range.
//
// An empty object has no byte 0 to range over and the server may answer
// 416; GetPrefix then opens one unranged reader and reads at most n bytes of
// it, so a key rewritten in between is still read from a single response.
// As Get, it refuses an object larger than the read limit, here without
// reading its body.
func (s *GCSConditionalStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", invalidArg("n", "%d, must be at least 1", n)
	}
	obj := s.client.Bucket(s.bucket).Object(key).ReadCompressed(true)
	r, err := obj.NewRangeReader(ctx, 0, n)
	var gerr *googleapi.Error
	if err != nil && errors.As(err, &gerr) && gerr.Code == http.StatusRequestedRangeNotSatisfiable {
		r, err = obj.NewReader(ctx)
	}
	if err != nil {
		return nil, 0, "", gcsError("get", key, err)
	}
	defer r.Close()
	size := r.Attrs.Size
	if size < 0 {
		return nil, 0, "", storeErr("gcs get", key, nil, errors.New("the server sent no object size"))
	}
	if limit := readLimit(s.MaxObjectSize); size > limit {
		return nil, 0, "", tooLarge("gcs get", key, limit)
	}
	prefix, err := io.ReadAll(io.LimitReader(r, n))
	if err != nil {
		return nil, 0, "", gcsError("get", key, err)
	}
	if want := min(n, size); int64(len(prefix)) != want {
		return nil, 0, "", storeErr("gcs get", key, nil,
			fmt.Errorf("read %d bytes of the first %d of a %d-byte object", len(prefix), want, size))
	}
	gen := r.Attrs.Generation
	if gen <= 0 {
		return nil, 0, "", storeErr("gcs get", key, nil, errNoGeneration)
	}
	return prefix, size, strconv.FormatInt(gen, 10), nil
}

// PutIfVersion implements ConditionalStore. An empty expectVersion is sent as
// ifGenerationMatch=0 (Conditions.DoesNotExist: the client refuses a
// GenerationMatch of 0), a token as ifGenerationMatch=<generation>. A token
// that is not a generation in its canonical form (a positive decimal
// integer) was never issued and cannot equal the current version: it
// returns an error matching ErrConflict and sends nothing.
//
// The object goes up in one multipart request (Writer.ChunkSize 0), never
// as a resumable session. With ChunkSize 0 the client streams the body
// without buffering it, so it cannot resend it and does not retry the
// write, although it classes a write with a precondition as idempotent and
// would otherwise retry it. Were a write retried after its first attempt
// landed, the retry would fail its own precondition: the caller would see
// ErrConflict for a write that happened, which the fence resolves by reading
// the record afresh. A 429 is returned as a *StoreError that says the
// request was rate limited (see gcsError).
func (s *GCSConditionalStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.PutPartsIfVersion(ctx, key, [][]byte{data}, expectVersion)
}

var _ PartsPutter = (*GCSConditionalStore)(nil)

// PutPartsIfVersion implements PartsPutter: the parts are written one after
// the other to one upload, with the preconditions of PutIfVersion, and
// never copied.
func (s *GCSConditionalStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (string, error) {
	conds, err := gcsConditions(key, expectVersion)
	if err != nil {
		return "", err
	}
	w := s.client.Bucket(s.bucket).Object(key).If(conds).NewWriter(ctx)
	w.ChunkSize = 0
	// A fixed content type: the client would otherwise sniff the body.
	w.ContentType = "application/octet-stream"
	// The server checks the checksum before it commits, so a body damaged
	// on the way is refused instead of stored.
	var sum uint32
	for _, p := range parts {
		sum = crc32.Update(sum, castagnoli, p) // CRC-32C, the checksum Cloud Storage uses
	}
	w.CRC32C = sum
	w.SendCRC32C = true
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			_ = w.Close()
			return "", gcsError("put", key, err)
		}
	}
	if err := w.Close(); err != nil {
		return "", gcsError("put", key, err)
	}
	attrs := w.Attrs()
	if attrs == nil || attrs.Generation <= 0 {
		return "", storeErr("gcs put", key, nil, errNoGeneration)
	}
	return strconv.FormatInt(attrs.Generation, 10), nil
}

var _ Deleter = (*GCSConditionalStore)(nil)

// Delete implements Deleter. It deletes the live object unconditionally; a
// missing object is not an error.
func (s *GCSConditionalStore) Delete(ctx context.Context, key string) error {
	err := s.client.Bucket(s.bucket).Object(key).Delete(ctx)
	if err == nil || errors.Is(err, storage.ErrObjectNotExist) {
		return nil
	}
	return gcsError("delete", key, err)
}

// gcsConditions maps a version token to the precondition of a write of
// key. A token of no form the store issues is a failed precondition.
func gcsConditions(key, expectVersion string) (storage.Conditions, error) {
	if expectVersion == "" {
		return storage.Conditions{DoesNotExist: true}, nil
	}
	g, err := strconv.ParseInt(expectVersion, 10, 64)
	// The canonical form only: "+1" or "01" were never handed out.
	if err != nil || g <= 0 || strconv.FormatInt(g, 10) != expectVersion {
		return storage.Conditions{}, storeErr("gcs put", key, ErrConflict,
			fmt.Errorf("%s is not a gcs object generation (a positive decimal integer)", esc(expectVersion)))
	}
	return storage.Conditions{GenerationMatch: g}, nil
}

var errNoGeneration = errors.New("the server sent no object generation")

// gcsError classifies an error from the client. A missing object is
// ErrNotFound only for a read: for a delete the caller handles it, and a
// write with a precondition is answered 412, never 404.
//
// A 401 or a 403 refuses the caller's credentials or their rights: it
// matches fs.ErrPermission, the request was not carried out, and sending it
// again will be refused again.
//
// A 429 is neither ErrConflict nor ErrNotFound: Cloud Storage allows about
// one update per second to one object and throttles a writer pushing faster
// than that to one shard. The request was refused, not decided, and the
// same call may be retried after a backoff of a second or more (a Fence
// does, as for any transient failure); the message says so.
//
// In every case the client's *googleapi.Error, with its Code, stays
// reachable with errors.As.
func gcsError(op, key string, err error) error {
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		switch gerr.Code {
		case http.StatusPreconditionFailed:
			return storeErr("gcs "+op, key, ErrConflict, err)
		case http.StatusUnauthorized, http.StatusForbidden:
			return storeErr("gcs "+op, key, fs.ErrPermission, err)
		case http.StatusTooManyRequests:
			return storeErr("gcs "+op, key, nil, fmt.Errorf("rate limited (http 429), retry after a backoff: %w", err))
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if op == "get" && errors.Is(err, storage.ErrObjectNotExist) {
		return storeErr("gcs "+op, key, ErrNotFound, err)
	}
	return storeErr("gcs "+op, key, nil, err)
}

var _ Lister = (*GCSConditionalStore)(nil)

// List implements Lister with the bucket's object listing under prefix, in
// the server's (lexical) order.
func (s *GCSConditionalStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	it := s.client.Bucket(s.bucket).Objects(ctx, &storage.Query{Prefix: prefix, Projection: storage.ProjectionNoACL})
	for {
		// The iterator hands out a fetched page without looking at ctx.
		if err := ctx.Err(); err != nil {
			return err
		}
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return ctx.Err()
		}
		if err != nil {
			return gcsError("list", prefix, err)
		}
		if err := fn(attrs.Name); err != nil {
			return err
		}
	}
}
