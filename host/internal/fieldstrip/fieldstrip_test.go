package fieldstrip

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// managed is a realistic managedFields value: a create and a status apply.
const managed = `[{"apiVersion":"x.io/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{".":{},"f:color":{},"f:size":{}}},"manager":"kubectl","operation":"Update","time":"2026-12-03T18:00:00Z"},{"apiVersion":"x.io/v1","fieldsType":"FieldsV1","fieldsV1":{"f:status":{".":{},"f:conditions":{".":{},"k:{\"type\":\"Ready\"}":{".":{},"f:status":{},"f:type":{}}},"f:summary":{}}},"manager":"wasmreconcile","operation":"Apply","subresource":"status","time":"2026-12-03T18:00:01Z"}]`

func widget(name, metadataExtra string) string {
	return `{"apiVersion":"x.io/v1","kind":"Widget","metadata":{"name":"` + name + `","namespace":"ns"` + metadataExtra + `},"spec":{"color":"a}b\"c{","size":3},"status":{"summary":"3 x {blue]"}}`
}

// reference is what Strip must leave, computed from the decoded value: the
// members the package comment lists, deleted.
func reference(t testing.TB, in []byte) any {
	t.Helper()
	v, err := decodeNumbers(in)
	if err != nil {
		t.Fatalf("reference decode: %v", err)
	}
	root, ok := v.(map[string]any)
	if !ok {
		return v
	}
	dropFrom := func(o any) {
		if m, ok := o.(map[string]any); ok {
			if md, ok := m["metadata"].(map[string]any); ok {
				delete(md, "managedFields")
			}
		}
	}
	dropFrom(root)
	if kind, ok := root["kind"].(string); ok && strings.HasSuffix(kind, "List") {
		if items, ok := root["items"].([]any); ok {
			for _, it := range items {
				dropFrom(it)
			}
		}
	}
	_, hasType := root["type"]
	_, hasAPIVersion := root["apiVersion"]
	_, hasKind := root["kind"]
	if hasType && !hasAPIVersion && !hasKind {
		dropFrom(root["object"])
	}
	return v
}

func decode(t testing.TB, b []byte) any {
	t.Helper()
	v, err := decodeNumbers(b)
	if err != nil {
		t.Fatalf("stripped output is not JSON: %v\n%s", err, b)
	}
	return v
}

// decodeNumbers decodes one JSON value with numbers as their text, so that
// any number json.Valid accepts decodes.
func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("more after the value: %v", err)
	}
	return v, nil
}

