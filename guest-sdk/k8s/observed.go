package k8s

import (
	"strconv"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/decode"
)

// WorkloadCondition is a condition of a Deployment's or a Job's status, as
// its controller writes it.
type WorkloadCondition struct {
	Type               string
	Status             string // True, False or Unknown
	Reason             string
	Message            string
	LastTransitionTime string
}

// DeploymentStatus is an observed Deployment's status.
type DeploymentStatus struct {
	ObservedGeneration  int64
	Replicas            int32 // pods, of any revision
	UpdatedReplicas     int32 // pods of the current template
	ReadyReplicas       int32
	AvailableReplicas   int32
	UnavailableReplicas int32
	Conditions          []WorkloadCondition
}

// ObservedDeployment is a Deployment as the host observed it (an element
// of req.Children): its name, its generation, the replicas its spec asks
// for, and the status its controller wrote.
type ObservedDeployment struct {
	Name, Namespace string
	Generation      int64
	Replicas        int32 // spec.replicas; 1 when the spec leaves it out, as the API defaults it
	Status          DeploymentStatus
}

// FindDeployment returns the observed Deployment named name among
// children (req.Children), decoded; ok is false when there is none. err
// is a field of the wrong type, naming its path.
func FindDeployment(children []map[string]any, name string) (d ObservedDeployment, ok bool, err error) {
	c, ok := guest.FindChild(children, "apps/v1", "Deployment", name)
	if !ok {
		return d, false, nil
	}
	d, err = ObserveDeployment(c)
	return d, true, err
}

// ObserveDeployment decodes child, an observed Deployment.
func ObserveDeployment(child map[string]any) (ObservedDeployment, error) {
	o := guest.Object(child)
	d := ObservedDeployment{Name: o.Name(), Namespace: o.Namespace(), Generation: o.Generation(), Replicas: 1}
	spec, err := decode.Object(child["spec"], "spec")
	if err != nil {
		return d, err
	}
	if r, err := decode.Ptr(spec["replicas"], "spec.replicas", decode.Int32); err != nil {
		return d, err
	} else if r != nil {
		d.Replicas = *r
	}
	st, err := decode.Object(child["status"], "status")
	if err != nil || st == nil {
		return d, err
	}
	s := &d.Status
	for _, f := range []struct {
		key string
		dst *int32
	}{
		{"replicas", &s.Replicas}, {"updatedReplicas", &s.UpdatedReplicas}, {"readyReplicas", &s.ReadyReplicas},
		{"availableReplicas", &s.AvailableReplicas}, {"unavailableReplicas", &s.UnavailableReplicas},
	} {
		if *f.dst, err = decode.Int32(st[f.key], "status."+f.key); err != nil {
			return d, err
		}
	}
	if s.ObservedGeneration, err = decode.Int64(st["observedGeneration"], "status.observedGeneration"); err != nil {
		return d, err
	}
	s.Conditions, err = decode.Slice(st["conditions"], "status.conditions", decodeWorkloadCondition)
	return d, err
}

// Condition returns the status condition of type t, if there is one.
func (s DeploymentStatus) Condition(t string) (WorkloadCondition, bool) { return find(s.Conditions, t) }

// RolledOut reports whether the Deployment's rollout is complete, as
// `kubectl rollout status` decides it: its controller has seen the
// current spec, every wanted pod runs the current template and is
// available, and no old pod is left. Otherwise reason says what it waits
// for, and failed is set when the rollout exceeded its progress deadline.
func (d ObservedDeployment) RolledOut() (done, failed bool, reason string) {
	s := d.Status
	if s.ObservedGeneration < d.Generation {
		return false, false, "waiting for the Deployment's controller to see generation " + strconv.FormatInt(d.Generation, 10)
	}
	if c, ok := s.Condition("Progressing"); ok && c.Reason == "ProgressDeadlineExceeded" {
		return false, true, "the rollout exceeded its progress deadline: " + c.Message
	}
	itoa := func(n int32) string { return strconv.FormatInt(int64(n), 10) }
	switch {
	case s.UpdatedReplicas < d.Replicas:
		return false, false, itoa(s.UpdatedReplicas) + " of " + itoa(d.Replicas) + " new replicas have been updated"
	case s.Replicas > s.UpdatedReplicas:
		return false, false, itoa(s.Replicas-s.UpdatedReplicas) + " old replicas are pending termination"
	case s.AvailableReplicas < s.UpdatedReplicas:
		return false, false, itoa(s.AvailableReplicas) + " of " + itoa(s.UpdatedReplicas) + " updated replicas are available"
	}
	return true, false, "rolled out: " + itoa(s.AvailableReplicas) + " replicas available"
}

