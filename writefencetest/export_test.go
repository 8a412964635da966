package writefencetest

// SetBlobFirstChunk sets how far Blobs/RoundTrip's largest blob goes
// past its two parts, in place of the 5 MiB a store's adapter may read
// before it chooses how to upload (blobFirstChunk). For the package's
// doubles of a store, in a process of their own: they read every blob
// whole, so the 5 MiB only costs them time.
func SetBlobFirstChunk(n int64) { blobFirstChunk = n }
