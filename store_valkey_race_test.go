package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestValkeyFenceSameEpochRace: 16 writers push the same epoch through one
// Fence each round; the server lets exactly one land and every other push
// is refused as stale.
func TestValkeyFenceSameEpochRace(t *testing.T) {
	const writers, rounds = 16, 50
	ctx := context.Background()
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			c := newValkeyClient(t, func(o *redis.Options) { o.PoolSize = writers })
			store := writefence.NewValkeyConditionalStore(c)
			store.Script = path.script
			fence := &writefence.Fence{Store: store, Prefix: valkeyPrefix(t, c)}

			var landed, stale, other int
			for round := uint64(1); round <= rounds; round++ {
				errs := make([]error, writers)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for w := range writers {
					wg.Go(func() {
						<-start
						payload := fmt.Appendf(nil, "round %d writer %d", round, w)
						errs[w] = fence.Push(ctx, "race", "shard", fmt.Sprintf("writer-%d", w), round, payload)
					})
				}
				close(start)
				wg.Wait()

				nils := 0
				for w, err := range errs {
					switch {
					case err == nil:
						nils++
					case errors.Is(err, writefence.ErrStaleEpoch):
						stale++
					default:
						other++
						t.Errorf("round %d writer %d: %v", round, w, err)
					}
				}
				landed += nils
				require.Equal(t, 1, nils, "round %d: exactly one push lands", round)

				epoch, _, _, err := fence.Latest(ctx, "race", "shard")
				require.NoError(t, err)
				require.Equal(t, round, epoch)
			}
			t.Logf("%s: %d rounds of %d writers: %d landed, %d stale, %d other errors",
				path.name, rounds, writers, landed, stale, other)
			assert.Equal(t, rounds, landed)
			assert.Equal(t, rounds*(writers-1), stale)
		})
	}
}
