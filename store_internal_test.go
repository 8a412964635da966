//go:build !writefence_nosdk && !writefence_nogcs && !writefence_nominio && !writefence_novalkey

package writefence

import (
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// TestStoreOptionsReachTheAdapters: every field of StoreOptions is read by
// an adapter that it names, and each adapter's constructor keeps the value
// given (none ignored); nil means every default.
func TestStoreOptionsReachTheAdapters(t *testing.T) {
	opts := &StoreOptions{MaxObjectSize: 12345, BlobPartSize: 6 << 20, ReadOnly: true, Script: true,
		WaitReplicas: 2, WaitTimeout: 3 * time.Second}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { client.Close() })
	adapters := map[string]any{
		"gcs":    newGCSStore(nil, "b", opts),
		"s3":     newMinioStore(nil, "b", opts),
		"valkey": newValkeyStore(client, opts),
	}
	read := map[string][]string{
		"gcs":    {"MaxObjectSize", "BlobPartSize"},
		"s3":     {"MaxObjectSize", "BlobPartSize"},
		"valkey": {"MaxObjectSize", "Script", "WaitReplicas", "WaitTimeout"},
		"dir":    {"MaxObjectSize", "ReadOnly"}, // TestDirStoreOptions checks them
	}
	covered := map[string]bool{}
	for _, fields := range read {
		for _, f := range fields {
			covered[f] = true
		}
	}
	ot := reflect.TypeOf(*opts)
	for i := range ot.NumField() {
		assert.True(t, covered[ot.Field(i).Name], "StoreOptions.%s is read by no adapter", ot.Field(i).Name)
	}
	ov := reflect.ValueOf(*opts)
	for name, s := range adapters {
		sv := reflect.ValueOf(s).Elem()
		for _, f := range read[name] {
			got := sv.FieldByName(f)
			if assert.True(t, got.IsValid(), "%s has no field %s", name, f) {
				assert.Equal(t, ov.FieldByName(f).Interface(), got.Interface(), "%s ignores StoreOptions.%s", name, f)
			}
		}
		zero := reflect.ValueOf(map[string]any{
			"gcs": newGCSStore(nil, "b", nil), "s3": newMinioStore(nil, "b", nil), "valkey": newValkeyStore(client, nil),
		}[name]).Elem()
		for _, f := range read[name] {
			assert.True(t, zero.FieldByName(f).IsZero(), "%s with nil options: %s is not the default", name, f)
		}
	}
}
