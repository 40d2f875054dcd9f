// Package k8s holds typed Kubernetes objects for the children a module
// writes: ConfigMap, Secret, Service, ServiceAccount,
// PersistentVolumeClaim, Deployment, Job and CronJob, and the types they are
// made of (ObjectMeta, PodSpec, Container, Volume, ...). It depends on the
// SDK and the standard library only, and builds for wasip1.
//
//	meta := k8s.ObjectMeta{Name: name + "-backup", Labels: labels}
//	cm := &k8s.ConfigMap{ObjectMeta: meta, Data: map[string]string{"backup.sh": script}}
//	cj := &k8s.CronJob{
//		ObjectMeta: meta,
//		Spec: k8s.CronJobSpec{
//			Schedule:          "0 3 * * *",
//			ConcurrencyPolicy: k8s.ForbidConcurrent,
//			JobTemplate: k8s.JobTemplateSpec{Spec: k8s.JobSpec{
//				BackoffLimit: new(int32(2)),
//				Template: k8s.PodTemplateSpec{Spec: k8s.PodSpec{
//					RestartPolicy: k8s.RestartPolicyOnFailure,
//					Containers:    []k8s.Container{{Name: "backup", Image: image}},
//				}},
//			}},
//		},
//	}
//	return &guest.Response{Children: []map[string]any{cm.Child(), cj.Child()}}
//
// # Names and shapes
//
// Go type and field names are those of k8s.io/api, so that code reads as it
// would against client-go; JSON member names and shapes are the API's, so
// that the API server accepts every child. Where k8s.io/api embeds a
// LocalObjectReference or a VolumeSource, the fields (Name; ConfigMap,
// Secret, ...) are here directly. The Kubernetes types' status is left
// out: a module writes desired state, and the children's own controllers
// write their status.
//
// A field that is zero (an empty string, 0, false, nil, an empty slice or
// map, a struct with nothing set) is left out of the JSON, as the API's
// omitempty leaves it out, and the API server then applies its default.
// Where zero means something different from absent (replicas: 0,
// suspend: false, backoffLimit: 0), the field is a pointer, as in
// k8s.io/api: write new(int32(0)).
//
// Resource quantities are strings, such as "500m" or "1Gi". Write them as
// the API server writes them back (not "0.5"), or the host sees a change on
// every reconcile and applies the child again.
//
// # Fields this package does not model
//
// Every object type (every struct but IntOrString) has an Extra map, for
// the members the type does not model: they are written in the same JSON
// object, and a key of Extra replaces the modelled field of that name. Its values are what a Response may hold
// (map[string]any, []any, strings, numbers, booleans, nil) and pointers to
// this package's types; any other value is an error naming its type, unless
// the module imports package guest-sdk/stdjson, which encodes it with
// encoding/json (a value of this package's types from its json tags,
// without its own Extra). For fields at the top level of an object, Child's map can also be
// set directly; to change any field of a child as plain maps, use Plain.
//
// # Encoding
//
// Every object type has AppendJSON, which appends its JSON with the members
// in sorted key order, as the SDK writes a map. The kinds and their specs
// also implement json.Marshaler with the same bytes, so that encoding/json
// (package stdjson's fallback, for a response holding a value the SDK's
// encoder does not handle) writes a child as the SDK's encoder does.
// encoding/json writes the other types from their json tags: the same
// JSON, without Extra.
//
// # Cost
//
// Child builds one small map per object (apiVersion, kind, metadata and
// the members at the top level) and refers to the typed spec, which the
// SDK's response encoder writes straight to JSON: no map is built for it,
// no reflection runs, and the bytes are those of the same child built as
// maps (keys sorted). docs/benchmarks.md, "Issue 14: typed children", has
// the measurements.
package k8s
