package engine

import (
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
)

func TestValidateTriggers(t *testing.T) {
	t.Parallel()
	pvc := abi.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}
	base := func(tr ...abi.Trigger) abi.Manifest {
		return abi.Manifest{Name: "backup", For: abi.GroupVersionKind{Group: "example.io", Version: "v1", Kind: "Backup"},
			Reads: []abi.GroupVersionKind{pvc}, Triggers: tr}
	}
	for _, tc := range []struct {
		name string
		m    abi.Manifest
		want string // "" for valid
	}{
		{"field", base(abi.Trigger{Kind: pvc, Field: "spec.target"}), ""},
		{"owner reference", base(abi.Trigger{Kind: pvc, OwnerReference: true}), ""},
		{"selector", base(abi.Trigger{Kind: pvc, Selector: "spec.selector"}), ""},
		{"all", base(abi.Trigger{Kind: pvc, All: true}), ""},
		{"two mappings", base(abi.Trigger{Kind: pvc, All: true, Field: "spec.target"}), "sets 2 of ownerReference, field, selector and all"},
		{"no mapping", base(abi.Trigger{Kind: pvc}), "sets 0 of"},
		{"kind not read", base(abi.Trigger{Kind: abi.GroupVersionKind{Version: "v1", Kind: "Secret"}, All: true}), "is not in reads"},
		{"other version of a read kind", base(abi.Trigger{Kind: abi.GroupVersionKind{Version: "v2", Kind: "PersistentVolumeClaim"}, All: true}), "is not in reads"},
		{"the reconciled kind itself", func() abi.Manifest {
			m := base(abi.Trigger{Kind: abi.GroupVersionKind{Group: "example.io", Version: "v1", Kind: "Backup"}, All: true})
			m.Reads = append(m.Reads, m.For)
			return m
		}(), "is the reconciled kind Backup itself"},
		{"empty path segment", base(abi.Trigger{Kind: pvc, Field: "spec..target"}), "empty segment"},
		{"trailing dot", base(abi.Trigger{Kind: pvc, Selector: "spec."}), "empty segment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateManifest(tc.m)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}
