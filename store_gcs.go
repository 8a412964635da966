//go:build !writefence_nogcs && !writefence_nosdk

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

	"github.com/writefence/writefence/internal/record"
)

// gcsStore is a ConditionalStore over one Google Cloud Storage
// bucket. The version token is the object's generation in decimal; the
// conditional write is a generation precondition decided by the server.
//
// Errors: every failure is a *StoreError whose Err reaches the client's
// error (a *googleapi.Error for an answer of the server, with its Code). A
// 412 matches ErrConflict; a 401 or a 403 matches fs.ErrPermission: the
// request was refused and did nothing, and a Fence does not retry it. A
// 429 is transient (see gcsError).
//
// Blobs (BlobStore): each blob is one object, written by CreateBlob in
// one request when it is smaller than 1 MiB, else streamed as a resumable
// upload of BlobPartSize chunks; see CreateBlob. A blob's Modified is its
// object's creation time (the metadata's timeCreated, by the server's
// clock, to the microsecond), the same in CreateBlob, OpenBlob, StatBlob
// and ListBlobs; an answer without it is an error, never a zero time.
//
// MaxObjectSize is the read limit of Get in bytes; zero (or less) means
// 64 MiB + 4 KiB, the largest default payload and a record header. The
// fields are read without locking and must be set before first use.
type gcsStore struct {
	MaxObjectSize int64

	// BlobPartSize is the chunk size in bytes of CreateBlob's resumable
	// upload (the Writer's ChunkSize, which the client rounds up to a
	// multiple of 256 KiB), and so what a blob write holds in memory: one
	// chunk. Zero (or less) means 16 MiB.
	BlobPartSize int64

	client *storage.Client
	bucket string
}

var _ ConditionalStore = (*gcsStore)(nil)

var _ Capable = (*gcsStore)(nil)

// Capabilities implements Capable: the store's PrefixReader, PartsPutter
// and BlobStore are its own.
func (s *gcsStore) Capabilities() ConditionalStore { return s }

// versionNamesBytes declares bytesNamed: a version is the bytes' generation.
func (s *gcsStore) versionNamesBytes() {}

// NewGCSConditionalStore returns a store that keeps its objects in bucket,
// which must exist, using the caller's client. The server must answer the
// JSON API's ifGenerationMatch preconditions (0: does not exist) with HTTP
// 412 and send x-goog-generation on reads, as Cloud Storage does, and
// fake-gcs-server when started with -public-host set to its own address.
// Reads are retried as the client is configured (Client.SetRetry); a write
// is sent once, as a retry of one that landed would fail its own
// precondition.
func NewGCSConditionalStore(client *storage.Client, bucket string, opts *StoreOptions) ConditionalStore {
	return newGCSStore(client, bucket, opts)
}

func newGCSStore(client *storage.Client, bucket string, opts *StoreOptions) *gcsStore {
	s := &gcsStore{client: client, bucket: bucket}
	if opts != nil {
		s.MaxObjectSize, s.BlobPartSize = opts.MaxObjectSize, opts.BlobPartSize
	}
	return s
}

