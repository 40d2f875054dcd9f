package k8s

import (
	"strings"
	"testing"
)

func deployment(gen int64, replicas any, status map[string]any) map[string]any {
	d := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "shop", "generation": float64(gen)},
		"spec":     map[string]any{},
	}
	if replicas != nil {
		d["spec"].(map[string]any)["replicas"] = replicas
	}
	if status != nil {
		d["status"] = status
	}
	return d
}

func TestObservedDeploymentRollout(t *testing.T) {
	for _, c := range []struct {
		name         string
		d            map[string]any
		done, failed bool
		reason       string
	}{
		{"never seen", deployment(2, nil, nil), false, false, "to see generation 2"},
		{"an old generation", deployment(2, float64(3), map[string]any{"observedGeneration": float64(1)}), false, false, "to see generation 2"},
		{"updating", deployment(2, float64(3), map[string]any{"observedGeneration": float64(2), "replicas": float64(3), "updatedReplicas": float64(1)}), false, false, "1 of 3 new replicas have been updated"},
		{"old pods left", deployment(2, float64(3), map[string]any{"observedGeneration": float64(2), "replicas": float64(4), "updatedReplicas": float64(3)}), false, false, "1 old replicas are pending termination"},
		{"not available", deployment(2, float64(3), map[string]any{"observedGeneration": float64(2), "replicas": float64(3), "updatedReplicas": float64(3), "availableReplicas": float64(2)}), false, false, "2 of 3 updated replicas are available"},
		{"deadline", deployment(2, float64(3), map[string]any{"observedGeneration": float64(2), "conditions": []any{
			map[string]any{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet web-1 has timed out progressing."}}}), false, true, "exceeded its progress deadline: ReplicaSet web-1 has timed out"},
		{"done", deployment(2, float64(3), map[string]any{"observedGeneration": float64(2), "replicas": float64(3), "updatedReplicas": float64(3), "availableReplicas": float64(3), "readyReplicas": float64(3)}), true, false, "rolled out: 3 replicas available"},
		{"done, default replicas", deployment(1, nil, map[string]any{"observedGeneration": float64(1), "replicas": float64(1), "updatedReplicas": float64(1), "availableReplicas": float64(1)}), true, false, "rolled out: 1 replicas"},
		{"scaled to zero", deployment(1, float64(0), map[string]any{"observedGeneration": float64(1)}), true, false, "rolled out: 0"},
	} {
		d, ok, err := FindDeployment([]map[string]any{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "web"}}, c.d}, "web")
		if !ok || err != nil {
			t.Fatalf("%s: FindDeployment: %v %v", c.name, ok, err)
		}
		done, failed, reason := d.RolledOut()
		if done != c.done || failed != c.failed || !strings.Contains(reason, c.reason) {
			t.Errorf("%s: RolledOut = %v, %v, %q; want %v, %v, %q", c.name, done, failed, reason, c.done, c.failed, c.reason)
		}
	}
	if _, ok, _ := FindDeployment(nil, "web"); ok {
		t.Error("found a Deployment among no children")
	}
	_, _, err := FindDeployment([]map[string]any{deployment(1, "3", nil)}, "web")
	if err == nil || err.Error() != `spec.replicas: want an integer, got a string "3"` {
		t.Errorf("a replicas string: %v", err)
	}
	d, _ := ObserveDeployment(deployment(1, nil, map[string]any{"conditions": []any{map[string]any{"type": "Available", "status": "True"}}}))
	if c, ok := d.Status.Condition("Available"); !ok || c.Status != "True" || d.Name != "web" || d.Namespace != "shop" {
		t.Errorf("ObserveDeployment: %+v", d)
	}
}

func TestObservedJob(t *testing.T) {
	job := func(conditions ...any) map[string]any {
		return map[string]any{"apiVersion": "batch/v1", "kind": "Job", "metadata": map[string]any{"name": "backup"},
			"status": map[string]any{"active": float64(1), "succeeded": float64(2), "startTime": "2026-01-01T00:00:00Z", "conditions": conditions}}
	}
	j, ok, err := FindJob([]map[string]any{job()}, "backup")
	if !ok || err != nil || j.Status.Active != 1 || j.Status.Succeeded != 2 || j.Status.StartTime == "" || j.Status.Complete() || j.Status.Finished() {
		t.Errorf("a running Job: %+v %v %v", j, ok, err)
	}
	j, _ = ObserveJob(job(map[string]any{"type": "Complete", "status": "True"}))
	if !j.Status.Complete() || !j.Status.Finished() {
		t.Errorf("a complete Job: %+v", j)
	}
	j, _ = ObserveJob(job(map[string]any{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}))
	if j.Status.Complete() || !j.Status.Finished() {
		t.Errorf("a failed Job: %+v", j)
	}
	if _, err := ObserveJob(job(map[string]any{"type": 1})); err == nil || !strings.Contains(err.Error(), "status.conditions[0].type") {
		t.Errorf("a condition of the wrong shape: %v", err)
	}
}
