package writefence_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOwnPackageSDKsNotLinked: the stores in packages of their own keep
// their SDKs out of every program that does not import them. A program
// that uses only this package (a MemStore, say) links what go list -deps
// reports for it, and neither the Azure SDK nor pgx is among it.
func TestOwnPackageSDKsNotLinked(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/writefence/writefence").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/writefence/writefence")
	for _, d := range deps {
		for _, sdk := range []string{"github.com/Azure/azure-sdk-for-go/", "github.com/jackc/"} {
			require.False(t, strings.HasPrefix(d, sdk), "the package links %s", d)
		}
	}
}
