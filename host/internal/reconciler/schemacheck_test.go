package reconciler_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/schemacheck"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestSchemaCheckParity writes what `operator test --crds` refuses to a real
// API server as the host writes it (server-side apply of a child, and of a
// status to the status subresource) and requires the API server to refuse
// it with the message the offline check gives.
func TestSchemaCheckParity(t *testing.T) {
	cp := testenv.Shared(t)
	k8s, err := client.New(cp.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, k8s)
	checker, err := schemacheck.LoadDir(filepath.Join(testwasm.RepoRoot(), "examples", "crds"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	parse := func(y string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
			t.Fatal(err)
		}
		u.SetNamespace(ns)
		return u
	}
	compare := func(what string, offline *schemacheck.Refusal, live error) {
		t.Helper()
		if offline == nil || live == nil {
			t.Fatalf("%s: offline refusal %v, API server error %v; want both", what, offline, live)
		}
		var code int32
		if s, ok := live.(apierrors.APIStatus); ok {
			code = s.Status().Code
		}
		t.Logf("%s: the API server answered %d (reason %q): %v", what, code, apierrors.ReasonForError(live), live)
		for _, f := range offline.Fields {
			if !strings.Contains(live.Error(), f) {
				t.Errorf("%s: the API server's message does not name the field %q of the offline refusal:\n%v", what, f, live)
			}
		}
		if !strings.Contains(live.Error(), offline.Message) {
			t.Errorf("%s: messages differ:\noffline:    %s\nAPI server: %v", what, offline.Message, live)
		}
	}

	// A child: a CronJob with a typo'd field in its pod template.
	cron := parse(`
apiVersion: batch/v1
kind: CronJob
metadata: {name: backup}
spec:
  schedule: "0 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          serviceAccount_Name: backup
          restartPolicy: OnFailure
          containers: [{name: backup, image: "busybox:1.36"}]
`)
	r, _ := checker.CheckObject(cron.Object)
	live := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(cron), client.FieldOwner("m"), client.ForceOwnership)
	compare("CronJob child", r, live)

	// The status of a WebApp: a typo'd field, and a value its CRD refuses.
	app := parse(`
apiVersion: examples.wasmreconcile.io/v1alpha1
kind: WebApp
metadata: {name: shop}
spec: {image: "nginx:1.27"}
`)
	if err := k8s.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	for _, status := range []string{
		`{observedGeneration: 1, childern: []}`,
		`{conditions: [{type: Ready, status: Maybe, reason: R, message: M, lastTransitionTime: "2000-01-01T00:00:00Z"}]}`,
	} {
		var s map[string]any
		if err := yaml.Unmarshal([]byte(status), &s); err != nil {
			t.Fatal(err)
		}
		r, _ := checker.CheckStatus(app.Object, s)
		patch := &unstructured.Unstructured{Object: map[string]any{"status": s}}
		patch.SetGroupVersionKind(app.GroupVersionKind())
		patch.SetNamespace(ns)
		patch.SetName(app.GetName())
		live := k8s.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(patch), client.FieldOwner("m"), client.ForceOwnership)
		compare("WebApp status "+status, r, live)
	}
}
