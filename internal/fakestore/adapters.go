package fakestore

import (
	"context"
	"io"

	"github.com/writefence/writefence"
)

//go:generate go run gen.go

// The adapters give a view of a store the methods of one capability each;
// views.go puts together a view for each set of them.
type (
	keys             store // Deleter and Lister
	prefixReader     store
	brandedPutter    store
	blobStore        store // BlobStore and BlobWriter
	consistentLister store
	batchDeleter     store
	declarer         store // Capable, and PartsPutter
)

func (d *declarer) Capabilities() writefence.ConditionalStore { return d.self }

func (d *declarer) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expect string) (string, error) {
	return (*store)(d).putParts(ctx, key, parts, expect)
}

func (k *keys) Delete(ctx context.Context, key string) error {
	return (*store)(k).delete(ctx, key)
}

func (k *keys) List(ctx context.Context, prefix string, fn func(string) error) error {
	return (*store)(k).list(ctx, prefix, fn)
}

func (p *prefixReader) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	return (*store)(p).getPrefix(ctx, key, n)
}

func (b *brandedPutter) PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expect string) (string, error) {
	return (*store)(b).putIfBranded(ctx, brandKey, identity, key, parts, expect)
}

func (b *blobStore) CreateBlob(ctx context.Context, key string, r io.Reader) (writefence.BlobInfo, error) {
	return (*store)(b).createBlob(ctx, key, r)
}

func (b *blobStore) WriteBlob(ctx context.Context, key string, r io.Reader) (int64, error) {
	return (*store)(b).writeBlob(ctx, key, r)
}

func (b *blobStore) OpenBlob(ctx context.Context, key string) (io.ReadCloser, writefence.BlobInfo, error) {
	return (*store)(b).openBlob(ctx, key)
}

func (b *blobStore) StatBlob(ctx context.Context, key string) (writefence.BlobInfo, error) {
	return (*store)(b).statBlob(ctx, key)
}

func (b *blobStore) ListBlobs(ctx context.Context, prefix string, fn func(writefence.BlobInfo) error) error {
	return (*store)(b).listBlobs(ctx, prefix, fn)
}

func (b *blobStore) DeleteBlob(ctx context.Context, key string) error {
	return (*store)(b).deleteBlob(ctx, key)
}

func (c *consistentLister) ListBlobsConsistent(ctx context.Context, prefix, after string, fn func(writefence.BlobInfo) error) error {
	return (*store)(c).listBlobsConsistent(ctx, prefix, after, fn)
}

func (b *batchDeleter) DeleteBlobs(ctx context.Context, keys []string) ([]string, error) {
	return (*store)(b).deleteBlobs(ctx, keys)
}
