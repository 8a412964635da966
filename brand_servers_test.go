//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
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

// TestBrandValkeyOtherFailures: on Valkey, a brand key of the wrong type and
// one the ACL user may not read fail with the server's error, which is
// never a refusal of the brand and never "absent". Both are final (the
// server will answer the same again), so each is read once, not retried:
// WRONGTYPE matches errors.ErrUnsupported, NOPERM fs.ErrPermission.
func TestBrandValkeyOtherFailures(t *testing.T) {
	ctx := context.Background()
	admin := newValkeyClient(t)
	prefix := valkeyPrefix(t, admin)
	list, hidden := prefix+"list/_brand", prefix+"hidden/_brand"
	require.NoError(t, admin.RPush(ctx, list, "writefence/v1").Err())
	_, err := writefence.NewValkeyStore(admin).PutIfVersion(ctx, hidden, []byte(defaults.Identity), "")
	require.NoError(t, err)

	user, password := strings.TrimSuffix(prefix, "/")+"-brand", "pw-"+testserver.UniqueName(t)
	require.NoError(t, admin.Do(ctx, "acl", "setuser", user, "on", ">"+password, "+@all", "~"+prefix+"list/*").Err())
	t.Cleanup(func() { assert.NoError(t, admin.Do(context.Background(), "acl", "deluser", user).Err()) })
	limited := newValkeyClient(t, func(o *redis.Options) { o.Username, o.Password = user, password })

	for _, tc := range []struct {
		key, code string
		is        error
	}{{list, "WRONGTYPE", errors.ErrUnsupported}, {hidden, "NOPERM", fs.ErrPermission}} {
		s := countedByKey(writefence.NewValkeyStore(limited))
		b := &writefence.Fence{Store: s, Prefix: strings.TrimSuffix(tc.key, "_brand")}
		_, installErr := b.ClaimBrand(ctx)
		for op, err := range map[string]error{"claim": claimBrand(ctx, b), "verify": b.VerifyBrand(ctx), "install": installErr} {
			require.Error(t, err, "%s %s", tc.code, op)
			assert.True(t, redis.HasErrorPrefix(err, tc.code), "%s %s: %v", tc.code, op, err)
			assert.ErrorIs(t, err, tc.is, "%s %s", tc.code, op)
			assert.NotErrorIs(t, err, writefence.ErrWire, "%s %s", tc.code, op)
			assert.NotErrorIs(t, err, writefence.ErrNotFound, "%s %s", tc.code, op)
			assert.NotErrorIs(t, err, writefence.ErrConflict, "%s %s", tc.code, op)
			assert.NotContains(t, err.Error(), password)
			t.Logf("%s %s: %v", tc.code, op, err)
		}
		gets, puts, _ := callsOf(s, tc.key)
		assert.Equal(t, [2]int{3, 0}, [2]int{gets, puts}, "%s: one read each, never retried, nothing written", tc.code)
	}
	n, err := admin.LLen(ctx, list).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the list is untouched")
	require.NoError(t, (&writefence.Fence{Store: writefence.NewValkeyStore(admin), Prefix: strings.TrimSuffix(hidden, "_brand")}).VerifyBrand(ctx), "the hidden brand is intact")
}
