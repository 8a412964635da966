package writefence

import "context"

// ValkeyPutGuarded runs the WATCH path of PutIfVersion with one guard key,
// so the external tests can exercise the guard step before anything in the
// package uses it.
func ValkeyPutGuarded(ctx context.Context, s *ValkeyConditionalStore, key string, data []byte, expectVersion, guardKey string, check func(value []byte, exists bool) error) (string, error) {
	return s.putIfVersion(ctx, key, data, expectVersion, []valkeyGuard{{key: guardKey, check: check}})
}