// JobStatus is an observed Job's status.
type JobStatus struct {
	Active, Succeeded, Failed int32
	StartTime, CompletionTime string // RFC 3339; "" when not yet
	Conditions                []WorkloadCondition
}

// Condition returns the status condition of type t, if there is one.
func (s JobStatus) Condition(t string) (WorkloadCondition, bool) { return find(s.Conditions, t) }

// Complete reports whether the Job succeeded (its Complete condition is
// True).
func (s JobStatus) Complete() bool { c, ok := s.Condition("Complete"); return ok && c.Status == "True" }

// Finished reports whether the Job ended, successfully or not (its
// Complete or Failed condition is True).
func (s JobStatus) Finished() bool {
	c, ok := s.Condition("Failed")
	return s.Complete() || ok && c.Status == "True"
}

// ObservedJob is a Job as the host observed it (an element of
// req.Children).
type ObservedJob struct {
	Name, Namespace string
	Generation      int64
	Status          JobStatus
}

// FindJob returns the observed Job named name among children, decoded; ok
// is false when there is none.
func FindJob(children []map[string]any, name string) (j ObservedJob, ok bool, err error) {
	c, ok := guest.FindChild(children, "batch/v1", "Job", name)
	if !ok {
		return j, false, nil
	}
	j, err = ObserveJob(c)
	return j, true, err
}

// ObserveJob decodes child, an observed Job.
func ObserveJob(child map[string]any) (ObservedJob, error) {
	o := guest.Object(child)
	j := ObservedJob{Name: o.Name(), Namespace: o.Namespace(), Generation: o.Generation()}
	st, err := decode.Object(child["status"], "status")
	if err != nil || st == nil {
		return j, err
	}
	s := &j.Status
	for _, f := range []struct {
		key string
		dst *int32
	}{{"active", &s.Active}, {"succeeded", &s.Succeeded}, {"failed", &s.Failed}} {
		if *f.dst, err = decode.Int32(st[f.key], "status."+f.key); err != nil {
			return j, err
		}
	}
	if s.StartTime, err = decode.String(st["startTime"], "status.startTime"); err != nil {
		return j, err
	}
	if s.CompletionTime, err = decode.String(st["completionTime"], "status.completionTime"); err != nil {
		return j, err
	}
	s.Conditions, err = decode.Slice(st["conditions"], "status.conditions", decodeWorkloadCondition)
	return j, err
}

func decodeWorkloadCondition(v any, path string) (WorkloadCondition, error) {
	m, err := decode.Object(v, path)
	var c WorkloadCondition
	if err != nil || m == nil {
		return c, err
	}
	for _, f := range []struct {
		key string
		dst *string
	}{
		{"type", &c.Type}, {"status", &c.Status}, {"reason", &c.Reason}, {"message", &c.Message}, {"lastTransitionTime", &c.LastTransitionTime},
	} {
		if *f.dst, err = decode.String(m[f.key], path+"."+f.key); err != nil {
			return c, err
		}
	}
	return c, nil
}

func find(conditions []WorkloadCondition, t string) (WorkloadCondition, bool) {
	for _, c := range conditions {
		if c.Type == t {
			return c, true
		}
	}
	return WorkloadCondition{}, false
}
