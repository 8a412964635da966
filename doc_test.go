package writefence

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// packageDoc returns the package documentation.
func packageDoc(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments)
	require.NoError(t, err)
	return f.Doc.Text()
}

// TestDocNamesEverySentinel: the package documentation's list of
// sentinels names every exported Err variable of the package.
func TestDocNamesEverySentinel(t *testing.T) {
	doc := packageDoc(t)
	errors := doc[strings.Index(doc, "Test errors with errors.Is"):]
	errors = errors[:strings.Index(errors, "typed error")]
	var found int
	for _, f := range sourceFiles(t) {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
						found++
						assert.Contains(t, errors, n.Name, "the package documentation's list of sentinels")
					}
				}
			}
		}
	}
	assert.Greater(t, found, 10)
}

// TestDocNamesTheFormatVersions: the package documentation names the
// record format versions writers write, as the codec numbers them.
func TestDocNamesTheFormatVersions(t *testing.T) {
	doc := strings.Join(strings.Fields(packageDoc(t)), " ")
	assert.Contains(t, doc, "Writers write format version 2 for a plain record, 3 for a stream's")
	assert.Equal(t, byte(2), byte(record.PlainVersion))
	assert.Equal(t, byte(3), byte(record.StreamVersion))
	assert.Equal(t, byte(4), byte(record.HorizonVersion))
	assert.Contains(t, doc, "and 4 for a stream's that carries a collection horizon")
}

// TestDocNamesTheLargestHeader: the documentation's 1343 bytes, the part
// of a record every store checks on a write (ConditionalStore.PutIfVersion
// in store.go, Update in fence.go), is the largest header the codec
// writes: format 4's, of the longest identity and writer, with no
// reference.
func TestDocNamesTheLargestHeader(t *testing.T) {
	longest := record.Encode(strings.Repeat("i", record.MaxIdentityLen), strings.Repeat("w", record.MaxWriterLen), 1,
		record.Body{Stream: true, Since: 1, Horizon: 1}, record.CRC32C(nil))
	var n int
	for _, p := range longest {
		n += len(p)
	}
	assert.Equal(t, writeChecked, n)
	for _, name := range []string{"store.go", "fence.go"} {
		data, err := os.ReadFile(name)
		require.NoError(t, err)
		text := strings.Join(strings.Fields(strings.ReplaceAll(string(data), "//", "")), " ")
		assert.True(t, strings.Contains(text, strconv.Itoa(n)+" bytes"), "%s does not say %d bytes", name, n)
	}
}

