package writefence

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryOpIsDocumented: WriteEvent's documentation and otelobserver's
// list of the writefence.op attribute name every op an Observer can see,
// quoted as the engine writes it, and name no other.
func TestEveryOpIsDocumented(t *testing.T) {
	doc := typeDoc(t, "WriteEvent")
	require.NotEmpty(t, doc, "WriteEvent's doc comment")
	otel, err := os.ReadFile("otelobserver/otelobserver.go")
	require.NoError(t, err)
	attr := string(otel)
	start := strings.Index(attr, "writefence.op ")
	require.GreaterOrEqual(t, start, 0)
	end := strings.Index(attr[start:], "(WriteEvent.Op)")
	require.Greater(t, end, 0)
	attr = strings.Join(strings.Fields(strings.ReplaceAll(attr[start:start+end], "//", "")), " ")

	for _, op := range ops {
		assert.Contains(t, doc, strconv.Quote(op), "WriteEvent's doc names %q", op)
		assert.Contains(t, attr, op, "otelobserver's list names %q", op)
	}
	// And no op the engine does not have: every quoted word of the list
	// at the start of the doc is an op.
	list := doc[:strings.Index(doc, "The engine reports")]
	for _, field := range strings.Split(list, "\"")[1:] {
		if strings.ContainsAny(field, ",;:.(") || field == "" || strings.HasPrefix(field, " ") {
			continue
		}
		assert.Contains(t, ops, field, "WriteEvent's doc names %q, which is no op", field)
	}
}

// TestReadmeNamesEveryOpAndOutcome: the README's attributes of the
// OpenTelemetry metrics name every op the engine has, and every outcome
// Outcome names of a write that ended (every one but "conflict-retried").
func TestReadmeNamesEveryOpAndOutcome(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	text := strings.Join(strings.Fields(string(readme)), " ")
	listed := func(attr string) []string {
		_, rest, ok := strings.Cut(text, "`"+attr+"` (")
		require.True(t, ok, "the README lists %s", attr)
		rest, _, _ = strings.Cut(rest, ")")
		var names []string
		for i, f := range strings.Split(rest, "`") {
			if i%2 == 1 {
				names = append(names, f)
			}
		}
		return names
	}
	assert.ElementsMatch(t, ops, listed("writefence.op"))
	var outcomes []string
	doc := funcDoc(t, "Outcome")
	require.NotEmpty(t, doc)
	for i, f := range strings.Split(doc, `"`) {
		if i%2 == 1 && f != "conflict-retried" {
			outcomes = append(outcomes, f)
		}
	}
	assert.ElementsMatch(t, outcomes, listed("writefence.outcome"))
}
