//go:build !wasip1

package main

import (
	"reflect"
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/sdktest"
)

func backup(name, target string) map[string]any {
	return map[string]any{"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Backup",
		"metadata": map[string]any{"name": name, "namespace": "default", "generation": int64(1)},
		"spec":     map[string]any{"target": target}}
}

var claim = map[string]any{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
	"metadata": map[string]any{"name": "data", "namespace": "default"}, "status": map[string]any{"phase": "Bound"}}

func ready(t *testing.T, resp *guest.Response) string {
	t.Helper()
	conds, _ := resp.Status["conditions"].([]any)
	if len(conds) != 1 {
		t.Fatalf("conditions %v", resp.Status["conditions"])
	}
	c := conds[0].(map[string]any)
	return c["status"].(string) + "/" + c["reason"].(string)
}

// TestWaitsForItsClaim: without the claim the Backup waits with no
// children; with it, it desires its two children.
func TestWaitsForItsClaim(t *testing.T) {
	h := sdktest.New(Manifest)
	t.Cleanup(h.Install())
	resp := Reconcile(&guest.Request{Object: backup("nightly", "data"), Now: "2026-01-01T00:00:00Z"})
	if got := ready(t, resp); got != "False/TargetMissing" || resp.Children == nil || len(resp.Children) != 0 {
		t.Fatalf("without the claim: %s, children %v; want False/TargetMissing and none", got, resp.Children)
	}
	h.Objects = append(h.Objects, claim)
	resp = Reconcile(&guest.Request{Object: backup("nightly", "data"), Now: "2026-01-01T00:00:00Z"})
	if got := ready(t, resp); got != "False/Progressing" || len(resp.Children) != 2 {
		t.Fatalf("with the claim: %s, %d children; want False/Progressing and 2", got, len(resp.Children))
	}
}

// TestTriggerReachesTheBackupsNamingTheClaim: the manifest's trigger maps
// the claim to the Backups whose spec.target names it, and to no other.
func TestTriggerReachesTheBackupsNamingTheClaim(t *testing.T) {
	h := sdktest.New(Manifest, backup("nightly", "data"), backup("hourly", "data"), backup("logs", "logs"))
	if got, want := h.Triggered(claim), []string{"default/hourly", "default/nightly"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Triggered(claim data) = %v, want %v", got, want)
	}
}
