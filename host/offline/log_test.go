package offline_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/offline"
)

// TestLoggerLines: the levels the engine logs a guest's lines at, as plain
// lines.
func TestLoggerLines(t *testing.T) {
	var b bytes.Buffer
	log := offline.NewLogger(&b, "case: ").WithName("guest")
	log.V(1).Info("a debug line")
	log.Info("an info line")
	log.Info("a warning", "guestLevel", "warn")
	log.Error(nil, "an error line")
	log.WithValues("ptr", 8).Error(errors.New("boom"), "failed", "len", 3)
	want := "case: guest: debug: a debug line\n" +
		"case: guest: info: an info line\n" +
		"case: guest: warn: a warning\n" +
		"case: guest: error: an error line\n" +
		"case: guest: error: failed ptr=8 len=3 error=boom\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
