package offline

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// ReadObjects reads the Kubernetes objects in a YAML or JSON file. A file
// may hold several YAML documents separated by "---", or a List.
func ReadObjects(path string) ([]map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for i, doc := range bytes.Split(append([]byte("\n"), b...), []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		if obj == nil {
			continue
		}
		if kind, _ := obj["kind"].(string); strings.HasSuffix(kind, "List") {
			items, _ := obj["items"].([]any)
			for _, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s: document %d: a List item is not an object", path, i+1)
				}
				out = append(out, m)
			}
			continue
		}
		if obj["apiVersion"] == nil || obj["kind"] == nil {
			return nil, fmt.Errorf("%s: document %d is not a Kubernetes object: it needs apiVersion and kind", path, i+1)
		}
		out = append(out, obj)
	}
	return out, nil
}

// ReadObject reads a file that holds exactly one object.
func ReadObject(path string) (map[string]any, error) {
	objs, err := ReadObjects(path)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s holds %d objects; want exactly one", path, len(objs))
	}
	return objs[0], nil
}

// ReadObjectDir reads the objects of every *.yaml, *.yml and *.json file in
// dir, in file name order.
func ReadObjectDir(dir string) ([]map[string]any, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
	}
	sort.Strings(names)
	var out []map[string]any
	for _, n := range names {
		objs, err := ReadObjects(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// ReadConfig reads a YAML or JSON object of module configuration.
func ReadConfig(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
