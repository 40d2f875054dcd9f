// Command backup is an example module that reads a related object and is
// triggered by it. It reconciles examples.wasmreconcile.io/v1alpha1 Backup
// objects (examples/crds) that name a PersistentVolumeClaim in
// spec.target, into:
//
//   - a ConfigMap "<name>-backup" holding backup.sh, the script the backup
//     Pods run: it archives the claim into itself, under .backups/, and
//     keeps the newest spec.retain archives (default 7);
//   - a CronJob "<name>-backup" on spec.schedule (default "0 3 * * *") that
//     mounts the claim and the script and runs it in spec.image (default
//     busybox:1.37).
//
// It reads the claim through the host's cache. While the claim does not
// exist the Backup is Ready=False with reason TargetMissing and has no
// children. The manifest's trigger on spec.target makes the host reconcile
// the Backup as soon as the claim is created, changed or deleted: no
// requeue, no polling. The children are owned by the Backup (the host sets
// it as their controller), so deleting a Backup deletes them through the
// cluster's garbage collector; the module needs no finalizer.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o backup.wasm ./backup
package main

import (
	"strconv"
	"strings"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/k8s"
)

var pvc = guest.GVK("", "v1", "PersistentVolumeClaim")

// Manifest declares what the module reconciles, owns and reads, and the
// trigger that calls it when the claim a Backup names changes.
var Manifest = guest.Manifest{
	Name: "backup",
	For:  guest.GVK("examples.wasmreconcile.io", "v1alpha1", "Backup"),
	Owns: []guest.GroupVersionKind{
		guest.GVK("batch", "v1", "CronJob"),
		guest.GVK("", "v1", "ConfigMap"),
	},
	Reads: []guest.GroupVersionKind{pvc},
	// A change to the claim named by spec.target reconciles the Backup.
	Triggers: []guest.Trigger{{Kind: pvc, Field: "spec.target"}},
	Limits:   &guest.ManifestLimits{Fuel: 50_000_000, TimeoutMillis: 2000, MemoryPages: 512},
}

func init() { guest.Handle(Manifest, Reconcile) }

const (
	defaultSchedule = "0 3 * * *"
	defaultImage    = "busybox:1.37"
	defaultRetain   = 7
)

