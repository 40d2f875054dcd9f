package jsontree

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

var seeds = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1.5e300`, `1e400`, `-1e-7`, `123456789012345678901234567890`,
	`"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u2028<>&"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`, `"\ud83d\u0041"`,
	"\"\xff\xfe\"", `{"a":1,"a":2}`, `{"k":[1,{"x":null}],"s":"v"}`, ` [ 1 , 2 ] `, `[1,]`, `{"a" 1}`, `01`, `1.`, `.5`,
	`"\x01"`, `tru`, `nul`, `[`, `{"a":`, `"unterminated`, `{"apiVersion":"v1","kind":"Widget","metadata":{"name":"w","generation":3},"spec":{"size":3.0}}`,
}

func FuzzEquivalence(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want any
		wantErr := json.Unmarshal(data, &want)
		got, err := Decode(data)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: Decode error %v, encoding/json error %v", data, err, wantErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: Decode = %#v, encoding/json = %#v", data, got, want)
		}
		enc, err := Append(nil, got)
		wantEnc, wantEncErr := json.Marshal(want)
		if (err == nil) != (wantEncErr == nil) {
			t.Fatalf("%q: Append error %v, json.Marshal error %v", data, err, wantEncErr)
		}
		if err == nil && !bytes.Equal(enc, wantEnc) {
			t.Fatalf("%q: Append = %s, json.Marshal = %s", data, enc, wantEnc)
		}
	})
}

func TestAppendTypes(t *testing.T) {
	v := map[string]any{"i": 3, "i64": int64(-4), "u": uint32(5), "f32": float32(1.5), "ms": map[string]string{"b": "x", "a": "y"},
		"lm": []map[string]any{{"k": 1.0}}, "nilmaps": []map[string]any(nil)}
	got, err := Append(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"f32":1.5,"i":3,"i64":-4,"lm":[{"k":1}],"ms":{"a":"y","b":"x"},"nilmaps":null,"u":5}`
	if string(got) != want {
		t.Errorf("Append = %s, want %s", got, want)
	}
	if _, err := Append(nil, struct{}{}); err == nil {
		t.Error("struct accepted")
	}
}

type appender string

func (a appender) AppendJSON(b []byte) ([]byte, error) { return append(b, a...), nil }

func TestAppendAppender(t *testing.T) {
	got, err := Append([]byte("x"), map[string]any{"a": appender(`{"k":1}`), "b": map[string]string{}, "c": map[string]string(nil)})
	if err != nil || string(got) != `x{"a":{"k":1},"b":{},"c":{}}` {
		t.Errorf("Append = %s, %v", got, err)
	}
}
