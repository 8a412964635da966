//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// TestBrandClaimRaceServers races 16 claimers of two identities on an empty
// brand key of every real server, 50 rounds with a fresh key each: exactly
// one write lands, every claimer of the winner's identity returns nil and
// every other is refused naming it.
func TestBrandClaimRaceServers(t *testing.T) {
	t.Parallel()
	const rounds = 50
	servers := []struct {
		name  string
		store func(t *testing.T) (writefence.ConditionalStore, string)
	}{
		{"valkey-watch", func(t *testing.T) (writefence.ConditionalStore, string) {
			c := newValkeyClient(t)
			return writefence.NewValkeyStore(c), valkeyPrefix(t, c)
		}},
		{"valkey-script", func(t *testing.T) (writefence.ConditionalStore, string) {
			c := newValkeyClient(t)
			s := writefence.NewValkeyStore(c)
			s.Script = true
			return s, valkeyPrefix(t, c)
		}},
		{"minio", func(t *testing.T) (writefence.ConditionalStore, string) {
			c, bucket := newMinioBucket(t)
			return writefence.NewMinioStore(c, bucket), ""
		}},
		{"gcs", func(t *testing.T) (writefence.ConditionalStore, string) {
			s, _ := newGCSIntegrationStore(t)
			return s, ""
		}},
	}
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			store, prefix := server.store(t)
			s := countedByKey(store)
			wins := map[string]int{}
			var won, refused, wrote, landed int
			for round := range rounds {
				r := raceBrand(t, s, keys.Brand(fmt.Sprintf("%sround-%02d/", prefix, round)))
				require.Equal(t, 1, r.landed, "round %d: exactly one write lands", round)
				wins[r.winner]++
				won, refused, wrote, landed = won+r.won, refused+r.refused, wrote+r.wrote, landed+r.landed
			}
			t.Logf("%s: %d rounds of 16 claimers: wins by identity %v; %d claims returned nil, %d refused with ErrWire; %d create-only writes tried, %d landed",
				server.name, rounds, wins, won, refused, wrote, landed)
		})
	}
}
