//go:build unix

package main

import (
	"context"
	"errors"
	"io/fs"
	"net/url"
	"path/filepath"

	"github.com/writefence/writefence"
)

// filePath checks a file:// address and returns its directory. The root
// directory is refused: a store there would put lock and objects/ at /.
func filePath(u *url.URL) (string, error) {
	if (u.Host != "" && u.Host != "localhost") || u.Path == "" || u.RawQuery != "" {
		return "", usagef("writefence: store address: want file:///absolute/path, with three slashes and no parameters")
	}
	dir := filepath.Clean(u.Path)
	if dir == "/" {
		return "", usagef("writefence: store address: file:/// is the root directory; name a directory of its own, e.g. file:///var/lib/writefence")
	}
	return dir, nil
}

// openFile opens file:///path, a DirConditionalStore, creating the
// directory when missing: only commands that write open it this way.
func openFile(_ context.Context, u *url.URL) (*opened, error) {
	dir, err := filePath(u)
	if err != nil {
		return nil, err
	}
	s, err := writefence.NewDirConditionalStore(dir)
	if err != nil {
		return nil, err
	}
	return &opened{store: s, close: noClose}, nil
}

// openFileRead opens an existing directory store for reading: no lock, no
// directory or file created, no write permission needed.
func openFileRead(_ context.Context, u *url.URL) (*opened, error) {
	dir, err := filePath(u)
	if err != nil {
		return nil, err
	}
	s, err := writefence.OpenDirConditionalStoreReadOnly(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &advisedError{err, "a push creates it: check -store and $WRITEFENCE_STORE"}
	}
	if err != nil {
		return nil, err
	}
	return &opened{store: s, close: noClose}, nil
}
