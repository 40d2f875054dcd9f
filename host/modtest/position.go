package modtest

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	// The YAML 1.2 parser sigs.k8s.io/yaml carries (go.yaml.in/yaml/v3),
	// for its nodes' line and column; the module requires sigs.k8s.io/yaml
	// directly, not go.yaml.in/yaml/v3.
	yamlv3 "sigs.k8s.io/yaml/goyaml.v3"
)

// locate finds where the case file b, read from path, breaks the schema of
// Case: the first unknown field, repeated field or value of the wrong type,
// in document order. It returns an error "path:line:column: what", or nil
// when it finds nothing (the caller then reports the decoder's own error).
//
// sigs.k8s.io/yaml converts YAML to JSON before decoding, so its errors
// carry no position ("json: unknown field \"expct\""); this walks the same
// document as YAML nodes, which keep theirs. Field names match as
// encoding/json matches them (exact, else case-insensitive), so that
// nothing the decoder accepts is reported.
func locate(path string, b []byte) error {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(b, &doc); err != nil || len(doc.Content) == 0 {
		return nil
	}
	p := walk(doc.Content[0], reflect.TypeOf(Case{}), "")
	if p == nil {
		return nil
	}
	return fmt.Errorf("%s:%d:%d: %s", path, p.node.Line, p.node.Column, p.msg)
}

// problem is what is wrong at a node.
type problem struct {
	node *yamlv3.Node
	msg  string
}

// walk checks n against the Go type t; path names n ("" for the root).
func walk(n *yamlv3.Node, t reflect.Type, path string) *problem {
	if n.Kind == yamlv3.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yamlv3.ScalarNode && n.Tag == "!!null" {
		return nil // null decodes into anything as its zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	mismatch := func(want string) *problem {
		return &problem{n, fmt.Sprintf("%s: want %s, got %s", or(path, "the case"), want, describe(n))}
	}
	switch t.Kind() {
	case reflect.Interface:
		return nil
	case reflect.Struct:
		if n.Kind != yamlv3.MappingNode {
			return mismatch("a mapping")
		}
		fields := jsonFields(t)
		seen := map[string]*yamlv3.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			f, ok := fields.find(key.Value)
			if !ok {
				in := ""
				if path != "" {
					in = " in " + path
				}
				return &problem{key, fmt.Sprintf("unknown field %q%s (known fields: %s)", key.Value, in, strings.Join(fields.names, ", "))}
			}
			if first, dup := seen[f.name]; dup {
				return &problem{key, fmt.Sprintf("field %q repeated%s (first at line %d)", key.Value, inPath(path), first.Line)}
			}
			seen[f.name] = key
			if p := walk(value, f.typ, join(path, f.name)); p != nil {
				return p
			}
		}
	case reflect.Map:
		if n.Kind != yamlv3.MappingNode {
			return mismatch("a mapping")
		}
		seen := map[string]*yamlv3.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			if first, dup := seen[key.Value]; dup {
				return &problem{key, fmt.Sprintf("field %q repeated%s (first at line %d)", key.Value, inPath(path), first.Line)}
			}
			seen[key.Value] = key
			if p := walk(value, t.Elem(), join(path, key.Value)); p != nil {
				return p
			}
		}
	case reflect.Slice:
		if n.Kind != yamlv3.SequenceNode {
			return mismatch("a list")
		}
		for i, e := range n.Content {
			if p := walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); p != nil {
				return p
			}
		}
	case reflect.String:
		// sigs.k8s.io/yaml turns a number or a boolean given for a string
		// field into its text, as written.
		if n.Kind != yamlv3.ScalarNode {
			return mismatch("a string")
		}
	case reflect.Bool:
		if n.Kind != yamlv3.ScalarNode || n.Tag != "!!bool" {
			return mismatch("true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.Kind != yamlv3.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			return mismatch("an integer")
		}
		if _, err := strconv.ParseInt(n.Value, 10, t.Bits()); n.Tag == "!!int" && isDecimal(n.Value) && err != nil {
			return mismatch(fmt.Sprintf("an integer of %d bits", t.Bits()))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yamlv3.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			return mismatch("an integer ≥ 0")
		}
		if _, err := strconv.ParseUint(n.Value, 10, t.Bits()); n.Tag == "!!int" && isDecimal(n.Value) && err != nil {
			return mismatch(fmt.Sprintf("an integer ≥ 0 of %d bits", t.Bits()))
		}
	case reflect.Float32, reflect.Float64:
		if n.Kind != yamlv3.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			return mismatch("a number")
		}
	}
	return nil
}

// isDecimal reports whether s is an optionally signed run of digits, the
// only integer syntax whose range walk checks.
func isDecimal(s string) bool {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// describe names a node's value for an error message.
func describe(n *yamlv3.Node) string {
	switch n.Kind {
	case yamlv3.MappingNode:
		return "a mapping"
	case yamlv3.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	switch n.Tag {
	case "!!int", "!!float":
		return "the number " + v
	case "!!bool":
		return v
	}
	return fmt.Sprintf("the string %q", v)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func inPath(path string) string {
	if path == "" {
		return ""
	}
	return " in " + path
}

// field is a struct field as encoding/json decodes it.
type field struct {
	name string
	typ  reflect.Type
}

// fieldSet is a struct's JSON fields, in declaration order.
type fieldSet struct {
	fields []field
	names  []string
}

// find returns the field key decodes into, matched as encoding/json does:
// the exact name, else a case-insensitive match.
func (s fieldSet) find(key string) (field, bool) {
	for _, f := range s.fields {
		if f.name == key {
			return f, true
		}
	}
	for _, f := range s.fields {
		if strings.EqualFold(f.name, key) {
			return f, true
		}
	}
	return field{}, false
}

// jsonFields lists the fields of struct type t under their JSON names,
// those of embedded structs without a name included.
func jsonFields(t reflect.Type) fieldSet {
	var s fieldSet
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				inner := jsonFields(ft)
				s.fields = append(s.fields, inner.fields...)
				s.names = append(s.names, inner.names...)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		s.fields = append(s.fields, field{name: name, typ: f.Type})
		s.names = append(s.names, name)
	}
	return s
}

// positionOf returns "path:line:column" of the value at keys in the case
// file b, or path alone when it is not found.
func positionOf(path string, b []byte, keys ...string) string {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(b, &doc); err != nil || len(doc.Content) == 0 {
		return path
	}
	n := doc.Content[0]
	for _, k := range keys {
		if n.Kind == yamlv3.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		if n.Kind != yamlv3.MappingNode {
			return path
		}
		var next *yamlv3.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return path
		}
		n = next
	}
	return fmt.Sprintf("%s:%d:%d", path, n.Line, n.Column)
}
