//go:build (!writefence_nominio || !writefence_nogcs) && !writefence_nosdk

package writefence_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// What the tests of the adapters that share the read limit (S3, GCS)
// share.

// requireTooLarge checks that err refuses a read of key, an object over
// limit bytes: it matches ErrTooLarge and is a *StoreError that names key
// and limit.
func requireTooLarge(t *testing.T, err error, key string, limit int64) {
	t.Helper()
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	var se *writefence.StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, key, se.Key)
	assert.ErrorContains(t, err, fmt.Sprintf("object too large: more than %d bytes", limit))
}
