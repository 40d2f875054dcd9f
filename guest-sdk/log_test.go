package guest

import (
	"errors"
	"math"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
)

type logPoint struct{ X int }

func TestKeyValueLogs(t *testing.T) {
	TakeLogs()
	Info("applied", "child", "web", "replicas", 3, "ready", true, "ratio", 0.5, "labels", map[string]any{"b": "2", "a": 1},
		"err", errors.New(`bad "x"`), "nil", nil, "point", logPoint{1}, "nan", math.NaN(), 7, "seven", "odd")
	Warn("plain")
	Debug("d", "k", "v")
	Errorlog("e", "list", []any{"x", 1.5})
	got := TakeLogs()
	want := []LogLine{
		{abi.LogLevelInfo, `applied child="web" replicas=3 ready=true ratio=0.5 labels={"a":1,"b":"2"} err="bad \"x\"" nil=null point=(guest.logPoint) nan=(float64) (key 7)="seven" odd=(missing)`},
		{abi.LogLevelWarn, "plain"},
		{abi.LogLevelDebug, `d k="v"`},
		{abi.LogLevelError, `e list=["x",1.5]`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines %q, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}
