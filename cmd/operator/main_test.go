package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCLI(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
		wantOut string
	}{
		{args: []string{"version"}, wantOut: "wasmreconcile operator"},
		{args: []string{"--help"}, wantOut: "Usage:"},
		{args: nil, wantErr: "missing subcommand"},
		{args: []string{"frobnicate"}, wantErr: `unknown subcommand "frobnicate"`},
		{args: []string{"run"}, wantErr: "no modules: pass --module"},
		{args: []string{"run", "--no-such-flag"}, wantErr: "flag provided but not defined"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		err := run(c.args, &out, &errOut)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("run(%q) error = %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("run(%q): %v", c.args, err)
		}
		if !strings.Contains(out.String(), c.wantOut) {
			t.Errorf("run(%q) output %q, want %q", c.args, out.String(), c.wantOut)
		}
	}
}
