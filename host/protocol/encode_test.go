package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
)

// strange are strings and numbers where encoders disagree most often.
var (
	strange = []string{"", "plain", `quote " and \ backslash`, "<html>&amp;", "tab\tnew\nline\rcr\bbs\fff",
		"\x00\x01\x1f\x7f", "é ü 日本 🙂", "\u2028\u2029", "bad \xff utf8 \xc3", "\xed\xa0\x80 surrogate"}
	numbers = []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-7, 1e-6, 123456789, 1e20, 1e21, 1.5e300, -2.5e-300, math.MaxInt64, 1.0 / 3, 5e-324}
)

func randomValue(r *rand.Rand, depth int) any {
	n := 9
	if depth > 4 {
		n = 6 // leaves only
	}
	switch r.IntN(n) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return strange[r.IntN(len(strange))]
	case 3:
		return r.Int64() - r.Int64()
	case 4:
		return numbers[r.IntN(len(numbers))]
	case 5:
		return r.NormFloat64() * math.Pow(10, float64(r.IntN(40)-20))
	case 6, 7:
		m := map[string]any{}
		for i := r.IntN(6); i > 0; i-- {
			m[strange[r.IntN(len(strange))]+fmt.Sprint(r.IntN(3))] = randomValue(r, depth+1)
		}
		if r.IntN(8) == 0 {
			return map[string]any(nil)
		}
		return m
	default:
		l := make([]any, r.IntN(5))
		for i := range l {
			l[i] = randomValue(r, depth+1)
		}
		if r.IntN(8) == 0 {
			return []any(nil)
		}
		return l
	}
}

// TestEncodeRequestIsEncodingJSON: the hand-written encoder gives exactly
// the bytes of encoding/json, on random requests full of strings and
// numbers that need escaping or an exponent, so that requests (and the
// fuel their guests use) are the same as with encoding/json.
func TestEncodeRequestIsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		obj, ok := randomValue(r, 0).(map[string]any)
		for !ok || obj == nil {
			obj, ok = randomValue(r, 0).(map[string]any)
		}
		req := abi.Request{Object: obj, Attempt: r.IntN(3), Now: strange[r.IntN(len(strange))], Finalizing: r.IntN(2) == 0}
		if r.IntN(2) == 0 {
			req.Config = map[string]any{"k": randomValue(r, 2), "n": json.Number("12.50")}
		}
		for j := r.IntN(3); j > 0; j-- {
			c, _ := randomValue(r, 1).(map[string]any)
			req.Children = append(req.Children, c)
		}
		if r.IntN(3) == 0 {
			req.Related = []map[string]any{{"x": map[string]string{"<a>": "b&"}, "i": 7, "f32": float32(0.1)}}
		}
		if r.IntN(3) == 0 {
			req.ChildFailures = []abi.ChildFailure{{APIVersion: "v1", Kind: "ConfigMap", Name: "a<b", Reason: "Conflict", Message: "m\u2028"}}
		}
		want, werr := json.Marshal(req)
		got, gerr := EncodeRequest(req)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("request %d: errors differ: encoding/json %v, ours %v", i, werr, gerr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("request %d differs from encoding/json:\n got %s\nwant %s", i, got, want)
		}
	}
}

func TestEncodeRequestRefusesNaN(t *testing.T) {
	if _, err := EncodeRequest(abi.Request{Object: map[string]any{"x": math.NaN()}}); err == nil {
		t.Fatal("NaN encoded")
	}
}
