// Package listing holds what the stores' listings share: how a listing
// hands out what it gathered.
package listing

import "context"

// Each hands fn the items a listing gathered, in order, as a Lister's List
// and a BlobStore's ListBlobs hand them out: a done ctx or fn's error ends
// it and is returned.
func Each[T any](ctx context.Context, items []T, fn func(T) error) error {
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}