func TestStrip(t *testing.T) {
	mf := `,"managedFields":` + managed
	cases := []struct {
		name      string
		in        string
		stripped  bool   // whether anything must go
		untouched string // a substring that must survive
	}{
		{name: "object, managedFields last", in: widget("a", mf), stripped: true},
		{name: "object, managedFields first", in: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"managedFields":` + managed + `,"name":"a"},"data":{"k":"v"}}`, stripped: true},
		{name: "object, managedFields only", in: `{"kind":"ConfigMap","metadata":{"managedFields":` + managed + `}}`, stripped: true},
		{name: "object, managedFields empty", in: `{"kind":"ConfigMap","metadata":{"name":"a","managedFields":[]}}`, stripped: true},
		{name: "object, duplicate managedFields", in: `{"kind":"C","metadata":{"managedFields":[],"managedFields":[1],"name":"a","managedFields":[2],"managedFields":[3]}}`, stripped: true},
		{name: "pretty-printed", in: "{\n  \"kind\" : \"C\" ,\n  \"metadata\" : {\n    \"name\" : \"a\" ,\n    \"managedFields\" : [ ] ,\n    \"uid\" : \"u\"\n  }\n}\n", stripped: true},
		{name: "list", in: `{"apiVersion":"x.io/v1","kind":"WidgetList","metadata":{"resourceVersion":"9"},"items":[` + widget("a", mf) + `,` + widget("b", "") + `, ` + widget("c", mf) + `]}`, stripped: true},
		{name: "empty list", in: `{"kind":"WidgetList","items":[]}`},
		{name: "watch event", in: `{"type":"MODIFIED","object":` + widget("a", mf) + `}`, stripped: true},
		{name: "watch event, object first", in: `{"object":` + widget("a", mf) + `,"type":"ADDED"}`, stripped: true},
		{name: "bookmark", in: `{"type":"BOOKMARK","object":{"kind":"Widget","apiVersion":"x.io/v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}`},
		{name: "error event", in: `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (2)","code":410}}`},
		{
			name:      "nested metadata in spec is data",
			in:        `{"kind":"Workload","metadata":{"name":"a"},"spec":{"template":{"metadata":{"managedFields":[{"keep":"me"}]}}}}`,
			untouched: `"managedFields":[{"keep":"me"}]`,
		},
		{
			name:      "top-level items in a kind that is not a list",
			in:        `{"apiVersion":"x.io/v1","kind":"Bag","metadata":{"name":"a"},"items":[{"metadata":{"managedFields":["keep"]}}]}`,
			untouched: `"managedFields":["keep"]`,
		},
		{
			name:      "top-level object and type in a resource",
			in:        `{"apiVersion":"x.io/v1","kind":"Box","type":"t","metadata":{"name":"a"},"object":{"metadata":{"managedFields":["keep"]}}}`,
			untouched: `"managedFields":["keep"]`,
		},
		{name: "key in a string", in: `{"kind":"C","metadata":{"name":"\"managedFields\":[]","labels":{"managedFields":"x"}}}`, untouched: `"labels":{"managedFields":"x"}`},
		{name: "escaped key", in: `{"kind":"C","metadata":{"managed\u0046ields":[],"name":"a"}}`, stripped: true},
		{name: "escaped list kind", in: `{"kind":"Widget\u004cist","items":[{"metadata":{"managedFields":[]}}]}`, stripped: true},
		{name: "escaped members", in: `{"\u0074ype":"ADDED","\u006fbject":{"\u006detadata":{"managedFields":[]}}}`, stripped: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.in)
			out := Strip(in)
			if got, want := decode(t, out), reference(t, in); !reflect.DeepEqual(got, want) {
				t.Fatalf("Strip(%s)\n = %s\nwant the value %v", in, out, want)
			}
			if changed := !bytes.Equal(out, in); changed != c.stripped {
				t.Errorf("changed = %v, want %v: %s", changed, c.stripped, out)
			}
			if c.stripped && bytes.Contains(out, []byte(`"managedFields"`)) {
				t.Errorf("managedFields left: %s", out)
			}
			if c.untouched != "" && !bytes.Contains(out, []byte(c.untouched)) {
				t.Errorf("%s was cut: %s", c.untouched, out)
			}
		})
	}
}

func TestStripLeavesMalformedInput(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `}`, `[]`, `"s"`, `12`, `null`,
		`{"kind":"C","metadata":{"managedFields":[]}`,     // unclosed
		`{"kind":"C","metadata":{"managedFields":[]}}}`,   // one too many
		`{"kind":"C","metadata":{"managedFields":[]}} {}`, // two values
		`{"kind":"C","metadata":{"managedFields" []}}`,    // no colon
		`{"kind":"C","metadata":{"managedFields":[],}}`,   // trailing comma
		`{"kind":"C","metadata":{"managedFields":["]}}`,   // unterminated string
		`{"kind":"C" "metadata":{"managedFields":[]}}`,    // no comma
	} {
		if out := Strip([]byte(in)); string(out) != in {
			t.Errorf("Strip(%q) = %q, want it unchanged", in, out)
		}
	}
}

