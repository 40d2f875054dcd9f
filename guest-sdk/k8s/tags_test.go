package k8s

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// The json tags of this package's types are its specification: the names
// and omitempty/omitzero rules of the Kubernetes API. These tests fill
// every field by reflection, so that a field AppendJSON forgets, misnames
// or writes out of order fails, and compare AppendJSON with what the tags
// say, computed by a reflection walk independent of the encoders.

// kinds are the top-level types with their apiVersion and kind.
var kinds = []struct {
	v                any // a pointer to a zero value
	apiVersion, kind string
}{
	{&ConfigMap{}, "v1", "ConfigMap"},
	{&Secret{}, "v1", "Secret"},
	{&Service{}, "v1", "Service"},
	{&ServiceAccount{}, "v1", "ServiceAccount"},
	{&PersistentVolumeClaim{}, "v1", "PersistentVolumeClaim"},
	{&Deployment{}, "apps/v1", "Deployment"},
	{&Job{}, "batch/v1", "Job"},
	{&CronJob{}, "batch/v1", "CronJob"},
	{&Ingress{}, "networking.k8s.io/v1", "Ingress"},
}

// parts are the other struct types.
var parts = []any{
	&ObjectMeta{}, &LabelSelector{}, &LabelSelectorRequirement{}, &LocalObjectReference{}, &ResourceRequirements{},
	&PodTemplateSpec{}, &PodSpec{}, &Container{}, &ContainerPort{}, &EnvVar{}, &EnvVarSource{},
	&ConfigMapKeySelector{}, &SecretKeySelector{}, &ObjectFieldSelector{}, &EnvFromSource{},
	&ConfigMapEnvSource{}, &SecretEnvSource{}, &VolumeMount{}, &Volume{},
	&PersistentVolumeClaimVolumeSource{}, &ConfigMapVolumeSource{}, &SecretVolumeSource{}, &KeyToPath{},
	&EmptyDirVolumeSource{}, &ServiceSpec{}, &ServicePort{}, &PersistentVolumeClaimSpec{},
	&VolumeResourceRequirements{}, &DeploymentSpec{}, &DeploymentStrategy{}, &RollingUpdateDeployment{},
	&JobSpec{}, &CronJobSpec{}, &JobTemplateSpec{},
	&IngressSpec{}, &IngressTLS{}, &IngressRule{}, &HTTPIngressRuleValue{}, &HTTPIngressPath{}, &IngressBackend{},
	&IngressServiceBackend{}, &ServiceBackendPort{},
	&Probe{}, &ExecAction{}, &HTTPGetAction{}, &HTTPHeader{}, &TCPSocketAction{}, &GRPCAction{}, &SecurityContext{}, &Capabilities{},
}

var intOrStringType = reflect.TypeFor[IntOrString]()

// fill sets the fields of the struct v points to, each with probability
// p, recursively, with values that need escaping now and then.
func fill(v reflect.Value, r *rand.Rand, p float64, depth int) {
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if sf.Name == "Extra" || r.Float64() >= p {
			continue
		}
		f.Set(value(sf.Type, sf.Name, r, p, depth))
	}
}

func value(t reflect.Type, name string, r *rand.Rand, p float64, depth int) reflect.Value {
	str := func() string {
		switch r.IntN(4) {
		case 0:
			return ""
		case 1:
			return name + ` <"\é>`
		}
		return strings.ToLower(name)
	}
	if t == intOrStringType {
		if r.IntN(2) == 0 {
			return reflect.ValueOf(FromInt32(r.Int32N(70000) - 5))
		}
		return reflect.ValueOf(FromString(str()))
	}
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.String:
		v.SetString(str())
	case reflect.Int32, reflect.Int64:
		v.SetInt(int64(r.IntN(3)) * int64(r.Int32())) // 0 now and then
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Pointer:
		v.Set(reflect.New(t.Elem()))
		v.Elem().Set(value(t.Elem(), name, r, p, depth))
	case reflect.Struct:
		if depth < 8 {
			fill(v, r, p, depth+1)
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(str()))
			break
		}
		n := r.IntN(3)
		if n == 0 {
			break // nil, as maps
		}
		v.Set(reflect.MakeSlice(t, n, n))
		for i := range n {
			v.Index(i).Set(value(t.Elem(), name, r, p, depth))
		}
	case reflect.Map:
		n := r.IntN(3)
		if n == 0 {
			break // nil: a non-nil empty map or slice makes its struct non-zero to omitzero (TestZeroValues)
		}
		v.Set(reflect.MakeMapWithSize(t, n))
		for i := range n {
			v.SetMapIndex(reflect.ValueOf(fmt.Sprintf("%s/k%d", name, i)), value(t.Elem(), name, r, p, depth))
		}
	default:
		panic("fill: unhandled " + t.String())
	}
	return v
}

