package k8s

import (
	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// Job is a batch/v1 Job. Its pod template cannot change once the Job
// exists: the API server refuses the apply (the host reports it in the
// next request's childFailures). To run different pods, use a new name.
type Job struct {
	ObjectMeta `json:"metadata"`
	Spec       JobSpec        `json:"spec"`
	Extra      map[string]any `json:"-"`
}

// Child returns j as an element of guest.Response.Children: apiVersion,
// kind and metadata are plain values (guest.Object's Name, Namespace,
// Labels and Annotations read them), and spec is &j.Spec, which the SDK encodes straight into the
// response. The child refers to j: a change to j shows in it until the
// response is encoded. Extra's members replace the modelled ones.
func (j *Job) Child() guest.Object {
	o := j.ObjectMeta.child("batch/v1", "Job", 1)
	o["spec"] = &j.Spec
	return withExtra(o, j.Extra)
}

// AppendJSON appends j's JSON encoding to b.
func (j *Job) AppendJSON(b []byte) ([]byte, error) {
	return jsontree.Append(b, map[string]any(j.Child()))
}

// MarshalJSON is AppendJSON for encoding/json.
func (j Job) MarshalJSON() ([]byte, error) { return j.AppendJSON(nil) }

// JobSpec runs the pods of Template to completion. Template's
// RestartPolicy must be OnFailure or Never. The pointers distinguish 0
// from absent: a nil BackoffLimit is the API's default, 6 retries, and
// new(int32(0)) is none.
type JobSpec struct {
	Parallelism             *int32          `json:"parallelism,omitempty"`
	Completions             *int32          `json:"completions,omitempty"`
	ActiveDeadlineSeconds   *int64          `json:"activeDeadlineSeconds,omitempty"`
	BackoffLimit            *int32          `json:"backoffLimit,omitempty"`
	TTLSecondsAfterFinished *int32          `json:"ttlSecondsAfterFinished,omitempty"`
	Suspend                 *bool           `json:"suspend,omitempty"`
	Template                PodTemplateSpec `json:"template,omitzero"`
	Extra                   map[string]any  `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *JobSpec) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.int64Ptr("activeDeadlineSeconds", s.ActiveDeadlineSeconds)
	w.int32Ptr("backoffLimit", s.BackoffLimit)
	w.int32Ptr("completions", s.Completions)
	w.int32Ptr("parallelism", s.Parallelism)
	w.boolPtr("suspend", s.Suspend)
	if w.key("template") {
		w.object(s.Template.AppendJSON(w.b))
	}
	w.int32Ptr("ttlSecondsAfterFinished", s.TTLSecondsAfterFinished)
	return w.close()
}

// MarshalJSON is AppendJSON for encoding/json, which the SDK falls back to
// for a response it cannot encode itself.
func (s *JobSpec) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil) }

// CronJob is a batch/v1 CronJob: it creates a Job from JobTemplate on
// Schedule.
type CronJob struct {
	ObjectMeta `json:"metadata"`
	Spec       CronJobSpec    `json:"spec"`
	Extra      map[string]any `json:"-"`
}

// Child returns c as an element of guest.Response.Children: apiVersion,
// kind and metadata are plain values (guest.Object's Name, Namespace,
// Labels and Annotations read them), and spec is &c.Spec, which the SDK encodes straight into the
// response. The child refers to c: a change to c shows in it until the
// response is encoded. Extra's members replace the modelled ones.
func (c *CronJob) Child() guest.Object {
	o := c.ObjectMeta.child("batch/v1", "CronJob", 1)
	o["spec"] = &c.Spec
	return withExtra(o, c.Extra)
}

// AppendJSON appends c's JSON encoding to b.
func (c *CronJob) AppendJSON(b []byte) ([]byte, error) {
	return jsontree.Append(b, map[string]any(c.Child()))
}

// MarshalJSON is AppendJSON for encoding/json.
func (c CronJob) MarshalJSON() ([]byte, error) { return c.AppendJSON(nil) }

// ConcurrencyPolicy is what a CronJob does when a run is due while the
// last one still runs.
type ConcurrencyPolicy string

// The concurrency policies; the API's default is Allow.
const (
	AllowConcurrent   ConcurrencyPolicy = "Allow"
	ForbidConcurrent  ConcurrencyPolicy = "Forbid"
	ReplaceConcurrent ConcurrencyPolicy = "Replace"
)

// CronJobSpec creates a Job from JobTemplate at each time of Schedule, in
// cron syntax ("0 3 * * *", "@hourly"), in TimeZone (an IANA name; nil is
// the controller manager's zone). The pointers distinguish 0 and false
// from absent: nil history limits are the API's defaults (3 successful
// Jobs kept, 1 failed), and a nil Suspend leaves the field to whoever else
// sets it.
type CronJobSpec struct {
	Schedule                   string            `json:"schedule,omitempty"`
	TimeZone                   *string           `json:"timeZone,omitempty"`
	StartingDeadlineSeconds    *int64            `json:"startingDeadlineSeconds,omitempty"`
	ConcurrencyPolicy          ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`
	Suspend                    *bool             `json:"suspend,omitempty"`
	JobTemplate                JobTemplateSpec   `json:"jobTemplate,omitzero"`
	SuccessfulJobsHistoryLimit *int32            `json:"successfulJobsHistoryLimit,omitempty"`
	FailedJobsHistoryLimit     *int32            `json:"failedJobsHistoryLimit,omitempty"`
	Extra                      map[string]any    `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *CronJobSpec) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.str("concurrencyPolicy", string(s.ConcurrencyPolicy))
	w.int32Ptr("failedJobsHistoryLimit", s.FailedJobsHistoryLimit)
	if w.key("jobTemplate") {
		w.object(s.JobTemplate.AppendJSON(w.b))
	}
	w.str("schedule", s.Schedule)
	w.int64Ptr("startingDeadlineSeconds", s.StartingDeadlineSeconds)
	w.int32Ptr("successfulJobsHistoryLimit", s.SuccessfulJobsHistoryLimit)
	w.boolPtr("suspend", s.Suspend)
	w.strPtr("timeZone", s.TimeZone)
	return w.close()
}

// MarshalJSON is AppendJSON for encoding/json, which the SDK falls back to
// for a response it cannot encode itself.
func (s *CronJobSpec) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil) }

// JobTemplateSpec is the Job a CronJob creates: its labels and
// annotations, and its spec.
type JobTemplateSpec struct {
	ObjectMeta `json:"metadata,omitzero"`
	Spec       JobSpec        `json:"spec,omitzero"`
	Extra      map[string]any `json:"-"`
}

// AppendJSON appends t's JSON encoding to b.
func (t *JobTemplateSpec) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, t.Extra)
	if w.key("metadata") {
		w.object(t.ObjectMeta.AppendJSON(w.b))
	}
	if w.key("spec") {
		w.object(t.Spec.AppendJSON(w.b))
	}
	return w.close()
}