// Get implements ConditionalStore. The bytes and the generation come from
// one reader, and so from one server response: the client pins any reopen
// of a broken download to the generation of the first response.
func (s *gcsStore) Get(ctx context.Context, key string) ([]byte, string, error) {
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

var _ PrefixReader = (*gcsStore)(nil)

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
func (s *gcsStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", storeErr("gcs get", key, nil, invalidArg("n", "%d, must be at least 1", n))
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
func (s *gcsStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.PutPartsIfVersion(ctx, key, [][]byte{data}, expectVersion)
}

var _ PartsPutter = (*gcsStore)(nil)

// PutPartsIfVersion implements PartsPutter: the parts are written one after
// the other to one upload, with the preconditions of PutIfVersion, and
// never copied.
func (s *gcsStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (string, error) {
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
		sum = crc32.Update(sum, record.Castagnoli, p) // CRC-32C, the checksum Cloud Storage uses
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

var _ Deleter = (*gcsStore)(nil)

// Delete implements Deleter. It deletes the live object unconditionally; a
// missing object is not an error.
func (s *gcsStore) Delete(ctx context.Context, key string) error {
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
// ErrNotFound only for a read (a record's or a blob's): for a delete the
// caller handles it, and a write with a precondition is answered 412,
// never 404. A 404 on a write or a listing is a missing bucket, which no
// retry creates: errors.ErrUnsupported. (A read cannot tell one: the
// client answers both as storage.ErrObjectNotExist, so a Push over a
// missing bucket reads no record and ends on its write.)
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
		case http.StatusNotFound:
			if op == "put" || op == "blob create" || op == "list" || op == "blob list" {
				return storeErr("gcs "+op, key, errors.ErrUnsupported,
					fmt.Errorf("the bucket does not exist (create it, as writefence init does): %w", err))
			}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if (op == "get" || op == "blob open" || op == "blob stat") && errors.Is(err, storage.ErrObjectNotExist) {
		return storeErr("gcs "+op, key, ErrNotFound, err)
	}
	return storeErr("gcs "+op, key, nil, err)
}

var _ Lister = (*gcsStore)(nil)

// List implements Lister with the bucket's object listing under prefix, in
// the server's (lexical) order.
func (s *gcsStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	q := &storage.Query{Prefix: prefix, Projection: storage.ProjectionNoACL}
	return s.eachObject(ctx, "list", q, func(attrs *storage.ObjectAttrs) error { return fn(attrs.Name) })
}

// eachObject calls fn with the attributes of each object q lists, in the
// server's (lexical) order; op names the listing in its errors.
func (s *gcsStore) eachObject(ctx context.Context, op string, q *storage.Query, fn func(*storage.ObjectAttrs) error) error {
	it := s.client.Bucket(s.bucket).Objects(ctx, q)
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
			return gcsError(op, q.Prefix, err)
		}
		if err := fn(attrs); err != nil {
			return err
		}
	}
}

// gcsDefaultBlobPartSize is the default chunk size of a blob's upload.
const gcsDefaultBlobPartSize = 16 << 20

// gcsSmallBlob is the size under which a blob is sent as one request,
// as a record is.
const gcsSmallBlob = 1 << 20

var _ BlobStore = (*gcsStore)(nil)

// CreateBlob implements BlobStore with one Writer, conditioned on
// DoesNotExist (ifGenerationMatch=0): create-only, decided by the server,
// whose 412 for a key that exists returns an error matching ErrConflict.
// It reads r's first MiB. A blob that ends within it goes up as a record
// does (see PutIfVersion): one request, unbuffered and so not retried,
// carrying the blob's CRC-32C. A larger blob goes up as a resumable
// upload in chunks of BlobPartSize (the Writer's ChunkSize): the Writer
// buffers one chunk, retries each chunk on a transient failure as the
// client is configured, and sends the CRC-32C of the whole blob with the
// last chunk. So the write holds one chunk (and the first MiB) in memory
// whatever the blob's size, and a small blob is not given a chunk's
// buffer. Cloud Storage checks the CRC-32C before it creates the object.
//
// A failure of r, or of ctx, cancels the upload before it is completed:
// nothing is created. The info returned is the object's as the server
// created it: its size and its creation time (Created), by the server's
// clock, at the microsecond resolution of its JSON API.
func (s *gcsStore) CreateBlob(ctx context.Context, key string, r io.Reader) (BlobInfo, error) {
	part := s.BlobPartSize
	if part <= 0 {
		part = gcsDefaultBlobPartSize
	}
	src := &gcsBlobSource{r: r}
	head, err := io.ReadAll(io.LimitReader(src, gcsSmallBlob))
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return BlobInfo{}, ctxErr
		}
		return BlobInfo{}, storeErr("gcs blob create", key, nil, err)
	}
	// Cancelling the Writer's context is how an upload is abandoned.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := s.client.Bucket(s.bucket).Object(key).If(storage.Conditions{DoesNotExist: true}).NewWriter(wctx)
	// A fixed content type: the client would otherwise sniff the body.
	w.ContentType = "application/octet-stream"
	small := len(head) < gcsSmallBlob
	if small {
		w.ChunkSize = 0
		w.CRC32C = crc32.Checksum(head, record.Castagnoli)
		w.SendCRC32C = true
	} else {
		w.ChunkSize = int(part)
	}
	_, err = w.Write(head)
	if err == nil && !small {
		_, err = io.Copy(w, src)
	}
	if err != nil {
		cancel()
		_ = w.Close()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return BlobInfo{}, ctxErr
		}
		if src.err != nil {
			return BlobInfo{}, storeErr("gcs blob create", key, nil, src.err)
		}
		return BlobInfo{}, gcsError("blob create", key, err)
	}
	if err := w.Close(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return BlobInfo{}, ctxErr
		}
		return BlobInfo{}, gcsError("blob create", key, err)
	}
	return gcsBlobInfo("blob create", key, w.Attrs())
}

// gcsBlobSource is the reader of a blob being created; it keeps the
// reader's own error, to tell it from the upload's.
type gcsBlobSource struct {
	r   io.Reader
	err error
}

func (s *gcsBlobSource) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// gcsBlobInfo is the BlobInfo of an object's attributes: its size and
// its creation time (timeCreated), which every object's metadata carries
// and which stays the same for the life of a generation. Without one it
// returns an error rather than a zero time, which Collect would take for
// the blob's being ancient.
func gcsBlobInfo(op, key string, attrs *storage.ObjectAttrs) (BlobInfo, error) {
	if attrs == nil || attrs.Created.IsZero() {
		return BlobInfo{}, storeErr("gcs "+op, key, nil, errors.New("the server sent no creation time"))
	}
	return BlobInfo{Key: key, Size: attrs.Size, Modified: attrs.Created}, nil
}

