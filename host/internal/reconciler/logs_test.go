package reconciler_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/internal/syncbuffer"
)

// lines returns the JSON lines written to s so far.
func lines(t *testing.T, s *syncbuffer.Buffer) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// find returns the lines with message msg about object name.
func find(lines []map[string]any, msg, name string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		obj, _ := l["object"].(map[string]any)
		if l["msg"] == msg && obj["name"] == name {
			out = append(out, l)
		}
	}
	return out
}

// TestStartFinishAtV1 captures a reconciler's log lines through the
// operator's production logger (JSON): at the default level (info) a
// failure's line appears with its reconcileID and no START or FINISH line
// does; at V(1) (debug, `-v=1`) every reconcile has a START and a FINISH
// line with the same reconcileID, and FINISH carries the duration, the
// fuel and the result. (They never appeared: the unmanaged controller's
// context logger discards, and Reconcile logged into it.)
func TestStartFinishAtV1(t *testing.T) {
	var out syncbuffer.Buffer
	level := uberzap.NewAtomicLevelAt(zapcore.InfoLevel)
	logger := zap.New(zap.WriteTo(&out), zap.Level(level))
	h := run(t, "./widget", runOptions{rec: reconciler.Options{Log: logger}})

	h.create(widgetGVK, "bad", map[string]any{"size": int64(1000)})
	var failure map[string]any
	testenv.Eventually(t, time.Minute, "the failure's log line", func() error {
		lines := find(lines(t, &out), "reconcile failed", "bad")
		if len(lines) == 0 {
			return fmt.Errorf("no line yet")
		}
		failure = lines[0]
		return nil
	})
	if id, _ := failure["reconcileID"].(string); id == "" || failure["module"] != "widget" || failure["result"] != "ReconcileFailed" || failure["level"] != "info" {
		t.Errorf("failure line %v: want a reconcileID, module widget, result ReconcileFailed at info", failure)
	}
	for _, msg := range []string{"START reconcile", "FINISH reconcile"} {
		if lines := find(lines(t, &out), msg, "bad"); len(lines) > 0 {
			t.Errorf("%q logged at the info level: %v", msg, lines[0])
		}
	}

	level.SetLevel(zapcore.DebugLevel) // -v=1
	h.create(widgetGVK, "good", map[string]any{"size": int64(3)})
	var finish map[string]any
	testenv.Eventually(t, time.Minute, "a FINISH line for a successful reconcile", func() error {
		for _, l := range find(lines(t, &out), "FINISH reconcile", "good") {
			if l["result"] == "Success" {
				finish = l
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	id, _ := finish["reconcileID"].(string)
	if fuel, _ := finish["fuel"].(float64); id == "" || fuel <= 0 || finish["duration"] == nil || finish["level"] != "debug" {
		t.Errorf("FINISH line %v: want a reconcileID, fuel, duration at debug", finish)
	}
	starts := 0
	for _, l := range find(lines(t, &out), "START reconcile", "good") {
		if l["reconcileID"] == id {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("%d START lines with the FINISH line's reconcileID %s, want 1", starts, id)
	}
}
