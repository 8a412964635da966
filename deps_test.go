package writefence_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// coreTags are the build tags that leave every adapter of this package
// out: a program built with them links the core alone.
const coreTags = "writefence_nominio,writefence_nogcs,writefence_novalkey"

// listDeps returns what go list -deps gives for pkgs under args.
func listDeps(t *testing.T, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, append([]string{"list", "-deps"}, args...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.Fields(string(out))
}

// assertLinksNone fails the test for each of deps under one of prefixes.
func assertLinksNone(t *testing.T, what string, deps, prefixes []string) {
	t.Helper()
	for _, d := range deps {
		for _, p := range prefixes {
			assert.False(t, strings.HasPrefix(d, p), "%s links %s", what, d)
		}
	}
}

// TestPackageLinksNoStoreSDKs: a program that imports only this package
// (MemStore, say) links none of the SDKs of the stores that live in
// packages of their own.
func TestPackageLinksNoStoreSDKs(t *testing.T) {
	deps := listDeps(t, "github.com/writefence/writefence")
	require.Contains(t, deps, "github.com/writefence/writefence")
	assertLinksNone(t, "github.com/writefence/writefence", deps,
		[]string{"github.com/aws/", "go.etcd.io/etcd/", "github.com/Azure/azure-sdk-for-go/", "github.com/jackc/"})
}

// TestModuleRequiresNoStoreSDK: the module graph of this module, which
// every program that imports it inherits, holds no SDK of the stores and
// epoch sources that live in modules of their own (azblobstore, pgstore,
// dynamostore, etcdstore, etcdepoch, zkepoch). OpenTelemetry stays: the
// GCS client requires it.
func TestModuleRequiresNoStoreSDK(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command(gobin, "list", "-m", "-f", "{{.Path}}", "all")
	cmd.Env = append(os.Environ(), "GOWORK=off") // this module alone, not the workspace
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	mods := strings.Fields(string(out))
	require.Contains(t, mods, "github.com/writefence/writefence")
	assertLinksNone(t, "the module graph", mods,
		[]string{"github.com/aws/", "go.etcd.io/", "github.com/Azure/", "github.com/jackc/", "github.com/go-zookeeper/"})
}

// adapterSDKs are the SDKs of the adapters in this package, by the tag
// that leaves each out.
var adapterSDKs = map[string][]string{
	"writefence_nominio":  {"github.com/minio/"},
	"writefence_nogcs":    {"cloud.google.com/go", "google.golang.org/api", "google.golang.org/grpc", "go.opentelemetry.io/"},
	"writefence_novalkey": {"github.com/redis/go-redis/"},
}

// TestTagsLeaveOutAdapterSDKs: built with an adapter's tag, this package
// links none of that adapter's SDK; with all of them, or with
// writefence_nosdk alone, it links the standard library and itself only,
// and so does writefencetest.
func TestTagsLeaveOutAdapterSDKs(t *testing.T) {
	for tag, sdks := range adapterSDKs {
		t.Run(tag, func(t *testing.T) {
			assertLinksNone(t, "-tags "+tag, listDeps(t, "-tags", tag, "github.com/writefence/writefence"), sdks)
		})
	}
	for _, tags := range []string{coreTags, "writefence_nosdk"} {
		t.Run(tags, func(t *testing.T) {
			deps := listDeps(t, "-tags", tags, "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
				"github.com/writefence/writefence", "github.com/writefence/writefence/writefencetest")
			require.Contains(t, deps, "github.com/writefence/writefence")
			for _, d := range deps {
				assert.True(t, d == "github.com/writefence/writefence" || strings.HasPrefix(d, "github.com/writefence/writefence/internal/") ||
					d == "github.com/writefence/writefence/writefencetest", "-tags %s links %s", tags, d)
			}
		})
	}
}

// TestRecordCodecLinksStandardLibraryOnly: the record codec, whose fuzz
// target compiles everything it links with coverage instrumentation,
// links the standard library and packages of this module's internal/
// only: no SDK, directly or through those packages.
func TestRecordCodecLinksStandardLibraryOnly(t *testing.T) {
	const pkg = "github.com/writefence/writefence/internal/record"
	deps := listDeps(t, "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg)
	require.Contains(t, deps, pkg)
	for _, d := range deps {
		assert.True(t, strings.HasPrefix(d, "github.com/writefence/writefence/internal/"), "%s links %s", pkg, d)
	}
}