// OpenBlob implements BlobStore with two requests: the object's
// attributes, which give the blob's info as StatBlob gives it (its size
// and its generation's creation time), and then one reader of that
// generation, whose response carries the bytes. The info is thus exactly
// StatBlob's and CreateBlob's, whatever the read's response carries: a
// Last-Modified header is not used, as the client's JSON reads and some
// servers send none, and the client would report a zero time for it.
// The generation read is the one the info describes; if it is gone by
// then, the error matches ErrNotFound. A read of the body that fails
// returns a *StoreError of op "gcs blob read", and a done context its own
// error.
func (s *gcsStore) OpenBlob(ctx context.Context, key string) (io.ReadCloser, BlobInfo, error) {
	obj := s.client.Bucket(s.bucket).Object(key)
	attrs, err := obj.Attrs(ctx)
	if err != nil {
		return nil, BlobInfo{}, gcsError("blob open", key, err)
	}
	info, err := gcsBlobInfo("blob open", key, attrs)
	if err != nil {
		return nil, BlobInfo{}, err
	}
	if attrs.Generation <= 0 {
		return nil, BlobInfo{}, storeErr("gcs blob open", key, nil, errNoGeneration)
	}
	// ReadCompressed: the stored bytes as they are, so the size read is
	// the size the attributes report.
	r, err := obj.Generation(attrs.Generation).ReadCompressed(true).NewReader(ctx)
	if err != nil {
		return nil, BlobInfo{}, gcsError("blob open", key, err)
	}
	if r.Attrs.Size != info.Size {
		r.Close()
		return nil, BlobInfo{}, storeErr("gcs blob open", key, nil,
			fmt.Errorf("the read of generation %d reports %d bytes, its attributes %d", attrs.Generation, r.Attrs.Size, info.Size))
	}
	return &gcsBlobBody{r: r, key: key}, info, nil
}

// gcsBlobBody is a blob's reader, whose failures are *StoreErrors.
type gcsBlobBody struct {
	r   *storage.Reader
	key string
}

func (b *gcsBlobBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = gcsError("blob read", b.key, err)
	}
	return n, err
}

func (b *gcsBlobBody) Close() error { return b.r.Close() }

// StatBlob implements BlobStore with the object's attributes: its size
// and its creation time.
func (s *gcsStore) StatBlob(ctx context.Context, key string) (BlobInfo, error) {
	attrs, err := s.client.Bucket(s.bucket).Object(key).Attrs(ctx)
	if err != nil {
		return BlobInfo{}, gcsError("blob stat", key, err)
	}
	return gcsBlobInfo("blob stat", key, attrs)
}

// ListBlobs implements BlobStore with the bucket's object listing under
// prefix, in the server's (lexical) order, asking only for each object's
// name, size and creation time.
func (s *gcsStore) ListBlobs(ctx context.Context, prefix string, fn func(BlobInfo) error) error {
	return s.listBlobs(ctx, prefix, "", fn)
}

func (s *gcsStore) listBlobs(ctx context.Context, prefix, after string, fn func(BlobInfo) error) error {
	// StartOffset is inclusive: the object named after, if any, is
	// skipped below, rather than asked for from after plus a NUL byte,
	// which the request carries as %00 and not every server may take.
	q := &storage.Query{Prefix: prefix, StartOffset: after, Projection: storage.ProjectionNoACL}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Created"}); err != nil {
		return storeErr("gcs blob list", prefix, nil, err)
	}
	return s.eachObject(ctx, "blob list", q, func(attrs *storage.ObjectAttrs) error {
		if after != "" && attrs.Name <= after {
			return nil
		}
		info, err := gcsBlobInfo("blob list", attrs.Name, attrs)
		if err != nil {
			return err
		}
		return fn(info)
	})
}

var _ ConsistentBlobLister = (*gcsStore)(nil)

// ListBlobsConsistent implements ConsistentBlobLister with ListBlobs, from
// StartOffset: Cloud Storage's object listing is strongly consistent, so
// it shows every object whose write returned before it began, and none
// whose delete did.
func (s *gcsStore) ListBlobsConsistent(ctx context.Context, prefix, after string, fn func(BlobInfo) error) error {
	return s.listBlobs(ctx, prefix, after, fn)
}

// DeleteBlob implements BlobStore, as Delete does.
func (s *gcsStore) DeleteBlob(ctx context.Context, key string) error {
	err := s.client.Bucket(s.bucket).Object(key).Delete(ctx)
	if err == nil || errors.Is(err, storage.ErrObjectNotExist) {
		return nil
	}
	return gcsError("blob delete", key, err)
}