// Reconcile computes a Backup's children and status.
func Reconcile(req *guest.Request) *guest.Response {
	obj := guest.Object(req.Object)
	name, ns, gen := obj.Name(), obj.Namespace(), obj.Generation()
	status := func(cond guest.Condition, extra map[string]any) map[string]any {
		cond.Type, cond.ObservedGeneration = "Ready", gen
		s := map[string]any{"observedGeneration": gen, "conditions": []any{obj.SetCondition(cond, req.Now)}}
		for k, v := range extra {
			s[k] = v
		}
		return s
	}

	target := obj.NestedString("spec", "target")
	schedule := obj.NestedString("spec", "schedule")
	if schedule == "" {
		schedule = defaultSchedule
	}
	if msg := invalidSpec(target, schedule); msg != "" {
		return &guest.Response{
			Status: status(guest.Condition{Status: "False", Reason: "InvalidSpec", Message: msg}, nil),
			Error:  &guest.Error{Message: msg, Terminal: true},
		}
	}

	claim, found, err := guest.Get("v1", "PersistentVolumeClaim", ns, target)
	if err != nil {
		// Retried by the host with backoff; the children are left alone.
		return &guest.Response{Error: &guest.Error{Message: "reading PersistentVolumeClaim " + ns + "/" + target + ": " + err.Error()}}
	}
	if !found {
		msg := guest.Sprintf("PersistentVolumeClaim %s/%s does not exist; create it, and the Backup is reconciled again when it appears", ns, target)
		return &guest.Response{
			Children: guest.NoChildren(), // nothing to back up: no CronJob
			Status:   status(guest.Condition{Status: "False", Reason: "TargetMissing", Message: msg}, map[string]any{"targetPhase": ""}),
		}
	}
	phase := claim.NestedString("status", "phase")

	retain, ok := obj.NestedInt64("spec", "retain")
	if !ok {
		retain = defaultRetain
	}
	image := obj.NestedString("spec", "image")
	if image == "" {
		image = defaultImage
	}
	suspend := false
	if v, ok := obj.NestedField("spec", "suspend"); ok {
		suspend, _ = v.(bool)
	}
	labels := map[string]string{"app.kubernetes.io/name": "backup", "app.kubernetes.io/instance": name}
	child := name + "-backup"
	// Typed children (package k8s): the API's field names, checked by the
	// compiler, encoded straight into the response.
	cm := &k8s.ConfigMap{
		ObjectMeta: k8s.ObjectMeta{Name: child, Labels: labels},
		Data:       map[string]string{"backup.sh": script},
	}
	cj := &k8s.CronJob{
		ObjectMeta: k8s.ObjectMeta{Name: child, Labels: labels},
		Spec: k8s.CronJobSpec{
			Schedule:                   schedule,
			Suspend:                    &suspend,
			ConcurrencyPolicy:          k8s.ForbidConcurrent,
			SuccessfulJobsHistoryLimit: new(int32(3)),
			FailedJobsHistoryLimit:     new(int32(1)),
			JobTemplate: k8s.JobTemplateSpec{
				ObjectMeta: k8s.ObjectMeta{Labels: labels},
				Spec: k8s.JobSpec{
					BackoffLimit: new(int32(2)),
					Template: k8s.PodTemplateSpec{
						ObjectMeta: k8s.ObjectMeta{Labels: labels},
						Spec: k8s.PodSpec{
							RestartPolicy:      k8s.RestartPolicyOnFailure,
							ServiceAccountName: obj.NestedString("spec", "serviceAccountName"), // "" is left out
							Containers: []k8s.Container{{
								Name:    "backup",
								Image:   image,
								Command: []string{"/bin/sh", "/scripts/backup.sh"},
								Env:     []k8s.EnvVar{{Name: "RETAIN", Value: strconv.FormatInt(retain, 10)}},
								VolumeMounts: []k8s.VolumeMount{
									{Name: "data", MountPath: "/data"},
									{Name: "scripts", MountPath: "/scripts", ReadOnly: true},
								},
							}},
							Volumes: []k8s.Volume{
								{Name: "data", PersistentVolumeClaim: &k8s.PersistentVolumeClaimVolumeSource{ClaimName: target}},
								{Name: "scripts", ConfigMap: &k8s.ConfigMapVolumeSource{Name: child}},
							},
						},
					},
				},
			},
		},
	}
	children := []map[string]any{cm.Child(), cj.Child()}

	// Ready once both children are observed; report the CronJob's last run.
	extra := map[string]any{"targetPhase": phase}
	seen := 0
	for _, c := range req.Children {
		o := guest.Object(c)
		if o.Name() != child {
			continue
		}
		seen++
		if t := o.NestedString("status", "lastScheduleTime"); t != "" && o.NestedString("kind") == "CronJob" {
			extra["lastScheduleTime"] = t
		}
	}
	cond := guest.Condition{Status: "True", Reason: "Scheduled",
		Message: guest.Sprintf("backing up PersistentVolumeClaim %s on %q, keeping %d archives", target, schedule, retain)}
	if suspend {
		cond.Reason, cond.Message = "Suspended", "the CronJob is suspended (spec.suspend)"
	}
	if seen < len(children) {
		cond.Status, cond.Reason, cond.Message = "False", "Progressing", guest.Sprintf("waiting for %d of %d children", len(children)-seen, len(children))
	}
	return &guest.Response{Children: children, Status: status(cond, extra)}
}

// invalidSpec returns why the spec cannot be reconciled, or "".
func invalidSpec(target, schedule string) string {
	if target == "" {
		return "spec.target is required: set it to the name of the PersistentVolumeClaim to back up"
	}
	if strings.HasPrefix(schedule, "@") {
		return "" // @daily, @hourly, ...: the API server checks them
	}
	if n := len(strings.Fields(schedule)); n != 5 {
		return guest.Sprintf("spec.schedule %q has %d fields; a cron schedule has 5 (minute hour day-of-month month day-of-week), e.g. %q", schedule, n, defaultSchedule)
	}
	return ""
}

// script archives /data into /data/.backups and keeps the newest $RETAIN.
const script = `#!/bin/sh
set -eu
mkdir -p /data/.backups
stamp=$(date -u +%Y%m%dT%H%M%SZ)
tar -czf "/data/.backups/$stamp.tgz" --exclude=./.backups -C /data .
ls -1t /data/.backups/*.tgz | tail -n +$((RETAIN + 1)) | xargs -r rm -f
echo "archived /data to /data/.backups/$stamp.tgz"
`

func main() {}