// tagged is v as its json tags say encoding/json (with omitempty and
// omitzero) would write it, as decoded JSON. Extra is not looked at.
func tagged(v reflect.Value) any {
	t := v.Type()
	if t == intOrStringType {
		x := v.Interface().(IntOrString)
		if x.kind == 1 {
			return float64(x.num)
		}
		return x.str
	}
	switch t.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int32, reflect.Int64:
		return float64(v.Int())
	case reflect.Bool:
		return v.Bool()
	case reflect.Pointer:
		return tagged(v.Elem())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return base64.StdEncoding.EncodeToString(v.Bytes())
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = tagged(v.Index(i))
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		for it := v.MapRange(); it.Next(); {
			out[it.Key().String()] = tagged(it.Value())
		}
		return out
	case reflect.Struct:
		out := map[string]any{}
		for i := range t.NumField() {
			sf, f := t.Field(i), v.Field(i)
			name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				panic(t.String() + "." + sf.Name + " has no json name")
			}
			empty := (f.Kind() == reflect.String || f.Kind() == reflect.Map || f.Kind() == reflect.Slice) && f.Len() == 0 ||
				(f.Kind() == reflect.Pointer && f.IsNil()) || (f.Kind() == reflect.Int32 || f.Kind() == reflect.Int64) && f.Int() == 0 ||
				f.Kind() == reflect.Bool && !f.Bool()
			if strings.Contains(opts, "omitempty") && empty {
				continue
			}
			if strings.Contains(opts, "omitzero") {
				x := tagged(f)
				if m, ok := x.(map[string]any); (ok && len(m) == 0) || f.IsZero() {
					continue
				}
			}
			out[name] = tagged(f)
		}
		return out
	}
	panic("tagged: unhandled " + t.String())
}

// encode is AppendJSON's output, checked to be JSON whose keys are sorted
// (the SDK's map encoder writes its decoding back to the same bytes).
func encode(t *testing.T, a jsontree.Appender) any {
	t.Helper()
	b, err := a.AppendJSON([]byte("prefix"))
	if err != nil {
		t.Fatalf("%T: %v", a, err)
	}
	if !strings.HasPrefix(string(b), "prefix") {
		t.Fatalf("%T: AppendJSON lost the buffer's contents: %s", a, b)
	}
	b = b[len("prefix"):]
	v, err := jsontree.Decode(b)
	if err != nil {
		t.Fatalf("%T: not JSON: %v\n%s", a, err, b)
	}
	again, err := jsontree.Append(nil, v)
	if err != nil || string(again) != string(b) {
		t.Fatalf("%T: not in the SDK's canonical form (keys sorted):\n%s\nwant\n%s", a, b, again)
	}
	return v
}

func TestAppendJSONMatchesTags(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		p := []float64{1, 0.7, 0.3, 0}[round%4]
		for _, x := range parts {
			v := reflect.New(reflect.TypeOf(x).Elem())
			fill(v.Elem(), r, p, 0)
			got := encode(t, v.Interface().(jsontree.Appender))
			if want := tagged(v.Elem()); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s (round %d):\nAppendJSON %v\ntags       %v", v.Type(), round, got, want)
			}
			// encoding/json, given a value (which has no MarshalJSON),
			// writes the same from the tags.
			b, err := json.Marshal(v.Elem().Interface())
			if err != nil {
				t.Fatal(err)
			}
			var viaJSON any
			_ = json.Unmarshal(b, &viaJSON)
			if !reflect.DeepEqual(got, viaJSON) {
				t.Fatalf("%s (round %d):\nAppendJSON    %v\nencoding/json %v", v.Type(), round, got, viaJSON)
			}
		}
		for _, k := range kinds {
			v := reflect.New(reflect.TypeOf(k.v).Elem())
			fill(v.Elem(), r, p, 0)
			got := encode(t, v.Interface().(jsontree.Appender))
			want := tagged(v.Elem()).(map[string]any)
			want["apiVersion"], want["kind"] = k.apiVersion, k.kind
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s (round %d):\nAppendJSON %v\ntags       %v", v.Type(), round, got, want)
			}
		}
	}
}

// TestEveryFieldWritten fills every field and checks that every json name
// of the type appears in the output: a field AppendJSON ignores fails.
func TestEveryFieldWritten(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	all := append([]any{}, parts...)
	for _, k := range kinds {
		all = append(all, k.v)
	}
	for _, x := range all {
		typ := reflect.TypeOf(x).Elem()
		seen := map[string]bool{}
		for range 50 {
			v := reflect.New(typ)
			fill(v.Elem(), r, 1, 0)
			for k := range encode(t, v.Interface().(jsontree.Appender)).(map[string]any) {
				seen[k] = true
			}
		}
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name != "-" && !seen[name] {
				t.Errorf("%s: %s (%s) never written", typ, typ.Field(i).Name, name)
			}
		}
	}
}