// TestDocNamesTheDefaults: the defaults and limits the doc comments state
// (Fence's zero values, the lease's names, the batch sizes) are the
// constants the code uses.
func TestDocNamesTheDefaults(t *testing.T) {
	comma := func(n int) string { // 131072 as 131,072
		s := strconv.Itoa(n)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	// internal/overwrite imports the package: its constants are read from
	// its source.
	src, err := os.ReadFile(filepath.Join("internal", "overwrite", "overwrite.go"))
	require.NoError(t, err)
	constant := func(name string) int {
		m := regexp.MustCompile(`(?m)^\s*` + name + `\s*=\s*(\d+)`).FindSubmatch(src)
		require.NotNil(t, m, "internal/overwrite's %s", name)
		n, err := strconv.Atoi(string(m[1]))
		require.NoError(t, err)
		return n
	}
	readers, reads, writes := constant("Readers"), constant("DefaultReads"), constant("MinWrites")
	for file, phrases := range map[string][]string{
		"fence.go": {
			fmt.Sprintf(`at most %d bytes; empty means %q`, record.MaxIdentityLen, defaultIdentity),
			fmt.Sprintf(`empty means %q`, keys.DefaultPrefix),
			fmt.Sprintf("MaxPayloadSize bounds a record's payload; zero means %d MiB", defaultMaxPayloadSize>>20),
			fmt.Sprintf("must exceed it by %d KiB", defaults.MaxHeaderSize>>10),
			fmt.Sprintf("MaxAttempts bounds the attempts of one write; zero means %d.", defaultMaxAttempts),
			fmt.Sprintf("zero means %v. The delay before attempt n+1 is uniform in (0, min(RetryDelay<<(n-1), %v)]", defaultRetryDelay, maxRetryDelay),
			fmt.Sprintf("a payload of at most %d bytes", cachedPayload),
		},
		"store.go":    {fmt.Sprintf("zero or less means %d MiB + %d KiB", defaults.MaxPayloadSize>>20, defaults.MaxHeaderSize>>10)},
		"memstore.go": {fmt.Sprintf("zero means %d MiB + %d KiB", defaults.MaxPayloadSize>>20, defaults.MaxHeaderSize>>10)},
		"lease.go": {
			fmt.Sprintf("Name names the lease, 1 to %d bytes", keys.MaxNameLen),
			fmt.Sprintf("Holder names this contender in the record, 1 to %d bytes", record.MaxWriterLen),
		},
		"blob.go": {
			fmt.Sprintf("zero means %v hours", defaultGrace.Hours()),
			fmt.Sprintf("up to %s blobs on a store that declares BlobBatchDeleter, else %d", comma(collectBatch), collectSerial),
		},
		"blob_list.go": {fmt.Sprintf("max(%d, 2 × its keys) blobs; other keys are checked with StatBlob, %d at a time", listBudget, statWorkers)},
		"check.go":     {fmt.Sprintf("%d reads at a time", checkAllAtOnce)},
		"doc.go":       {fmt.Sprintf("memory (%s shards)", comma(maxCached))},
		"README.md": {
			fmt.Sprintf("(%s shards;", comma(maxCached)),
			fmt.Sprintf("while %s readers read it", map[int]string{8: "eight"}[readers]),
			fmt.Sprintf("the suite's full %s", comma(reads)),
		},
		filepath.Join("writefencetest", "doc.go"): {
			fmt.Sprintf("while %d readers read it", readers),
			fmt.Sprintf("until the readers have made %s reads that overlap a write", comma(reads)),
			fmt.Sprintf("and at least %d writes", writes),
		},
	} {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		text := strings.Join(strings.Fields(strings.ReplaceAll(string(data), "//", "")), " ")
		for _, p := range phrases {
			assert.True(t, strings.Contains(text, p), "%s does not say %q", file, p)
		}
	}
}

// TestDocNamesTheReservedSpace: the package documentation's list of what
// the reserved space Prefix + "_" + name holds names every reserved key
// internal/keys builds.
func TestDocNamesTheReservedSpace(t *testing.T) {
	doc := strings.Join(strings.Fields(packageDoc(t)), " ")
	_, list, ok := strings.Cut(doc, `the reserved space Prefix + "_" + name (`)
	require.True(t, ok, "the package documentation names the reserved space")
	list, _, _ = strings.Cut(list, ")")
	named := map[string]string{"_brand": "brand", "_lease/": "leases", "_probe": "probe", "_settled/": "settle logs", "_floor/": "floors", "_clock/": "blob clock"}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("internal", "keys", "keys.go"), nil, 0)
	require.NoError(t, err)
	var found int
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING || !strings.HasPrefix(lit.Value, `"_`) {
					continue
				}
				name, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				found++
				word, ok := named[name]
				if assert.True(t, ok, "internal/keys reserves %q: name it in the package documentation and here", name) {
					assert.Contains(t, list, word, "the package documentation's reserved space")
				}
			}
		}
	}
	assert.GreaterOrEqual(t, found, len(named))
}

