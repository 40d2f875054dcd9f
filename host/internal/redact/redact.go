// Package redact keeps Secret values out of what the host shows of guest
// calls: the flight recorder's records and a shadow candidate's
// differences.
//
// A Scrubber learns the values of the Secrets a call saw (Learn: data,
// decoded and as base64, and stringData), then rewrites objects and text:
// every Secret's data and stringData values become REDACTED, annotations
// that copy a whole object (kubectl's last-applied-configuration) are
// dropped, and every learned value found in any other string (a status
// field, a ConfigMap child, an error message, a map key) is replaced by
// REDACTED too, so that a guest that copies a Secret's value somewhere
// else does not carry it out.
//
// What it cannot catch: a value the guest transformed (cut, reversed,
// hashed, re-encoded other than base64) before it put it somewhere; and a
// value of fewer than MinSubstring bytes inside a longer string (it is
// replaced only where it is a whole string, or a short value such as "1"
// would blank half the record).
package redact

import (
	"encoding/base64"
	"encoding/json"
	"sort"
	"strings"
)

// Redacted is what a Secret's value becomes; RedactedBase64 is
// base64(Redacted), what a Secret's data value becomes, so that the object
// stays a valid Secret.
const (
	Redacted       = "REDACTED"
	RedactedBase64 = "UkVEQUNURUQ="
)

// MinSubstring is the shortest learned value replaced inside longer
// strings; shorter ones are replaced only where they are the whole string.
const MinSubstring = 4

// CopyAnnotations are annotations whose value copies a whole object, and
// so may copy a Secret's data: they are dropped.
var CopyAnnotations = []string{"kubectl.kubernetes.io/last-applied-configuration"}

// Scrubber rewrites objects and text without the Secret values it learned.
// The zero value is ready; it is not safe for concurrent use.
type Scrubber struct {
	values map[string]bool
	sorted []string // values, longest first; nil when stale
}

// IsSecret reports whether obj is a core v1 Secret.
func IsSecret(obj map[string]any) bool {
	return obj != nil && obj["kind"] == "Secret" && (obj["apiVersion"] == "v1" || obj["apiVersion"] == nil)
}

// Learn remembers the values of obj if it is a Secret: each data value as
// given (base64) and decoded, each stringData value as given and encoded,
// and the JSON-escaped form of each (as it appears quoted in JSON text).
func (s *Scrubber) Learn(obj map[string]any) {
	if !IsSecret(obj) {
		return
	}
	if data, ok := obj["data"].(map[string]any); ok {
		for _, v := range data {
			if str, ok := v.(string); ok {
				s.add(str)
				if dec, err := base64.StdEncoding.DecodeString(str); err == nil {
					s.add(string(dec))
				}
			}
		}
	}
	if data, ok := obj["stringData"].(map[string]any); ok {
		for _, v := range data {
			if str, ok := v.(string); ok {
				s.add(str)
				s.add(base64.StdEncoding.EncodeToString([]byte(str)))
			}
		}
	}
}

// LearnAll learns every object of objs.
func (s *Scrubber) LearnAll(objs ...map[string]any) {
	for _, o := range objs {
		s.Learn(o)
	}
}

func (s *Scrubber) add(v string) {
	if v == "" || v == Redacted || v == RedactedBase64 {
		return
	}
	if s.values == nil {
		s.values = map[string]bool{}
	}
	for _, form := range []string{v, jsonEscaped(v)} {
		if !s.values[form] {
			s.values[form] = true
			s.sorted = nil
		}
	}
}

// jsonEscaped is v as it appears between the quotes of a JSON string.
func jsonEscaped(v string) string {
	b, _ := json.Marshal(v)
	return string(b[1 : len(b)-1])
}

// Empty reports whether s has learned no value.
func (s *Scrubber) Empty() bool { return len(s.values) == 0 }

// String returns str with every learned value replaced by Redacted.
func (s *Scrubber) String(str string) string {
	if len(s.values) == 0 || str == "" {
		return str
	}
	if s.values[str] {
		return Redacted
	}
	if s.sorted == nil {
		for v := range s.values {
			s.sorted = append(s.sorted, v)
		}
		// Longest first, so that a value that contains another is
		// replaced whole.
		sort.Slice(s.sorted, func(i, j int) bool {
			if len(s.sorted[i]) != len(s.sorted[j]) {
				return len(s.sorted[i]) > len(s.sorted[j])
			}
			return s.sorted[i] < s.sorted[j]
		})
	}
	for _, v := range s.sorted {
		if len(v) >= MinSubstring && strings.Contains(str, v) {
			str = strings.ReplaceAll(str, v, Redacted)
		}
	}
	return str
}

// Object returns a deep copy of obj with every learned value replaced in
// every string and map key, and, in obj and every object nested in it (a
// map with apiVersion and kind), Secret data and stringData values
// redacted and CopyAnnotations dropped. obj is not modified.
func (s *Scrubber) Object(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	out, _ := s.Value(obj).(map[string]any)
	return out
}

// Objects is Object of each of objs; nil stays nil.
func (s *Scrubber) Objects(objs []map[string]any) []map[string]any {
	if objs == nil {
		return nil
	}
	out := make([]map[string]any, len(objs))
	for i, o := range objs {
		out[i] = s.Object(o)
	}
	return out
}

// JSON is Value of the JSON document raw, encoded again; raw itself when
// it is not JSON.
func (s *Scrubber) JSON(raw []byte) []byte {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	out, err := json.Marshal(s.Value(v))
	if err != nil {
		return raw
	}
	return out
}

// Value returns a deep copy of v, a decoded JSON value, scrubbed as
// Object scrubs an object.
func (s *Scrubber) Value(v any) any {
	v = s.value(v)
	fixObjects(v)
	return v
}

// fixObjects redacts, in place, the Secrets' values and the
// CopyAnnotations of every object in v.
func fixObjects(v any) {
	switch t := v.(type) {
	case map[string]any:
		_, hasAPIVersion := t["apiVersion"]
		_, hasKind := t["kind"]
		if hasAPIVersion && hasKind {
			fixObject(t)
		}
		for _, x := range t {
			fixObjects(x)
		}
	case []any:
		for _, x := range t {
			fixObjects(x)
		}
	}
}

func fixObject(obj map[string]any) {
	if IsSecret(obj) {
		for field, value := range map[string]string{"data": RedactedBase64, "stringData": Redacted} {
			if m, ok := obj[field].(map[string]any); ok {
				for k := range m {
					m[k] = value
				}
			}
		}
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		if ann, ok := meta["annotations"].(map[string]any); ok {
			for _, a := range CopyAnnotations {
				delete(ann, a)
			}
			if len(ann) == 0 {
				delete(meta, "annotations")
			}
		}
	}
}

// value deep-copies v, replacing learned values in strings and keys.
func (s *Scrubber) value(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[s.String(k)] = s.value(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = s.value(x)
		}
		return out
	case []map[string]any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = s.value(x)
		}
		return out
	case string:
		return s.String(t)
	}
	return v
}