// events is a watch stream of n events, with the whitespace an API server
// puts between them.
func events(n int) (stream []byte, want []byte) {
	for i := range n {
		ev := `{"type":"ADDED","object":` + widget("w"+strings.Repeat("x", i%7), `,"managedFields":`+managed) + `}`
		stream = append(stream, ev...)
		stream = append(stream, '\n')
		want = append(want, Strip([]byte(ev))...)
		want = append(want, '\n')
	}
	return stream, want
}

func TestReaderAnyChunking(t *testing.T) {
	stream, want := events(50)
	if bytes.Equal(stream, want) {
		t.Fatal("nothing to strip: the test would prove nothing")
	}
	readers := map[string]func() io.Reader{
		"whole":    func() io.Reader { return bytes.NewReader(stream) },
		"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(stream)) },
		"half":     func() io.Reader { return iotest.HalfReader(bytes.NewReader(stream)) },
		"random": func() io.Reader {
			return &chunky{b: stream, r: rand.New(rand.NewPCG(1, 2))}
		},
		"data with EOF": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(stream)) },
	}
	for name, mk := range readers {
		t.Run(name, func(t *testing.T) {
			got, err := io.ReadAll(NewReader(io.NopCloser(mk())))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// chunky returns b in random chunks of 1 to 700 bytes.
type chunky struct {
	b []byte
	r *rand.Rand
}

func (c *chunky) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.b), 1+c.r.IntN(700))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

func TestReaderPassesTruncatedAndForeignBodies(t *testing.T) {
	for _, body := range []string{
		`{"type":"ADDED","object":{"metadata":{"managedFields":[]`, // cut off
		"404 page not found\n",
		`"a string"`,
		`} {"kind":"C","metadata":{"managedFields":[]}}`,
		`12 {"kind":"C","metadata":{"managedFields":[]}}`,
	} {
		got, err := io.ReadAll(NewReader(io.NopCloser(strings.NewReader(body))))
		if err != nil || string(got) != body {
			t.Errorf("ReadAll = %q, %v; want %q unchanged", got, err, body)
		}
	}
	// A source error after a complete value: the value, then the error.
	boom := io.ErrUnexpectedEOF
	ev := `{"type":"ADDED","object":{"kind":"C","metadata":{"managedFields":[]}}}`
	r := NewReader(io.NopCloser(io.MultiReader(strings.NewReader(ev+`{"type":`), iotest.ErrReader(boom))))
	got, err := io.ReadAll(r)
	if err != boom {
		t.Errorf("error = %v, want %v", err, boom)
	}
	if want := string(Strip([]byte(ev))) + `{"type":`; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A watch event must reach the decoder as soon as its last byte arrives,
// not when the next one does.
func TestReaderDoesNotHoldBackAnEvent(t *testing.T) {
	pr, pw := io.Pipe()
	r := NewReader(pr)
	defer r.Close()
	ev := []byte(`{"type":"ADDED","object":` + widget("a", `,"managedFields":`+managed) + "}\n")
	go func() { _, _ = pw.Write(ev) }() // and nothing more: the pipe stays open
	want := Strip(ev)
	got := make([]byte, 0, len(want))
	buf := make([]byte, 64)
	for len(got) < len(want) {
		n, err := r.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %s, want %s", got, want)
	}
	_ = pw.Close()
}

func TestTransport(t *testing.T) {
	body := widget("a", `,"managedFields":`+managed)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", r.URL.Query().Get("ct"))
		if r.URL.Query().Get("enc") != "" {
			w.Header().Set("Content-Encoding", r.URL.Query().Get("enc"))
		}
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	client := &http.Client{Transport: WrapTransport(http.DefaultTransport), Timeout: time.Minute}
	for _, c := range []struct {
		method, query string
		strip         bool
	}{
		{"GET", "ct=application/json", true},
		{"GET", "ct=application/json%3B+charset=utf-8", true},
		{"GET", "ct=application/vnd.kubernetes.protobuf", false},
		{"GET", "ct=application/cbor", false},
		{"GET", "ct=text/plain", false},
		{"GET", "ct=application/json&enc=br", false},
		{"POST", "ct=application/json", false},
		{"PATCH", "ct=application/json", false},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+"?"+c.query, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		stripped := !bytes.Equal(got, []byte(body))
		if stripped != c.strip {
			t.Errorf("%s ?%s: stripped = %v, want %v", c.method, c.query, stripped, c.strip)
		}
		if stripped && (resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "") {
			t.Errorf("%s ?%s: the stripped body still claims the old length", c.method, c.query)
		}
	}
}

// The decoder the cache uses reads a stripped object as it read the whole
// one, less its managedFields.
func TestUnstructuredDecodesTheSame(t *testing.T) {
	in := []byte(widget("a", `,"managedFields":`+managed))
	whole, stripped := &unstructured.Unstructured{}, &unstructured.Unstructured{}
	if _, _, err := unstructured.UnstructuredJSONScheme.Decode(in, nil, whole); err != nil {
		t.Fatal(err)
	}
	if _, _, err := unstructured.UnstructuredJSONScheme.Decode(Strip(in), nil, stripped); err != nil {
		t.Fatal(err)
	}
	if len(whole.GetManagedFields()) != 2 {
		t.Fatalf("the fixture has %d managedFields entries, want 2", len(whole.GetManagedFields()))
	}
	whole.SetManagedFields(nil)
	if !reflect.DeepEqual(whole, stripped) {
		t.Fatalf("decoded differently:\n%v\n%v", whole, stripped)
	}
}

func FuzzStrip(f *testing.F) {
	f.Add([]byte(widget("a", `,"managedFields":`+managed)))
	f.Add([]byte(`{"kind":"WidgetList","items":[` + widget("a", `,"managedFields":[]`) + `]}`))
	f.Add([]byte(`{"type":"ADDED","object":` + widget("a", `,"managedFields":[1]`) + `}`))
	f.Add([]byte(`{"kind":"C","metadata":{"managedFields":[],"managedFields":[1]}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		out := Strip(in)
		if !json.Valid(in) {
			// Only a value that parsed is cut, and what is cut is not
			// checked: the rest of the bytes pass as they came.
			return
		}
		if got, want := decode(t, out), reference(t, in); !reflect.DeepEqual(got, want) {
			t.Fatalf("Strip(%s) = %s", in, out)
		}
		// The reader gives the same bytes, read one byte at a time.
		got, err := io.ReadAll(NewReader(io.NopCloser(iotest.OneByteReader(bytes.NewReader(in)))))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, out) {
			t.Fatalf("reader gave %s, Strip %s", got, out)
		}
	})
}

// BenchmarkDecode compares decoding a watch event into an unstructured
// object whole with stripping it first, as the cache now does.
func BenchmarkDecode(b *testing.B) {
	ev := []byte(`{"type":"MODIFIED","object":` + widget("a", `,"managedFields":`+managed) + `}`)
	decodeEvent := func(b *testing.B, data []byte) {
		var e struct {
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			b.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if _, _, err := unstructured.UnstructuredJSONScheme.Decode(e.Object, nil, u); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			decodeEvent(b, ev)
		}
	})
	b.Run("stripped", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			decodeEvent(b, Strip(ev))
		}
	})
}

// BenchmarkReader reads a watch stream of 200 events through NewReader.
func BenchmarkReader(b *testing.B) {
	stream, _ := events(200)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := io.Copy(io.Discard, NewReader(io.NopCloser(bytes.NewReader(stream)))); err != nil {
			b.Fatal(err)
		}
	}
}

// TestValuesAnyChunking: Values returns each value of a stream, stripped
// and without the whitespace around it, however the stream is chunked.
func TestValuesAnyChunking(t *testing.T) {
	stream, _ := events(50)
	var want [][]byte
	for _, line := range bytes.Split(bytes.TrimSpace(stream), []byte("\n")) {
		want = append(want, Strip(line))
	}
	readers := map[string]func() io.Reader{
		"whole":    func() io.Reader { return bytes.NewReader(stream) },
		"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(stream)) },
		"random":   func() io.Reader { return &chunky{b: stream, r: rand.New(rand.NewPCG(3, 4))} },
	}
	for name, mk := range readers {
		t.Run(name, func(t *testing.T) {
			v := newValues(io.NopCloser(mk()))
			for i, w := range want {
				got, err := v.Next()
				if err != nil {
					t.Fatalf("value %d: %v", i, err)
				}
				if !bytes.Equal(got, w) {
					t.Fatalf("value %d:\n%s\nwant\n%s", i, got, w)
				}
			}
			if _, err := v.Next(); err != io.EOF {
				t.Fatalf("after the last value: %v, want EOF", err)
			}
		})
	}
}

// TestValuesEnds: a value cut short is io.ErrUnexpectedEOF, the source's
// own error comes after the values before it, and a body that is not JSON
// values says so.
func TestValuesEnds(t *testing.T) {
	ev := `{"type":"ADDED","object":{"kind":"C","metadata":{"managedFields":[]}}}`
	v := newValues(io.NopCloser(strings.NewReader(ev + "\n" + `{"type":"ADD`)))
	if got, err := v.Next(); err != nil || string(got) != string(Strip([]byte(ev))) {
		t.Fatalf("first value %q %v", got, err)
	}
	if _, err := v.Next(); err != io.ErrUnexpectedEOF {
		t.Errorf("a value cut short: %v", err)
	}
	boom := errors.New("connection reset")
	v = newValues(io.NopCloser(io.MultiReader(strings.NewReader(ev), iotest.ErrReader(boom))))
	if _, err := v.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Next(); err != boom {
		t.Errorf("the source's error: %v", err)
	}
	v = newValues(io.NopCloser(strings.NewReader(ev + "404 page not found\n")))
	if _, err := v.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Next(); err == nil || !strings.Contains(err.Error(), "not a stream of JSON objects") {
		t.Errorf("a foreign body: %v", err)
	}
}

// TestDivert: a successful JSON response to a request made with Divert's
// context goes to the Diversion, stripped, and the client reads the
// placeholder; an error response, another encoding, and a second request
// with the same context reach the client as always.
func TestDivert(t *testing.T) {
	body := widget("a", `,"managedFields":`+managed)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", r.URL.Query().Get("ct"))
		if code := r.URL.Query().Get("code"); code != "" {
			w.WriteHeader(map[string]int{"410": 410, "500": 500}[code])
		}
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	client := &http.Client{Transport: WrapTransport(http.DefaultTransport), Timeout: time.Minute}
	get := func(ctx context.Context, query string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"?"+query, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	placeholder := []byte(`{"kind":"List","items":[]}`)

	ctx, d := Divert(context.Background(), placeholder)
	if got := get(ctx, "ct=application/json"); got != string(placeholder) {
		t.Errorf("the client read %q, want the placeholder", got)
	}
	if d.Values() == nil {
		t.Fatal("nothing diverted")
	}
	got, err := d.Values().Next()
	if err != nil || string(got) != string(Strip([]byte(body))) {
		t.Errorf("diverted %q %v, want the stripped body", got, err)
	}
	_ = d.Values().Close()
	if got := get(ctx, "ct=application/json"); got != string(Strip([]byte(body))) {
		t.Errorf("a second request with the context read %q", got)
	}

	for _, query := range []string{"ct=application/json&code=410", "ct=application/json&code=500", "ct=application/vnd.kubernetes.protobuf"} {
		ctx, d := Divert(context.Background(), placeholder)
		if got := get(ctx, query); got == string(placeholder) || d.Values() != nil {
			t.Errorf("?%s was diverted", query)
		}
	}
}
