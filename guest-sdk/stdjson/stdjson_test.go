package stdjson_test

import (
	"strings"
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	_ "github.com/wasmreconcile/wasmreconcile/guest-sdk/stdjson"
)

type backupStatus struct {
	Phase    string `json:"phase"`
	Archives int    `json:"archives,omitempty"`
}

// TestImportEncodesStructs: with the package imported, a struct in a
// status encodes as encoding/json writes it.
func TestImportEncodesStructs(t *testing.T) {
	guest.Handle(guest.Manifest{Name: "s", For: guest.GVK("g", "v1", "K")}, func(*guest.Request) *guest.Response {
		return &guest.Response{Status: map[string]any{"backup": backupStatus{Phase: "Ready", Archives: 3}}}
	})
	got := string(guest.Dispatch([]byte(`{"object":{},"attempt":0,"now":""}`)))
	if want := `{"status":{"backup":{"phase":"Ready","archives":3}}}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if strings.Contains(got, "error") {
		t.Errorf("an error: %s", got)
	}
}