// TestKitDocNamesEveryCheck: the list of checks in writefencetest's
// documentation names exactly the subtests (Group/Check) the suite runs.
func TestKitDocNamesEveryCheck(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("writefencetest", "*.go"))
	require.NoError(t, err)
	// names returns the check names of a []check literal.
	names := func(lit *ast.CompositeLit) []string {
		var out []string
		for _, el := range lit.Elts {
			if c, ok := el.(*ast.CompositeLit); ok && len(c.Elts) > 0 {
				if s, ok := c.Elts[0].(*ast.BasicLit); ok && s.Kind == token.STRING {
					name, err := strconv.Unquote(s.Value)
					require.NoError(t, err)
					out = append(out, name)
				}
			}
		}
		return out
	}
	isChecks := func(e ast.Expr) (*ast.CompositeLit, bool) {
		lit, ok := e.(*ast.CompositeLit)
		if !ok {
			return nil, false
		}
		a, ok := lit.Type.(*ast.ArrayType)
		if !ok {
			return nil, false
		}
		id, ok := a.Elt.(*ast.Ident)
		return lit, ok && id.Name == "check"
	}
	vars := map[string][]string{}  // a []check variable's checks
	var groups []*ast.CompositeLit // {"Group", checks}: a literal, or a variable
	var doc string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		if filepath.Base(name) == "doc.go" {
			doc = f.Doc.Text()
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, v := range n.Values {
					if lit, ok := isChecks(v); ok {
						vars[n.Names[i].Name] = names(lit)
					}
				}
			case *ast.CompositeLit:
				if len(n.Elts) != 2 {
					break
				}
				s, ok := n.Elts[0].(*ast.BasicLit)
				_, lit := isChecks(n.Elts[1])
				_, id := n.Elts[1].(*ast.Ident)
				if ok && s.Kind == token.STRING && (lit || id) {
					groups = append(groups, n)
				}
			}
			return true
		})
	}
	run := map[string]bool{}
	for _, n := range groups {
		g, err := strconv.Unquote(n.Elts[0].(*ast.BasicLit).Value)
		require.NoError(t, err)
		checks, ok := vars[fmt.Sprint(n.Elts[1])]
		if lit, isLit := isChecks(n.Elts[1]); isLit {
			checks, ok = names(lit), true
		}
		if !ok {
			continue // a check of a group: {"Name", testName}
		}
		for _, c := range checks {
			run[g+"/"+c] = true
		}
	}
	require.Greater(t, len(run), 50)
	_, list, ok := strings.Cut(doc, "# The checks")
	require.True(t, ok)
	list, _, _ = strings.Cut(list, "\n# ")
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b([A-Z][A-Za-z]+/[A-Z0-9][A-Za-z0-9]+)\b`).FindAllStringSubmatch(list, -1) {
		named[m[1]] = true
	}
	for c := range run {
		assert.True(t, named[c], "the suite runs %s, which writefencetest's documentation does not name", c)
	}
	for c := range named {
		assert.True(t, run[c], "writefencetest's documentation names %s, which the suite does not run", c)
	}
}

// TestDocsCiteFilesThatExist: every file of the repository a comment or a
// Markdown file names (BENCHMARKS.md, .ci/run, cmd/writefence/exit.go...),
// and every file of the package the README or BENCHMARKS.md names alone
// (`fence.go`), exists. It is parallel: it only reads files, and its
// regular expression over every file of the repository takes seconds
// under -race.
func TestDocsCiteFilesThatExist(t *testing.T) {
	t.Parallel()
	cited := regexp.MustCompile(`(?:^|[\s(\x60"])((?:\.ci|cmd|internal|bench|writefencetest|[a-z]+store|otelobserver|etcdepoch|zkepoch)/[A-Za-z0-9_./-]+\.(?:go|sh|md)|\.ci/[a-z-]+|[A-Z]+\.md)\b`)
	rootFile := regexp.MustCompile("`([a-z][a-z0-9_]*\\.go)`")
	var checked int
	eachDocFile(t, func(path string, data []byte) {
		for _, m := range cited.FindAllStringSubmatch(string(data), -1) {
			name := strings.TrimSuffix(m[1], ".")
			checked++
			_, err := os.Stat(name)
			assert.NoError(t, err, "%s cites %s", path, name)
		}
		if path == "README.md" || path == "BENCHMARKS.md" {
			// The package's own files, named alone (`fence.go`).
			for _, m := range rootFile.FindAllStringSubmatch(string(data), -1) {
				checked++
				_, err := os.Stat(m[1])
				assert.NoError(t, err, "%s cites %s", path, m[1])
			}
		}
	})
	assert.Greater(t, checked, 10)
}

// TestDocsCiteTestsThatExist: every test, benchmark, example or fuzz
// target a Markdown file or a comment names (`go test -run
// '^ExampleFence_Push$'`, "asserted by TestDirColdPush", `testX` for a
// helper of the kit) is a function of the repository, unless the text
// declares it itself (func TestMyStore, in an example). It is parallel,
// as TestDocsCiteFilesThatExist is.
func TestDocsCiteTestsThatExist(t *testing.T) {
	t.Parallel()
	declared := regexp.MustCompile(`(?m)^func (?:\([^)]*\) )?([A-Za-z0-9_]+)[\[(]`)
	inText := regexp.MustCompile(`func ([A-Za-z0-9_]+)\(`)
	cited := regexp.MustCompile("\\b(?:Test|Benchmark|Example|Fuzz)[A-Z_][A-Za-z0-9_]*|`test[A-Z][A-Za-z0-9_]*`")
	funcs := map[string]bool{}
	texts := map[string]string{}
	eachDocFile(t, func(path string, data []byte) {
		if strings.HasSuffix(path, ".go") {
			for _, m := range declared.FindAllStringSubmatch(string(data), -1) {
				funcs[m[1]] = true
			}
			var comments []string
			for line := range strings.Lines(string(data)) {
				if l := strings.TrimSpace(line); strings.HasPrefix(l, "//") {
					comments = append(comments, l)
				}
			}
			data = []byte(strings.Join(comments, "\n"))
		}
		if path != "doc_test.go" { // its comments name patterns (TestPromiseN)
			texts[path] = string(data)
		}
	})
	var checked int
	for path, text := range texts {
		own := map[string]bool{}
		for _, m := range inText.FindAllStringSubmatch(text, -1) {
			own[m[1]] = true
		}
		for _, name := range cited.FindAllString(text, -1) {
			name = strings.Trim(name, "`")
			checked++
			assert.True(t, funcs[name] || own[name], "%s cites %s, which no file of the repository declares", path, name)
		}
	}
	assert.Greater(t, checked, 50)
}

// TestEveryPromiseNumberedAndChecked: the package documentation numbers
// its promises 1 to n, each once and in order; the checker's tests hold a
// TestPromiseN, a history that breaks it, for each of them and no other;
// and no comment or Markdown file of the repository cites a promise
// beyond n (in "promise N" or "promises N to M").
func TestEveryPromiseNumberedAndChecked(t *testing.T) {
	t.Parallel()
	var numbers []int
	for _, m := range regexp.MustCompile(`(?m)^ ?(\d+)\. `).FindAllStringSubmatch(packageDoc(t), -1) {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		numbers = append(numbers, n)
	}
	require.NotEmpty(t, numbers)
	n := len(numbers)
	for i, got := range numbers {
		assert.Equal(t, i+1, got, "the promise after %v", numbers[:i])
	}
	tests, err := os.ReadFile(filepath.Join("internal", "promise", "checker_test.go"))
	require.NoError(t, err)
	tested := map[int]bool{}
	for _, m := range regexp.MustCompile(`func TestPromise(\d+)[_(]`).FindAllStringSubmatch(string(tests), -1) {
		k, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		tested[k] = true
	}
	for k := 1; k <= n; k++ {
		assert.True(t, tested[k], "promise %d has no TestPromise%d in internal/promise", k, k)
	}
	for k := range tested {
		assert.LessOrEqual(t, k, n, "TestPromise%d tests no numbered promise", k)
	}
	cite := regexp.MustCompile(`[Pp]romises? (\d+)(?:(?:,| to| and|, and) (\d+))*`)
	num := regexp.MustCompile(`\d+`)
	var cited int
	eachDocFile(t, func(path string, data []byte) {
		for _, m := range cite.FindAllString(string(data), -1) {
			for _, k := range num.FindAllString(m, -1) {
				cited++
				v, _ := strconv.Atoi(k)
				assert.True(t, v >= 1 && v <= n, "%s cites %q: the promises are 1 to %d", path, m, n)
			}
		}
	})
	assert.Greater(t, cited, 50)
}

// eachDocFile calls fn with every Go and Markdown file of the repository
// and its contents, but those under testdata and hidden folders (.ci
// aside).
func eachDocFile(t *testing.T, fn func(path string, data []byte)) {
	t.Helper()
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." && d.Name() != ".ci" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md")) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fn(path, data)
		return nil
	})
	require.NoError(t, err)
}

// sourceFiles returns the package's files, but its tests, parsed with
// their comments.
func sourceFiles(t *testing.T) []*ast.File {
	t.Helper()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	return files
}

// typeDoc returns the doc comment of the package's type name, in whichever
// of the package's files declares it.
func typeDoc(t *testing.T, name string) string {
	t.Helper()
	var doc string
	for _, f := range sourceFiles(t) {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE && g.Doc != nil {
				for _, s := range g.Specs {
					if s.(*ast.TypeSpec).Name.Name == name {
						doc = g.Doc.Text()
					}
				}
			}
		}
	}
	return doc
}

// funcDoc returns the doc comment of the package's function or method
// name, in whichever of the package's files declares it.
func funcDoc(t *testing.T, name string) string {
	t.Helper()
	var doc string
	for _, f := range sourceFiles(t) {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name && fn.Doc != nil {
				doc = fn.Doc.Text()
			}
		}
	}
	return doc
}

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
