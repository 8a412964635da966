package writefence_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPackageLinksNoStoreSDKs: a program that imports only this package
// (MemStore, say) links none of the SDKs of the stores that live in
// packages of their own.
func TestPackageLinksNoStoreSDKs(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/writefence/writefence").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/writefence/writefence")
	for _, d := range deps {
		for _, sdk := range []string{"github.com/aws/", "go.etcd.io/etcd/", "github.com/Azure/azure-sdk-for-go/", "github.com/jackc/"} {
			assert.False(t, strings.HasPrefix(d, sdk), "github.com/writefence/writefence links %s", d)
		}
	}
}
