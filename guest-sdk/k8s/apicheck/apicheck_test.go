// Package apicheck checks the JSON of package k8s against k8s.io/api: every
// member it writes must be one the API's types know (strict decoding), of
// the right shape, and come back unchanged when the API's type encodes the
// object again.
package apicheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/k8s"
)

var kinds = []struct {
	ours, theirs any // pointers to zero values
}{
	{&k8s.ConfigMap{}, &corev1.ConfigMap{}},
	{&k8s.Secret{}, &corev1.Secret{}},
	{&k8s.Service{}, &corev1.Service{}},
	{&k8s.ServiceAccount{}, &corev1.ServiceAccount{}},
	{&k8s.PersistentVolumeClaim{}, &corev1.PersistentVolumeClaim{}},
	{&k8s.Deployment{}, &appsv1.Deployment{}},
	{&k8s.Job{}, &batchv1.Job{}},
	{&k8s.CronJob{}, &batchv1.CronJob{}},
	{&k8s.Ingress{}, &networkingv1.Ingress{}},
}

func TestAgainstK8sAPI(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 200 {
		p := []float64{1, 0.6, 0.3}[round%3]
		for _, k := range kinds {
			ours := reflect.New(reflect.TypeOf(k.ours).Elem())
			fill(ours.Elem(), r, p, 0)
			b, err := json.Marshal(ours.Interface())
			if err != nil {
				t.Fatal(err)
			}
			theirs := reflect.New(reflect.TypeOf(k.theirs).Elem()).Interface()
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(theirs); err != nil {
				t.Fatalf("%T: k8s.io/api refuses it: %v\n%s", theirs, err, b)
			}
			again, err := json.Marshal(theirs)
			if err != nil {
				t.Fatal(err)
			}
			var want, got any
			_ = json.Unmarshal(b, &want)
			_ = json.Unmarshal(again, &got)
			if path, ok := contained(want, got, ""); !ok {
				t.Fatalf("%T: %s differs once k8s.io/api encodes it again\nours   %s\ntheirs %s", theirs, path, b, again)
			}
			if m := got.(map[string]any); m["apiVersion"] == nil || m["kind"] == nil {
				t.Fatalf("%T: no apiVersion or kind: %s", theirs, b)
			}
		}
	}
}

// contained reports whether every member of a is in b, with the same
// value; lists must have the same length.
func contained(a, b any, path string) (string, bool) {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return path, false
		}
		for k, v := range x {
			if p, ok := contained(v, y[k], path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return path, false
		}
		for i := range x {
			if p, ok := contained(x[i], y[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	}
	return path, reflect.DeepEqual(a, b)
}

var (
	intOrString  = reflect.TypeFor[k8s.IntOrString]()
	resourceList = reflect.TypeFor[k8s.ResourceList]()
	quantities   = []string{"1", "250m", "64Mi", "1Gi", "10G"}
)

// fill sets the fields of the struct v points to, each with probability p.
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
	str := strings.ToLower(name) + ` <"é>`
	if name == "SizeLimit" {
		str = quantities[r.IntN(len(quantities))]
	}
	switch t {
	case intOrString:
		if r.IntN(2) == 0 {
			return reflect.ValueOf(k8s.FromInt32(r.Int32N(70000)))
		}
		return reflect.ValueOf(k8s.FromString("25%"))
	case resourceList:
		return reflect.ValueOf(k8s.ResourceList{k8s.ResourceCPU: quantities[r.IntN(len(quantities))], k8s.ResourceStorage: "1Gi"})
	}
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.String:
		v.SetString(str)
	case reflect.Int32, reflect.Int64:
		v.SetInt(int64(r.IntN(3)) * int64(r.Int32N(1000)))
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
			v.SetBytes([]byte(str))
			break
		}
		n := 1 + r.IntN(2)
		v.Set(reflect.MakeSlice(t, n, n))
		for i := range n {
			v.Index(i).Set(value(t.Elem(), name, r, p, depth))
		}
	case reflect.Map:
		n := 1 + r.IntN(2)
		v.Set(reflect.MakeMapWithSize(t, n))
		for i := range n {
			v.SetMapIndex(reflect.ValueOf(fmt.Sprintf("%s-%d", strings.ToLower(name), i)), value(t.Elem(), name, r, p, depth))
		}
	default:
		panic("fill: unhandled " + t.String())
	}
	return v
}
