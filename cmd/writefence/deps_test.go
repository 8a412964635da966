//go:build !writefence_nosdk

package main

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests here ask go list what the command links under the tags each
// names, whatever tags their own binary was built with: built under
// writefence_nosdk (.ci/build-tags) they would only ask again.

// storeSDKs are the packages each store tag leaves out of the command.
var storeSDKs = map[string][]string{
	"writefence_nominio":    {"github.com/minio/"},
	"writefence_nogcs":      {"cloud.google.com/go", "google.golang.org/api", "go.opentelemetry.io/"}, // gRPC stays with etcd
	"writefence_novalkey":   {"github.com/redis/go-redis/"},
	"writefence_nodynamodb": {"github.com/aws/", "github.com/writefence/writefence/dynamostore"},
	"writefence_noetcd":     {"go.etcd.io/", "go.uber.org/zap", "github.com/writefence/writefence/etcdstore"},
	"writefence_noazblob":   {"github.com/Azure/", "github.com/writefence/writefence/azblobstore"},
	"writefence_nopostgres": {"github.com/jackc/", "github.com/writefence/writefence/pgstore"},
}

// goList returns what go list -deps gives for the command under args.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, append(append([]string{"list", "-deps"}, args...), ".")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.Fields(string(out))
}

// TestTagsLeaveOutStoreSDKs: built with a store's tag, the command links
// none of that store's SDK.
func TestTagsLeaveOutStoreSDKs(t *testing.T) {
	require.ElementsMatch(t, slices.Collect(maps.Keys(storeTags)), slices.Collect(maps.Keys(storeSDKs)), "one tag per store")
	for tag, sdks := range storeSDKs {
		t.Run(tag, func(t *testing.T) {
			for _, d := range goList(t, "-tags", tag) {
				for _, sdk := range sdks {
					assert.False(t, strings.HasPrefix(d, sdk), "-tags %s links %s", tag, d)
				}
			}
		})
	}
}

// TestAllTagsLinkNoModule: built with every store's tag, or with
// writefence_nosdk alone, the command links the standard library and the
// root module's core only: no other module, no package of a store, and
// neither net/http nor crypto/tls.
func TestAllTagsLinkNoModule(t *testing.T) {
	const module = "github.com/writefence/writefence"
	for _, tags := range []string{strings.Join(slices.Sorted(maps.Keys(storeTags)), ","), "writefence_nosdk"} {
		t.Run(tags, func(t *testing.T) {
			deps := goList(t, "-tags", tags, "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}")
			require.Contains(t, deps, module+"/cmd/writefence")
			for _, d := range deps {
				assert.True(t, d == module || d == module+"/cmd/writefence" || strings.HasPrefix(d, module+"/internal/"), "-tags %s links %s", tags, d)
			}
			all := goList(t, "-tags", tags)
			for _, std := range []string{"net/http", "crypto/tls"} {
				assert.NotContains(t, all, std, "-tags %s", tags)
			}
		})
	}
}

// TestLinksNoTesting: the command runs the push race through
// internal/pushrace, not through the conformance kit, so it does not link
// package testing (and its flags).
func TestLinksNoTesting(t *testing.T) {
	deps := goList(t)
	require.Contains(t, deps, "github.com/writefence/writefence")
	assert.NotContains(t, deps, "testing")
}
