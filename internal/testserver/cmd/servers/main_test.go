package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestWriteEnv: a shell that sources the file gets every value back as
// it was, quotes included.
func TestWriteEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "env")
	values := []string{"A=plain", "B=it's $HOME `x` \"q\"", "C=a=b", "D="}
	if err := writeEnv(file, values); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", `. "$1" && printf '%s\n' "A=$A" "B=$B" "C=$C" "D=$D"`, "sh", file).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, v := range values {
		want += v + "\n"
	}
	if string(out) != want {
		t.Errorf("sourced:\n%s\nwant:\n%s", out, want)
	}
}
