//go:build unix

package main

import (
	"context"
	"net/url"

	"github.com/writefence/writefence"
)

// openFile opens file:///path, a DirConditionalStore, creating the
// directory when missing.
func openFile(_ context.Context, u *url.URL) (*opened, error) {
	if (u.Host != "" && u.Host != "localhost") || u.Path == "" || u.RawQuery != "" {
		return nil, usagef("writefence: store address: want file:///absolute/path, with three slashes and no parameters")
	}
	s, err := writefence.NewDirConditionalStore(u.Path)
	if err != nil {
		return nil, err
	}
	return &opened{store: s, close: noClose}, nil
}
